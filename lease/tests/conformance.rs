//! The in-memory lease arbiter and directory pass the shared conformance suite
//! (`troupe_lease::testing::conformance`), as every coordination backend must.

use std::sync::Arc;
use std::time::Duration;

use troupe_lease::directory::InMemoryDirectory;
use troupe_lease::lease::{InMemoryLeaseArbiter, LeaseSettings};
use troupe_lease::testing::conformance::Backend;

async fn in_memory() -> Backend {
    let settings = LeaseSettings::new(Duration::from_secs(1), Duration::from_millis(250)).unwrap();
    Backend::new(
        "in-memory",
        Arc::new(InMemoryLeaseArbiter::new(settings)),
        Arc::new(InMemoryDirectory::new()),
        settings,
    )
    .with_expiry_slack(Duration::from_millis(200))
}

troupe_lease::conformance_tests!(in_memory);
