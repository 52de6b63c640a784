//! Graceful hand-off of virtual actors (a simulated cluster of three nodes, paused clock): a
//! node hands its activations off while other nodes keep sending, and no message is lost,
//! duplicated or reordered per sender; afterwards it holds no claim and can leave.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use troupe::directory::{
    Claim, ClaimOutcome, Directory, DirectoryFuture, DirectorySnapshot, DirectoryWatch,
    InMemoryDirectory, Revision,
};
use troupe::remoting::RemoteMessage;
use troupe::testkit::{SimCluster, sim_address};
use troupe::virtual_actor::{
    PreferLocalPlacement, VirtualActorOptions, VirtualActorType, VirtualActors,
};
use troupe::{Actor, ActorError, Address, Context, DeadLetter, ReplyTo};

const LIMIT: Duration = Duration::from_secs(30);

/// A message of the recorder.
#[derive(Debug, Serialize, Deserialize)]
enum NoteMsg {
    /// The `seq`-th note of `sender`.
    Note { sender: u64, seq: u64 },
    /// Reply with the node the activation runs on.
    Where { reply: ReplyTo<String> },
}

impl RemoteMessage for NoteMsg {
    const MANIFEST: &'static str = "test.virtual.NoteMsg";
}

/// What an activation handled: (node, key, sender, seq).
type Handled = (Address, String, u64, u64);

/// Reports every note it handles.
struct Recorder {
    node: Address,
    key: String,
    handled: mpsc::UnboundedSender<Handled>,
}

impl Actor for Recorder {
    type Msg = NoteMsg;

    async fn handle(&mut self, msg: NoteMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            NoteMsg::Note { sender, seq } => {
                let _ = self
                    .handled
                    .send((self.node.clone(), self.key.clone(), sender, seq));
            }
            NoteMsg::Where { reply } => reply.send(self.node.to_string()),
        }
        Ok(())
    }
}

/// A directory whose releases take 20 ms, so that messages arrive while a claim is released.
#[derive(Debug)]
struct SlowRelease(Arc<InMemoryDirectory>);

impl Directory for SlowRelease {
    fn claim(&self, actor: &str, host: &str) -> DirectoryFuture<ClaimOutcome> {
        self.0.claim(actor, host)
    }
    fn lookup(&self, actor: &str) -> DirectoryFuture<Option<Claim>> {
        self.0.lookup(actor)
    }
    fn release(&self, actor: &str, host: &str) -> DirectoryFuture<bool> {
        let (inner, actor, host) = (Arc::clone(&self.0), actor.to_owned(), host.to_owned());
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            inner.release(&actor, &host).await
        })
    }
    fn evict_host(&self, host: &str) -> DirectoryFuture<Vec<String>> {
        self.0.evict_host(host)
    }
    fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot> {
        self.0.snapshot()
    }
    fn watch(&self, after: Revision) -> DirectoryFuture<DirectoryWatch> {
        self.0.watch(after)
    }
}

