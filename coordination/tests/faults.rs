//! Fault tests on a private etcd: a member restart (the holder keeps its grant, or reports the
//! loss before anyone else can acquire), and a client cut off from etcd for longer than the
//! TTL (the loss is reported and a singleton guarded by the lease stops before another owner
//! acquires it).

#[path = "support/private_etcd.rs"]
mod private_etcd;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use private_etcd::{CutProxy, PrivateEtcd};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use troupe::directory::{Directory, DirectoryChange};
use troupe::lease::{FencingToken, Lease, LeaseLostCallback, LeaseProvider, LeaseSettings};
use troupe::remoting::RemoteMessage;
use troupe::singleton::ClusterSingleton;
use troupe::singleton::{SingletonKey, StartSingletonOptions};
use troupe::testkit::SimCluster;
use troupe::{Actor, ActorError, Context, Props};
use troupe_coordination::etcd::{self, EtcdDirectory, EtcdLeases};

fn loss_recorder() -> (LeaseLostCallback, Arc<Mutex<Vec<Instant>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (Box::new(move |_| sink.lock().push(Instant::now())), seen)
}

async fn leases(endpoint: String) -> EtcdLeases {
    let client = etcd::connect(&[endpoint]).await.expect("connect");
    EtcdLeases::new(client, "/faults/").unwrap()
}

/// Acquire every 100 ms until granted; answers when.
async fn acquire_until_granted(lease: &Arc<dyn Lease>, limit: Duration) -> (Instant, FencingToken) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(token)) = lease.acquire(Box::new(|_| {})).await {
            return (Instant::now(), token);
        }
        assert!(Instant::now() < deadline, "not granted within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_restart_keeps_the_grant_or_reports_the_loss_before_a_takeover() {
    let mut server = PrivateEtcd::start().await;
    let settings = LeaseSettings::new(Duration::from_secs(8), Duration::from_secs(1)).unwrap();
    let holder = leases(server.endpoint())
        .await
        .lease("restart", "holder", &settings)
        .unwrap();
    let other = leases(server.endpoint())
        .await
        .lease("restart", "other", &settings)
        .unwrap();
    let (on_lost, lost) = loss_recorder();
    let token = holder.acquire(on_lost).await.unwrap().expect("granted");

    // A quick restart: etcd restores the lease (and refreshes its TTL on election); the holder
    // reconnects its keep-alive and keeps the grant past its local deadline. (The 7 s local
    // deadline leaves a loaded machine about 6 s to restart etcd.)
    server.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().await;
    tokio::time::sleep(settings.loss_deadline()).await;
    assert!(lost.lock().is_empty(), "no loss across a quick restart");
    assert!(holder.holds());
    assert_eq!(holder.fencing_token(), Some(token));
    assert_eq!(
        other.acquire(Box::new(|_| {})).await.unwrap(),
        None,
        "still held"
    );

    // Down for longer than the TTL: the holder reports the loss by its local deadline, and
    // only after that (and the restart) does the other owner get in.
    server.kill();
    let down = Instant::now();
    tokio::time::sleep(settings.ttl() + Duration::from_secs(1)).await;
    let lost_at = *lost.lock().first().expect("the loss was reported");
    assert!(!holder.holds());
    assert!(
        lost_at - down <= settings.loss_deadline() + Duration::from_millis(500),
        "reported {:?} after etcd went down; the local deadline is {:?}",
        lost_at - down,
        settings.loss_deadline()
    );
    server.restart().await;
    let (granted_at, next) = acquire_until_granted(&other, Duration::from_secs(30)).await;
    assert!(lost_at < granted_at);
    assert!(next > token, "{next} after {token}");
    assert_eq!(lost.lock().len(), 1, "reported once");
}

#[derive(Debug, Serialize, Deserialize)]
enum Job {
    Tick,
}

impl RemoteMessage for Job {
    const MANIFEST: &'static str = "test.coordination.Job";
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Started(Instant),
    Stopped(Instant),
}

struct Scheduler {
    log: Arc<Mutex<Vec<Life>>>,
}

impl Actor for Scheduler {
    type Msg = Job;

    async fn pre_start(&mut self, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        self.log.lock().push(Life::Started(Instant::now()));
        Ok(())
    }

