//! The [`Directory`]: which host owns an actor id, cluster-wide — and an in-memory directory for
//! tests and single-node use.
//!
//! Membership answers which hosts are alive; the directory answers which host owns *this*
//! actor. Backends for etcd and PostgreSQL live in the `troupe-coordination` crate; every
//! backend passes the shared conformance suite in `troupe_lease::testing::conformance` (feature `testing`).
//!
//! # Contract
//! - `claim(actor, host)`: of any number of concurrent claimants exactly one wins. The answer
//!   is [`ClaimOutcome::Claimed`] for the winner (and for a host claiming what it already
//!   owns, with the original claim unchanged) and [`ClaimOutcome::Owned`] naming the owner for
//!   everyone else. A claim stays until released or evicted; it is not tied to a lease.
//! - `lookup(actor)` answers the current claim, if any.
//! - `release(actor, host)` removes the claim only if `host` owns it, and answers whether it
//!   did. A release by a non-owner is refused (`false`) and changes nothing.
//! - `evict_host(host)` removes every claim of `host` — what a survivor calls when membership
//!   ages that host out — and answers the released actor ids.
//! - Every change gets a [`Revision`]; revisions of one directory strictly increase in the
//!   order the changes took effect (they need not be consecutive). A claim carries the
//!   revision that created it, usable as a fencing token for that activation.
//! - `watch(after)` streams every change with a revision greater than `after`, in revision
//!   order, each exactly once — including the changes made while no watch was open, so a
//!   watcher that reconnects with the last revision it saw misses nothing. `snapshot()` gives
//!   the current claims and the revision they are current at, to start a watch from. A
//!   backend that no longer has the history asked for ends the watch with
//!   [`DirectoryError::Compacted`]; the watcher takes a new snapshot.
//! - A watch ends (`next()` answers `None` or an error) when the backend connection is lost;
//!   the watcher resumes with `watch(last_seen)`.
//! - Actor ids and host names are non-empty UTF-8 strings of at most
//!   [`MAX_NAME_BYTES`](crate::lease::MAX_NAME_BYTES) bytes without control characters;
//!   backends refuse others in every operation with [`DirectoryError::InvalidActor`] or
//!   [`DirectoryError::InvalidHost`] (the actor first). A stored entry that does not
//!   parse is [`DirectoryError::Malformed`], never a panic.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

pub use crate::NameProblem;

/// The position of a change in a directory's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision(pub u64);

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// One actor's owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    /// The actor id.
    pub actor: String,
    /// The owning host.
    pub host: String,
    /// The revision that created this claim (grows with every new claim of the id).
    pub revision: Revision,
}

/// The answer to [`Directory::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The claimant owns the actor (newly, or it already did).
    Claimed(Claim),
    /// Another host owns it.
    Owned(Claim),
}

impl ClaimOutcome {
    /// The claim in force, whoever owns it.
    #[must_use]
    pub fn claim(&self) -> &Claim {
        match self {
            Self::Claimed(c) | Self::Owned(c) => c,
        }
    }

    /// Whether the claimant won.
    #[must_use]
    pub fn won(&self) -> bool {
        matches!(self, Self::Claimed(_))
    }
}

/// What changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DirectoryChange {
    /// `host` now owns `actor`.
    Claimed {
        /// The actor id.
        actor: String,
        /// Its new owner.
        host: String,
    },
    /// `host` no longer owns `actor` (released or evicted).
    Released {
        /// The actor id.
        actor: String,
        /// Its former owner.
        host: String,
    },
}

/// One change and its revision.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DirectoryEvent {
    /// When it took effect.
    pub revision: Revision,
    /// What changed.
    pub change: DirectoryChange,
}

/// The claims in force at one revision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DirectorySnapshot {
    /// Every claim, sorted by actor id.
    pub claims: Vec<Claim>,
    /// The revision they are current at; watch from here.
    pub revision: Revision,
}

