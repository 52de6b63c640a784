//! The OpenAPI document (`/api/v1/openapi.json`) as users' tools read it: the pinned
//! openapi-spec-validator (scripts/requirements.txt, in `$TROUPE_VENV`, default
//! /var/tmp/troupe-venv, which scripts/test installs) accepts it with no error; every
//! operation has its own operationId; one security scheme per token; u64 values are strings;
//! the ingest body is the report format.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

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
}
