//! JSON as every answer, error and live-stream event writes it: serde_json's output with `<`,
//! `>` and `&` inside strings written as `\u003c`, `\u003e` and `\u0026`.
//!
//! # Why
//! Reported strings are whatever an agent (or an attacker holding an ingest token) sent. An
//! API answer or an event's `data:` line that a browser sniffs as HTML, a proxy injects into a
//! page, or a script embeds, then holds no markup: the escapes are the same string to every
//! JSON parser, so clients read exactly what was reported. `nosniff` on every response (see
//! `crate::app`) is the other half.

use std::io;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, HttpResponseBuilder};
use serde::Serialize;
use serde_json::ser::{Formatter, Serializer};

/// serde_json's compact output (every method but one is the default), escaping `<`, `>` and `&` in strings (keys included).
struct MarkupSafe;

impl Formatter for MarkupSafe {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let bytes = fragment.as_bytes();
        let mut start = 0;
        for (i, byte) in bytes.iter().enumerate() {
            let escape: &[u8] = match byte {
                b'<' => b"\\u003c",
                b'>' => b"\\u003e",
                b'&' => b"\\u0026",
                _ => continue,
            };
            writer.write_all(&bytes[start..i])?;
            writer.write_all(escape)?;
            start = i + 1;
        }
        writer.write_all(&bytes[start..])
    }
}

/// `value` as JSON, `<`, `>` and `&` escaped.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    value.serialize(&mut Serializer::with_formatter(&mut out, MarkupSafe))?;
    Ok(out)
}

/// `value` as a JSON string, `<`, `>` and `&` escaped.
pub(crate) fn to_string<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    // The formatter writes only what serde_json's writes, plus ASCII escapes: valid UTF-8.
    to_vec(value).map(|bytes| String::from_utf8(bytes).expect("serde_json writes UTF-8"))
}

/// A JSON body for a response builder, as [`HttpResponseBuilder::json`] but escaped.
pub(crate) trait JsonBody {
    /// Finishes the response with `value` as an `application/json` body; a value that cannot
    /// be serialized is a 500 (as actix's own `json`).
    fn json_body<T: Serialize>(&mut self, value: T) -> HttpResponse;
}

impl JsonBody for HttpResponseBuilder {
    fn json_body<T: Serialize>(&mut self, value: T) -> HttpResponse {
        match to_vec(&value) {
            Ok(body) => self
                .insert_header((
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ))
                .body(body),
            Err(error) => {
                HttpResponse::from_error(actix_web::error::JsonPayloadError::Serialize(error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{to_string, to_vec};

    #[test]
    fn markup_characters_in_strings_are_escaped_and_read_back_unchanged() {
        let value = serde_json::json!({
            "<key>": "<script>alert('x&y')</script>",
            "list": ["a>b", "&amp;", "plain", "\u{0}\"\\\n"],
            "n": 1,
        });
        let text = to_string(&value).unwrap();
        assert!(!text.contains(['<', '>', '&']), "{text}");
        assert!(
            text.contains(r"\u003cscript\u003ealert('x\u0026y')\u003c/script\u003e"),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            value
        );
        // Everything without those characters is exactly serde_json's output.
        let plain =
            serde_json::json!({"a": [1, "b\u{7f}\u{2028}", null, {"c": 1.5}], "\u{1}": true});
        assert_eq!(to_vec(&plain).unwrap(), serde_json::to_vec(&plain).unwrap());
    }
}
