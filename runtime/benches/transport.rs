//! TCP transport throughput and round-trip latency against a bare tokio TCP floor (being built).

fn main() {}