async fn three_nodes(
    directory: &Arc<InMemoryDirectory>,
    handled: &mpsc::UnboundedSender<Handled>,
) -> (SimCluster, Vec<VirtualActorType<NoteMsg>>) {
    let mut sim = SimCluster::new(17);
    for _ in 0..3 {
        sim.start_node(&[]);
    }
    sim.wait_all_up(3, LIMIT).await;
    let mut types = Vec::new();
    for i in 0..3 {
        let (node, handled) = (sim_address(i), handled.clone());
        let notes = VirtualActors::get(&sim.node(i).cluster)
            .start(
                "notes",
                move |key: &str| Recorder {
                    node: node.clone(),
                    key: key.to_owned(),
                    handled: handled.clone(),
                },
                VirtualActorOptions::new(Arc::new(SlowRelease(Arc::clone(directory))))
                    .with_placement(PreferLocalPlacement),
            )
            .expect("the type starts");
        types.push(notes);
    }
    for notes in &types {
        tokio::time::timeout(LIMIT, async {
            while notes.status().await.is_none_or(|s| s.members.len() < 3) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("every host sees three members");
    }
    (sim, types)
}

async fn node_of(notes: &VirtualActorType<NoteMsg>, key: &str) -> String {
    notes
        .get(key)
        .unwrap()
        .ask(|reply| NoteMsg::Where { reply })
        .timeout(LIMIT)
        .await
        .unwrap_or_else(|e| panic!("ask {key}: {e}"))
}

/// Grouped so `cargo nextest run -p troupe virtual_actor` selects these tests.
mod virtual_actor {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_hand_off_while_others_send_loses_duplicates_and_reorders_no_message() {
        const KEYS: usize = 8;
        const ROUNDS: u64 = 60;
        let directory = Arc::new(InMemoryDirectory::new());
        let (tx, mut handled) = mpsc::unbounded_channel();
        let (sim, types) = three_nodes(&directory, &tx).await;
        let mut dead: Vec<_> = (0..3)
            .map(|i| sim.node(i).system.event_stream().subscribe::<DeadLetter>())
            .collect();
        let keys: Vec<String> = (0..KEYS).map(|k| format!("k{k}")).collect();
        // Placed on node 0: the first message comes from there and placement prefers it.
        for key in &keys {
            types[0]
                .get(key)
                .unwrap()
                .tell(NoteMsg::Note { sender: 0, seq: 0 });
            assert_eq!(node_of(&types[0], key).await, sim_address(0).to_string());
        }
        // Every node keeps sending, one note per key every 5 ms; node 0 hands off meanwhile.
        let senders: Vec<_> = (0..3)
            .map(|i| {
                let (notes, keys) = (types[i].clone(), keys.clone());
                let first = u64::from(i == 0);
                tokio::spawn(async move {
                    for seq in first..ROUNDS {
                        for key in &keys {
                            notes.get(key).unwrap().tell(NoteMsg::Note {
                                sender: i as u64,
                                seq,
                            });
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = tokio::time::Instant::now();
        types[0]
            .hand_off(LIMIT)
            .await
            .expect("node 0 hands off in time");
        let took = started.elapsed();
        let status = types[0].status().await.unwrap();
        assert!(
            status.active.is_empty(),
            "nothing active on node 0: {status:?}"
        );
        let snapshot = directory.snapshot().await.unwrap();
        let node0 = sim.node(0).node.to_string();
        assert!(
            snapshot.claims.iter().all(|c| c.host != node0),
            "no claim of node 0 is left: {:?}",
            snapshot.claims
        );
        for sender in senders {
            sender.await.unwrap();
        }
        // Every key now runs elsewhere, and is reached from every node.
        for key in &keys {
            let host = node_of(&types[1], key).await;
            assert_ne!(host, sim_address(0).to_string(), "{key} moved off node 0");
            assert_eq!(node_of(&types[0], key).await, host);
            assert_eq!(node_of(&types[2], key).await, host);
        }
        assert!(
            took >= Duration::from_millis(20),
            "the hand-off waited for the releases: {took:?}"
        );
        // Every note arrived once, in each sender's order.
        let expected = KEYS * 3 * ROUNDS as usize;
        let mut seen: BTreeMap<(String, u64), Vec<u64>> = BTreeMap::new();
        for _ in 0..expected {
            let (_, key, sender, seq) = tokio::time::timeout(LIMIT, handled.recv())
                .await
                .expect("every note is handled in time")
                .unwrap();
            seen.entry((key, sender)).or_default().push(seq);
        }
        for key in &keys {
            for sender in 0..3 {
                assert_eq!(
                    seen.get(&(key.clone(), sender)),
                    Some(&(0..ROUNDS).collect::<Vec<_>>()),
                    "{key} from node {sender}: all notes, once, in order"
                );
            }
        }
        assert!(handled.try_recv().is_err(), "no note twice");
        for (i, stream) in dead.iter_mut().enumerate() {
            assert!(
                stream.try_recv().is_none(),
                "node {i} dead-lettered nothing"
            );
        }
        println!("hand-off of {KEYS} activations under load: {took:?} (virtual time)");
        // A second hand-off answers at once; node 0 can now leave.
        types[0].hand_off(LIMIT).await.unwrap();
        sim.node(0).cluster.leave();
        for i in 1..3 {
            sim.wait_until(LIMIT, |s| s.view(i).members.len() == 2)
                .await;
        }
        for key in &keys {
            let host = node_of(&types[1], key).await;
            assert_eq!(node_of(&types[2], key).await, host);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_with_nothing_active_hands_off_at_once_and_every_type_is_handed_off_together() {
        let directory = Arc::new(InMemoryDirectory::new());
        let (tx, _handled) = mpsc::unbounded_channel();
        let (sim, types) = three_nodes(&directory, &tx).await;
        let started = tokio::time::Instant::now();
        types[1].hand_off(LIMIT).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(10));
        types[2]
            .get("a")
            .unwrap()
            .tell(NoteMsg::Note { sender: 2, seq: 0 });
        assert_eq!(node_of(&types[2], "a").await, sim_address(2).to_string());
        VirtualActors::get(&sim.node(2).cluster)
            .hand_off(LIMIT)
            .await
            .unwrap();
        assert!(types[2].status().await.unwrap().active.is_empty());
        assert_eq!(directory.lookup("virtual/notes/a").await.unwrap(), None);
        // Node 1 handed off: the next activation of "a" goes to node 0, the only one left.
        assert_eq!(node_of(&types[2], "a").await, sim_address(0).to_string());
    }
}
