//! `KubeLease` passes troupe's shared lease conformance suite (`troupe_lease::testing::conformance`),
//! through the real kube client against the stand-in API server. (Leases only: Kubernetes
//! Leases answer who is alive, not who owns an actor; there is no Kubernetes directory.)

use std::sync::Arc;
use std::time::Duration;

use troupe::directory::InMemoryDirectory;
use troupe::lease::{Lease, LeaseError, LeaseProvider, LeaseSettings};
use troupe_kubernetes::lease::KubeLeaseProvider;
use troupe_kubernetes::standin::StandIn;
use troupe_lease::testing::conformance::Backend;

/// The provider, keeping its stand-in API server alive as long as the backend.
#[derive(Debug)]
struct OnStandIn {
    _server: StandIn,
    provider: KubeLeaseProvider,
}

impl LeaseProvider for OnStandIn {
    fn lease(
        &self,
        name: &str,
        owner: &str,
        settings: &LeaseSettings,
    ) -> Result<Arc<dyn Lease>, LeaseError> {
        self.provider.lease(name, owner, settings)
    }
}

async fn kubernetes() -> Backend {
    let server = StandIn::start().await.expect("the stand-in starts");
    let provider = KubeLeaseProvider::new(server.client(), "default");
    // leaseDurationSeconds is whole seconds: the shortest TTL a Lease can carry.
    let settings = LeaseSettings::new(Duration::from_secs(1), Duration::from_millis(250))
        .expect("valid settings");
    Backend::new(
        "kubernetes (stand-in)",
        Arc::new(OnStandIn {
            _server: server,
            provider,
        }),
        Arc::new(InMemoryDirectory::new()),
        settings,
    )
    // Expiry is judged on renewTime, which has microsecond precision: no extra slack needed
    // beyond scheduling on a loaded machine.
    .with_expiry_slack(Duration::from_millis(500))
}

troupe_lease::conformance_tests!(leases: kubernetes);

#[tokio::test]
async fn settings_a_lease_cannot_carry_are_refused() {
    let server = StandIn::start().await.unwrap();
    let provider = KubeLeaseProvider::new(server.client(), "default");
    let settings =
        LeaseSettings::new(Duration::from_millis(1500), Duration::from_millis(300)).unwrap();
    let error = provider.lease("s", "a", &settings).unwrap_err();
    assert!(
        matches!(&error, LeaseError::Settings { reason, .. } if reason.contains("whole number of seconds")),
        "{error}"
    );
}
