//! The hostile-input corpus (`tests/hostile/`) through every field of the report format, walked
//! from the `ReportBatch` schema of the OpenAPI document (not a hand list, so a field added to
//! the format is covered): every string through every string field, within and over each
//! field's limit, then every dashboard page and every API answer that shows those values must
//! hold them inert; every edge number and NaN-like text through every numeric field gets 200
//! or 400, never a 5xx. In-process, on PostgreSQL and SQLite; the corpus travels in few,
//! large batches so the walk stays quick.

#[path = "support/every_field.rs"]
mod every_field;
#[path = "support/hostile.rs"]
mod hostile;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::Value;
use troupe_server::store::Store;
use troupe_server::{AppState, Config};

use every_field::{every_field_batch, incompressible, leaf_mut};
use hostile::{Payload, encoded, escaped};

const INGEST: &str = "ingest-secret";

troupe_server::on_every_store!(
    every_corpus_string_in_every_string_field_is_stored_or_refused_by_name_and_shown_inert,
    every_corpus_string_in_every_identity_field_is_stored_or_refused_by_name_and_shown_inert,
    a_string_over_its_limit_is_refused_naming_field_length_and_limit,
    hostile_numbers_in_every_numeric_field_get_200_or_400_never_a_5xx,
);

// ---------------------------------------------------------------------------------------------
// The schema walk.

/// A leaf of a batch and what the document says about it.
#[derive(Debug, Clone)]
struct Leaf {
    /// Its JSON path in the batch (`events[3].member.address`).
    path: String,
    /// The schema property it is (`MemberInfo.address`).
    field: String,
    /// A free string: no enumeration, no format pattern (the document's NUL pattern aside).
    free: bool,
    /// Its `maxLength`, if it has one.
    max_length: Option<usize>,
    /// The integer range it allows, if it may be a number.
    integer: Option<(i128, i128)>,
    /// Whether it may be that integer as a decimal string.
    decimal_string: bool,
    /// Whether it may be `null` (an optional number: `null` is its absence).
    nullable: bool,
}

fn document() -> Value {
    troupe_server::api::openapi::document_value()
}

fn resolve<'a>(schemas: &'a Value, schema: &'a Value) -> (&'a Value, Option<&'a str>) {
    match schema["$ref"].as_str() {
        Some(target) => {
            let name = target.trim_start_matches("#/components/schemas/");
            let (resolved, inner) = resolve(schemas, &schemas[name]);
            (resolved, inner.or(Some(name)))
        }
        None => (schema, None),
    }
}

