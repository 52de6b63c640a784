//! The OpenAPI document (`/api/v1/openapi.json`) as users' tools read it: the pinned
//! openapi-spec-validator (scripts/requirements.txt, in `$TROUPE_VENV`, default
//! /var/tmp/troupe-venv, which scripts/test installs) accepts it with no error; every
//! operation has its own operationId; one security scheme per token; u64 values are strings;
//! the ingest body is the report format.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use troupe_protocol::limits::{FieldClass, Overflow};

fn document() -> Value {
    troupe_server::api::openapi::document_value()
}

fn venv_tool(name: &str) -> PathBuf {
    let venv = std::env::var_os("TROUPE_VENV").unwrap_or_else(|| "/var/tmp/troupe-venv".into());
    let tool = PathBuf::from(venv).join("bin").join(name);
    assert!(
        tool.exists(),
        "{} is missing: install the pinned Python tools (`scripts/test` does, or \
         `python3 -m venv $TROUPE_VENV && $TROUPE_VENV/bin/pip install -r scripts/requirements.txt`)",
        tool.display()
    );
    tool
}

fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            out.push((method.clone(), path.clone(), operation));
        }
    }
    out
}

#[test]
fn openapi_spec_validator_accepts_the_document_with_no_error() {
    let dir = std::env::temp_dir().join(format!("troupe-openapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&document()).unwrap()).unwrap();
    let output = Command::new(venv_tool("openapi-spec-validator"))
        .args(["--validation-errors", "all"])
        .arg(&file)
        .output()
        .expect("run openapi-spec-validator");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success() && stdout.contains("OK"),
        "openapi-spec-validator refused the document:\n{stdout}\n{stderr}"
    );
}

#[test]
fn every_operation_has_its_own_operation_id_and_declares_its_path_parameters_in_the_path() {
    let doc = document();
    let mut seen = BTreeSet::new();
    for (method, path, operation) in operations(&doc) {
        let id = operation["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
        assert!(seen.insert(id.to_owned()), "operationId {id} used twice");
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            let name = parameter["name"].as_str().unwrap();
            let templated = path.contains(&format!("{{{name}}}"));
            assert_eq!(
                parameter["in"] == "path",
                templated,
                "{method} {path}: parameter {name} is `in: {}`",
                parameter["in"]
            );
        }
    }
    assert!(seen.len() >= 36, "{} operations", seen.len());
}

#[test]
fn each_token_is_its_own_security_scheme_and_each_guarded_operation_names_its_token() {
    let doc = document();
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    let names: BTreeSet<&str> = schemes.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["admin", "coordination", "ingest", "viewer", "viewerBasic"])
    );
    let scheme_of = |method: &str, path: &str| {
        let operation = &doc["paths"][path][method];
        let security = operation["security"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        security
            .iter()
            .flat_map(|s| s.as_object().unwrap().keys().cloned())
            .collect::<Vec<_>>()
    };
    assert_eq!(scheme_of("post", "/api/v1/ingest"), ["ingest"]);
    assert_eq!(
        scheme_of("put", "/api/v1/clusters/{cluster}/members/{address}"),
        ["admin"]
    );
    assert_eq!(
        scheme_of("put", "/management/{cluster}/cluster/members/{address}"),
        ["admin"]
    );
    assert_eq!(
        scheme_of("post", "/api/v1/coordination/leases/{name}/acquire"),
        ["coordination"]
    );
    // Every read needs the viewer credential (or the admin token) and may answer 401; the
    // probes, metrics and the document itself stay open.
    for (method, path, operation) in operations(&doc) {
        let open = matches!(
            path.as_str(),
            "/livez" | "/readyz" | "/metrics" | "/api/v1/openapi.json" | "/api/v1/docs"
        );
        let schemes = scheme_of(&method, &path);
        if open {
            assert!(schemes.is_empty(), "{method} {path} is open: {schemes:?}");
        } else if method == "get" && !path.starts_with("/api/v1/coordination/") {
            assert_eq!(
                schemes,
                ["viewer", "viewerBasic", "admin"],
                "{method} {path}"
            );
        }
        if !open {
            assert!(
                operation["responses"]["401"].is_object(),
                "{method} {path} does not declare its 401"
            );
        }
    }
}

