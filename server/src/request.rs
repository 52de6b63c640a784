//! Request parameters: query strings parsed into typed structs (repeated keys fill lists:
//! `kind=MemberUp&kind=LeaderChanged`) and JSON bodies, each with a 400 that says what was
//! wrong. A query parameter given with an empty value (`?limit=`) is refused: it names no
//! value (leave the parameter out for the default).

use actix_web::HttpRequest;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Parses the query string of `req` into `T`, or says what was wrong.
pub(crate) fn query<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    refuse_empty(req.query_string())?;
    serde_html_form::from_str(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))
}

/// 400 for a parameter without a value (`?limit=`, `?limit`).
fn refuse_empty(query: &str) -> Result<(), ApiError> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if value.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "query parameter `{name}` has no value; give one or leave the parameter out"
            )));
        }
    }
    Ok(())
}

/// Like [`query`], naming the expected form in the error (`?after=<revision>&wait_ms=…`).
pub(crate) fn query_expecting<T: DeserializeOwned>(
    req: &HttpRequest,
    expected: &str,
) -> Result<T, ApiError> {
    refuse_empty(req.query_string())?;
    serde_html_form::from_str(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("malformed query ({e}); expected {expected}")))
}

/// Parses a JSON body into `T`, naming the expected shape in the error.
pub(crate) fn json_body<T: DeserializeOwned>(bytes: &[u8], expected: &str) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::BadRequest(format!("malformed JSON body ({e}); expected {expected}"))
    })
}