/// Why a directory operation failed. Each variant has a stable
/// [`code`](DirectoryError::code), what the control plane's JSON error bodies carry and its
/// HTTP client maps back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryError {
    /// The backend could not be reached or did not answer in time (`unavailable`): retrying
    /// may succeed.
    #[error("directory: backend unreachable: {0}")]
    Unavailable(String),
    /// The backend answered with an error (`provider_error`).
    #[error("directory: {0}")]
    Provider(String),
    /// An actor id outside the limits (`actor_empty`, `actor_too_long`,
    /// `actor_control_character`).
    #[error("directory: {reason}")]
    InvalidActor {
        /// What is wrong with it.
        problem: NameProblem,
        /// What was wrong and what is allowed.
        reason: String,
    },
    /// A host name outside the limits (`host_empty`, `host_too_long`,
    /// `host_control_character`).
    #[error("directory: {reason}")]
    InvalidHost {
        /// What is wrong with it.
        problem: NameProblem,
        /// What was wrong and what is allowed.
        reason: String,
    },
    /// Another argument the directory cannot take, such as a revision past what the backend
    /// stores (`invalid_argument`).
    #[error("directory: {0}")]
    Invalid(String),
    /// A stored entry is not a valid claim (`malformed`).
    #[error("directory: malformed entry {key:?}: {reason}")]
    Malformed {
        /// The entry's key at the backend.
        key: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The history from the requested revision is gone (`compacted`).
    #[error(
        "directory: history after {requested} is compacted (oldest available {oldest}); take a new snapshot"
    )]
    Compacted {
        /// The revision the watch asked to resume after.
        requested: Revision,
        /// The oldest revision still available.
        oldest: Revision,
    },
}

/// Every code [`DirectoryError::code`] answers, except the actor and host codes (`actor_…`,
/// `host_…` with each [`NameProblem::suffix`]).
pub const DIRECTORY_ERROR_CODES: [&str; 5] = [
    "unavailable",
    "provider_error",
    "invalid_argument",
    "malformed",
    "compacted",
];

impl DirectoryError {
    /// The stable machine-readable code of this error (`actor_too_long`, `compacted`,
    /// `unavailable`, …); see each variant.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "unavailable",
            Self::Provider(_) => "provider_error",
            Self::InvalidActor { problem, .. } => match problem {
                NameProblem::Empty => "actor_empty",
                NameProblem::TooLong => "actor_too_long",
                NameProblem::ControlCharacter => "actor_control_character",
            },
            Self::InvalidHost { problem, .. } => match problem {
                NameProblem::Empty => "host_empty",
                NameProblem::TooLong => "host_too_long",
                NameProblem::ControlCharacter => "host_control_character",
            },
            Self::Invalid(_) => "invalid_argument",
            Self::Malformed { .. } => "malformed",
            Self::Compacted { .. } => "compacted",
        }
    }

    /// The error with `code` and `reason` (the text after `directory: `) as the control plane
    /// sends them; `None` for a code this version does not know, and for `compacted` (which
    /// needs its revisions).
    #[must_use]
    pub fn from_code(code: &str, reason: String) -> Option<Self> {
        Some(match code {
            "unavailable" => Self::Unavailable(reason),
            "provider_error" => Self::Provider(reason),
            "invalid_argument" => Self::Invalid(reason),
            "malformed" => Self::Malformed {
                key: String::new(),
                reason,
            },
            _ => {
                if let Some(problem) = NameProblem::from_code("actor", code) {
                    Self::InvalidActor { problem, reason }
                } else {
                    Self::InvalidHost {
                        problem: NameProblem::from_code("host", code)?,
                        reason,
                    }
                }
            }
        })
    }

    /// Whether the same request may succeed later (only [`DirectoryError::Unavailable`]).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// The future of a directory operation.
pub type DirectoryFuture<T> = Pin<Box<dyn Future<Output = Result<T, DirectoryError>> + Send>>;

/// A stream of [`DirectoryEvent`]s in revision order. Dropping it stops the watch.
pub struct DirectoryWatch {
    rx: mpsc::Receiver<Result<DirectoryEvent, DirectoryError>>,
    task: Option<tokio::task::AbortHandle>,
}

impl fmt::Debug for DirectoryWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryWatch").finish_non_exhaustive()
    }
}

impl DirectoryWatch {
    /// A watch fed through `rx`; `task`, if given, is aborted when the watch is dropped.
    #[must_use]
    pub fn new(
        rx: mpsc::Receiver<Result<DirectoryEvent, DirectoryError>>,
        task: Option<tokio::task::AbortHandle>,
    ) -> Self {
        Self { rx, task }
    }

    /// The next change; `None` when the watch ended (resume with `watch(last_seen)`). After
    /// an error the watch has ended too.
    pub async fn next(&mut self) -> Option<Result<DirectoryEvent, DirectoryError>> {
        self.rx.recv().await
    }
}

