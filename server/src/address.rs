//! Member addresses as clients write them: `host:port` (how agents report members), or the
//! full form agents print, `troupe://<system>@<host>:<port>`, raw or percent-encoded in a path.
//!
//! A cluster's name is its actor system's name, so the full address of member `host:port` of
//! cluster `demo` is `troupe://demo@host:port`.

/// The full address of member `host_port` of cluster `cluster`.
#[must_use]
pub fn full(cluster: &str, host_port: &str) -> String {
    format!("troupe://{cluster}@{host_port}")
}

/// The `host:port` a client means by `written` in cluster `cluster`: the text itself, or the
/// host and port of a full address of that cluster's system. `None` when it is a full address
/// of another system, or not an address at all.
#[must_use]
pub fn member(cluster: &str, written: &str) -> Option<String> {
    let written = written.trim();
    let Some(rest) = written.strip_prefix("troupe://") else {
        return (!written.is_empty() && !written.contains('/')).then(|| written.to_owned());
    };
    let (system, host_port) = rest.trim_end_matches('/').split_once('@')?;
    (system == cluster && !host_port.is_empty() && !host_port.contains('/'))
        .then(|| host_port.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_name_the_same_member_and_other_systems_name_none() {
        assert_eq!(
            full("demo", "127.0.0.1:2552"),
            "troupe://demo@127.0.0.1:2552"
        );
        for written in [
            "127.0.0.1:2552",
            "troupe://demo@127.0.0.1:2552",
            "troupe://demo@127.0.0.1:2552/",
        ] {
            assert_eq!(
                member("demo", written).as_deref(),
                Some("127.0.0.1:2552"),
                "{written}"
            );
        }
        assert_eq!(member("demo", "troupe://other@127.0.0.1:2552"), None);
        assert_eq!(member("demo", "troupe://demo"), None);
        assert_eq!(member("demo", "troupe://demo@127.0.0.1:2552/user/x"), None);
        assert_eq!(member("demo", ""), None);
    }
}
