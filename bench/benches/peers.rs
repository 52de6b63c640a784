//! Placeholder replaced by the peer comparison.
fn main() {}
