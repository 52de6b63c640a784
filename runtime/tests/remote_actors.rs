//! Remote actor refs over real TCP on 127.0.0.1: the same API as local refs — tell, ask, death
//! watch, stop — plus self-routing through the loopback and dead letters for what cannot be
//! delivered.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use troupe::cluster::{Cluster, ClusterEvent, MemberStatus, MembershipOptions};
use troupe::remoting::RemoteMessage;
use troupe::transport::{ClusterSecret, TcpTransportOptions};
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, AskError, Context, DeadLetter, DeadLetterReason,
    Props, ReplyTo, Terminated,
};

const WAIT: Duration = Duration::from_secs(15);

#[derive(Debug, Serialize, Deserialize)]
enum Counter {
    Add(u64),
    Get {
        reply: ReplyTo<u64>,
    },
    /// Reply to `to` with the current count.
    Report {
        to: ActorRef<Report>,
    },
}

impl RemoteMessage for Counter {
    const MANIFEST: &'static str = "test.Counter";
}

#[derive(Debug, Serialize, Deserialize)]
struct Report(u64);

impl RemoteMessage for Report {
    const MANIFEST: &'static str = "test.Report";
}

#[derive(Default)]
struct CounterActor {
    count: u64,
}

impl Actor for CounterActor {
    type Msg = Counter;

    async fn handle(&mut self, msg: Counter, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            Counter::Add(n) => self.count += n,
            Counter::Get { reply } => reply.send(self.count),
            Counter::Report { to } => to.tell(Report(self.count)),
        }
        Ok(())
    }
}

struct Collector(mpsc::UnboundedSender<Report>);

impl Actor for Collector {
    type Msg = Report;

    async fn handle(&mut self, msg: Report, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let _ = self.0.send(msg);
        Ok(())
    }
}

/// Watches one ref and reports its `Terminated`.
struct Watcher {
    target: ActorRef<Counter>,
    seen: mpsc::UnboundedSender<Terminated>,
}

impl Actor for Watcher {
    type Msg = ();

    async fn pre_start(&mut self, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        ctx.watch(&self.target);
        Ok(())
    }

    async fn handle(&mut self, _msg: (), _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        Ok(())
    }

    async fn on_terminated(
        &mut self,
        terminated: Terminated,
        _ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        let _ = self.seen.send(terminated);
        Ok(())
    }
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
}

async fn node(seed_port: Option<u16>) -> Node {
    let system = ActorSystem::new("remote-test").unwrap();
    let config = TcpTransportOptions::new(
        "remote-test",
        "127.0.0.1:0".parse().unwrap(),
        ClusterSecret::new("a shared secret of enough length").unwrap(),
    )
    .with_incarnation(rand::random());
    let settings = MembershipOptions::default().with_seeds(seed_port.map(|seed| {
        format!("troupe://remote-test@127.0.0.1:{seed}")
            .parse()
            .unwrap()
    }));
    let cluster = Cluster::builder(&system)
        .with_membership(settings)
        .with_self_seed_if_none()
        .with_inbound_capacity(1024)
        .bind_tcp(config)
        .await
        .unwrap();
    cluster.remoting().register::<Counter>();
    cluster.remoting().register::<Report>();
    Node { system, cluster }
}

async fn up(cluster: &Cluster, members: usize) {
    tokio::time::timeout(
        WAIT,
        cluster.wait_for_view(|v| {
            v.converged
                && v.members
                    .iter()
                    .filter(|m| m.status == MemberStatus::Up)
                    .count()
                    == members
        }),
    )
    .await
    .expect("cluster formed");
}

async fn pair() -> (Node, Node) {
    let a = node(None).await;
    let port = a.cluster.self_address().port;
    let b = node(Some(port)).await;
    up(&a.cluster, 2).await;
    up(&b.cluster, 2).await;
    (a, b)
}

