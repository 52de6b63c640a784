//! Releasing an etcd grant whose etcd lease is already gone (expired, or revoked behind the
//! holder's back) is not an error: the grant has ended either way. etcd answers that revoke
//! with gRPC `NOT_FOUND`, which the backend recognises by its status code, not its text.

#[path = "support/services.rs"]
mod services;

use std::time::Duration;

use troupe::lease::{LeaseProvider, LeaseSettings};
use troupe_coordination::etcd::EtcdLeases;

#[tokio::test]
async fn releasing_a_grant_whose_etcd_lease_was_revoked_elsewhere_succeeds_and_frees_the_lease() {
    let mut client = services::etcd_client().await;
    let prefix = services::etcd_prefix("revoked-release");
    let leases = EtcdLeases::new(client.clone(), &prefix).unwrap();
    // Renewal every 3 s: the release below reaches etcd before any renewal could notice.
    let settings = LeaseSettings::new(Duration::from_secs(15), Duration::from_secs(3)).unwrap();
    let holder = leases.lease("revoked", "holder", &settings).unwrap();
    let token = holder.acquire(Box::new(|_| {})).await.unwrap();
    assert!(token.is_some(), "granted");

    let key = leases.key("revoked");
    let stored = client.get(key.clone(), None).await.unwrap();
    let etcd_lease = stored.kvs().first().expect("the lease key exists").lease();
    client.lease_revoke(etcd_lease).await.unwrap();
    let again = client.lease_revoke(etcd_lease).await.unwrap_err();
    assert!(
        matches!(&again, etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::NotFound),
        "etcd answers a revoke of a gone lease with NOT_FOUND: {again:?}"
    );

    tokio::time::timeout(Duration::from_secs(10), holder.release())
        .await
        .expect("release answers")
        .expect("releasing a grant whose etcd lease is gone is not an error");
    assert!(!holder.holds());
    let successor = leases.lease("revoked", "successor", &settings).unwrap();
    let granted = successor.acquire(Box::new(|_| {})).await.unwrap();
    assert!(granted > token, "{granted:?} after {token:?}");
    successor.release().await.unwrap();
}
