//! Actor paths (`troupe://<system>/user/worker`) and the rules for actor names.

use std::fmt;
use std::sync::Arc;

use crate::Address;

/// Where an actor lives: its system, the node (for a remote actor), and its slash-separated
/// path from the root.
///
/// Cheap to clone (a few reference counts). Two paths are equal when system, node and elements
/// match; a restarted actor at the same path has the same path but a different
/// [`crate::ActorId`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorPath {
    system: Arc<str>,
    elements: Arc<str>,
    address: Option<Arc<Address>>,
}

/// The URI scheme of actor paths.
pub const SCHEME: &str = "troupe";

impl ActorPath {
    pub(crate) fn root(system: Arc<str>) -> Self {
        Self {
            system,
            elements: Arc::from(""),
            address: None,
        }
    }

    /// The path `elements` (such as `/user/worker`) on the node at `address`.
    #[must_use]
    pub fn remote(address: &Address, elements: &str) -> Self {
        Self {
            system: Arc::clone(&address.system),
            elements: Arc::from(elements),
            address: Some(Arc::new(address.clone())),
        }
    }

    /// The node this path is on, for a path that names one (remote refs, or local paths
    /// rendered for other nodes).
    #[must_use]
    pub fn address(&self) -> Option<&Address> {
        self.address.as_deref()
    }

    /// This path on the node at `address`.
    #[must_use]
    pub fn with_address(&self, address: &Address) -> Self {
        Self::remote(address, &self.elements)
    }

    pub(crate) fn child(&self, name: &str) -> Self {
        let mut elements = String::with_capacity(self.elements.len() + 1 + name.len());
        elements.push_str(&self.elements);
        elements.push('/');
        elements.push_str(name);
        Self {
            system: Arc::clone(&self.system),
            elements: Arc::from(elements),
            address: self.address.clone(),
        }
    }

    /// The path `/<name>` directly under the root of the same system.
    pub(crate) fn root_child(&self, name: &str) -> Self {
        let mut root = Self::root(Arc::clone(&self.system));
        root.address = self.address.clone();
        root.child(name)
    }

    /// The name of the actor system this path belongs to.
    #[must_use]
    pub fn system(&self) -> &str {
        &self.system
    }

    /// The path below the root, such as `/user/worker` (empty for the root itself).
    #[must_use]
    pub fn elements(&self) -> &str {
        &self.elements
    }

    /// The last element, such as `worker`.
    #[must_use]
    pub fn name(&self) -> &str {
        self.elements.rsplit('/').next().unwrap_or_default()
    }
}

impl fmt::Display for ActorPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.address {
            Some(address) => write!(
                f,
                "{SCHEME}://{}@{}:{}{}",
                self.system, address.host, address.port, self.elements
            ),
            None => write!(f, "{SCHEME}://{}{}", self.system, self.elements),
        }
    }
}

impl fmt::Debug for ActorPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a name cannot be used for a new actor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    /// The name is the empty string.
    #[error("actor name must not be empty")]
    Empty,
    /// The name contains a character that has a meaning in paths.
    #[error(
        "actor name {name:?} contains {found:?}; names may not contain '/', '#', '?' or whitespace"
    )]
    ReservedCharacter {
        /// The rejected name.
        name: String,
        /// The offending character.
        found: char,
    },
    /// The name starts with `$`, which is reserved for names the runtime generates.
    #[error("actor name {name:?} starts with '$', which is reserved for generated names")]
    Reserved {
        /// The rejected name.
        name: String,
    },
}

/// Check that `name` can name an actor: non-empty, no `/`, `#`, `?` or whitespace, no leading `$`.
pub fn validate_name(name: &str) -> Result<(), InvalidName> {
    if name.is_empty() {
        return Err(InvalidName::Empty);
    }
    if let Some(found) = name
        .chars()
        .find(|c| matches!(c, '/' | '#' | '?') || c.is_whitespace())
    {
        return Err(InvalidName::ReservedCharacter {
            name: name.to_owned(),
            found,
        });
    }
    if name.starts_with('$') {
        return Err(InvalidName::Reserved {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Split a path given as `/user/a/b`, `troupe://system/user/a/b` or
/// `troupe://system@host:port/user/a/b` into its system (if any) and its elements; the node
/// part, if any, is returned by [`parse_address`].
pub(crate) fn parse(path: &str) -> Option<(Option<&str>, Vec<&str>)> {
    let (system, rest) = match path.strip_prefix("troupe://") {
        Some(rest) => {
            let slash = rest.find('/').unwrap_or(rest.len());
            let authority = &rest[..slash];
            let system = authority
                .split_once('@')
                .map_or(authority, |(system, _)| system);
            (Some(system), &rest[slash..])
        }
        None => (None, path),
    };
    let rest = rest.strip_prefix('/')?;
    if rest.is_empty() {
        return Some((system, Vec::new()));
    }
    let elements: Vec<&str> = rest.split('/').collect();
    if elements.iter().any(|e| e.is_empty()) {
        return None;
    }
    Some((system, elements))
}

/// The node named in a full path (`troupe://system@host:port/...`), if it names one.
pub(crate) fn parse_address(path: &str) -> Option<Address> {
    let rest = path.strip_prefix("troupe://")?;
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    if !authority.contains('@') {
        return None;
    }
    format!("troupe://{authority}").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_paths_render_with_scheme_and_system() {
        let root = ActorPath::root(Arc::from("app"));
        let worker = root.child("user").child("worker");
        assert_eq!(worker.to_string(), "troupe://app/user/worker");
        assert_eq!(worker.elements(), "/user/worker");
        assert_eq!(worker.name(), "worker");
    }

    #[test]
    fn names_with_slash_or_empty_are_rejected_with_the_reason() {
        assert_eq!(validate_name(""), Err(InvalidName::Empty));
        let err = validate_name("a/b").unwrap_err();
        assert!(err.to_string().contains("'/'"), "{err}");
        assert!(validate_name("$gen").is_err());
        assert!(validate_name("worker-1").is_ok());
    }

    #[test]
    fn parse_accepts_plain_and_full_paths_and_rejects_empty_elements() {
        assert_eq!(parse("/user/a"), Some((None, vec!["user", "a"])));
        assert_eq!(
            parse("troupe://app/user/a"),
            Some((Some("app"), vec!["user", "a"]))
        );
        assert_eq!(parse("user/a"), None);
        assert_eq!(parse("/user//a"), None);
    }

    #[test]
    fn remote_paths_carry_and_render_their_node() {
        let full = "troupe://app@10.0.0.1:2552/user/worker";
        assert_eq!(parse(full), Some((Some("app"), vec!["user", "worker"])));
        let address = parse_address(full).unwrap();
        assert_eq!(address, Address::new("app", "10.0.0.1", 2552));
        let path = ActorPath::remote(&address, "/user/worker");
        assert_eq!(path.to_string(), full);
        assert_eq!(
            path.child("child").to_string(),
            "troupe://app@10.0.0.1:2552/user/worker/child"
        );
        assert_eq!(parse_address("troupe://app/user/worker"), None);
    }
}