#[test]
fn the_ingest_body_is_the_report_format_and_u64_values_are_strings_accepting_numbers_on_input() {
    let doc = document();
    let body = &doc["paths"]["/api/v1/ingest"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["$ref"];
    assert_eq!(body, "#/components/schemas/ReportBatch");
    let schemas = &doc["components"]["schemas"];
    for kind in ["MemberUp", "DeadLetter", "SingletonHandOverCompleted"] {
        assert!(
            schemas["EventBody"].to_string().contains(kind),
            "EventBody lacks {kind}"
        );
    }
    let written = &schemas["Uint64"];
    assert_eq!(written["type"], "string");
    let input = schemas["Uint64Input"]["oneOf"].as_array().unwrap();
    assert_eq!(input[0]["type"], "string");
    assert_eq!(input[1]["type"], "integer");
    assert_eq!(input[1]["maximum"].as_u64(), Some(u64::MAX));
    // The history's event (with `incarnation`) and the directory's change (with `revision`)
    // are two schemas, not one name for both.
    assert!(schemas["EventDto"]["properties"]["incarnation"].is_object());
    assert!(schemas["DirectoryEventDto"]["properties"]["revision"].is_object());
    assert_eq!(
        schemas["MemberDto"]["properties"]["node_uid"]["$ref"],
        "#/components/schemas/Uint64"
    );
    // What the agent reports in `dropped.spool_batches`, the API returns (issue 14).
    assert!(schemas["DroppedCounts"]["properties"]["spool_batches"].is_object());
    assert_eq!(
        schemas["DroppedDto"]["properties"]["spool_batches"]["type"],
        "integer"
    );
}

/// The byte limit of every string field of the report format, by its schema and property, as
/// `troupe_protocol::limits::enforce` applies it.
fn report_string_limits() -> Vec<(&'static str, &'static str, FieldClass)> {
    use FieldClass::{
        ActorPath, Address, ClusterName, MessageType, NodeName, Reason, Role, SingletonName, Status,
    };
    let mut table = vec![
        ("AgentIdentity", "cluster", ClusterName),
        ("AgentIdentity", "node", NodeName),
        ("AgentMeta", "node", NodeName),
        ("MemberInfo", "address", Address),
        ("MemberInfo", "roles", Role),
        ("MemberChange", "observers", Address),
        ("LeaderChange", "leader", Address),
        ("SingletonHostElected", "host", Address),
        ("SingletonHostElected", "previous_host", Address),
        ("HandOverStarted", "new_host", Address),
        ("HandOverStarted", "peers", Address),
        ("HandOverCompleted", "new_host", Address),
        ("HandOverTimedOut", "new_host", Address),
        ("HandOverTimedOut", "silent_peers", Address),
        ("SingletonInstance", "host", Address),
        ("SingletonInstance", "reason", Reason),
        ("LeaseChange", "lease", SingletonName),
        ("LeaseChange", "holder", Address),
        ("LeaseChange", "reason", Reason),
        ("RouterStarted", "router", ActorPath),
        ("RouterStarted", "role", Role),
        ("RouterStarted", "routee_path", ActorPath),
        ("RouteesChange", "router", ActorPath),
        ("RouteesChange", "routees", ActorPath),
        ("DeadLetterEvent", "recipient", ActorPath),
        ("DeadLetterEvent", "sender", ActorPath),
        ("DeadLetterEvent", "message_type", MessageType),
        ("DeadLetterEvent", "reason", Reason),
        ("HealthChange", "reason", Reason),
        ("HostEviction", "host", Address),
        ("HostEviction", "previous_status", Status),
        ("HostEviction", "actors", ActorPath),
        ("DepthSample", "path", ActorPath),
        ("DepthSample", "router", ActorPath),
    ];
    for schema in [
        "SingletonHostElected",
        "HandOverStarted",
        "HandOverCompleted",
        "HandOverTimedOut",
        "SingletonInstance",
        "LeaseChange",
        "SingletonMessages",
    ] {
        table.push((schema, "singleton", SingletonName));
        table.push((schema, "role", Role));
    }
    table
}

/// Whether `schema` is a string (or a list of strings, or either or null) of free form: not an
/// enumeration, a pattern or a reference to a named schema.
fn free_string(schema: &Value) -> Option<&Value> {
    let schema = if schema["type"] == "array"
        || schema["type"]
            .as_array()
            .is_some_and(|t| t.contains(&"array".into()))
    {
        &schema["items"]
    } else {
        schema
    };
    let is_string = schema["type"] == "string"
        || schema["type"]
            .as_array()
            .is_some_and(|t| t.contains(&"string".into()));
    // The document refuses NUL in every free string (`pattern`); other patterns are formats.
    let free = schema
        .get("pattern")
        .is_none_or(|p| p.as_str() == Some(troupe_server::api::openapi::NO_NUL));
    (is_string && schema.get("enum").is_none() && free).then_some(schema)
}

/// Every free-form string property of the schemas reachable from `name`, as
/// `(schema, property) -> its schema`.
fn string_properties<'a>(
    schemas: &'a Value,
    name: &str,
    seen: &mut BTreeSet<String>,
    out: &mut Vec<(String, String, &'a Value)>,
) {
    fn refs<'b>(value: &'b Value, found: &mut Vec<&'b str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    found.push(target.trim_start_matches("#/components/schemas/"));
                }
                map.values().for_each(|v| refs(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }
    fn properties<'b>(name: &str, value: &'b Value, out: &mut Vec<(String, String, &'b Value)>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(props)) = map.get("properties") {
                    for (property, schema) in props {
                        if let Some(string) = free_string(schema) {
                            out.push((name.to_owned(), property.clone(), string));
                        }
                    }
                }
                map.values().for_each(|v| properties(name, v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| properties(name, v, out)),
            _ => {}
        }
    }
    if !seen.insert(name.to_owned()) {
        return;
    }
    let schema = &schemas[name];
    assert!(schema.is_object(), "no schema {name}");
    properties(name, schema, out);
    let mut found = Vec::new();
    refs(schema, &mut found);
    for target in found {
        string_properties(schemas, target, seen, out);
    }
}

