//! Member addresses as clients write them: `host:port` (how agents report members), or the
//! full form agents print, `troupe://<system>@<host>:<port>`, percent-encoded in a path.
//!
//! A cluster's name is its actor system's name, so the full address of member `host:port` of
//! cluster `demo` is `troupe://demo@host:port`.
//!
//! # Exact spelling
//! A reported address is a string the server does not parse: it may hold `/`, `%`, `?`, `#`
//! or leading and trailing spaces, and two members may differ only in those. A path names a
//! member by the address's exact spelling, percent-encoded (`%2F`, `%25`, `%3F`, `%23`,
//! `%20`); the server decodes the segment once and never trims or normalises it. The spelling
//! as written wins over the full form: a member reported as `troupe://demo@h:1` is found as
//! that, before the member `h:1`.

/// The full address of member `host_port` of cluster `cluster`.
#[must_use]
pub fn full(cluster: &str, host_port: &str) -> String {
    format!("troupe://{cluster}@{host_port}")
}

/// The addresses `written` may name in cluster `cluster`, best first: the text itself, then
/// the `host:port` of a full address of that cluster's system (as written, then without one
/// trailing `/`, as Akka prints node addresses). Nothing is trimmed or decoded.
#[must_use]
pub fn candidates(cluster: &str, written: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(3);
    if !written.is_empty() {
        out.push(written.to_owned());
    }
    let prefix = format!("troupe://{cluster}@");
    if let Some(rest) = written.strip_prefix(&prefix) {
        for host_port in [Some(rest), rest.strip_suffix('/')].into_iter().flatten() {
            if !host_port.is_empty() && !out.iter().any(|c| c == host_port) {
                out.push(host_port.to_owned());
            }
        }
    }
    out
}

/// The address among `known` that `written` names in cluster `cluster` (the first of its
/// [`candidates`] that is known), or `None`.
#[must_use]
pub fn resolve<'a>(
    cluster: &str,
    written: &str,
    known: impl IntoIterator<Item = &'a str> + Clone,
) -> Option<&'a str> {
    candidates(cluster, written)
        .into_iter()
        .find_map(|candidate| known.clone().into_iter().find(|k| *k == candidate))
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
        let known = ["127.0.0.1:2552", "127.0.0.1:2553"];
        for written in [
            "127.0.0.1:2552",
            "troupe://demo@127.0.0.1:2552",
            "troupe://demo@127.0.0.1:2552/",
        ] {
            assert_eq!(
                resolve("demo", written, known),
                Some("127.0.0.1:2552"),
                "{written}"
            );
        }
        assert_eq!(
            resolve("demo", "troupe://other@127.0.0.1:2552", known),
            None
        );
        assert_eq!(resolve("demo", "troupe://demo", known), None);
        assert_eq!(resolve("demo", "troupe://demo@", known), None);
        assert_eq!(
            resolve("demo", "troupe://demo@127.0.0.1:2552/user/x", known),
            None
        );
        assert_eq!(resolve("demo", "", known), None);
    }

    #[test]
    fn an_address_is_found_by_its_exact_spelling_never_trimmed_or_reparsed() {
        let known = [
            "h:1",
            " h:1",
            "h:1 ",
            "h:1/",
            "a/b:1",
            "h%2F:1",
            "h?x#y:1",
            "troupe://demo@h:1",
        ];
        for k in known {
            assert_eq!(resolve("demo", k, known), Some(k), "{k:?}");
        }
        // The full form of each names it too (the written spelling first).
        assert_eq!(resolve("demo", "troupe://demo@ h:1", known), Some(" h:1"));
        assert_eq!(resolve("demo", "troupe://demo@a/b:1", known), Some("a/b:1"));
        assert_eq!(resolve("demo", "troupe://demo@h:1/", known), Some("h:1/"));
        assert_eq!(
            resolve("demo", "troupe://demo@troupe://demo@h:1", known),
            Some("troupe://demo@h:1")
        );
        // Nothing close is taken for it.
        assert_eq!(resolve("demo", "  h:1", known), None);
        assert_eq!(resolve("demo", "h%3A1", known), None);
        assert_eq!(resolve("demo", "H:1", known), None);
    }
}
