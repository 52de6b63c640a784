//! Lease membership through the real kube client against the stand-in API server: three hosts
//! form a cluster with the same events gossip produces, a host whose renewals stop ages out, a
//! deleted Lease fences its host (which never recreates it), a leave racing a renewal does not
//! fence, and a malformed Lease is ignored with an error, not a panic.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use troupe::ActorSystem;
use troupe::cluster::{Cluster, ClusterEvent, ClusterNotification};
use troupe::singleton::ClusterSingleton;
use troupe::transport::SimNetwork;
use troupe::{Address, UniqueAddress};
use troupe_kubernetes::membership::lease_name;
use troupe_kubernetes::standin::{Fault, StandIn};
use troupe_kubernetes::{HostHealth, KubeMembership, KubeMembershipSettings, KubeTiming};

fn settings() -> KubeMembershipSettings {
    KubeMembershipSettings {
        namespace: "default".into(),
        cluster: "demo".into(),
        timing: KubeTiming {
            ttl: Duration::from_secs(2),
            renew_interval: Duration::from_millis(300),
            max_clock_skew: Duration::from_millis(200),
        },
        roles: ["worker".to_owned()].into(),
        ..KubeMembershipSettings::default()
    }
}

fn node(port: u16) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("demo", "10.2.0.1", port),
        incarnation: 0xabc0_0000 + u64::from(port),
    }
}

struct Host {
    cluster: Cluster,
    health: watch::Receiver<HostHealth>,
    _system: ActorSystem,
}

fn start(server: &StandIn, network: &SimNetwork, port: u16) -> Host {
    start_on(ActorSystem::new("demo").unwrap(), server, network, port)
}

fn start_on(system: ActorSystem, server: &StandIn, network: &SimNetwork, port: u16) -> Host {
    start_with(system, server, network, port, settings())
}

fn start_with(
    system: ActorSystem,
    server: &StandIn,
    network: &SimNetwork,
    port: u16,
    settings: KubeMembershipSettings,
) -> Host {
    let provider = KubeMembership::new(server.client(), settings).unwrap();
    let health = provider.health();
    let cluster = Cluster::builder(&system)
        .with_provider(Box::new(provider))
        .with_inbound_capacity(64)
        .start_on(|inbound| Arc::new(network.join(node(port), inbound)))
        .unwrap();
    Host {
        cluster,
        health,
        _system: system,
    }
}

async fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let until = tokio::time::Instant::now() + within;
    while !check() {
        assert!(
            tokio::time::Instant::now() < until,
            "not within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn up_ports(host: &Host) -> Vec<u16> {
    host.cluster
        .up_members()
        .iter()
        .map(|m| m.node.address.port)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_form_a_cluster_with_the_gossip_events() {
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(7);
    let system = ActorSystem::new("demo").unwrap();
    // Every cluster event of a, from the very first view on.
    let mut events = system.event_stream().subscribe::<ClusterEvent>();
    let a = start_on(system, &server, &network, 1);
    eventually("a up", Duration::from_secs(5), || up_ports(&a) == [1]).await;
    let b = start(&server, &network, 2);
    let c = start(&server, &network, 3);
    for host in [&a, &b, &c] {
        eventually("all three up everywhere", Duration::from_secs(5), || {
            up_ports(host) == [1, 2, 3]
        })
        .await;
        assert_eq!(host.cluster.leader(), Some(node(1).address));
        assert_eq!(*host.health.borrow(), HostHealth::Up);
        let me = host.cluster.self_member().expect("a member");
        assert!(me.roles.contains("worker"));
    }
    let mut kinds = Vec::new();
    while let Some(event) = events.try_recv() {
        kinds.push(match &event {
            ClusterEvent::MemberUp(m) => format!("MemberUp {}", m.node.address.port),
            ClusterEvent::SelfUp(m) => format!("SelfUp {}", m.node.address.port),
            ClusterEvent::LeaderChanged(l) => {
                format!("LeaderChanged {:?}", l.as_ref().map(|a| a.port))
            }
            other => other.kind().to_owned(),
        });
    }
    // What gossip reports on the first node (minus Joining: a Lease member has no admission
    // step), then each newcomer's MemberUp, in whichever order their Leases were created.
    assert_eq!(
        kinds[..3],
        ["MemberUp 1", "LeaderChanged Some(1)", "SelfUp 1"],
        "{kinds:?}"
    );
    let mut rest = kinds[3..].to_vec();
    rest.sort();
    assert_eq!(rest, ["MemberUp 2", "MemberUp 3"], "{kinds:?}");
    // One labelled Lease per host.
    let mut names = server.names("default");
    names.sort();
    let mut expected: Vec<String> = [1, 2, 3]
        .iter()
        .map(|p| lease_name("demo", &node(*p)))
        .collect();
    expected.sort();
    assert_eq!(names, expected);
    let lease = server
        .get("default", &lease_name("demo", &node(2)))
        .unwrap();
    assert_eq!(lease["metadata"]["labels"]["troupe.dev/cluster"], "demo");
    assert_eq!(lease["spec"]["holderIdentity"], node(2).to_string());

    // A graceful leave: peers see MemberLeft then MemberRemoved; the Lease is gone.
    let mut on_a = a.cluster.subscribe();
    c.cluster.leave();
    tokio::time::timeout(Duration::from_secs(5), c.cluster.terminated())
        .await
        .expect("c stops");
    assert_eq!(*c.health.borrow(), HostHealth::Left);
    eventually("c removed on a", Duration::from_secs(5), || {
        up_ports(&a) == [1, 2]
    })
    .await;
    // c is no longer up once MemberLeft arrives; MemberRemoved may follow a moment later.
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while seen.last() != Some(&"MemberRemoved") {
        match tokio::time::timeout_at(deadline, on_a.recv()).await {
            Ok(Some(ClusterNotification::Event(event))) => seen.push(event.kind()),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    assert_eq!(
        seen,
        ["MemberLeft", "MemberRemoved"],
        "as gossip reports a graceful leave"
    );
    assert!(
        server
            .get("default", &lease_name("demo", &node(3)))
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_renewals_stop_ages_out() {
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(7);
    let a = start(&server, &network, 1);
    let b = start(&server, &network, 2);
    eventually("both up", Duration::from_secs(5), || up_ports(&a) == [1, 2]).await;
    let mut events = a.cluster.subscribe();
    // b's renewals now hang longer than the TTL.
    server.inject(
        &lease_name("demo", &node(2)),
        Fault::Delay(Duration::from_secs(10)),
    );
    let stalled = tokio::time::Instant::now();
    eventually("b aged out on a", Duration::from_secs(5), || {
        up_ports(&a) == [1]
    })
    .await;
    let aged = stalled.elapsed();
    assert!(aged <= Duration::from_secs(3), "aged out after {aged:?}");
    let removed = events
        .wait_for(
            |e| matches!(e, ClusterEvent::MemberRemoved { member, .. } if member.node == node(2)),
        )
        .await;
    assert!(removed.is_some());
    // b itself fenced when its heartbeat passed its TTL, and said so before a aged it out.
    eventually("b fenced", Duration::from_secs(3), || {
        b.health.borrow().is_fatal()
    })
    .await;
    let HostHealth::Fenced { reason } = b.health.borrow().clone() else {
        unreachable!()
    };
    assert!(reason.contains("no successful renewal"), "{reason}");
    assert!(
        b.cluster.self_member().is_none(),
        "a fenced host is out of its own view: it hosts nothing"
    );
    // The leader reaps b's Lease a TTL later.
    eventually("b's Lease reaped", Duration::from_secs(6), || {
        server
            .get("default", &lease_name("demo", &node(2)))
            .is_none()
    })
    .await;
    assert_eq!(*a.health.borrow(), HostHealth::Up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lease_fences_the_host_which_never_recreates_it() {
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(7);
    let a = start(&server, &network, 1);
    let b = start(&server, &network, 2);
    eventually("both up", Duration::from_secs(5), || up_ports(&a) == [1, 2]).await;
    let b_lease = lease_name("demo", &node(2));
    // Renewals of b now answer 404, as after an operator's delete.
    server.inject(&b_lease, Fault::NotFound);
    eventually("b fenced", Duration::from_secs(3), || {
        b.health.borrow().is_fatal()
    })
    .await;
    let HostHealth::Fenced { reason } = b.health.borrow().clone() else {
        unreachable!()
    };
    assert!(reason.contains("404"), "{reason}");
    tokio::time::timeout(Duration::from_secs(2), b.cluster.terminated())
        .await
        .expect("b's membership stops");
    assert!(b.cluster.self_member().is_none());
    assert_eq!(
        up_ports(&b),
        [1],
        "the others stay as b last saw them: b does not report live members removed"
    );
    let departure = b.cluster.departure().expect("b departed");
    assert!(
        departure.is_fenced() && format!("{departure:?}").contains("404"),
        "{departure:?}"
    );
    // Really delete it: nobody recreates it, and a ages b out.
    server.clear_faults();
    server.delete("default", &b_lease);
    eventually("b gone on a", Duration::from_secs(3), || {
        up_ports(&a) == [1]
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let creates = server
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/leases"))
        .count();
    assert_eq!(creates, 2, "one create per host, never a re-create");
    assert!(server.get("default", &b_lease).is_none());
    assert_eq!(*a.health.borrow(), HostHealth::Up);

    // And when the Lease is deleted outright (no injected fault), the watch or the next
    // renewal fences the host just the same.
    let c = start(&server, &network, 3);
    eventually("c up", Duration::from_secs(5), || up_ports(&a) == [1, 3]).await;
    server.delete("default", &lease_name("demo", &node(3)));
    eventually("c fenced", Duration::from_secs(3), || {
        c.health.borrow().is_fatal()
    })
    .await;
    assert!(
        server
            .get("default", &lease_name("demo", &node(3)))
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_racing_a_renewal_that_meets_404_does_not_fence() {
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(7);
    let a = start(&server, &network, 1);
    eventually("up", Duration::from_secs(5), || up_ports(&a) == [1]).await;
    let lease = lease_name("demo", &node(1));
    // The next renewal is held and then answered 404 — as when our own delete wins the race
    // with it. Leave while it is in flight.
    server.inject(&lease, Fault::DelayedNotFound(Duration::from_millis(250)));
    eventually("a renewal in flight", Duration::from_secs(2), || {
        server.held() == 1
    })
    .await;
    a.cluster.leave();
    tokio::time::timeout(Duration::from_secs(5), a.cluster.terminated())
        .await
        .expect("a stops");
    assert_eq!(
        *a.health.borrow(),
        HostHealth::Left,
        "a graceful exit, not a fence"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_member_lease_is_ignored_not_a_panic() {
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(7);
    let a = start(&server, &network, 1);
    eventually("up", Duration::from_secs(5), || up_ports(&a) == [1]).await;
    server.put_raw(
        "default",
        "demo-broken",
        json!({
            "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": { "name": "demo-broken", "namespace": "default",
                          "labels": { "troupe.dev/cluster": "demo" },
                          "annotations": { "troupe.dev/address": "not an address" } },
            "spec": { "holderIdentity": "x", "leaseDurationSeconds": 2,
                      "renewTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true) },
        }),
    );
    server.put_raw(
        "default",
        "demo-garbled",
        json!({
            "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": { "name": "demo-garbled", "namespace": "default",
                          "labels": { "troupe.dev/cluster": "demo" } },
            "spec": { "renewTime": "yesterday", "leaseDurationSeconds": "long" },
        }),
    );
    let b = start(&server, &network, 2);
    eventually(
        "b joins despite the garbage",
        Duration::from_secs(5),
        || up_ports(&a) == [1, 2] && up_ports(&b) == [1, 2],
    )
    .await;
    assert_eq!(*a.health.borrow(), HostHealth::Up);
}

/// The singleton's (unused) message.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Ping;

impl troupe::remoting::RemoteMessage for Ping {
    const MANIFEST: &'static str = "test.Ping";
}

/// A singleton that counts its running instances.
struct Counted(Arc<std::sync::atomic::AtomicI32>);

impl troupe::Actor for Counted {
    type Msg = Ping;

    async fn pre_start(
        &mut self,
        _ctx: &mut troupe::Context<Self>,
    ) -> Result<(), troupe::ActorError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn handle(
        &mut self,
        _msg: Ping,
        _ctx: &mut troupe::Context<Self>,
    ) -> Result<(), troupe::ActorError> {
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut troupe::Context<Self>) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_host_stops_the_singleton_it_hosted() {
    use std::sync::atomic::{AtomicI32, Ordering};
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(7);
    let a = start(&server, &network, 1);
    eventually("up", Duration::from_secs(5), || up_ports(&a) == [1]).await;
    let running = Arc::new(AtomicI32::new(0));
    let counter = Arc::clone(&running);
    let key = troupe::singleton::SingletonKey::of::<Ping>("scheduler", None);
    let props = troupe::Props::new(move || Counted(Arc::clone(&counter)));
    ClusterSingleton::get(&a.cluster)
        .start(&key, troupe::singleton::StartSingletonOptions::new(props))
        .unwrap();
    eventually("the singleton runs on a", Duration::from_secs(5), || {
        running.load(Ordering::SeqCst) == 1
    })
    .await;
    server.delete("default", &lease_name("demo", &node(1)));
    eventually("a fenced", Duration::from_secs(3), || {
        a.health.borrow().is_fatal()
    })
    .await;
    eventually("the singleton stopped", Duration::from_secs(3), || {
        running.load(Ordering::SeqCst) == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_resume_after_a_broken_stream_and_relist_after_410() {
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(7);
    let a = start(&server, &network, 1);
    eventually("a up", Duration::from_secs(5), || up_ports(&a) == [1]).await;
    // The stream breaks: a resumes from its last version and sees b arrive.
    server.close_watches();
    let b = start(&server, &network, 2);
    eventually("b seen after a resume", Duration::from_secs(5), || {
        up_ports(&a) == [1, 2]
    })
    .await;
    // The stream breaks again and a's resume is held while c arrives, b leaves and history is
    // compacted: the resume gets 410 Expired, a relists and sees both changes it missed.
    server.hold_watches(Duration::from_millis(1500));
    server.close_watches();
    let c = start(&server, &network, 3);
    b.cluster.leave();
    tokio::time::timeout(Duration::from_secs(5), b.cluster.terminated())
        .await
        .expect("b left");
    eventually("c's Lease exists", Duration::from_secs(2), || {
        server
            .names("default")
            .contains(&lease_name("demo", &node(3)))
    })
    .await;
    server.compact();
    server.hold_watches(Duration::ZERO);
    eventually("relisted", Duration::from_secs(5), || {
        up_ports(&a) == [1, 3]
    })
    .await;
    assert!(server.expired_watches() >= 1, "the resume met 410");
    eventually("c sees a", Duration::from_secs(5), || {
        up_ports(&c) == [1, 3]
    })
    .await;
    let watches = server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.name.is_none())
        .count();
    assert!(
        watches >= 5,
        "list + watch, resume, relist: {watches} collection reads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_lease_prefix_and_label_name_the_leases_and_select_the_members() {
    let server = StandIn::start().await.unwrap();
    let network = SimNetwork::new(9);
    let custom = KubeMembershipSettings {
        lease_prefix: Some("shop-members".into()),
        label_key: Some("app.kubernetes.io/instance".into()),
        cluster: "shop-prod".into(),
        ..settings()
    };
    let a = start_with(
        ActorSystem::new("demo").unwrap(),
        &server,
        &network,
        1,
        custom.clone(),
    );
    let b = start_with(
        ActorSystem::new("demo").unwrap(),
        &server,
        &network,
        2,
        custom,
    );
    // A host of another cluster label in the same namespace is not a member.
    let other = start(&server, &network, 3);
    for host in [&a, &b] {
        eventually("both custom hosts up", Duration::from_secs(5), || {
            up_ports(host) == [1, 2]
        })
        .await;
    }
    eventually("the other cluster up alone", Duration::from_secs(5), || {
        up_ports(&other) == [3]
    })
    .await;
    let lease = server
        .get("default", &lease_name("shop-members", &node(2)))
        .expect("the Lease is named after the prefix");
    assert_eq!(
        lease["metadata"]["labels"]["app.kubernetes.io/instance"],
        "shop-prod"
    );
    assert!(
        lease["metadata"]["labels"]
            .get("troupe.dev/cluster")
            .is_none()
    );
    let bad = KubeMembershipSettings {
        lease_prefix: Some("Shop_Members".into()),
        ..settings()
    };
    let message = KubeMembership::new(server.client(), bad)
        .unwrap_err()
        .to_string();
    assert!(message.contains("prefix"), "{message}");
}