#[test]
fn every_report_string_states_the_byte_limit_the_server_enforces() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let mut found = Vec::new();
    string_properties(schemas, "ReportBatch", &mut BTreeSet::new(), &mut found);
    let table = report_string_limits();
    let documented: BTreeSet<(String, String)> = found
        .iter()
        .map(|(s, p, _)| (s.clone(), p.clone()))
        .collect();
    let limited: BTreeSet<(String, String)> = table
        .iter()
        .map(|(s, p, _)| ((*s).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(
        documented, limited,
        "the report's string fields and the limits table differ"
    );
    for (schema, property, string) in &found {
        let class = table
            .iter()
            .find(|(s, p, _)| s == schema && p == property)
            .map(|(_, _, class)| *class)
            .unwrap();
        let limit = class.max_bytes();
        match class.overflow() {
            // Refused above the limit: the schema says so.
            Overflow::Refuse => assert_eq!(
                string["maxLength"].as_u64(),
                Some(limit as u64),
                "{schema}.{property} ({class:?}): {string}"
            ),
            // Shortened, not refused: a longer value is valid input, so no maxLength; the
            // description states the limit.
            Overflow::Truncate => {
                assert!(string.get("maxLength").is_none(), "{schema}.{property}");
                let description =
                    schemas[schema.as_str()]["properties"][property.as_str()]["description"]
                        .as_str()
                        .unwrap_or_default();
                assert!(
                    description.contains(&format!("{limit} bytes")),
                    "{schema}.{property}: {description}"
                );
            }
        }
    }
}

/// A valid batch in which the object of schema `schema` sits at the returned JSON pointer.
fn batch_with(schema: &str) -> (Value, &'static str) {
    use serde_json::json;
    let event = match schema {
        "MemberInfo" | "MemberChange" => json!({"kind": "MemberUp",
            "member": {"address": "h:1", "uid": "1", "status": "up", "roles": ["r"]},
            "previous_status": null, "observers": ["h:2"]}),
        "LeaderChange" => json!({"kind": "LeaderChanged", "leader": "h:1"}),
        "SingletonHostElected" => json!({"kind": "SingletonHostElected", "singleton": "s",
            "role": "r", "host": "h:1", "previous_host": "h:2"}),
        "HandOverStarted" => json!({"kind": "SingletonHandOverStarted", "singleton": "s",
            "role": "r", "new_host": "h:1", "peers": ["h:2"]}),
        "HandOverCompleted" => json!({"kind": "SingletonHandOverCompleted", "singleton": "s",
            "role": "r", "new_host": "h:1", "duration_ms": "1"}),
        "HandOverTimedOut" => json!({"kind": "SingletonHandOverTimedOut", "singleton": "s",
            "role": "r", "new_host": "h:1", "silent_peers": ["h:2"], "duration_ms": "1"}),
        "SingletonInstance" => json!({"kind": "SingletonRestarted", "singleton": "s",
            "role": "r", "host": "h:1", "backoff_ms": "5", "reason": "boom"}),
        "LeaseChange" => json!({"kind": "LeaseLost", "singleton": "s", "role": "r",
            "lease": "l", "holder": "h:1", "reason": "expired"}),
        "SingletonMessages" => json!({"kind": "SingletonMessagesHeld", "singleton": "s",
            "role": "r", "count": "1"}),
        "RouterStarted" => json!({"kind": "RouterStarted", "router": "/user/r",
            "strategy": "round-robin", "role": "r", "routee_path": "/user/w"}),
        "RouteesChange" => json!({"kind": "RouteesChanged", "router": "/user/r",
            "strategy": "random", "routees": ["/user/w"]}),
        "DeadLetterEvent" => json!({"kind": "DeadLetter", "recipient": "/user/a",
            "sender": "/user/b", "message_type": "T", "reason": "no actor"}),
        "HealthChange" => json!({"kind": "AgentHealthChanged", "health": "draining",
            "reason": "SIGTERM"}),
        "HostEviction" => json!({"kind": "DirectoryHostEvicted", "host": "troupe://c@h:1#1",
            "previous_status": "down", "actors": ["a"]}),
        _ => json!({"kind": "LeaderChanged", "leader": null}),
    };
    let mut event = event;
    event["at_ms"] = json!(0);
    let batch = json!({
        "version": 1,
        "identity": {"cluster": "c", "node": "h:1", "incarnation": "1", "meta": {"node": "k"}},
        "sequence": "1",
        "sent_at_ms": 0,
        "events": [event],
        "depth_samples": [{"at_ms": 0, "samples": [{"path": "/user/a", "router": "/user/r", "depth": 1}]}],
    });
    let at = match schema {
        "AgentIdentity" => "/identity",
        "AgentMeta" => "/identity/meta",
        "MemberInfo" => "/events/0/member",
        "DepthSample" => "/depth_samples/0/samples/0",
        _ => "/events/0",
    };
    (batch, at)
}

/// The table the document is checked against is the one `enforce` applies: at the limit a
/// value passes untouched, one byte over it is refused naming the field, or shortened.
#[test]
fn the_limits_table_is_what_the_ingest_check_enforces() {
    for (schema, property, class) in report_string_limits() {
        let limit = class.max_bytes();
        let run = |length: usize| {
            let (mut batch, at) = batch_with(schema);
            let field = &mut batch.pointer_mut(at).unwrap()[property];
            assert!(
                !field.is_null(),
                "{schema}.{property} missing from the sample"
            );
            let value = Value::from("a".repeat(length));
            let list = field.is_array();
            *field = if list {
                Value::Array(vec![value])
            } else {
                value
            };
            let mut batch: troupe_protocol::ReportBatch = serde_json::from_value(batch)
                .unwrap_or_else(|e| panic!("{schema}.{property}: sample does not parse: {e}"));
            let outcome = troupe_protocol::limits::enforce(&mut batch);
            (outcome, serde_json::to_value(&batch).unwrap(), list)
        };
        let (at_limit, _, _) = run(limit);
        assert_eq!(at_limit, Ok(0), "{schema}.{property} at its limit");
        let (over, after, list) = run(limit + 1);
        match class.overflow() {
            Overflow::Refuse => {
                let error = over.expect_err(&format!("{schema}.{property} over its limit"));
                let suffix = if list {
                    format!(".{property}[0]")
                } else {
                    format!(".{property}")
                };
                assert!(
                    error.path.ends_with(&suffix) && error.limit == limit,
                    "{schema}.{property}: {error}"
                );
            }
            Overflow::Truncate => {
                assert_eq!(over, Ok(1), "{schema}.{property} over its limit");
                let (_, at) = batch_with(schema);
                let kept = after.pointer(at).unwrap()[property].as_str().unwrap();
                assert!(kept.len() <= limit, "{schema}.{property}");
            }
        }
    }
}

#[test]
fn every_error_body_has_a_required_code_from_the_documented_enum() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let body = &schemas["ErrorBody"];
    let required: Vec<&str> = body["required"]
        .as_array()
        .expect("ErrorBody.required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        ["error", "status", "code"]
            .iter()
            .all(|f| required.contains(f)),
        "{required:?}"
    );
    assert_eq!(
        body["properties"]["code"]["$ref"], "#/components/schemas/ErrorCode",
        "{body}"
    );
    let codes: BTreeSet<&str> = schemas["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode.enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for code in [
        "ttl_out_of_range",
        "renew_interval_out_of_range",
        "unsupported_settings",
        "name_too_long",
        "owner_control_character",
        "actor_empty",
        "host_too_long",
        "not_owner",
        "compacted",
        "unavailable",
        "bad_request",
        "method_not_allowed",
    ] {
        assert!(codes.contains(code), "{code} missing from {codes:?}");
    }
}
