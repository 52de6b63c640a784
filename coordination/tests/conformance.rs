//! The etcd and PostgreSQL backends pass the shared conformance suite
//! (`troupe_lease::testing::conformance`) against the real servers, each case in a fresh key prefix
//! or schema.

#[path = "support/services.rs"]
mod services;

mod etcd {
    use std::sync::Arc;
    use std::time::Duration;

    use troupe::lease::LeaseSettings;
    use troupe_coordination::etcd::{EtcdDirectory, EtcdLeases};
    use troupe_lease::testing::conformance::Backend;

    use crate::services;

    async fn etcd() -> Backend {
        let client = services::etcd_client().await;
        let prefix = services::etcd_prefix("conformance");
        // etcd grants whole seconds; 2 s is the shortest TTL a default etcd grants as asked.
        let settings =
            LeaseSettings::new(Duration::from_secs(2), Duration::from_millis(500)).unwrap();
        Backend::new(
            "etcd",
            Arc::new(EtcdLeases::new(client.clone(), &prefix).unwrap()),
            Arc::new(EtcdDirectory::new(client, &prefix).unwrap()),
            settings,
        )
        // etcd checks for expired leases every 500 ms and revokes them through raft.
        .with_expiry_slack(Duration::from_millis(1500))
    }

    troupe_lease::conformance_tests!(etcd);
}

mod postgres {
    use std::sync::Arc;
    use std::time::Duration;

    use troupe::lease::LeaseSettings;
    use troupe_lease::testing::conformance::Backend;

    use crate::services;

    async fn postgres() -> Backend {
        let coordination = services::pg_coordination("conformance").await;
        let settings =
            LeaseSettings::new(Duration::from_secs(1), Duration::from_millis(250)).unwrap();
        Backend::new(
            "postgres",
            Arc::new(coordination.leases()),
            Arc::new(coordination.directory()),
            settings,
        )
        .with_expiry_slack(Duration::from_millis(500))
    }

    troupe_lease::conformance_tests!(postgres);
}