impl Drop for DirectoryWatch {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Which host owns an actor id. See the module header for the contract.
pub trait Directory: fmt::Debug + Send + Sync + 'static {
    /// Claim `actor` for `host`; exactly one of concurrent claimants wins.
    fn claim(&self, actor: &str, host: &str) -> DirectoryFuture<ClaimOutcome>;

    /// The current claim of `actor`.
    fn lookup(&self, actor: &str) -> DirectoryFuture<Option<Claim>>;

    /// Remove `host`'s claim of `actor`; `false` (and nothing changed) when `host` does not
    /// own it.
    fn release(&self, actor: &str, host: &str) -> DirectoryFuture<bool>;

    /// Remove every claim of `host`; answers the released actor ids.
    fn evict_host(&self, host: &str) -> DirectoryFuture<Vec<String>>;

    /// Every claim and the revision it is current at.
    fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot>;

    /// Every change after revision `after`, in order.
    fn watch(&self, after: Revision) -> DirectoryFuture<DirectoryWatch>;
}

/// Refuse an actor id no backend can store unambiguously: empty, longer than
/// [`MAX_NAME_BYTES`](crate::lease::MAX_NAME_BYTES) bytes, or with a control character. Every
/// backend checks it in every operation that takes one, so the same bad id gets the same
/// error everywhere.
pub fn validate_actor(actor: &str) -> Result<(), DirectoryError> {
    crate::check_name("actor id", actor)
        .map_err(|(problem, reason)| DirectoryError::InvalidActor { problem, reason })
}

/// Refuse a host name no backend can store unambiguously (as [`validate_actor`]).
pub fn validate_host(host: &str) -> Result<(), DirectoryError> {
    crate::check_name("host", host)
        .map_err(|(problem, reason)| DirectoryError::InvalidHost { problem, reason })
}

/// The default number of changes an [`InMemoryDirectory`] keeps for watches that resume.
pub const DEFAULT_HISTORY: usize = 100_000;

/// A directory in memory: every handle (clone) in the process sees the same claims.
#[derive(Clone)]
pub struct InMemoryDirectory {
    inner: Arc<DirInner>,
}

struct DirInner {
    state: Mutex<DirState>,
    changed: Notify,
}

struct DirState {
    claims: BTreeMap<String, Claim>,
    history: VecDeque<DirectoryEvent>,
    capacity: usize,
    revision: Revision,
}

impl fmt::Debug for InMemoryDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("InMemoryDirectory")
            .field("claims", &state.claims.len())
            .field("revision", &state.revision)
            .finish()
    }
}

impl Default for InMemoryDirectory {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryDirectory {
    /// An empty directory that keeps the last [`DEFAULT_HISTORY`] changes.
    #[must_use]
    pub fn new() -> Self {
        Self::with_history(DEFAULT_HISTORY)
    }

    /// An empty directory that keeps the last `capacity` changes (at least one).
    #[must_use]
    pub fn with_history(capacity: usize) -> Self {
        Self {
            inner: Arc::new(DirInner {
                state: Mutex::new(DirState {
                    claims: BTreeMap::new(),
                    history: VecDeque::new(),
                    capacity: capacity.max(1),
                    revision: Revision(0),
                }),
                changed: Notify::new(),
            }),
        }
    }

    fn apply(&self, f: impl FnOnce(&mut DirState) -> bool) {
        let changed = f(&mut self.inner.state.lock());
        if changed {
            self.inner.changed.notify_waiters();
        }
    }
}

impl DirState {
    fn record(&mut self, change: DirectoryChange) -> Revision {
        self.revision = Revision(self.revision.0 + 1);
        if self.history.len() == self.capacity {
            self.history.pop_front();
        }
        self.history.push_back(DirectoryEvent {
            revision: self.revision,
            change,
        });
        self.revision
    }

    fn remove(&mut self, actor: &str) -> Option<Claim> {
        let claim = self.claims.remove(actor)?;
        self.record(DirectoryChange::Released {
            actor: claim.actor.clone(),
            host: claim.host.clone(),
        });
        Some(claim)
    }