    async fn handle(&mut self, _msg: Job, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        self.log.lock().push(Life::Stopped(Instant::now()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_off_past_the_ttl_stops_its_singleton_before_another_owner_acquires() {
    let server = PrivateEtcd::start().await;
    let proxy = CutProxy::start(server.addr()).await;
    let settings = LeaseSettings::new(Duration::from_secs(3), Duration::from_secs(1)).unwrap();
    let guarded = leases(proxy.endpoint())
        .await
        .lease("scheduler", "node-0", &settings)
        .unwrap();
    let competitor = leases(server.endpoint())
        .await
        .lease("scheduler", "node-1", &settings)
        .unwrap();

    let mut sim = SimCluster::new(11);
    sim.start_node(&[]);
    sim.wait_all_up(1, Duration::from_secs(20)).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let actor_log = Arc::clone(&log);
    let options = StartSingletonOptions::new(Props::new(move || Scheduler {
        log: Arc::clone(&actor_log),
    }))
    .with_lease(guarded)
    .with_acquire_retry_interval(Duration::from_millis(500));
    let key = SingletonKey::of::<Job>("scheduler", None);
    let proxy_ref = ClusterSingleton::get(&sim.node(0).cluster)
        .start(&key, options)
        .unwrap();
    proxy_ref.tell(Job::Tick);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(log.lock().first(), Some(Life::Started(_))) {
        assert!(Instant::now() < deadline, "the singleton never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        competitor.acquire(Box::new(|_| {})).await.unwrap(),
        None,
        "held by the singleton's node"
    );

    proxy.cut();
    let cut = Instant::now();
    let (granted_at, _) = acquire_until_granted(&competitor, Duration::from_secs(30)).await;
    let lives = log.lock().clone();
    let stopped = lives
        .iter()
        .find_map(|l| match l {
            Life::Stopped(at) => Some(*at),
            Life::Started(_) => None,
        })
        .expect("the singleton stopped when its lease was lost");
    assert!(
        stopped < granted_at,
        "the singleton stopped {:?} after the cut, but another owner acquired at {:?}",
        stopped - cut,
        granted_at - cut
    );
    assert!(
        granted_at - cut >= settings.ttl() - settings.renew_interval(),
        "another owner got in {:?} after the cut, before the ttl could pass",
        granted_at - cut
    );
    assert_eq!(
        lives
            .iter()
            .filter(|l| matches!(l, Life::Started(_)))
            .count(),
        1,
        "no restart while cut off: {lives:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_watch_cut_off_from_etcd_ends_and_resumes_without_losing_a_change() {
    let server = PrivateEtcd::start().await;
    let proxy = CutProxy::start(server.addr()).await;
    let remote = EtcdDirectory::new(
        etcd::connect(&[proxy.endpoint()]).await.unwrap(),
        "/faults/",
    )
    .unwrap();
    let direct = EtcdDirectory::new(
        etcd::connect(&[server.endpoint()]).await.unwrap(),
        "/faults/",
    )
    .unwrap();
    let start = direct.snapshot().await.unwrap().revision;
    let mut watch = remote.watch(start).await.unwrap();
    direct.claim("a", "h1").await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("an event")
        .expect("open")
        .expect("not an error");
    proxy.cut();
    for actor in ["b", "c"] {
        direct.claim(actor, "h2").await.unwrap();
    }
    direct.release("a", "h1").await.unwrap();
    // The HTTP/2 keep-alive pings notice the dead connection: the watch ends, it does not hang.
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match watch.next().await {
                Some(Ok(_)) => {} // events that were already in flight before the cut
                Some(Err(_)) | None => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "a cut-off watch ends within 15 s");
    let mut resumed = direct.watch(first.revision).await.unwrap();
    let mut changes = Vec::new();
    for _ in 0..3 {
        let event = tokio::time::timeout(Duration::from_secs(10), resumed.next())
            .await
            .expect("an event")
            .expect("open")
            .expect("not an error");
        changes.push(event.change);
    }
    let claimed = |actor: &str| DirectoryChange::Claimed {
        actor: actor.to_owned(),
        host: "h2".to_owned(),
    };
    assert_eq!(
        changes,
        vec![
            claimed("b"),
            claimed("c"),
            DirectoryChange::Released {
                actor: "a".to_owned(),
                host: "h1".to_owned()
            }
        ]
    );
}
