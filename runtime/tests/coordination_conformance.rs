//! The in-memory lease arbiter and directory pass the shared conformance suite
//! (`troupe::testkit::conformance`), as every coordination backend must.

use std::sync::Arc;
use std::time::Duration;

use troupe::directory::InMemoryDirectory;
use troupe::lease::{InMemoryLeaseArbiter, LeaseSettings};
use troupe::testkit::conformance::Backend;

async fn in_memory() -> Backend {
    let settings =
        LeaseSettings::new(Duration::from_millis(600), Duration::from_millis(150)).unwrap();
    Backend::new(
        "in-memory",
        Arc::new(InMemoryLeaseArbiter::new(settings.ttl())),
        Arc::new(InMemoryDirectory::new()),
        settings,
    )
    .with_expiry_slack(Duration::from_millis(200))
}

troupe::conformance_tests!(in_memory);
