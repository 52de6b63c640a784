//! Test machinery for lease and directory backends (feature `testing`; not for production
//! builds): the [`conformance`] suite and the [`conformance_tests!`](crate::conformance_tests)
//! macro.

pub mod conformance;