fn types(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Whether `value` may be an instance of `schema`, far enough to choose a `oneOf` branch: by
/// type, and for objects by the `kind` discriminator.
fn fits(schemas: &Value, schema: &Value, value: &Value) -> bool {
    let (schema, _) = resolve(schemas, schema);
    for key in ["allOf"] {
        if let Some(all) = schema[key].as_array()
            && !all.iter().all(|s| fits(schemas, s, value))
        {
            return false;
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(any) = schema[key].as_array()
            && !any.iter().any(|s| fits(schemas, s, value))
        {
            return false;
        }
    }
    let ts = types(schema);
    if !ts.is_empty() {
        let ok = match value {
            Value::Null => ts.contains(&"null"),
            Value::Bool(_) => ts.contains(&"boolean"),
            Value::Number(n) => {
                ts.contains(&"number") || (ts.contains(&"integer") && (n.is_i64() || n.is_u64()))
            }
            Value::String(_) => ts.contains(&"string"),
            Value::Array(_) => ts.contains(&"array"),
            Value::Object(_) => ts.contains(&"object"),
        };
        if !ok {
            return false;
        }
    }
    if let (Some(kinds), Some(kind)) = (
        schema["properties"]["kind"]["enum"].as_array(),
        value["kind"].as_str(),
    ) && !kinds.iter().any(|k| k == kind)
    {
        return false;
    }
    true
}

/// Every leaf of `value` (an instance of `schema`) with what the document says about it.
fn walk(
    schemas: &Value,
    schema: &Value,
    owner: &str,
    field: &str,
    value: &Value,
    path: &str,
    out: &mut Vec<Leaf>,
) {
    let (schema, name) = resolve(schemas, schema);
    let owner = name.unwrap_or(owner);
    if let Some(all) = schema["allOf"].as_array() {
        for sub in all {
            walk(schemas, sub, owner, field, value, path, out);
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(any) = schema[key].as_array() {
            if value.is_object() || value.is_array() {
                let branch = any
                    .iter()
                    .find(|s| fits(schemas, s, value))
                    .unwrap_or_else(|| panic!("{path}: no branch of {owner} fits {value}"));
                walk(schemas, branch, owner, field, value, path, out);
            } else {
                // A scalar: every branch says what the leaf may be (a decimal string or a
                // JSON number; a string or null).
                for branch in any {
                    walk(schemas, branch, owner, field, value, path, out);
                }
            }
        }
    }
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (property, sub) in properties {
                    if let Some(v) = fields.get(property) {
                        let at = if path.is_empty() {
                            property.clone()
                        } else {
                            format!("{path}.{property}")
                        };
                        walk(
                            schemas,
                            sub,
                            owner,
                            &format!("{owner}.{property}"),
                            v,
                            &at,
                            out,
                        );
                    }
                }
            }
        }
        Value::Array(items) if schema.get("items").is_some() => {
            for (i, item) in items.iter().enumerate() {
                walk(
                    schemas,
                    &schema["items"],
                    owner,
                    field,
                    item,
                    &format!("{path}[{i}]"),
                    out,
                );
            }
        }
        Value::String(_) | Value::Number(_) if !types(schema).is_empty() => {
            let ts = types(schema);
            let integer = (ts.contains(&"integer")).then(|| {
                (
                    schema["minimum"]
                        .as_i64()
                        .map_or(i128::from(i64::MIN), i128::from),
                    schema["maximum"]
                        .as_u64()
                        .map(i128::from)
                        .or_else(|| schema["maximum"].as_i64().map(i128::from))
                        .unwrap_or(i128::from(u64::MAX)),
                )
            });
            let leaf = out.iter_mut().find(|l| l.path == path);
            let leaf = match leaf {
                Some(leaf) => leaf,
                None => {
                    out.push(Leaf {
                        path: path.to_owned(),
                        field: field.to_owned(),
                        free: false,
                        max_length: None,
                        integer: None,
                        decimal_string: false,
                        nullable: false,
                    });
                    out.last_mut().unwrap()
                }
            };
            if ts.contains(&"string") && value.is_string() {
                let pattern = schema["pattern"].as_str();
                leaf.free = schema.get("enum").is_none()
                    && pattern.is_none_or(|p| p == troupe_server::api::openapi::NO_NUL);
                leaf.max_length = schema["maxLength"].as_u64().map(|m| m as usize);
                leaf.decimal_string = pattern.is_some_and(|p| p.contains("[0-9]"));
            }
            if integer.is_some() {
                leaf.integer = integer;
            }
            if ts.contains(&"null") {
                leaf.nullable = true;
            }
        }
        _ => {}
    }
}

