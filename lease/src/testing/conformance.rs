//! The conformance suite every [`Lease`] and [`Directory`] backend passes — the in-memory ones
//! here, etcd and PostgreSQL in `troupe-coordination`, and any backend written elsewhere.
//!
//! Each case is an `async fn(&Backend)` that panics with a message naming the backend when the
//! backend breaks the contract ([`crate::lease`], [`crate::directory`]). Give each case a
//! fresh, isolated [`Backend`] (its own key prefix, schema or namespace), on a multi-threaded
//! runtime. [`conformance_tests!`](crate::conformance_tests) writes one test per case:
//!
//! ```no_run
//! use std::sync::Arc;
//! use troupe_lease::directory::InMemoryDirectory;
//! use troupe_lease::lease::{InMemoryLeaseArbiter, LeaseSettings};
//! use troupe_lease::testing::conformance::Backend;
//!
//! async fn in_memory() -> Backend {
//!     let settings = LeaseSettings::new(
//!         std::time::Duration::from_secs(1),
//!         std::time::Duration::from_millis(250),
//!     )
//!     .unwrap();
//!     Backend::new(
//!         "in-memory",
//!         Arc::new(InMemoryLeaseArbiter::new(settings)),
//!         Arc::new(InMemoryDirectory::new()),
//!         settings,
//!     )
//! }
//! troupe_lease::conformance_tests!(in_memory);
//! ```
//!
//! Cases:
//! - [`concurrent_acquirers_one_winner`]: 20 concurrent acquirers, exactly one winner (on a TTL
//!   of at least the operation timeout, so load cannot let the grant lapse mid-case).
//! - [`racing_updaters_never_lose_an_update`]: owners racing acquire/release never overlap (at
//!   the store, nor in `holds()`: once one is granted, the previous holder's `holds()` is false) and
//!   every grant is counted with its own increasing token; hosts racing claims and releases on
//!   distinct ids leave exactly the expected claims.
//! - [`expiry_after_ttl`]: a holder that stops renewing (its handle dropped, as in a crash)
//!   keeps the lease until about its TTL has passed, then another owner gets it.
//! - [`release_by_non_holder_is_refused`].
//! - [`fencing_token_increases_across_holders`].
//! - [`directory_claim_race_has_one_winner`] (and release by a non-owner is refused).
//! - [`eviction_releases_every_claim`].
//! - [`watch_resumes_in_order_after_reconnect`].
//! - [`bad_lease_input_is_refused_alike`]: every out-of-limits lease name and owner gets exactly
//!   the error [`validate_identity`] gives (variant, code and message), nothing granted.
//! - [`bad_directory_input_is_refused_alike`]: every out-of-limits actor id and host, in every
//!   operation, gets exactly the error [`validate_actor`] or [`validate_host`] gives.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::directory::{
    ClaimOutcome, Directory, DirectoryChange, DirectoryError, DirectoryEvent, DirectoryWatch,
    Revision, validate_actor, validate_host,
};
use crate::lease::{
    FencingToken, Lease, LeaseLost, LeaseLostCallback, LeaseProvider, LeaseSettings, MAX_LEASE_TTL,
    MAX_NAME_BYTES, validate_identity,
};

/// One isolated backend instance under test.
#[derive(Clone)]
pub struct Backend {
    /// Named in failure messages.
    pub name: String,
    /// Makes lease handles.
    pub leases: Arc<dyn LeaseProvider>,
    /// The directory.
    pub directory: Arc<dyn Directory>,
    /// The settings the cases acquire with; keep the TTL short (the expiry case waits about
    /// one TTL), within what the backend honours.
    pub settings: LeaseSettings,
    /// How much later than `ttl` after the last renewal the backend may let another owner in
    /// (its expiry granularity); the expiry case allows this on top of the TTL.
    pub expiry_slack: Duration,
    /// Time for one operation under load; the cases fail when one takes longer.
    pub operation_timeout: Duration,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// A backend with 1 s expiry slack and a 10 s operation timeout.
    pub fn new(
        name: &str,
        leases: Arc<dyn LeaseProvider>,
        directory: Arc<dyn Directory>,
        settings: LeaseSettings,
    ) -> Self {
        Self {
            name: name.to_owned(),
            leases,
            directory,
            settings,
            expiry_slack: Duration::from_secs(1),
            operation_timeout: Duration::from_secs(10),
        }
    }