    /// The events after `after`, or why they are gone.
    fn since(&self, after: Revision) -> Result<Vec<DirectoryEvent>, DirectoryError> {
        if let Some(first) = self.history.front()
            && first.revision.0 > after.0 + 1
        {
            return Err(DirectoryError::Compacted {
                requested: after,
                oldest: first.revision,
            });
        }
        Ok(self
            .history
            .iter()
            .filter(|e| e.revision > after)
            .cloned()
            .collect())
    }
}

fn ready<T: Send + 'static>(value: Result<T, DirectoryError>) -> DirectoryFuture<T> {
    Box::pin(std::future::ready(value))
}

impl Directory for InMemoryDirectory {
    fn claim(&self, actor: &str, host: &str) -> DirectoryFuture<ClaimOutcome> {
        if let Err(e) = validate_actor(actor).and(validate_host(host)) {
            return ready(Err(e));
        }
        let mut outcome = None;
        self.apply(|state| {
            if let Some(existing) = state.claims.get(actor) {
                outcome = Some(if existing.host == host {
                    ClaimOutcome::Claimed(existing.clone())
                } else {
                    ClaimOutcome::Owned(existing.clone())
                });
                return false;
            }
            let revision = state.record(DirectoryChange::Claimed {
                actor: actor.to_owned(),
                host: host.to_owned(),
            });
            let claim = Claim {
                actor: actor.to_owned(),
                host: host.to_owned(),
                revision,
            };
            state.claims.insert(actor.to_owned(), claim.clone());
            outcome = Some(ClaimOutcome::Claimed(claim));
            true
        });
        ready(outcome.ok_or_else(|| DirectoryError::Provider("no outcome".to_owned())))
    }

    fn lookup(&self, actor: &str) -> DirectoryFuture<Option<Claim>> {
        if let Err(e) = validate_actor(actor) {
            return ready(Err(e));
        }
        ready(Ok(self.inner.state.lock().claims.get(actor).cloned()))
    }

    fn release(&self, actor: &str, host: &str) -> DirectoryFuture<bool> {
        if let Err(e) = validate_actor(actor).and(validate_host(host)) {
            return ready(Err(e));
        }
        let mut released = false;
        self.apply(|state| {
            if state.claims.get(actor).is_some_and(|c| c.host == host) {
                state.remove(actor);
                released = true;
            }
            released
        });
        ready(Ok(released))
    }

    fn evict_host(&self, host: &str) -> DirectoryFuture<Vec<String>> {
        if let Err(e) = validate_host(host) {
            return ready(Err(e));
        }
        let mut evicted = Vec::new();
        self.apply(|state| {
            let owned: Vec<String> = state
                .claims
                .values()
                .filter(|c| c.host == host)
                .map(|c| c.actor.clone())
                .collect();
            for actor in owned {
                state.remove(&actor);
                evicted.push(actor);
            }
            !evicted.is_empty()
        });
        ready(Ok(evicted))
    }

    fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot> {
        let state = self.inner.state.lock();
        ready(Ok(DirectorySnapshot {
            claims: state.claims.values().cloned().collect(),
            revision: state.revision,
        }))
    }

    fn watch(&self, after: Revision) -> DirectoryFuture<DirectoryWatch> {
        if let Err(e) = self.inner.state.lock().since(after) {
            return ready(Err(e));
        }
        let inner = Arc::clone(&self.inner);
        let (tx, rx) = mpsc::channel(256);
        let task = tokio::spawn(async move {
            let mut last = after;
            loop {
                let changed = inner.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let batch = inner.state.lock().since(last);
                match batch {
                    Ok(events) => {
                        for event in events {
                            last = event.revision;
                            if tx.send(Ok(event)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
                changed.await;
            }
        });
        ready(Ok(DirectoryWatch::new(rx, Some(task.abort_handle()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_compacted_history_ends_the_watch_with_an_error() {
        let dir = InMemoryDirectory::with_history(2);
        for i in 0..5 {
            dir.claim(&format!("a{i}"), "h").await.unwrap();
        }
        let err = dir.watch(Revision(1)).await.unwrap_err();
        assert_eq!(
            err,
            DirectoryError::Compacted {
                requested: Revision(1),
                oldest: Revision(4)
            }
        );
        assert!(dir.watch(Revision(3)).await.is_ok());
    }

    #[tokio::test]
    async fn names_with_control_characters_are_refused() {
        let dir = InMemoryDirectory::new();
        let err = dir.claim("a\nb", "h").await.unwrap_err();
        assert!(err.to_string().contains("control character"), "{err}");
        assert!(dir.claim("", "h").await.is_err());
    }
}
