//! The cluster identity an agent reports to the control plane (see
//! [`troupe_protocol::AgentIdentity::cluster_identity`]).
//!
//! It is `HMAC-SHA256(secret, CLUSTER_IDENTITY_LABEL ‖ len(name) ‖ name)`: every node holding the
//! same secret for the same cluster name sends the same value, a node with another secret an
//! unrelated one, and nothing about the secret can be learnt from it. The label keeps it apart
//! from every tag the transport handshake makes with the same key.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use troupe_protocol::CLUSTER_IDENTITY_LABEL;

/// The identity of cluster `name` whose nodes share `secret`, as 64 lowercase hex digits.
#[must_use]
pub fn derive(name: &str, secret: &[u8]) -> String {
    // HMAC takes keys of any length: `new_from_slice` cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(CLUSTER_IDENTITY_LABEL);
    mac.update(&(name.len() as u32).to_be_bytes());
    mac.update(name.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_secret_and_name_give_the_same_identity_and_any_other_a_different_one() {
        let shop = derive("shop", b"a shared secret, 16 bytes+");
        assert!(troupe_protocol::valid_cluster_identity(&shop), "{shop}");
        assert_eq!(shop, derive("shop", b"a shared secret, 16 bytes+"));
        assert_ne!(shop, derive("shop", b"another secret, 16 bytes+"));
        assert_ne!(shop, derive("shop2", b"a shared secret, 16 bytes+"));
        assert!(
            !shop.contains("736563726574"),
            "the secret's bytes do not show"
        );
    }
}