    /// Allow `slack` past the TTL before expiry must have happened.
    #[must_use]
    pub fn with_expiry_slack(mut self, slack: Duration) -> Self {
        self.expiry_slack = slack;
        self
    }

    fn lease(&self, name: &str, owner: &str) -> Arc<dyn Lease> {
        self.lease_with(name, owner, &self.settings)
    }

    fn lease_with(&self, name: &str, owner: &str, settings: &LeaseSettings) -> Arc<dyn Lease> {
        self.leases
            .lease(name, owner, settings)
            .unwrap_or_else(|e| panic!("[{}] lease handle {name}/{owner}: {e}", self.name))
    }

    /// `settings` with TTL and renew interval multiplied by the smallest whole factor that
    /// makes the TTL at least `operation_timeout` (so a backend that honours whole seconds
    /// still does), capped at [`MAX_LEASE_TTL`].
    fn race_settings(&self) -> LeaseSettings {
        let ttl = self.settings.ttl();
        let wanted = self.operation_timeout.min(MAX_LEASE_TTL);
        let factor = u32::try_from(wanted.as_nanos().div_ceil(ttl.as_nanos().max(1)))
            .unwrap_or(1)
            .max(1);
        LeaseSettings::new(ttl * factor, self.settings.renew_interval() * factor)
            .unwrap_or(self.settings)
    }

    async fn bounded<T>(&self, what: &str, fut: impl Future<Output = T>) -> T {
        match tokio::time::timeout(self.operation_timeout, fut).await {
            Ok(v) => v,
            Err(_) => panic!(
                "[{}] {what} took longer than {:?}",
                self.name, self.operation_timeout
            ),
        }
    }

    async fn acquire(&self, lease: &Arc<dyn Lease>) -> Option<FencingToken> {
        let what = format!("acquire {} as {}", lease.name(), lease.owner());
        self.bounded(&what, lease.acquire(ignore_loss()))
            .await
            .unwrap_or_else(|e| panic!("[{}] {what}: {e}", self.name))
    }

    async fn release(&self, lease: &Arc<dyn Lease>) {
        let what = format!("release {} as {}", lease.name(), lease.owner());
        self.bounded(&what, lease.release())
            .await
            .unwrap_or_else(|e| panic!("[{}] {what}: {e}", self.name));
    }

    async fn claim(&self, actor: &str, host: &str) -> ClaimOutcome {
        let what = format!("claim {actor} for {host}");
        self.bounded(&what, self.directory.claim(actor, host))
            .await
            .unwrap_or_else(|e| panic!("[{}] {what}: {e}", self.name))
    }

    async fn next_event(&self, watch: &mut DirectoryWatch) -> DirectoryEvent {
        match self.bounded("watch next", watch.next()).await {
            Some(Ok(event)) => event,
            Some(Err(e)) => panic!("[{}] watch failed: {e}", self.name),
            None => panic!("[{}] watch ended unexpectedly", self.name),
        }
    }
}

fn ignore_loss() -> LeaseLostCallback {
    Box::new(|_: LeaseLost| {})
}

/// 20 handles of one lease acquire at once: exactly one wins, the others are told it is held.
///
/// The handles use [`Backend::settings`] scaled up (same ratio, whole multiples) to a TTL of at
/// least [`Backend::operation_timeout`]: the case is about the race, and a short TTL on a loaded
/// machine would let the winner's grant lapse between the race and the checks, so a late
/// acquirer would win too.
pub async fn concurrent_acquirers_one_winner(b: &Backend) {
    let settings = b.race_settings();
    let handles: Vec<Arc<dyn Lease>> = (0..20)
        .map(|i| b.lease_with("contended", &format!("owner-{i}"), &settings))
        .collect();
    let mut tasks = Vec::new();
    for handle in &handles {
        let b = b.clone();
        let handle = Arc::clone(handle);
        tasks.push(tokio::spawn(async move { b.acquire(&handle).await }));
    }
    let mut winners = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        if task.await.expect("acquire task").is_some() {
            winners.push(i);
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "[{}] exactly one of 20 concurrent acquirers wins, got {winners:?}",
        b.name
    );
    for (i, handle) in handles.iter().enumerate() {
        assert_eq!(
            handle.holds(),
            i == winners[0],
            "[{}] owner-{i} holds() after the race",
            b.name
        );
    }
    let winner = &handles[winners[0]];
    let token = winner.fencing_token();
    assert!(token.is_some(), "[{}] the winner has a token", b.name);
    assert_eq!(
        b.acquire(winner).await,
        token,
        "[{}] acquiring again while holding answers the same grant",
        b.name
    );
    b.release(winner).await;
    assert!(!winner.holds(), "[{}] released", b.name);
}

