//! `KubeLease` through the real kube client against the stand-in API server: one holder,
//! increasing fencing tokens, renewal, expiry, release, and the faults a real API server can
//! produce (404, 409, answers slower than the TTL, malformed objects).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;
use troupe::lease::{Lease, LeaseError, LeaseLost, LeaseLostCallback};
use troupe_kubernetes::standin::{Fault, StandIn};
use troupe_kubernetes::{KubeLease, KubeTiming};

/// Short times so the tests are quick: TTL 2 s, renew every 300 ms, skew ≤ 200 ms.
fn timing() -> KubeTiming {
    KubeTiming {
        ttl: Duration::from_secs(2),
        renew_interval: Duration::from_millis(300),
        max_clock_skew: Duration::from_millis(200),
    }
}

fn handle(server: &StandIn, name: &str, owner: &str) -> KubeLease {
    KubeLease::new(server.client(), "default", name, owner, timing()).unwrap()
}

type Seen = Arc<Mutex<Vec<(Instant, LeaseLost)>>>;

fn recorder() -> (LeaseLostCallback, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (
        Box::new(move |lost| sink.lock().push((Instant::now(), lost))),
        seen,
    )
}

fn holder(server: &StandIn, name: &str) -> Option<String> {
    server
        .get("default", name)
        .and_then(|o| o["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

async fn wait_lost(seen: &Seen, within: Duration) -> (Instant, LeaseLost) {
    let until = Instant::now() + within;
    loop {
        if let Some(first) = seen.lock().first().cloned() {
            return first;
        }
        assert!(
            Instant::now() < until,
            "the loss was not reported within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_acquirers_have_exactly_one_winner() {
    let server = StandIn::start().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let lease = handle(&server, "race", &format!("owner-{i}"));
        tasks.push(tokio::spawn(async move {
            let (cb, _) = recorder();
            let granted = lease.acquire(cb).await.unwrap();
            (lease, granted)
        }));
    }
    let mut winners = Vec::new();
    let mut handles = Vec::new();
    for task in tasks {
        let (lease, granted) = task.await.unwrap();
        if let Some(token) = granted {
            winners.push((lease.owner().to_owned(), token));
        }
        handles.push(lease);
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(
        holder(&server, "race").as_deref(),
        Some(winners[0].0.as_str())
    );
    assert_eq!(handles.iter().filter(|h| h.holds()).count(), 1);
}

#[tokio::test]
async fn tokens_strictly_increase_across_holders_even_when_the_lease_is_recreated() {
    let server = StandIn::start().await.unwrap();
    let a = handle(&server, "s", "a");
    let b = handle(&server, "s", "b");
    let c = handle(&server, "s", "c");
    let (cb, _) = recorder();
    let t1 = a.acquire(cb).await.unwrap().expect("free");
    let (cb, _) = recorder();
    assert_eq!(b.acquire(cb).await.unwrap(), None, "held by a");
    a.release().await.unwrap();
    assert!(!a.holds());
    assert_eq!(holder(&server, "s"), None, "release clears holderIdentity");
    let (cb, _) = recorder();
    let t2 = b.acquire(cb).await.unwrap().expect("released");
    assert!(t2 > t1, "{t2} after {t1}");
    b.release().await.unwrap();
    assert!(server.delete("default", "s"));
    let (cb, _) = recorder();
    let t3 = c.acquire(cb).await.unwrap().expect("recreated");
    assert!(t3 > t2, "{t3} after {t2}: the token survives deletion");
    let (cb, _) = recorder();
    let t4 = a.acquire(cb).await.unwrap();
    assert_eq!(t4, None);
    c.release().await.unwrap();
    let (cb, _) = recorder();
    let t5 = a.acquire(cb).await.unwrap().expect("free again");
    assert!(t5 > t3);
    assert_eq!(
        server.get("default", "s").unwrap()["spec"]["leaseTransitions"],
        1
    );
}

#[tokio::test]
async fn a_holder_renews_past_its_ttl_and_a_non_holder_cannot_release() {
    let server = StandIn::start().await.unwrap();
    let a = handle(&server, "s", "a");
    let b = handle(&server, "s", "b");
    let (cb, lost) = recorder();
    let token = a.acquire(cb).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(a.holds() && lost.lock().is_empty());
    assert_eq!(
        a.fencing_token(),
        Some(token),
        "renewals keep the grant's token"
    );
    let (cb, _) = recorder();
    assert_eq!(b.acquire(cb).await.unwrap(), None);
    b.release().await.unwrap();
    assert_eq!(
        holder(&server, "s").as_deref(),
        Some("a"),
        "a non-holder's release is refused"
    );
    let renewals = server
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.status == 200)
        .count();
    assert!(renewals >= 5, "renewed every 300 ms: {renewals}");
    // Acquire while holding: the same grant.
    let (cb, _) = recorder();
    assert_eq!(a.acquire(cb).await.unwrap(), Some(token));
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_old_holder_knew_first() {
    let server = StandIn::start().await.unwrap();
    let a = handle(&server, "s", "a");
    let b = handle(&server, "s", "b");
    let (cb, lost) = recorder();
    let t1 = a.acquire(cb).await.unwrap().unwrap();
    // Every renewal from now on takes longer than the TTL.
    server.inject("s", Fault::Delay(Duration::from_secs(5)));
    let started = Instant::now();
    let (lost_at, loss) = wait_lost(&lost, Duration::from_secs(3)).await;
    assert!(!a.holds());
    assert_eq!(loss.token, t1);
    assert!(
        lost_at - started < timing().ttl,
        "reported {:?} after the last good renewal window opened",
        lost_at - started
    );
    // The API server is fast again for everyone (a's held renewal is still pending and will
    // meet 409). b gets in only once the Lease's TTL has passed on the server's record.
    server.clear_faults();
    let granted_at = loop {
        let (cb, _) = recorder();
        if let Some(t2) = b.acquire(cb).await.unwrap() {
            assert!(t2 > t1);
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        lost_at < granted_at,
        "loss reported before another holder got in"
    );
    assert_eq!(holder(&server, "s").as_deref(), Some("b"));
}

#[tokio::test]
async fn a_renewal_answered_404_or_409_ends_the_grant_at_once() {
    for (fault, code) in [(Fault::NotFound, "404"), (Fault::Conflict, "409")] {
        let server = StandIn::start().await.unwrap();
        let a = handle(&server, "s", "a");
        let (cb, lost) = recorder();
        a.acquire(cb).await.unwrap().unwrap();
        let injected = Instant::now();
        server.inject("s", fault.clone());
        let (at, loss) = wait_lost(&lost, Duration::from_secs(1)).await;
        assert!(
            at - injected < Duration::from_millis(700),
            "{fault:?}: {:?}",
            at - injected
        );
        assert!(loss.reason.contains(code), "{fault:?}: {}", loss.reason);
        assert!(!a.holds());
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(lost.lock().len(), 1, "reported once");
        let requests = server.requests();
        let creates = requests.iter().filter(|r| r.method == "POST").count();
        assert_eq!(creates, 1, "{fault:?}: never re-created");
        let refused = requests
            .iter()
            .position(|r| r.method == "PUT" && (r.status == 404 || r.status == 409))
            .expect("the refused renewal");
        assert!(
            requests[refused + 1..].iter().all(|r| r.method == "GET"),
            "{fault:?}: no write after the refused renewal: {:?}",
            &requests[refused + 1..]
        );
    }
}

#[tokio::test]
async fn a_malformed_lease_object_is_an_error_with_context() {
    let server = StandIn::start().await.unwrap();
    let a = handle(&server, "s", "a");
    server.put_raw(
        "default",
        "s",
        json!({
            "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": { "name": "s", "namespace": "default" },
            "spec": { "holderIdentity": "x", "leaseDurationSeconds": "fifteen" },
        }),
    );
    let (cb, _) = recorder();
    let error = a.acquire(cb).await.unwrap_err();
    let LeaseError::Malformed { reason, .. } = &error else {
        panic!("{error:?}")
    };
    assert!(
        reason.contains("default/s") && reason.contains("not a valid Lease object"),
        "{reason}"
    );

    server.put_raw(
        "default",
        "s",
        json!({
            "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": { "name": "s", "namespace": "default" },
            "spec": { "holderIdentity": "x", "leaseDurationSeconds": -3, "renewTime": "2020-01-01T00:00:00.000000Z" },
        }),
    );
    let (cb, _) = recorder();
    let error = a.acquire(cb).await.unwrap_err().to_string();
    assert!(
        error.contains("malformed") && error.contains("leaseDurationSeconds"),
        "{error}"
    );
    assert!(!a.holds());
}

#[tokio::test]
async fn settings_are_validated_together() {
    let server = StandIn::start().await.unwrap();
    let bad = KubeTiming {
        ttl: Duration::from_secs(2),
        renew_interval: Duration::from_secs(1),
        max_clock_skew: Duration::from_millis(500),
    };
    let error = KubeLease::new(server.client(), "default", "s", "a", bad).unwrap_err();
    assert!(error.to_string().contains("renew_interval"), "{error}");
}
