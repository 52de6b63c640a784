//! What the stand-in answers besides Lease objects, so that a stock `kubectl` works against it:
//! content negotiation on `Accept`, API discovery (`/api`, `/api/v1`, `/apis`,
//! `/apis/coordination.k8s.io`, `/apis/coordination.k8s.io/v1`, and `/version`) in both the aggregated form
//! (`apidiscovery.k8s.io/v2` and `v2beta1`, which kubectl 1.26+ asks for first) and the legacy
//! form (`APIVersions`, `APIGroupList`, `APIResourceList`, which older clients ask for and newer
//! ones fall back to), and server-side printing (`meta.k8s.io` `Table`, `v1` or `v1beta1`, with
//! the real server's Lease columns `Name`, `Holder`, `Age`).
//!
//! Negotiation follows the real server: the first media type in `Accept` that it can produce
//! wins (`application/json` and `*/*` mean plain JSON; an empty `Accept` too); when none can be
//! produced the answer is `406 NotAcceptable`. Protobuf and YAML are never produced.

use serde_json::{Value, json};

use super::{API_VERSION, GROUP};

/// The encodings the stand-in can answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Media {
    /// Plain `application/json` of the object itself.
    Json,
    /// A `meta.k8s.io` `Table` of the given version (`v1` or `v1beta1`).
    Table(&'static str),
    /// An `apidiscovery.k8s.io` `APIGroupDiscoveryList` of the given version (`v2`, `v2beta1`).
    Discovery(&'static str),
}

impl Media {
    /// The `Content-Type` of an answer in this encoding.
    pub(super) fn content_type(self) -> String {
        match self {
            Self::Json => "application/json".to_owned(),
            Self::Table(v) => format!("application/json;as=Table;v={v};g=meta.k8s.io"),
            Self::Discovery(v) => {
                format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList")
            }
        }
    }
}

/// The first media type in `accept` that is one of `offered`; `None` when there is none.
pub(super) fn negotiate(accept: &str, offered: &[MediaKind]) -> Option<Media> {
    if accept.trim().is_empty() {
        return offered.contains(&MediaKind::Json).then_some(Media::Json);
    }
    accept.split(',').find_map(|range| {
        let media = parse_range(range)?;
        offered.contains(&media.kind()).then_some(media)
    })
}

/// A [`Media`] without its version, for what an endpoint offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MediaKind {
    Json,
    Table,
    Discovery,
}

impl Media {
    fn kind(self) -> MediaKind {
        match self {
            Self::Json => MediaKind::Json,
            Self::Table(_) => MediaKind::Table,
            Self::Discovery(_) => MediaKind::Discovery,
        }
    }
}

/// One media range of an `Accept` header, when it is one the stand-in can produce.
fn parse_range(range: &str) -> Option<Media> {
    let mut parts = range.split(';').map(str::trim);
    let essence = parts.next()?.to_ascii_lowercase();
    let (mut r#as, mut version, mut group) = (None, None, None);
    for param in parts {
        let (key, value) = param.split_once('=')?;
        let value = value.trim().trim_matches('"');
        match key.trim() {
            "as" => r#as = Some(value.to_owned()),
            "v" => version = Some(value.to_owned()),
            "g" => group = Some(value.to_owned()),
            _ => {}
        }
    }
    if !matches!(
        essence.as_str(),
        "application/json" | "application/*" | "*/*"
    ) {
        return None;
    }
    match (r#as.as_deref(), group.as_deref(), version.as_deref()) {
        (None, _, _) => Some(Media::Json),
        (Some("Table"), Some("meta.k8s.io"), Some("v1")) => Some(Media::Table("v1")),
        (Some("Table"), Some("meta.k8s.io"), Some("v1beta1")) => Some(Media::Table("v1beta1")),
        (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => {
            Some(Media::Discovery("v2"))
        }
        (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2beta1")) => {
            Some(Media::Discovery("v2beta1"))
        }
        _ => None,
    }
}

/// The Kubernetes minor version the stand-in claims at `/version`: its Lease API and discovery
/// are those of that release.
const SERVER_MINOR: &str = "31";

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A discovery path the stand-in serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Discovery {
    /// `/api`: the core group's versions.
    Core,
    /// `/api/v1`: the core group's resources (none are served).
    CoreV1,
    /// `/apis`: the named groups.
    Groups,
    /// `/apis/coordination.k8s.io`: the group.
    Group,
    /// `/apis/coordination.k8s.io/v1`: its resources (`leases`).
    GroupV1,
    /// `/version`: the server's version (kubectl's version dispatchers pick a client by it).
    Version,
}

impl Discovery {
    pub(super) fn parse(path: &str) -> Option<Self> {
        match path.trim_end_matches('/') {
            "/api" => Some(Self::Core),
            "/api/v1" => Some(Self::CoreV1),
            "/apis" => Some(Self::Groups),
            "/apis/coordination.k8s.io" => Some(Self::Group),
            "/apis/coordination.k8s.io/v1" => Some(Self::GroupV1),
            "/version" => Some(Self::Version),
            _ => None,
        }
    }

    /// Which encodings this path offers (the aggregated form only at the two roots).
    pub(super) fn offers(self) -> &'static [MediaKind] {
        match self {
            Self::Core | Self::Groups => &[MediaKind::Json, MediaKind::Discovery],
            _ => &[MediaKind::Json],
        }
    }

    /// The answer's body in `media`; `server` is the `host:port` clients reach.
    pub(super) fn body(self, media: Media, server: &str) -> Value {
        let group_version = json!({ "groupVersion": API_VERSION, "version": "v1" });
        match (self, media) {
            (Self::Core, Media::Discovery(v)) => aggregated(v, "", &[]),
            (Self::Groups, Media::Discovery(v)) => aggregated(v, GROUP, &[lease_resource_v2()]),
            (Self::Core, _) => json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    { "clientCIDR": "0.0.0.0/0", "serverAddress": server }
                ],
            }),
            (Self::Version, _) => json!({
                "major": "1",
                "minor": SERVER_MINOR,
                "gitVersion": format!("v1.{SERVER_MINOR}.0+troupe-standin"),
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z",
                "goVersion": "go1.23.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }),
            (Self::CoreV1, _) => json!({
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [],
            }),
            (Self::Groups, _) => json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [{
                    "name": GROUP,
                    "versions": [group_version],
                    "preferredVersion": group_version,
                }],
            }),
            (Self::Group, _) => json!({
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": GROUP,
                "versions": [group_version],
                "preferredVersion": group_version,
            }),
            (Self::GroupV1, _) => json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": API_VERSION,
                "resources": [{
                    "name": "leases",
                    "singularName": "lease",
                    "namespaced": true,
                    "kind": "Lease",
                    "verbs": VERBS,
                    "storageVersionHash": "gqkMMb/YqFM=",
                }],
            }),
        }
    }
}

