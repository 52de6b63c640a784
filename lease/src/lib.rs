//! Troupe's leases and actor directory, with no network I/O and no actor runtime.
//!
//! - [`lease`]: the [`Lease`](lease::Lease) trait (at most one holder cluster-wide), its
//!   [`LeaseSettings`](lease::LeaseSettings) and limits, typed errors, the
//!   [`LeaseProvider`](lease::LeaseProvider) that makes handles, the in-memory arbiter, and the
//!   one held-grant / renewal / loss-deadline machine every backend uses: a backend implements
//!   only its store operations ([`lease::store::LeaseStore`]) and gets its handle from
//!   [`lease::store::GrantedLease`].
//! - Every error has a stable machine-readable [`code`](lease::LeaseError::code)
//!   (`ttl_out_of_range`, `owner_too_long`, `not_owner`, `unavailable`, …) that the control
//!   plane sends in its JSON error bodies and its HTTP client maps back to the same variant.
//! - [`directory`]: the [`Directory`](directory::Directory) (which host owns an actor id) and
//!   the in-memory directory.
//! - `testing` (feature `testing`): the conformance suite every backend passes, and
//!   `conformance_tests!` to write one test per case.
//!
//! The actor runtime re-exports both modules as `troupe::lease` and `troupe::directory`; the
//! etcd, PostgreSQL and control-plane backends are in `troupe-coordination`, the Kubernetes
//! Lease in `troupe-kubernetes`.

pub mod directory;
pub mod lease;
#[cfg(feature = "testing")]
pub mod testing;

/// What is wrong with a name, owner, actor id or host: part of an error's
/// [`code`](lease::LeaseError::code) (`owner_too_long`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameProblem {
    /// It is empty.
    Empty,
    /// It is longer than [`MAX_NAME_BYTES`](lease::MAX_NAME_BYTES) bytes.
    TooLong,
    /// It contains a control character.
    ControlCharacter,
}

impl NameProblem {
    /// Every problem.
    pub const ALL: [Self; 3] = [Self::Empty, Self::TooLong, Self::ControlCharacter];

    /// The end of the error code (`too_long`).
    #[must_use]
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooLong => "too_long",
            Self::ControlCharacter => "control_character",
        }
    }

    /// The problem whose code is `prefix` `_` its suffix (`owner_too_long` with `owner`).
    #[must_use]
    pub fn from_code(prefix: &str, code: &str) -> Option<Self> {
        let suffix = code.strip_prefix(prefix)?.strip_prefix('_')?;
        Self::ALL.into_iter().find(|p| p.suffix() == suffix)
    }
}

/// Check one name against the shared limits; the error names `what`, what was wrong, and what
/// is allowed (without echoing an over-long value whole).
fn check_name(what: &str, value: &str) -> Result<(), (NameProblem, String)> {
    if value.is_empty() {
        return Err((NameProblem::Empty, format!("{what} must not be empty")));
    }
    if value.len() > lease::MAX_NAME_BYTES {
        return Err((
            NameProblem::TooLong,
            format!(
                "{what} {:?} is {} bytes long; at most {} bytes are allowed",
                shorten(value),
                value.len(),
                lease::MAX_NAME_BYTES
            ),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err((
            NameProblem::ControlCharacter,
            format!(
                "{what} {value:?} contains the control character {c:?}; only printable characters are allowed"
            ),
        ));
    }
    Ok(())
}

/// `value`, or its first 32 characters and `…` when it is longer.
fn shorten(value: &str) -> String {
    const SHOWN: usize = 32;
    match value.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}
