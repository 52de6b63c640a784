//! Node addresses: `troupe://<system>@<host>:<port>`, and the incarnation that makes a restarted
//! process a new member.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Where a node listens, as its peers reach it.
///
/// # Ordering
/// Addresses sort by host (as text), then port, then system name. "The first address-sorted up
/// member" (the leader, the singleton host) uses exactly this order on every node.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Address {
    /// The actor system (cluster) name.
    pub system: Arc<str>,
    /// Host name or IP literal.
    pub host: Arc<str>,
    /// TCP port.
    pub port: u16,
}

impl Address {
    /// An address from its parts.
    #[must_use]
    pub fn new(system: &str, host: &str, port: u16) -> Self {
        Self {
            system: Arc::from(system),
            host: Arc::from(host),
            port,
        }
    }

    /// `host:port`, for connecting.
    #[must_use]
    pub fn host_port(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl Ord for Address {
    fn cmp(&self, other: &Self) -> Ordering {
        self.host
            .cmp(&other.host)
            .then(self.port.cmp(&other.port))
            .then(self.system.cmp(&other.system))
    }
}

impl PartialOrd for Address {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}@{}:{}",
            crate::SCHEME,
            self.system,
            self.host,
            self.port
        )
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A string that is not a node address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a node address: expected troupe://<system>@<host>:<port> ({problem})")]
pub struct AddressError {
    /// The rejected input.
    pub input: String,
    /// What was wrong.
    pub problem: &'static str,
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |problem| AddressError {
            input: input.to_owned(),
            problem,
        };
        let rest = input
            .strip_prefix("troupe://")
            .ok_or_else(|| err("missing troupe:// scheme"))?;
        let (system, host_port) = rest.split_once('@').ok_or_else(|| err("missing '@'"))?;
        if system.is_empty() {
            return Err(err("empty system name"));
        }
        let host_port = host_port.trim_end_matches('/');
        let (host, port) = host_port
            .rsplit_once(':')
            .ok_or_else(|| err("missing ':<port>'"))?;
        if host.is_empty() {
            return Err(err("empty host"));
        }
        let port = port
            .parse()
            .map_err(|_| err("port is not a number from 0 to 65535"))?;
        Ok(Self::new(system, host, port))
    }
}

/// An address plus the incarnation of the process listening there. A restarted process gets a
/// new incarnation, so the cluster treats it as a new member.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UniqueAddress {
    /// The address.
    pub address: Address,
    /// A random number chosen at process start.
    pub incarnation: u64,
}

impl fmt::Display for UniqueAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.address, self.incarnation)
    }
}

impl fmt::Debug for UniqueAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_render_and_sort_by_host_then_port() {
        let a: Address = "troupe://app@127.0.0.1:2552".parse().unwrap();
        assert_eq!(a.to_string(), "troupe://app@127.0.0.1:2552");
        let b = Address::new("app", "127.0.0.1", 2553);
        let c = Address::new("app", "127.0.0.2", 1);
        let mut all = vec![c.clone(), b.clone(), a.clone()];
        all.sort();
        assert_eq!(all, vec![a, b, c]);
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        let err = "app@h:1".parse::<Address>().unwrap_err();
        assert!(err.to_string().contains("scheme"), "{err}");
        let err = "troupe://app@h:99999".parse::<Address>().unwrap_err();
        assert!(err.to_string().contains("port"), "{err}");
    }
}