fn path_on(node: &Node, elements: &str) -> String {
    format!("{}{elements}", node.cluster.self_address())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tell_and_ask_use_the_same_api_as_local_refs() {
    let (a, b) = pair().await;
    b.system
        .spawn("counter", Props::new(CounterActor::default))
        .unwrap();
    let remote: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/counter"))
        .unwrap();
    for _ in 0..100 {
        remote.tell(Counter::Add(1));
    }
    let count = remote
        .ask(|reply| Counter::Get { reply })
        .timeout(WAIT)
        .await
        .unwrap();
    assert_eq!(
        count, 100,
        "tells from one sender arrive in order before the ask"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_inside_a_message_reaches_back_across_the_network() {
    let (a, b) = pair().await;
    b.system
        .spawn("counter", Props::new(CounterActor::default))
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let collector = a
        .system
        .spawn("collector", Props::new(move || Collector(tx.clone())))
        .unwrap();
    let remote: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/counter"))
        .unwrap();
    remote.tell(Counter::Add(7));
    remote.tell(Counter::Report { to: collector });
    let report = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.0, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_to_this_node_delivers_through_the_loopback_path() {
    let (a, _b) = pair().await;
    a.system
        .spawn("counter", Props::new(CounterActor::default))
        .unwrap();
    let own: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&a, "/user/counter"))
        .unwrap();
    own.tell(Counter::Add(3));
    let count = own
        .ask(|reply| Counter::Get { reply })
        .timeout(WAIT)
        .await
        .unwrap();
    assert_eq!(count, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_for_a_missing_remote_actor_is_a_dead_letter_on_the_receiving_node() {
    let (a, b) = pair().await;
    let mut dead = b.system.event_stream().subscribe::<DeadLetter>();
    let remote: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/nobody"))
        .unwrap();
    remote.tell(Counter::Add(1));
    let letter = tokio::time::timeout(WAIT, dead.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(letter.reason, DeadLetterReason::UnknownRecipient);
    assert_eq!(letter.recipient.elements(), "/user/nobody");
    // An ask to it is not answered: it times out rather than hanging.
    let err = remote
        .ask(|reply| Counter::Get { reply })
        .timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, AskError::Timeout { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregistered_manifest_is_a_dead_letter_naming_it_never_a_panic() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Unknown;
    impl RemoteMessage for Unknown {
        const MANIFEST: &'static str = "test.NobodyRegisteredThis";
    }
    let (a, b) = pair().await;
    let mut dead = b.system.event_stream().subscribe::<DeadLetter>();
    let remote: ActorRef<Unknown> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/counter"))
        .unwrap();
    remote.tell(Unknown);
    let letter = tokio::time::timeout(WAIT, dead.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&letter.reason, DeadLetterReason::UnknownManifest { manifest } if manifest == "test.NobodyRegisteredThis"),
        "{letter:?}"
    );
    assert_eq!(
        b.cluster
            .remoting()
            .stats()
            .unknown_manifests
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// Spawn a watcher of `remote` on `node`; returns where its `Terminated` arrives. An ask round
/// trip afterwards orders the watch before whatever the test does next.
async fn watch_from(
    node: &Node,
    remote: &ActorRef<Counter>,
) -> mpsc::UnboundedReceiver<Terminated> {
    let (tx, seen) = mpsc::unbounded_channel();
    let target = remote.clone();
    node.system
        .spawn(
            "watcher",
            Props::new(move || Watcher {
                target: target.clone(),
                seen: tx.clone(),
            }),
        )
        .unwrap();
    remote
        .ask(|reply| Counter::Get { reply })
        .timeout(WAIT)
        .await
        .unwrap();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_a_remote_actor_delivers_terminated_when_it_stops() {
    let (a, b) = pair().await;
    let counter = b
        .system
        .spawn("counter", Props::new(CounterActor::default))
        .unwrap();
    let remote: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/counter"))
        .unwrap();
    let mut seen = watch_from(&a, &remote).await;
    counter.stop();
    let terminated = tokio::time::timeout(WAIT, seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(terminated.id, remote.id());
    assert!(remote.is_terminated());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_an_actor_on_a_node_that_is_removed_delivers_terminated() {
    let (a, b) = pair().await;
    b.system
        .spawn("counter", Props::new(CounterActor::default))
        .unwrap();
    let remote: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/counter"))
        .unwrap();
    let mut seen = watch_from(&a, &remote).await;
    let mut events = a.cluster.subscribe();
    b.cluster.leave();
    events
        .wait_for(|e| matches!(e, ClusterEvent::MemberRemoved { .. }))
        .await
        .unwrap();
    let terminated = tokio::time::timeout(WAIT, seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(terminated.id, remote.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_remote_ref_stops_the_remote_actor() {
    let (a, b) = pair().await;
    let counter = b
        .system
        .spawn("counter", Props::new(CounterActor::default))
        .unwrap();
    let remote: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/counter"))
        .unwrap();
    remote.stop();
    tokio::time::timeout(WAIT, counter.terminated())
        .await
        .unwrap();
}

/// Records where each message came from, as the runtime reports it.
struct OriginRecorder(mpsc::UnboundedSender<Option<troupe::Address>>);

impl Actor for OriginRecorder {
    type Msg = Counter;

    async fn handle(&mut self, _msg: Counter, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let _ = self.0.send(ctx.origin().cloned());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_of_a_remote_message_is_the_verified_node_not_the_claimed_sender() {
    let (a, b) = pair().await;
    let (tx, mut origins) = mpsc::unbounded_channel();
    b.system
        .spawn("recorder", Props::new(move || OriginRecorder(tx.clone())))
        .unwrap();
    let remote: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref(&path_on(&b, "/user/recorder"))
        .unwrap();
    // Claim to be an actor on a third node: the payload says so, the transport knows better.
    let forged: troupe::Address = "troupe://remote-test@10.9.9.9:1".parse().unwrap();
    let claimed = troupe::ActorPath::remote(&forged, "/user/impostor");
    remote.tell_from(Counter::Add(1), &claimed);
    let origin = tokio::time::timeout(WAIT, origins.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(origin.as_ref(), Some(a.cluster.self_address()));
    // A local message has no remote origin.
    let local = b.system.resolve::<Counter>("/user/recorder").unwrap();
    local.tell(Counter::Add(1));
    assert_eq!(
        tokio::time::timeout(WAIT, origins.recv())
            .await
            .unwrap()
            .unwrap(),
        None
    );
}

/// The transport's queue to a node nobody listens on fills up: a refused remote send comes
/// back as `SendError::NotSent` with the message, and a plain tell becomes a dead letter whose
/// reason is `NotSent` (a variant, not text naming the node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_the_transport_refuses_is_not_sent_both_for_try_tell_and_tell() {
    let a = node(None).await;
    up(&a.cluster, 1).await;
    let mut dead = a.system.event_stream().subscribe::<DeadLetter>();
    let nowhere: ActorRef<Counter> = a
        .cluster
        .remoting()
        .actor_ref("troupe://remote-test@127.0.0.1:1/user/counter")
        .unwrap();
    // The queue to one peer holds 4096 frames (plus one the writer holds while it dials).
    let refused = (0..10_000)
        .find_map(|i| nowhere.try_tell(Counter::Add(i)).err())
        .expect("the transport's queue to an unreachable peer fills up");
    assert_eq!(refused.reason(), DeadLetterReason::NotSent);
    assert!(
        matches!(refused, troupe::SendError::NotSent(Counter::Add(_))),
        "{refused:?}"
    );
    nowhere.tell(Counter::Add(1));
    let letter = loop {
        let letter = tokio::time::timeout(WAIT, dead.recv())
            .await
            .expect("a dead letter")
            .expect("the stream is open");
        if letter.recipient == *nowhere.path() {
            break letter;
        }
    };
    assert_eq!(letter.reason, DeadLetterReason::NotSent);
    assert_eq!(
        letter.reason.to_string(),
        "not sent: the transport refused it"
    );
    a.system.shutdown().await;
}
