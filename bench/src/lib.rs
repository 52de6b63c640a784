//! Benchmarks that run Troupe beside peer actor runtimes in one process and one run; the
//! peers are dev-dependencies of this crate only, so the runtime's own tests never build them.