fn lease_resource_v2() -> Value {
    json!({
        "resource": "leases",
        "responseKind": { "group": GROUP, "version": "v1", "kind": "Lease" },
        "scope": "Namespaced",
        "singularResource": "lease",
        "verbs": VERBS,
    })
}

/// An `APIGroupDiscoveryList` with one group `name` (empty for the core group) at `v1`.
fn aggregated(version: &str, name: &str, resources: &[Value]) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": [{
            "metadata": { "name": name, "creationTimestamp": null },
            "versions": [{ "version": "v1", "resources": resources, "freshness": "Current" }],
        }],
    })
}

/// How much of each object a `Table` row carries (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    /// The query value; `Metadata` when absent, as on the real server.
    pub(super) fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(Self::Metadata),
            "None" => Ok(Self::None),
            "Object" => Ok(Self::Object),
            other => Err(format!(
                "Invalid value: {other:?}: must be 'Metadata', 'Object', 'None', or empty"
            )),
        }
    }
}

/// A `Table` of `objects` (Leases) in table version `version`; `columns` false leaves out the
/// column definitions (every watch event after the first, as on the real server).
pub(super) fn table(
    version: &str,
    objects: &[&Value],
    resource_version: Option<&str>,
    include: IncludeObject,
    columns: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> Value {
    let definitions = if columns {
        json!([
            {
                "name": "Name", "type": "string", "format": "name", "priority": 0,
                "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
            },
            {
                "name": "Holder", "type": "string", "format": "", "priority": 0,
                "description": "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.",
            },
            {
                "name": "Age", "type": "string", "format": "", "priority": 0,
                "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            },
        ])
    } else {
        json!([])
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let holder = object
                .pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .unwrap_or("");
            let age = object
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map_or_else(
                    || "<unknown>".to_owned(),
                    |t| human_duration(now.signed_duration_since(t)),
                );
            let mut row = json!({ "cells": [name, holder, age] });
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": format!("meta.k8s.io/{version}"),
                        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
                    });
                }
                IncludeObject::Object => {
                    let mut full = (*object).clone();
                    full["kind"] = json!("Lease");
                    full["apiVersion"] = json!(API_VERSION);
                    row["object"] = full;
                }
            }
            row
        })
        .collect();
    let mut metadata = json!({});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// An age as `kubectl` prints it (`HumanDuration`): `42s`, `3m12s`, `25m`, `4h30m`, `13h`,
/// `3d4h`, `20d`, `2y`.
pub(super) fn human_duration(age: chrono::TimeDelta) -> String {
    let seconds = age.num_seconds();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    let seconds = seconds.max(0);
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if hours < 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else {
        format!("{}y", days / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_producible_media_range_wins() {
        let kubectl_table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        let all = [MediaKind::Json, MediaKind::Table];
        assert_eq!(negotiate(kubectl_table, &all), Some(Media::Table("v1")));
        assert_eq!(
            negotiate(kubectl_table, &[MediaKind::Json]),
            Some(Media::Json)
        );
        let discovery = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            negotiate(discovery, Discovery::Groups.offers()),
            Some(Media::Discovery("v2"))
        );
        assert_eq!(
            negotiate(discovery, Discovery::GroupV1.offers()),
            Some(Media::Json)
        );
        assert_eq!(negotiate("", &all), Some(Media::Json));
        assert_eq!(negotiate("*/*", &all), Some(Media::Json));
        assert_eq!(negotiate("application/vnd.kubernetes.protobuf", &all), None);
        assert_eq!(negotiate("application/yaml", &all), None);
    }

    #[test]
    fn ages_print_as_kubectl_prints_them() {
        let s = chrono::TimeDelta::seconds;
        let cases = [
            (0, "0s"),
            (42, "42s"),
            (119, "119s"),
            (192, "3m12s"),
            (180, "3m"),
            (25 * 60, "25m"),
            (4 * 3600 + 30 * 60, "4h30m"),
            (13 * 3600, "13h"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (20 * 86_400, "20d"),
            (800 * 86_400, "2y"),
        ];
        for (seconds, printed) in cases {
            assert_eq!(human_duration(s(seconds)), printed, "{seconds} s");
        }
    }
}