/// The free string properties the schemas reachable from `ReportBatch` declare, as
/// `Schema.property`: what the walk of an instance must cover.
fn declared_string_fields(schemas: &Value) -> BTreeSet<String> {
    fn free(schemas: &Value, schema: &Value) -> bool {
        let (schema, _) = resolve(schemas, schema);
        let schema = if types(schema).contains(&"array") {
            resolve(schemas, &schema["items"]).0
        } else {
            schema
        };
        types(schema).contains(&"string")
            && schema.get("enum").is_none()
            && schema["pattern"]
                .as_str()
                .is_none_or(|p| p == troupe_server::api::openapi::NO_NUL)
    }
    fn scan(
        schemas: &Value,
        name: &str,
        value: &Value,
        seen: &mut BTreeSet<String>,
        out: &mut BTreeSet<String>,
    ) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    let target = target.trim_start_matches("#/components/schemas/");
                    if seen.insert(target.to_owned()) {
                        scan(schemas, target, &schemas[target], seen, out);
                    }
                }
                if let Some(Value::Object(props)) = map.get("properties") {
                    for (property, schema) in props {
                        if free(schemas, schema) {
                            out.insert(format!("{name}.{property}"));
                        }
                    }
                }
                for v in map.values() {
                    scan(schemas, name, v, seen, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| scan(schemas, name, v, seen, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    let mut seen = BTreeSet::from(["ReportBatch".to_owned()]);
    scan(
        schemas,
        "ReportBatch",
        &schemas["ReportBatch"],
        &mut seen,
        &mut out,
    );
    out
}

/// The template batch (every event kind, every optional field) and its leaves, from the
/// document; fails if the template leaves a declared string field unvisited.
fn template_and_leaves(cluster: &str, t: i64) -> (Value, Vec<Leaf>) {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let template = serde_json::to_value(every_field_batch(cluster, 1, t)).unwrap();
    let mut leaves = Vec::new();
    walk(
        schemas,
        &serde_json::json!({"$ref": "#/components/schemas/ReportBatch"}),
        "ReportBatch",
        "",
        &template,
        "",
        &mut leaves,
    );
    let walked: BTreeSet<String> = leaves
        .iter()
        .filter(|l| l.free)
        .map(|l| l.field.clone())
        .collect();
    let declared = declared_string_fields(schemas);
    let missed: Vec<&String> = declared.difference(&walked).collect();
    assert!(
        missed.is_empty(),
        "declared string fields the template does not hold: {missed:?}"
    );
    (template, leaves)
}

// ---------------------------------------------------------------------------------------------
// HTTP.

fn state(store: Store) -> AppState {
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
    AppState::new(config, store).0
}

macro_rules! service {
    ($state:expr) => {
        init_service(
            actix_web::App::new()
                .configure(troupe_server::api::configure($state))
                .configure(troupe_server::ui::configure),
        )
        .await
    };
}

/// Status, content type and body of a request.
async fn call(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    request: actix_http::Request,
) -> (StatusCode, String, String) {
    let resp = call_service(app, request).await;
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = String::from_utf8(read_body(resp).await.to_vec()).expect("UTF-8 body");
    (status, content_type, body)
}

fn ingest_request(body: String) -> actix_http::Request {
    TestRequest::post()
        .uri("/api/v1/ingest")
        .insert_header(("content-type", "application/json"))
        .insert_header(("authorization", format!("Bearer {INGEST}")))
        .set_payload(body)
        .to_request()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Whether the server accepts `s` in `leaf` by what the document says (a NUL is refused
/// everywhere; a string over `maxLength` bytes is refused; a free-text field without one is
/// shortened).
fn acceptable(leaf: &Leaf, s: &str) -> bool {
    !s.contains('\0') && leaf.max_length.is_none_or(|m| s.len() <= m)
}

/// A 400 for a value of `leaf`: it names the field by its JSON path.
fn assert_refusal_names(status: StatusCode, body: &str, path: &str, what: &str) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
    let error: Value = serde_json::from_str(body).unwrap();
    let message = error["error"].as_str().unwrap_or_default();
    assert!(
        message.contains(path),
        "{what}: the refusal names {path}: {message}"
    );
}

/// What the pages and answers were checked for.
#[derive(Default)]
struct Checks {
    answers: usize,
    /// Whether answers are kept for the "was it shown" check.
    keep: bool,
    /// Every string value of every kept JSON answer, joined.
    shown_json: String,
    /// Every kept HTML page, joined.
    shown_html: String,
}

impl Checks {
    /// An HTML page: 200, every payload that could break out escaped, no script but the
    /// dashboard's own, no `javascript:` link.
    fn html(
        &mut self,
        uri: &str,
        (status, content_type, page): (StatusCode, String, String),
        corpus: &[Payload],
    ) {
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert!(
            content_type.starts_with("text/html"),
            "{uri}: {content_type}"
        );
        for p in corpus {
            // A lone quote or bracket is on every page; longer payloads are not.
            if p.text.len() >= 4 && p.text.contains(['<', '>', '"', '\'']) {
                assert!(
                    !page.contains(p.text.as_str()),
                    "{uri}: {p} appears unescaped"
                );
            }
        }
        // Only real markup counts: escaped text (`&#60;img src=javascript:`) is inert however
        // it reads, so tags and their attributes are found by tokenizing the page.
        let tags = markup(&page);
        let scripts = tags.iter().filter(|t| t.name == "script").count();
        // A page has the dashboard's own script; the map fragment (`/ui/map`) none.
        let own = usize::from(!uri.starts_with("/ui/map"));
        assert_eq!(scripts, own, "{uri}: only the dashboard's own script");
        for tag in &tags {
            for (name, value) in &tag.attributes {
                assert!(
                    !name.starts_with("on"),
                    "{uri}: an event handler <{} {name}>",
                    tag.name
                );
                let value = value.trim_start().to_ascii_lowercase();
                if ["href", "src", "action", "formaction", "xlink:href", "data"]
                    .contains(&name.as_str())
                {
                    for scheme in ["javascript:", "vbscript:", "data:"] {
                        assert!(
                            !value.starts_with(scheme),
                            "{uri}: a {scheme} {name} on <{}>",
                            tag.name
                        );
                    }
                }
            }
        }
        self.answers += 1;
        if self.keep {
            self.shown_html.push_str(&page);
        }
    }

    /// A JSON answer: 200, `application/json`, valid JSON; its strings are kept for the
    /// "was it shown" check. Returns it.
    fn json(
        &mut self,
        uri: &str,
        (status, content_type, body): (StatusCode, String, String),
    ) -> Value {
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        assert!(
            content_type.starts_with("application/json"),
            "{uri}: {content_type}"
        );
        let value: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{uri}: {e}"));
        fn strings(value: &Value, out: &mut String) {
            match value {
                Value::String(s) => {
                    out.push_str(s);
                    out.push('\u{1}');
                }
                Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
                Value::Object(map) => map.values().for_each(|v| strings(v, out)),
                _ => {}
            }
        }
        if self.keep {
            strings(&value, &mut self.shown_json);
        }
        self.answers += 1;
        value
    }
}

/// A start tag of a page, as a browser would read it.
#[derive(Debug)]
struct Tag {
    /// Lower-cased.
    name: String,
    /// Lower-cased names with their raw values.
    attributes: Vec<(String, String)>,
}

/// The start tags of `page`: every `<` that opens a tag (escaped text holds none), its name
/// and attributes (quoted, unquoted or bare). Comments, doctype and end tags are skipped;
/// the raw text of a `<script>` or `<style>` element is not markup.
fn markup(page: &str) -> Vec<Tag> {
    let bytes = page.as_bytes();
    let mut tags = Vec::new();
    let mut i = 0;
    while let Some(at) = page[i..].find('<') {
        i += at + 1;
        if page[i..].starts_with("!--") {
            i = page[i..].find("-->").map_or(bytes.len(), |end| i + end + 3);
            continue;
        }
        if !bytes.get(i).is_some_and(u8::is_ascii_alphabetic) {
            continue;
        }
        let name_end = page[i..]
            .find(|c: char| c.is_ascii_whitespace() || c == '>' || c == '/')
            .map_or(bytes.len(), |n| i + n);
        let name = page[i..name_end].to_ascii_lowercase();
        i = name_end;
        let mut attributes = Vec::new();
        loop {
            while bytes
                .get(i)
                .is_some_and(|b| b.is_ascii_whitespace() || *b == b'/')
            {
                i += 1;
            }
            if i >= bytes.len() || bytes[i] == b'>' {
                i += 1;
                break;
            }
            let end = page[i..]
                .find(|c: char| c.is_ascii_whitespace() || c == '=' || c == '>')
                .map_or(bytes.len(), |n| i + n);
            let attribute = page[i..end].to_ascii_lowercase();
            i = end;
            let mut value = String::new();
            if bytes.get(i) == Some(&b'=') {
                i += 1;
                match bytes.get(i) {
                    Some(q @ (b'"' | b'\'')) => {
                        let quote = char::from(*q);
                        let end = page[i + 1..].find(quote).map_or(bytes.len(), |n| i + 1 + n);
                        value = page[i + 1..end].to_owned();
                        i = end + 1;
                    }
                    _ => {
                        let end = page[i..]
                            .find(|c: char| c.is_ascii_whitespace() || c == '>')
                            .map_or(bytes.len(), |n| i + n);
                        value = page[i..end].to_owned();
                        i = end;
                    }
                }
            }
            attributes.push((attribute, value));
        }
        if name == "script" || name == "style" {
            // Up to its end tag, in any case.
            let mut end = bytes.len();
            let mut from = i;
            while let Some(n) = page[from..].find("</") {
                let at = from + n + 2;
                if bytes
                    .get(at..at + name.len())
                    .is_some_and(|b| b.eq_ignore_ascii_case(name.as_bytes()))
                {
                    end = from + n;
                    break;
                }
                from = at;
            }
            i = end;
        }
        tags.push(Tag { name, attributes });
    }
    tags
}

#[test]
fn escaped_text_is_not_markup_and_real_attributes_are_read() {
    let tags = markup(
        "<p title=\"a > b\">&#60;img src=javascript:x&#62; <a href='/ui/' data-x=1 hidden>x</a>\
         <!-- <script> --><img src=javascript:alert(1)><script src=/a.js></script>",
    );
    let names: Vec<&str> = tags.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["p", "a", "img", "script"]);
    assert_eq!(
        tags[0].attributes,
        [("title".to_owned(), "a > b".to_owned())]
    );
    assert_eq!(tags[1].attributes[2], ("hidden".to_owned(), String::new()));
    assert_eq!(
        tags[2].attributes,
        [("src".to_owned(), "javascript:alert(1)".to_owned())]
    );
}

// ---------------------------------------------------------------------------------------------
// Strings.

/// The mailbox depth series of every router of the cluster at `api`, each by its path.
async fn router_depths(
    app: &impl actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
    checks: &mut Checks,
    api: &str,
) {
    let uri = format!("{api}/routers");
    let routers = checks.json(
        &uri,
        call(app, TestRequest::get().uri(&uri).to_request()).await,
    );
    let routers = routers.as_array().expect("a list of routers");
    for router in routers {
        let path = router["path"].as_str().unwrap();
        let uri = format!("{api}/routers/depth?router={}", encoded(path));
        let depth = checks.json(
            &uri,
            call(app, TestRequest::get().uri(&uri).to_request()).await,
        );
        assert_eq!(depth["router"], path, "{uri}: {depth}");
    }
}

/// Sets the string leaf `path` of `batch`.
fn set(batch: &mut Value, path: &str, s: &str) {
    *leaf_mut(batch, path) = Value::String(s.to_owned());
}

async fn every_corpus_string_in_every_string_field_is_stored_or_refused_by_name_and_shown_inert(
    store: Store,
) {
    corpus_through_fields(store, Part::Body).await;
}

async fn every_corpus_string_in_every_identity_field_is_stored_or_refused_by_name_and_shown_inert(
    store: Store,
) {
    corpus_through_fields(store, Part::Identity).await;
}

/// Which string fields a run fills (two tests, so each stays well inside the test timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Events and depth samples, in the few large batches of one cluster.
    Body,
    /// The batch identity: one cluster per corpus string.
    Identity,
}

async fn corpus_through_fields(store: Store, part: Part) {
    let started = Instant::now();
    let app = service!(state(store));
    let t = now();
    let cluster = "hostile";
    let (template, leaves) = template_and_leaves(cluster, t);
    let mut corpus = hostile::strings();
    let mut seen = BTreeSet::new();
    corpus.retain(|p| seen.insert(p.text.clone()));
    let corpus = corpus;
    let free: Vec<&Leaf> = leaves.iter().filter(|l| l.free).collect();
    let (identity, body): (Vec<&Leaf>, Vec<&Leaf>) =
        free.iter().partition(|l| l.path.starts_with("identity."));
    let fields: BTreeSet<&str> = free.iter().map(|l| l.field.as_str()).collect();
    let mut sent = 0usize;
    let mut refused_placements = Vec::new();

    if part == Part::Body {
        // Events and depth samples: copy j of the template holds, in its i-th string leaf,
        // corpus string (i + j) mod n, so n copies put every string in every leaf. A placement the
        // document says is refused (a NUL, over maxLength) is tried on its own below.
        let n = corpus.len();
        const BATCHES: usize = 4;
        let mut batches: Vec<Value> = (0..BATCHES)
            .map(|b| {
                let mut batch = template.clone();
                batch["sequence"] = Value::String((b + 1).to_string());
                batch["events"] = Value::Array(Vec::new());
                batch["depth_samples"] = Value::Array(Vec::new());
                batch
            })
            .collect();
        for j in 0..n {
            let mut copy = template.clone();
            for (i, leaf) in body.iter().enumerate() {
                let p = &corpus[(i + j) % n];
                if acceptable(leaf, &p.text) {
                    set(&mut copy, &leaf.path, &p.text);
                    sent += 1;
                } else {
                    set(&mut copy, &leaf.path, &format!("f{j}.{i}"));
                    refused_placements.push((*leaf, p));
                }
            }
            let target = &mut batches[j % BATCHES];
            for key in ["events", "depth_samples"] {
                let items = copy[key].as_array().unwrap().clone();
                target[key].as_array_mut().unwrap().extend(items);
            }
        }
        for batch in batches {
            let (status, _, body) = call(&app, ingest_request(batch.to_string())).await;
            assert_eq!(status, StatusCode::OK, "a corpus batch: {body}");
        }
    }

    let stored_at = started.elapsed();

    // Identity: one small batch per string (a batch has one identity), each its own cluster,
    // node and Kubernetes node; a string refused in one of them is tried again on its own.
    let mut clusters = Vec::new();
    if part == Part::Identity {
        for (k, p) in corpus.iter().enumerate() {
            let mut batch = template.clone();
            batch["events"] = Value::Array(Vec::new());
            batch["depth_samples"] = Value::Array(Vec::new());
            let mut named = Vec::new();
            for leaf in &identity {
                if acceptable(leaf, &p.text) {
                    set(&mut batch, &leaf.path, &p.text);
                    named.push(*leaf);
                } else {
                    set(&mut batch, &leaf.path, &format!("id{k}"));
                    refused_placements.push((*leaf, p));
                }
            }
            let (status, _, answer) = call(&app, ingest_request(batch.to_string())).await;
            sent += named.len();
            match status {
                StatusCode::OK => clusters.push((
                    batch["identity"]["cluster"].as_str().unwrap().to_owned(),
                    batch["identity"]["node"].as_str().unwrap().to_owned(),
                )),
                // Only a cluster name has a rule beyond NUL and length (no `~`): named.
                _ => {
                    assert_refusal_names(status, &answer, "identity.cluster", &format!("{p}"));
                    assert!(
                        p.text.contains(troupe_protocol::CLUSTER_KEY_SEPARATOR),
                        "{p}: {answer}"
                    );
                    set(&mut batch, "identity.cluster", &format!("id{k}"));
                    let (status, _, answer) = call(&app, ingest_request(batch.to_string())).await;
                    assert_eq!(
                        status,
                        StatusCode::OK,
                        "{p} outside the cluster name: {answer}"
                    );
                    clusters.push((
                        format!("id{k}"),
                        batch["identity"]["node"].as_str().unwrap().to_owned(),
                    ));
                }
            }
        }
    }

    // What the document refuses is refused, naming the field: each on its own, in a batch of
    // the one event (or identity) that holds it.
    for (leaf, p) in &refused_placements {
        let mut batch = template.clone();
        set(&mut batch, &leaf.path, &p.text);
        let (status, _, answer) = call(&app, ingest_request(batch.to_string())).await;
        assert_refusal_names(status, &answer, &leaf.path, &format!("{} = {p}", leaf.path));
        sent += 1;
    }

    // Everything that shows those values.
    let mut checks = Checks {
        keep: true,
        ..Checks::default()
    };
    if part == Part::Body {
        let c = encoded(cluster);
        for uri in [
            format!("/ui/?cluster={c}"),
            format!("/ui/timeline?cluster={c}"),
            format!("/ui/timeline?cluster={c}&kind=membership"),
            format!("/ui/timeline?cluster={c}&kind=singleton"),
            format!("/ui/timeline?cluster={c}&kind=router"),
            format!("/ui/timeline?cluster={c}&kind=health"),
            format!("/ui/singletons?cluster={c}"),
            format!("/ui/routers?cluster={c}"),
            format!("/ui/dead-letters?cluster={c}"),
            format!("/ui/node?cluster={c}&node={}", encoded("127.0.0.1:2552")),
            format!("/ui/map?cluster={c}"),
        ] {
            let answer = call(&app, TestRequest::get().uri(&uri).to_request()).await;
            checks.html(&uri, answer, &corpus);
        }
        let api = format!("/api/v1/clusters/{c}");
        for uri in [
            "/api/v1/clusters".to_owned(),
            api.clone(),
            format!("{api}/nodes"),
            format!("{api}/dead-letters/per-minute"),
            format!("{api}/routers"),
            format!("/management/{c}/cluster/members"),
        ] {
            let answer = call(&app, TestRequest::get().uri(&uri).to_request()).await;
            checks.json(&uri, answer);
        }
        router_depths(&app, &mut checks, &api).await;
        let routers = call(
            &app,
            TestRequest::get()
                .uri(&format!("{api}/routers"))
                .to_request(),
        )
        .await;
        assert!(
            routers.2.len() > 2,
            "the corpus batches report routers: {}",
            routers.2
        );
        // Paged lists, every page.
        for first in [
            format!("{api}/events?limit=1000"),
            format!("{api}/dead-letters?limit=1000"),
        ] {
            let mut uri = first.clone();
            loop {
                let answer = call(&app, TestRequest::get().uri(&uri).to_request()).await;
                let page = checks.json(&uri, answer);
                match page["next_cursor"].as_str() {
                    Some(cursor) => uri = format!("{first}&cursor={}", encoded(cursor)),
                    None => break,
                }
            }
        }
        // Each member and each singleton on its own, by its exact spelling.
        let members = checks.json(
            "members",
            call(
                &app,
                TestRequest::get()
                    .uri(&format!("{api}/members?include_removed=true"))
                    .to_request(),
            )
            .await,
        );
        let members: Vec<String> = members["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["node"].as_str().unwrap().to_owned())
            .collect();
        for member in &members {
            let uri = format!("{api}/members/{}", encoded(member));
            let answer = checks.json(
                &uri,
                call(&app, TestRequest::get().uri(&uri).to_request()).await,
            );
            assert_eq!(answer["node"], *member);
        }
        let singletons = checks.json(
            "singletons",
            call(
                &app,
                TestRequest::get()
                    .uri(&format!("{api}/singletons"))
                    .to_request(),
            )
            .await,
        );
        let singletons = singletons.as_array().expect("a list of singletons");
        assert!(
            !singletons.is_empty(),
            "the corpus batches report singletons"
        );
        for singleton in singletons {
            let name = singleton["name"].as_str().unwrap();
            let uri = format!("{api}/singletons/{}", encoded(name));
            let answer = checks.json(
                &uri,
                call(&app, TestRequest::get().uri(&uri).to_request()).await,
            );
            assert_eq!(answer["singleton"]["name"], name);
        }
    }

    if part == Part::Identity {
        // The identity clusters: listed, and each one's nodes and node page; the overview of one
        // (its cluster switcher names them all).
        checks.keep = false;
        for (k, (cluster, node)) in clusters.iter().enumerate() {
            let (c, n) = (encoded(cluster), encoded(node));
            let mut pages = vec![format!("/ui/node?cluster={c}&node={n}")];
            if k == 0 {
                pages.push(format!("/ui/?cluster={c}"));
            }
            for uri in pages {
                let answer = call(&app, TestRequest::get().uri(&uri).to_request()).await;
                checks.html(&uri, answer, &corpus);
            }
            let uri = format!("/api/v1/clusters/{}/nodes", encoded(cluster));
            let nodes = checks.json(
                &uri,
                call(&app, TestRequest::get().uri(&uri).to_request()).await,
            );
            assert_eq!(nodes[0]["node"], *node, "{uri}: {nodes}");
        }
        let listed = checks.json(
            "/api/v1/clusters",
            call(
                &app,
                TestRequest::get().uri("/api/v1/clusters").to_request(),
            )
            .await,
        );
        let listed: BTreeSet<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        for (cluster, _) in &clusters {
            assert!(listed.contains(cluster.as_str()), "{cluster:?} is listed");
        }
    }

    if part == Part::Body {
        // Each accepted string was shown: exactly, in a JSON answer; escaped, on a page.
        for p in &corpus {
            if p.text.contains('\0') {
                continue;
            }
            assert!(
                checks.shown_json.contains(&p.text),
                "{p} is in an API answer, exactly"
            );
            assert!(
                checks.shown_html.contains(&escaped(&p.text)),
                "{p} is on a dashboard page, escaped"
            );
        }
    }

    println!(
        "hostile strings ({part:?}): {} fields walked ({} string leaves), {} corpus strings, {sent} placements sent \
         ({} refused by name), {} answers checked; stored in {:.1?}, all in {:.1?}",
        fields.len(),
        free.len(),
        corpus.len(),
        refused_placements.len(),
        checks.answers,
        stored_at,
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Limits.

async fn a_string_over_its_limit_is_refused_naming_field_length_and_limit(store: Store) {
    let started = Instant::now();
    let app = service!(state(store));
    let (template, leaves) = template_and_leaves("limits", now());
    let free: Vec<&Leaf> = leaves.iter().filter(|l| l.free).collect();
    let mut at_limit = template.clone();
    let (mut refused, mut shortened) = (0, 0);
    for (i, leaf) in free.iter().enumerate() {
        let mut batch = template.clone();
        match leaf.max_length {
            Some(limit) => {
                set(&mut at_limit, &leaf.path, &incompressible(limit, i as u64));
                set(&mut batch, &leaf.path, &incompressible(limit + 1, i as u64));
                let (status, _, body) = call(&app, ingest_request(batch.to_string())).await;
                assert_refusal_names(status, &body, &leaf.path, &leaf.path);
                let expected = format!(
                    "field too long: {} is {} bytes long; the limit is {limit} bytes",
                    leaf.path,
                    limit + 1
                );
                assert!(body.contains(&expected), "{body} should say {expected}");
                refused += 1;
            }
            // Free text without a maxLength is shortened, not refused.
            None => {
                batch["sequence"] = Value::String((i + 2).to_string());
                set(&mut batch, &leaf.path, &incompressible(5_000, i as u64));
                let (status, _, body) = call(&app, ingest_request(batch.to_string())).await;
                assert_eq!(status, StatusCode::OK, "{}: {body}", leaf.path);
                shortened += 1;
            }
        }
    }
    at_limit["sequence"] = Value::String("1".to_owned());
    let (status, _, body) = call(&app, ingest_request(at_limit.to_string())).await;
    assert_eq!(status, StatusCode::OK, "every field at its limit: {body}");
    assert!(refused > 80 && shortened > 0, "{refused} {shortened}");
    println!(
        "limits: {} string leaves, {refused} refused one byte over maxLength, {shortened} free-text leaves shortened; {:.1?}",
        free.len(),
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Numbers.

/// Number-like text beside `tests/hostile/numbers.txt`: what is not a JSON number, or a number
/// as a string.
const NOT_NUMBERS: [&str; 16] = [
    "NaN",
    "-NaN",
    "Infinity",
    "-Infinity",
    "\"NaN\"",
    "\"Infinity\"",
    "\"1e400\"",
    "\"-1\"",
    "\"0x10\"",
    "\"\"",
    "\" 1\"",
    "\"1.5\"",
    "null",
    "true",
    "[]",
    "{}",
];

/// Whether the document accepts `token` (JSON text) in the numeric `leaf`: an integer in its
/// range, or that integer as a decimal string where it allows one.
fn documented(leaf: &Leaf, token: &str) -> bool {
    let Ok(value) = serde_json::from_str::<Value>(token) else {
        return false;
    };
    let Some((min, max)) = leaf.integer else {
        return false;
    };
    let in_range = |v: i128| v >= min && v <= max;
    match value {
        Value::Null => leaf.nullable,
        // JSON Schema counts a number with a zero fraction (`1.0`, `1e2`, `-0`) as an
        // integer; the server reads those exactly within ±2^53.
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or(n.as_u64().map(i128::from))
            .or(n
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0)
                .map(|f| f as i128))
            .is_some_and(in_range),
        Value::String(s) => {
            leaf.decimal_string
                && !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && s.parse::<i128>().is_ok_and(in_range)
        }
        _ => false,
    }
}

async fn hostile_numbers_in_every_numeric_field_get_200_or_400_never_a_5xx(store: Store) {
    let started = Instant::now();
    let app = service!(state(store));
    let cluster = "numbers";
    let (template, leaves) = template_and_leaves(cluster, now());
    // One leaf per numeric property (the template repeats some in every event).
    let mut numeric: BTreeMap<&str, &Leaf> = BTreeMap::new();
    for leaf in leaves.iter().filter(|l| l.integer.is_some()) {
        numeric.entry(leaf.field.as_str()).or_insert(leaf);
    }
    assert!(numeric.len() > 15, "{numeric:?}");
    let mut tokens = hostile::numbers();
    tokens.extend(NOT_NUMBERS.iter().map(|s| (*s).to_owned()));
    let (mut sent, mut accepted, mut refused) = (0, 0, 0);
    let mut sequence = 1u64;
    for leaf in numeric.values() {
        // The event (or depth tick) that holds the leaf, alone: an accepted batch writes little.
        let mut batch = template.clone();
        let mut path = leaf.path.clone();
        for key in ["events", "depth_samples"] {
            let prefix = format!("{key}[");
            if let Some(rest) = path.strip_prefix(&prefix) {
                let (index, tail) = rest.split_once(']').unwrap();
                let item = batch[key][index.parse::<usize>().unwrap()].clone();
                batch[key] = Value::Array(vec![item]);
                path = format!("{key}[0]{tail}");
            } else {
                batch[key] = Value::Array(Vec::new());
            }
        }
        for token in &tokens {
            sequence += 1;
            batch["sequence"] = Value::String(sequence.to_string());
            *leaf_mut(&mut batch, &path) = Value::String("\u{1}N\u{1}".to_owned());
            let body = batch.to_string().replace("\"\\u0001N\\u0001\"", token);
            let (status, _, answer) = call(&app, ingest_request(body)).await;
            sent += 1;
            assert!(
                status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
                "{} = {token}: {status} {answer}",
                leaf.field
            );
            let expected = documented(leaf, token);
            assert_eq!(
                status == StatusCode::OK,
                expected,
                "{} ({}) = {token}: the document says {}: {answer}",
                leaf.field,
                path,
                if expected { "accepted" } else { "refused" }
            );
            if status == StatusCode::OK {
                accepted += 1;
            } else {
                refused += 1;
                let error: Value = serde_json::from_str(&answer).unwrap();
                assert!(
                    !error["error"].as_str().unwrap_or_default().is_empty(),
                    "{answer}"
                );
            }
        }
    }
    // Whatever was stored renders.
    let mut checks = Checks::default();
    for uri in [
        format!("/ui/?cluster={cluster}"),
        format!("/ui/timeline?cluster={cluster}"),
        format!("/ui/singletons?cluster={cluster}"),
        format!("/ui/routers?cluster={cluster}"),
        format!("/ui/dead-letters?cluster={cluster}"),
    ] {
        let answer = call(&app, TestRequest::get().uri(&uri).to_request()).await;
        checks.html(&uri, answer, &[]);
    }
    for uri in [
        format!("/api/v1/clusters/{cluster}/members?include_removed=true"),
        format!("/api/v1/clusters/{cluster}/nodes"),
        format!("/api/v1/clusters/{cluster}/events?limit=1000"),
        format!("/api/v1/clusters/{cluster}/dead-letters"),
        format!("/api/v1/clusters/{cluster}/singletons"),
    ] {
        let answer = call(&app, TestRequest::get().uri(&uri).to_request()).await;
        checks.json(&uri, answer);
    }
    router_depths(&app, &mut checks, &format!("/api/v1/clusters/{cluster}")).await;
    println!(
        "hostile numbers: {} numeric fields walked, {} values each, {sent} sent ({accepted} accepted, {refused} refused), {} answers checked; {:.1?}",
        numeric.len(),
        tokens.len(),
        checks.answers,
        started.elapsed()
    );
}
