//! Request parameters: query strings parsed into typed structs (repeated keys fill lists:
//! `kind=MemberUp&kind=LeaderChanged`) and JSON bodies, each with a 400 that says what was
//! wrong.

use actix_web::HttpRequest;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Parses the query string of `req` into `T`, or says what was wrong.
pub(crate) fn query<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    serde_html_form::from_str(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))
}

/// Like [`query`], naming the expected form in the error (`?after=<revision>&wait_ms=…`).
pub(crate) fn query_expecting<T: DeserializeOwned>(
    req: &HttpRequest,
    expected: &str,
) -> Result<T, ApiError> {
    serde_html_form::from_str(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("malformed query ({e}); expected {expected}")))
}

/// Parses a JSON body into `T`, naming the expected shape in the error.
pub(crate) fn json_body<T: DeserializeOwned>(bytes: &[u8], expected: &str) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::BadRequest(format!("malformed JSON body ({e}); expected {expected}"))
    })
}
