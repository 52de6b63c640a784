//! Akka Management's cluster routes on the agent's management listener: this node's own view,
//! in the JSON shapes the server's `/management/{cluster}/cluster/…` answers with (one format).
//!
//! | route | answer |
//! |---|---|
//! | `GET /cluster/members` (or `/cluster/members/`) | `{selfNode, members: [{node, nodeUid, status, roles}], unreachable: [{node, observedBy}], leader, oldest, oldestPerRole}` |
//! | `GET /cluster/members/{address}` | one member `{node, nodeUid, status, roles}`; 404 `{"message": "Member [<address>] not found"}` |
//! | `POST /cluster/members` (form `address=troupe://…`) | join that node's cluster: 200 `{"message": "Joining <address>"}` |
//! | `PUT /cluster/members/{address}` (form `operation=Down` or `Leave`, any case) | 200 `{"message": "Downing <address>"}` / `"Leaving <address>"`; 400 `{"message": "Operation not supported"}` |
//! | `DELETE /cluster/members/{address}` | 200 `{"message": "Leaving <address>"}` |
//!
//! `{address}` is the full form the agents print, `troupe://<system>@host:port`, raw or
//! percent-encoded, or `host:port` of this node's system. `nodeUid` is the incarnation as a
//! string (a u64). `oldest` is the member singletons are placed on: the first address-sorted up
//! member (Troupe elects by address, where Akka elects by age); `oldestPerRole` the same per
//! role.
//!
//! # Singleton managers (`GET /cluster/singletons`, `GET /cluster/singletons/{name}`)
//! What is not in Akka Management and users ask for — "is the manager on this node active?":
//! per singleton this node has a manager for, `{name, managerActive, electedHost, hosting,
//! hostingSinceMs, awaitingAcknowledgments, lease, holdsLease, heldMessages, latchedOut}`:
//! whether `start` is in effect here, the host this node's view elects, whether the instance
//! runs here and since when (Unix milliseconds), which peers' hand-over acknowledgments it
//! waits for before hosting, the lease phase (`idle`, `acquiring`, `held`, `releasing`; null
//! without a lease), how many messages wait here for an instance, and whether it latched out
//! of hosting (`restart_on_termination(false)` after its instance ended).
//!
//! # Mutations are opt-in
//! `POST`, `PUT` and `DELETE` answer 403 unless the agent runs with `--management-token`
//! (`TROUPE_MANAGEMENT_TOKEN`), and then need `Authorization: Bearer <token>` (else 401), as
//! Akka Management is read-only until configured otherwise. Every error is Akka's
//! `{"message": …}`.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use troupe::Address;
use troupe::cluster::{Cluster, ClusterView, Member, MemberStatus};
use troupe::singleton::{ClusterSingleton, ManagerStatus};

/// An answer: status and JSON body.
pub(super) type Answer = (u16, Value);

fn message(status: u16, text: impl Into<String>) -> Answer {
    (status, json!({ "message": text.into() }))
}

/// Akka's name of a status (`weakly-up` → `WeaklyUp`).
pub(super) fn akka_status(status: MemberStatus) -> String {
    status
        .name()
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect()
            })
        })
        .collect()
}

pub(super) fn member_json(member: &Member) -> Value {
    json!({
        "node": member.address().to_string(),
        "nodeUid": member.node.incarnation.to_string(),
        "status": akka_status(member.status),
        "roles": member.roles,
    })
}

/// `GET /cluster/members`: this node's view.
pub(super) fn members(view: &ClusterView, me: &Address) -> Value {
    let mut up: Vec<&Member> = view
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Up)
        .collect();
    up.sort_by(|a, b| a.address().cmp(b.address()));
    let mut oldest_per_role = BTreeMap::new();
    for member in &up {
        for role in &member.roles {
            oldest_per_role
                .entry(role.clone())
                .or_insert_with(|| member.address().to_string());
        }
    }
    let unreachable: Vec<Value> = view
        .unreachable
        .iter()
        .map(|node| {
            let observers: Vec<String> = view
                .observed_by
                .iter()
                .find(|(subject, _)| subject == node)
                .map(|(_, observers)| observers.iter().map(|o| o.address.to_string()).collect())
                .unwrap_or_default();
            json!({ "node": node.address.to_string(), "observedBy": observers })
        })
        .collect();
    json!({
        "selfNode": me.to_string(),
        "members": view.members.iter().map(member_json).collect::<Vec<_>>(),
        "unreachable": unreachable,
        "leader": view.leader.as_ref().map(ToString::to_string),
        "oldest": up.first().map(|m| m.address().to_string()),
        "oldestPerRole": oldest_per_role,
    })
}

/// Decodes `%XX` escapes (an invalid escape is kept as written).
pub(super) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The full address a client means by `written` (raw or percent-encoded; `host:port` and
/// `system@host:port` are of this node's system).
pub(super) fn full_address(system: &str, written: &str) -> String {
    let decoded = percent_decode(written);
    let decoded = decoded.trim().trim_end_matches('/');
    if decoded.contains("://") {
        decoded.to_owned()
    } else if decoded.contains('@') {
        format!("troupe://{decoded}")
    } else {
        format!("troupe://{system}@{decoded}")
    }
}

fn find<'a>(view: &'a ClusterView, address: &str) -> Option<&'a Member> {
    view.members
        .iter()
        .find(|m| m.address().to_string() == address)
}

/// `GET /cluster/members/{address}`.
pub(super) fn member(cluster: &Cluster, written: &str) -> Answer {
    let address = full_address(&cluster.self_address().system, written);
    let view = cluster.view();
    match find(&view, &address) {
        Some(member) => (200, member_json(member)),
        None => message(404, format!("Member [{address}] not found")),
    }
}

