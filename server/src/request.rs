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

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Page {
        limit: Option<u32>,
        cursor: Option<String>,
    }

    fn message(error: ApiError) -> String {
        match error {
            ApiError::BadRequest(message) => message,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn a_query_parameter_without_a_value_is_refused_naming_it() {
        for uri in ["/x?limit=", "/x?limit", "/x?cursor=&limit=5"] {
            let req = TestRequest::with_uri(uri).to_http_request();
            let error = message(query::<Page>(&req).unwrap_err());
            let name = if uri.contains("cursor") {
                "cursor"
            } else {
                "limit"
            };
            assert_eq!(
                error,
                format!(
                    "query parameter `{name}` has no value; give one or leave the parameter out"
                ),
                "{uri}"
            );
        }
        let req = TestRequest::with_uri("/x?limit=5").to_http_request();
        assert_eq!(query::<Page>(&req).unwrap().limit, Some(5));
        let req = TestRequest::with_uri("/x").to_http_request();
        let page = query::<Page>(&req).unwrap();
        assert!(page.limit.is_none() && page.cursor.is_none());
    }

    #[derive(Debug, Deserialize)]
    struct Grant {
        #[serde(with = "troupe_protocol::wire::u64_string")]
        token: u64,
    }

    #[test]
    fn a_u64_in_a_body_is_a_decimal_string_or_a_json_number() {
        for (body, value) in [
            (
                r#"{"token": "15365700884095386388"}"#,
                15_365_700_884_095_386_388,
            ),
            (r#"{"token": "42"}"#, 42),
            (r#"{"token": 42}"#, 42),
            (r#"{"token": 42.0}"#, 42),
            (r#"{"token": 4.2e1}"#, 42),
            (r#"{"token": 18446744073709551615}"#, u64::MAX),
        ] {
            let grant: Grant = json_body(body.as_bytes(), "a grant").unwrap();
            assert_eq!(grant.token, value, "{body}");
        }
        for body in [
            r#"{"token": "+42"}"#,
            r#"{"token": "-1"}"#,
            r#"{"token": -1}"#,
            r#"{"token": 1.5}"#,
            r#"{"token": ""}"#,
            r#"{"token": " 42"}"#,
            r#"{"token": "18446744073709551616"}"#,
        ] {
            let error = message(json_body::<Grant>(body.as_bytes(), "a grant").unwrap_err());
            assert!(
                error.contains(
                    "expected an unsigned 64-bit integer as a decimal string (\"42\") or a JSON number"
                ) && error.contains("line 1 column"),
                "{body}: {error}"
            );
        }
    }
}