/// Owners racing acquire/release never hold at once — neither at the store (one grant at a
/// time) nor in their own belief (when one is granted, every other handle's `holds()` is
/// false) — and every grant gets its own, larger token; hosts racing claims and releases on distinct ids leave exactly the expected claims.
pub async fn racing_updaters_never_lose_an_update(b: &Backend) {
    const OWNERS: usize = 8;
    const GRANTS_EACH: usize = 3;
    let inside = Arc::new(AtomicBool::new(false));
    let granted: Arc<Mutex<Vec<(usize, FencingToken)>>> = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + b.operation_timeout * 3;
    let handles: Arc<Vec<Arc<dyn Lease>>> = Arc::new(
        (0..OWNERS)
            .map(|i| b.lease("raced", &format!("racer-{i}")))
            .collect(),
    );
    let mut tasks = Vec::new();
    for i in 0..OWNERS {
        let b = b.clone();
        let inside = Arc::clone(&inside);
        let granted = Arc::clone(&granted);
        let handles = Arc::clone(&handles);
        tasks.push(tokio::spawn(async move {
            let handle = &handles[i];
            let mut mine = 0;
            while mine < GRANTS_EACH {
                assert!(
                    Instant::now() < deadline,
                    "[{}] racer-{i} got only {mine} grants in time",
                    b.name
                );
                if let Some(token) = b.acquire(handle).await {
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "[{}] racer-{i} was granted {token} while another racer held the lease",
                        b.name
                    );
                    // The previous holder's own belief: once the store granted racer-i, no
                    // other handle may still answer `holds()` (it released or lost first).
                    for (k, other) in handles.iter().enumerate() {
                        assert!(
                            k == i || !other.holds(),
                            "[{}] racer-{k} still holds() {:?} after racer-{i} was granted {token}",
                            b.name,
                            other.fencing_token()
                        );
                    }
                    granted.lock().push((i, token));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.store(false, Ordering::SeqCst);
                    b.release(handle).await;
                    assert!(
                        !handle.holds(),
                        "[{}] racer-{i} holds() after its release",
                        b.name
                    );
                    mine += 1;
                }
                tokio::time::sleep(Duration::from_millis(1 + (i as u64 % 4))).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("racer task");
    }
    let granted = granted.lock().clone();
    assert_eq!(granted.len(), OWNERS * GRANTS_EACH, "[{}] grants", b.name);
    for pair in granted.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "[{}] token of a later grant {:?} is not larger than {:?}",
            b.name,
            pair[1],
            pair[0]
        );
    }

    // The directory: 20 hosts, 10 ids each, every odd one released again, all at once.
    let mut tasks = Vec::new();
    for h in 0..20 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let host = format!("host-{h}");
            for a in 0..10 {
                let actor = format!("actor-{h}-{a}");
                assert!(b.claim(&actor, &host).await.won(), "[{}] {actor}", b.name);
                if a % 2 == 1 {
                    let released = b
                        .bounded("release", b.directory.release(&actor, &host))
                        .await
                        .unwrap_or_else(|e| panic!("[{}] release {actor}: {e}", b.name));
                    assert!(released, "[{}] release {actor} by its owner", b.name);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("claimer task");
    }
    let snapshot = b
        .bounded("snapshot", b.directory.snapshot())
        .await
        .unwrap_or_else(|e| panic!("[{}] snapshot: {e}", b.name));
    let found: BTreeMap<String, String> = snapshot
        .claims
        .iter()
        .map(|c| (c.actor.clone(), c.host.clone()))
        .collect();
    let expected: BTreeMap<String, String> = (0..20)
        .flat_map(|h| {
            (0..10)
                .filter(|a| a % 2 == 0)
                .map(move |a| (format!("actor-{h}-{a}"), format!("host-{h}")))
        })
        .collect();
    assert_eq!(found, expected, "[{}] claims after racing updates", b.name);
}

/// A holder that stops renewing keeps the lease until about its TTL has passed, then another
/// owner gets it with a larger token.
pub async fn expiry_after_ttl(b: &Backend) {
    let a = b.lease("expiring", "crashing-owner");
    let sent = Instant::now();
    let first = b.acquire(&a).await.expect("a free lease is granted");
    let stopped = Instant::now();
    drop(a);
    let other = b.lease("expiring", "survivor");
    assert_eq!(
        b.acquire(&other).await,
        None,
        "[{}] the lease is still held right after its holder stopped renewing",
        b.name
    );
    let ttl = b.settings.ttl();
    // The grant lives at least `ttl` after the acquire was sent (later, if a renewal was
    // confirmed before the handle was dropped). Counting from `stopped` instead would blame the
    // backend for a slow acquire.
    let earliest = sent + ttl.saturating_sub(Duration::from_millis(100));
    let latest = stopped + ttl + b.settings.renew_interval() + b.expiry_slack;
    let token = loop {
        let asked = Instant::now();
        if let Some(token) = b.acquire(&other).await {
            assert!(
                asked >= earliest,
                "[{}] another owner got the lease {:?} after the holder stopped, before its ttl {ttl:?} could have passed",
                b.name,
                asked - stopped
            );
            break token;
        }
        assert!(
            Instant::now() <= latest,
            "[{}] the lease did not expire within ttl {ttl:?} + slack {:?}",
            b.name,
            b.expiry_slack + b.settings.renew_interval()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(token > first, "[{}] {token} after {first}", b.name);
    b.release(&other).await;
}

/// A release by an owner that does not hold the lease changes nothing.
pub async fn release_by_non_holder_is_refused(b: &Backend) {
    let holder = b.lease("guarded", "holder");
    let intruder = b.lease("guarded", "intruder");
    let token = b.acquire(&holder).await.expect("granted");
    b.release(&intruder).await;
    assert!(
        holder.holds(),
        "[{}] holder still believes it holds",
        b.name
    );
    assert_eq!(
        b.acquire(&intruder).await,
        None,
        "[{}] a release by a non-holder must not free the lease",
        b.name
    );
    assert_eq!(holder.fencing_token(), Some(token));
    b.release(&holder).await;
    assert!(
        b.acquire(&intruder).await.is_some(),
        "[{}] free after the holder's own release",
        b.name
    );
    b.release(&intruder).await;
}

/// Tokens strictly increase across holders, including the same owner acquiring again.
pub async fn fencing_token_increases_across_holders(b: &Backend) {
    let owners: Vec<Arc<dyn Lease>> = ["a", "b", "c"]
        .iter()
        .map(|o| b.lease("fenced", o))
        .collect();
    let mut last: Option<FencingToken> = None;
    for round in 0..7 {
        let handle = &owners[round % 2 + usize::from(round % 3 == 0)];
        let token = b.acquire(handle).await.expect("free lease is granted");
        assert_eq!(handle.fencing_token(), Some(token), "[{}]", b.name);
        if let Some(last) = last {
            assert!(
                token > last,
                "[{}] round {round}: token {token} not above the previous holder's {last}",
                b.name
            );
        }
        last = Some(token);
        b.release(handle).await;
        assert_eq!(handle.fencing_token(), None, "[{}] released", b.name);
    }
}

/// 20 hosts claim one id at once: one wins, everyone is told the winner; a non-owner cannot
/// release it; the owner can; the next claim has a larger revision.
pub async fn directory_claim_race_has_one_winner(b: &Backend) {
    let mut tasks = Vec::new();
    for h in 0..20 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            b.claim("contended-actor", &format!("host-{h}")).await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("claim task"));
    }
    let winners: Vec<&ClaimOutcome> = outcomes.iter().filter(|o| o.won()).collect();
    assert_eq!(winners.len(), 1, "[{}] claim winners: {winners:?}", b.name);
    let claim = winners[0].claim().clone();
    for outcome in &outcomes {
        assert_eq!(
            outcome.claim(),
            &claim,
            "[{}] every claimant is told the winning claim",
            b.name
        );
    }
    let looked_up = b
        .bounded("lookup", b.directory.lookup("contended-actor"))
        .await
        .unwrap_or_else(|e| panic!("[{}] lookup: {e}", b.name));
    assert_eq!(looked_up.as_ref(), Some(&claim), "[{}] lookup", b.name);
    assert_eq!(
        b.claim("contended-actor", &claim.host).await,
        ClaimOutcome::Claimed(claim.clone()),
        "[{}] claiming what one owns changes nothing",
        b.name
    );
    let other = if claim.host == "host-0" {
        "host-1"
    } else {
        "host-0"
    };
    let refused = b
        .bounded("release", b.directory.release("contended-actor", other))
        .await
        .unwrap_or_else(|e| panic!("[{}] release: {e}", b.name));
    assert!(!refused, "[{}] release by a non-owner is refused", b.name);
    let released = b
        .bounded(
            "release",
            b.directory.release("contended-actor", &claim.host),
        )
        .await
        .unwrap_or_else(|e| panic!("[{}] release: {e}", b.name));
    assert!(released, "[{}] release by the owner", b.name);
    let gone = b
        .bounded("lookup", b.directory.lookup("contended-actor"))
        .await
        .unwrap_or_else(|e| panic!("[{}] lookup: {e}", b.name));
    assert_eq!(gone, None, "[{}] released", b.name);
    let again = b.claim("contended-actor", other).await;
    assert!(again.won(), "[{}] free again", b.name);
    assert!(
        again.claim().revision > claim.revision,
        "[{}] a new claim has a larger revision",
        b.name
    );
}

/// Evicting a host releases every claim it held and nothing else.
pub async fn eviction_releases_every_claim(b: &Backend) {
    let mut doomed = BTreeSet::new();
    for i in 0..10 {
        let actor = format!("doomed-{i}");
        assert!(b.claim(&actor, "dead-host").await.won());
        doomed.insert(actor);
    }
    for i in 0..5 {
        assert!(b.claim(&format!("kept-{i}"), "live-host").await.won());
    }
    let evicted: BTreeSet<String> = b
        .bounded("evict", b.directory.evict_host("dead-host"))
        .await
        .unwrap_or_else(|e| panic!("[{}] evict: {e}", b.name))
        .into_iter()
        .collect();
    assert_eq!(evicted, doomed, "[{}] evicted ids", b.name);
    for actor in &doomed {
        let claim = b
            .bounded("lookup", b.directory.lookup(actor))
            .await
            .unwrap_or_else(|e| panic!("[{}] lookup: {e}", b.name));
        assert_eq!(claim, None, "[{}] {actor} released by the eviction", b.name);
        assert!(
            b.claim(actor, "live-host").await.won(),
            "[{}] {actor} claimable after eviction",
            b.name
        );
    }
    for i in 0..5 {
        let claim = b
            .bounded("lookup", b.directory.lookup(&format!("kept-{i}")))
            .await
            .unwrap_or_else(|e| panic!("[{}] lookup: {e}", b.name));
        assert_eq!(
            claim.map(|c| c.host),
            Some("live-host".to_owned()),
            "[{}] another host's claims survive the eviction",
            b.name
        );
    }
    let again = b
        .bounded("evict", b.directory.evict_host("dead-host"))
        .await
        .unwrap_or_else(|e| panic!("[{}] evict: {e}", b.name));
    assert!(again.is_empty(), "[{}] nothing left to evict", b.name);
}

/// A watcher sees every change in order; after it drops its watch and resumes from the last
/// revision it saw, it gets exactly the changes it had not seen — including those made while
/// it was away — in order, once each.
pub async fn watch_resumes_in_order_after_reconnect(b: &Backend) {
    let d = &b.directory;
    let start = b
        .bounded("snapshot", d.snapshot())
        .await
        .unwrap_or_else(|e| panic!("[{}] snapshot: {e}", b.name));
    let mut watch = b
        .bounded("watch", d.watch(start.revision))
        .await
        .unwrap_or_else(|e| panic!("[{}] watch: {e}", b.name));
    let claimed = |actor: &str, host: &str| DirectoryChange::Claimed {
        actor: actor.to_owned(),
        host: host.to_owned(),
    };
    let released = |actor: &str, host: &str| DirectoryChange::Released {
        actor: actor.to_owned(),
        host: host.to_owned(),
    };
    b.claim("w-a", "h1").await;
    b.claim("w-b", "h2").await;
    b.bounded("release", d.release("w-a", "h1"))
        .await
        .unwrap_or_else(|e| panic!("[{}] release: {e}", b.name));
    b.bounded("evict", d.evict_host("h2"))
        .await
        .unwrap_or_else(|e| panic!("[{}] evict: {e}", b.name));
    let mut expected = vec![
        claimed("w-a", "h1"),
        claimed("w-b", "h2"),
        released("w-a", "h1"),
        released("w-b", "h2"),
    ];
    let mut seen: Vec<DirectoryEvent> = Vec::new();
    for _ in 0..2 {
        seen.push(b.next_event(&mut watch).await);
    }
    // Disconnect, and change more while away.
    drop(watch);
    b.claim("w-c", "h3").await;
    b.claim("w-a", "h3").await;
    expected.push(claimed("w-c", "h3"));
    expected.push(claimed("w-a", "h3"));
    let resume_from = seen.last().map(|e| e.revision).unwrap_or(start.revision);
    let mut watch = b
        .bounded("watch", d.watch(resume_from))
        .await
        .unwrap_or_else(|e| panic!("[{}] resume watch: {e}", b.name));
    while seen.len() < expected.len() {
        seen.push(b.next_event(&mut watch).await);
    }
    // One more change proves nothing was duplicated or left in between.
    b.claim("w-d", "h4").await;
    expected.push(claimed("w-d", "h4"));
    seen.push(b.next_event(&mut watch).await);
    let changes: Vec<DirectoryChange> = seen.iter().map(|e| e.change.clone()).collect();
    assert_eq!(
        changes, expected,
        "[{}] changes seen across a reconnect",
        b.name
    );
    let mut previous = start.revision;
    for event in &seen {
        assert!(
            event.revision > previous,
            "[{}] revisions strictly increase: {} after {previous}",
            b.name,
            event.revision
        );
        previous = event.revision;
    }
    let claim = b
        .bounded("lookup", d.lookup("w-d"))
        .await
        .unwrap_or_else(|e| panic!("[{}] lookup: {e}", b.name))
        .expect("claimed");
    assert_eq!(
        claim.revision,
        seen.last().map_or(Revision(0), |e| e.revision),
        "[{}] a claim's revision is the revision of its change",
        b.name
    );
}

/// Names and owners outside the limits, one of each problem: empty, one byte too long, 100 KiB,
/// a control character.
fn bad_names() -> Vec<String> {
    vec![
        String::new(),
        "x".repeat(MAX_NAME_BYTES + 1),
        "y".repeat(100 * 1024),
        "a\u{0}b".to_owned(),
        "line\nbreak".to_owned(),
    ]
}

/// Every lease name and owner outside the limits is refused when the handle is made, with
/// exactly the error [`validate_identity`] gives — the same variant, code and message on
/// every backend — and a good handle of the same lease is still granted afterwards.
pub async fn bad_lease_input_is_refused_alike(b: &Backend) {
    for bad in bad_names() {
        for (name, owner) in [(bad.as_str(), "owner-a"), ("refused", bad.as_str())] {
            let expected = validate_identity(name, owner).expect_err("outside the limits");
            let got = b
                .leases
                .lease(name, owner, &b.settings)
                .err()
                .unwrap_or_else(|| {
                    panic!(
                        "[{}] a handle for name {} / owner {} was made",
                        b.name,
                        crate::shorten(name),
                        crate::shorten(owner)
                    )
                });
            assert_eq!(got, expected, "[{}] {}", b.name, expected.code());
            assert_eq!(got.code(), expected.code(), "[{}]", b.name);
            assert!(
                !got.is_retryable(),
                "[{}] bad input is not retryable",
                b.name
            );
        }
    }
    let good = b.lease("refused", "owner-a");
    assert!(b.acquire(&good).await.is_some(), "[{}] free", b.name);
    b.release(&good).await;
}

/// Every actor id and host outside the limits is refused by every operation that takes one
/// (claim, lookup, release, evict), with exactly the error [`validate_actor`] or
/// [`validate_host`] gives, the actor checked first; nothing is claimed.
pub async fn bad_directory_input_is_refused_alike(b: &Backend) {
    let d = &b.directory;
    let expect = |what: &str, got: Result<(), DirectoryError>, expected: DirectoryError| {
        let got = got.expect_err(what);
        assert_eq!(got, expected, "[{}] {what}", b.name);
        assert_eq!(got.code(), expected.code(), "[{}] {what}", b.name);
    };
    for bad in bad_names() {
        let actor_error = validate_actor(&bad).expect_err("outside the limits");
        let host_error = validate_host(&bad).expect_err("outside the limits");
        let shown = crate::shorten(&bad);
        expect(
            &format!("claim actor {shown:?}"),
            b.bounded("claim", d.claim(&bad, "host-a")).await.map(drop),
            actor_error.clone(),
        );
        expect(
            &format!("claim actor {shown:?} with a bad host too"),
            b.bounded("claim", d.claim(&bad, &bad)).await.map(drop),
            actor_error.clone(),
        );
        expect(
            &format!("claim for host {shown:?}"),
            b.bounded("claim", d.claim("actor-a", &bad)).await.map(drop),
            host_error.clone(),
        );
        expect(
            &format!("lookup {shown:?}"),
            b.bounded("lookup", d.lookup(&bad)).await.map(drop),
            actor_error.clone(),
        );
        expect(
            &format!("release actor {shown:?}"),
            b.bounded("release", d.release(&bad, "host-a"))
                .await
                .map(drop),
            actor_error.clone(),
        );
        expect(
            &format!("release for host {shown:?}"),
            b.bounded("release", d.release("actor-a", &bad))
                .await
                .map(drop),
            host_error.clone(),
        );
        expect(
            &format!("evict host {shown:?}"),
            b.bounded("evict", d.evict_host(&bad)).await.map(drop),
            host_error,
        );
    }
    let lookup = b.bounded("lookup", d.lookup("actor-a")).await;
    assert_eq!(
        lookup.map_err(|e| e.to_string()),
        Ok(None),
        "[{}] nothing was claimed",
        b.name
    );
}

/// One `#[tokio::test]` per conformance case, each on a fresh backend from `$make` (an async
/// function answering a [`Backend`]).
///
/// `conformance_tests!(make)` writes every case; `conformance_tests!(leases: make)` only the
/// lease cases and `conformance_tests!(directory: make)` only the directory cases, for a
/// backend that implements one of the two (give [`Backend`] an in-memory stand-in for the
/// other; it is not exercised).
#[macro_export]
macro_rules! conformance_tests {
    (leases: $make:path) => {
        $crate::conformance_tests!(@case $make,
            conformance_concurrent_acquirers_one_winner => concurrent_acquirers_one_winner,
            conformance_racing_updaters_never_lose_an_update => racing_updaters_never_lose_an_update,
            conformance_expiry_after_ttl => expiry_after_ttl,
            conformance_release_by_non_holder_is_refused => release_by_non_holder_is_refused,
            conformance_fencing_token_increases_across_holders => fencing_token_increases_across_holders,
            conformance_bad_lease_input_is_refused_alike => bad_lease_input_is_refused_alike
        );
    };
    (directory: $make:path) => {
        $crate::conformance_tests!(@case $make,
            conformance_racing_updaters_never_lose_an_update => racing_updaters_never_lose_an_update,
            conformance_directory_claim_race_has_one_winner => directory_claim_race_has_one_winner,
            conformance_eviction_releases_every_claim => eviction_releases_every_claim,
            conformance_watch_resumes_in_order_after_reconnect => watch_resumes_in_order_after_reconnect,
            conformance_bad_directory_input_is_refused_alike => bad_directory_input_is_refused_alike
        );
    };
    ($make:path) => {
        $crate::conformance_tests!(@case $make,
            conformance_concurrent_acquirers_one_winner => concurrent_acquirers_one_winner,
            conformance_racing_updaters_never_lose_an_update => racing_updaters_never_lose_an_update,
            conformance_expiry_after_ttl => expiry_after_ttl,
            conformance_release_by_non_holder_is_refused => release_by_non_holder_is_refused,
            conformance_fencing_token_increases_across_holders => fencing_token_increases_across_holders,
            conformance_directory_claim_race_has_one_winner => directory_claim_race_has_one_winner,
            conformance_eviction_releases_every_claim => eviction_releases_every_claim,
            conformance_watch_resumes_in_order_after_reconnect => watch_resumes_in_order_after_reconnect,
            conformance_bad_lease_input_is_refused_alike => bad_lease_input_is_refused_alike,
            conformance_bad_directory_input_is_refused_alike => bad_directory_input_is_refused_alike
        );
    };
    (@case $make:path, $($test:ident => $case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let backend = $make().await;
                $crate::testing::conformance::$case(&backend).await;
            }
        )+
    };
}