/// Whether a mutation may go ahead: `None` when it may, else the refusal.
pub(super) fn authorize(token: Option<&str>, authorization: Option<&str>) -> Option<Answer> {
    let Some(token) = token else {
        return Some(message(
            403,
            "Member operations are off: start the agent with --management-token \
             (TROUPE_MANAGEMENT_TOKEN) and send it as a bearer token",
        ));
    };
    let offered = authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(offered.as_bytes().ct_eq(token.as_bytes())) {
        None
    } else {
        Some(message(
            401,
            "Missing or wrong bearer token (the agent's --management-token)",
        ))
    }
}

/// The value of `key` in an `application/x-www-form-urlencoded` body.
fn form_value(body: &[u8], key: &str) -> Option<String> {
    String::from_utf8_lossy(body).split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (percent_decode(k) == key).then(|| percent_decode(v))
    })
}

/// `PUT /cluster/members/{address}` (form `operation`), or `DELETE` (`operation: None`: leave).
pub(super) fn operate(cluster: &Cluster, written: &str, body: Option<&[u8]>) -> Answer {
    let address = full_address(&cluster.self_address().system, written);
    let view = cluster.view();
    // Akka answers 404 for an unknown member before looking at the operation.
    let Some(member) = find(&view, &address) else {
        return message(404, format!("Member [{address}] not found"));
    };
    let target = member.address().clone();
    let operation = match body {
        None => "leave".to_owned(),
        Some(body) => form_value(body, "operation")
            .unwrap_or_default()
            .to_ascii_lowercase(),
    };
    match operation.as_str() {
        "down" => {
            cluster.down(target);
            message(200, format!("Downing {address}"))
        }
        "leave" => {
            cluster.leave_member(target);
            message(200, format!("Leaving {address}"))
        }
        _ => message(400, "Operation not supported"),
    }
}

/// `POST /cluster/members` (form `address`): join that node's cluster.
pub(super) fn join(cluster: &Cluster, body: &[u8]) -> Answer {
    let Some(written) = form_value(body, "address") else {
        return message(
            400,
            "the form needs `address`, the full address of a member to join: \
             troupe://<system>@host:port",
        );
    };
    let full = full_address(&cluster.self_address().system, &written);
    match full.parse::<Address>() {
        Ok(address) => {
            cluster.join(address);
            message(200, format!("Joining {full}"))
        }
        Err(error) => message(400, format!("`{written}` is not an address: {error}")),
    }
}

fn singleton_json(name: &str, status: &ManagerStatus) -> Value {
    let since_ms = status.hosting_since.and_then(|at| {
        at.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    });
    json!({
        "name": name,
        "managerActive": status.active,
        "electedHost": status.host.as_ref().map(ToString::to_string),
        "hosting": status.hosting,
        "hostingSinceMs": since_ms,
        "awaitingAcknowledgments": status
            .awaiting_acknowledgments
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        "lease": status.lease,
        "holdsLease": status.holds_lease,
        "heldMessages": status.held_messages,
        "latchedOut": status.latched_out,
    })
}

/// `GET /cluster/singletons`: each singleton's manager on this node.
pub(super) async fn singletons(cluster: &Cluster) -> Value {
    let singleton = ClusterSingleton::get(cluster);
    let mut out = Vec::new();
    for name in singleton.names() {
        if let Some(status) = singleton.status_of(&name).await {
            out.push(singleton_json(&name, &status));
        }
    }
    json!({ "selfNode": cluster.self_address().to_string(), "singletons": out })
}

/// `GET /cluster/singletons/{name}`.
pub(super) async fn singleton(cluster: &Cluster, written: &str) -> Answer {
    let name = percent_decode(written);
    match ClusterSingleton::get(cluster).status_of(&name).await {
        Some(status) => (200, singleton_json(&name, &status)),
        None => message(
            404,
            format!("No manager of singleton [{name}] on this node"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_written_form_of_an_address_names_the_same_full_address() {
        for written in [
            "troupe://demo@127.0.0.1:2552",
            "troupe%3A%2F%2Fdemo%40127.0.0.1%3A2552",
            "troupe://demo@127.0.0.1:2552/",
            "demo@127.0.0.1:2552",
            "127.0.0.1:2552",
        ] {
            assert_eq!(
                full_address("demo", written),
                "troupe://demo@127.0.0.1:2552",
                "{written}"
            );
        }
        assert_eq!(
            full_address("demo", "troupe://other@h:1"),
            "troupe://other@h:1"
        );
    }

    #[test]
    fn statuses_are_named_as_akka_names_them() {
        assert_eq!(akka_status(MemberStatus::WeaklyUp), "WeaklyUp");
        assert_eq!(akka_status(MemberStatus::Up), "Up");
        assert_eq!(akka_status(MemberStatus::Exiting), "Exiting");
    }

    #[test]
    fn mutations_need_the_configured_token() {
        assert_eq!(authorize(None, Some("Bearer x")).unwrap().0, 403);
        assert_eq!(authorize(Some("secret"), None).unwrap().0, 401);
        assert_eq!(
            authorize(Some("secret"), Some("Bearer nope")).unwrap().0,
            401
        );
        assert!(authorize(Some("secret"), Some("Bearer secret")).is_none());
    }

    #[test]
    fn form_values_are_percent_decoded() {
        assert_eq!(
            form_value(b"operation=Down", "operation").as_deref(),
            Some("Down")
        );
        assert_eq!(
            form_value(b"x=1&address=troupe%3A%2F%2Fd%40h%3A1", "address").as_deref(),
            Some("troupe://d@h:1")
        );
        assert_eq!(form_value(b"", "operation"), None);
    }
}
