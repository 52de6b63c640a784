//! How 64-bit unsigned integers travel: as decimal strings.
//!
//! JSON numbers above 2^53 lose precision in JavaScript, jq and many JSON libraries, and
//! incarnations and uids are random 64-bit values (15365700884095386388 has been seen). So
//! every `u64` of the wire format is written as a string (`"incarnation":"15365700884095386388"`),
//! as the protobuf JSON mapping does; on input a JSON number is accepted as well, so reports
//! of agents that send numbers still parse. Anything else (a negative number, a fraction, a
//! string that is not a decimal `u64`) is an error naming what is allowed.
//!
//! Use with serde's `with`: `#[serde(with = "troupe_protocol::wire::u64_string")]` for `u64`,
//! `#[serde(default, with = "troupe_protocol::wire::option_u64_string")]` for `Option<u64>`.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

struct U64Visitor;

impl Visitor<'_> for U64Visitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an unsigned 64-bit integer as a decimal string (\"42\") or a JSON number")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::invalid_value(de::Unexpected::Signed(value), &self))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        Err(E::invalid_value(de::Unexpected::Float(value), &self))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<u64, E> {
        // `u64::from_str` also takes a leading `+`; the wire form is digits only.
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(E::invalid_value(de::Unexpected::Str(value), &self));
        }
        value
            .parse()
            .map_err(|_| E::invalid_value(de::Unexpected::Str(value), &self))
    }
}

/// A `u64` written as a decimal string, read from a string or a number.
pub mod u64_string {
    use super::{Deserializer, Serializer, U64Visitor};

    /// Writes `value` as a decimal string.
    ///
    /// # Errors
    /// Whatever the serializer fails with.
    pub fn serialize<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    /// Reads a decimal string or a non-negative integer.
    ///
    /// # Errors
    /// Anything else, naming what is allowed.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(U64Visitor)
    }
}

/// An `Option<u64>`: `null` or a decimal string; read from `null`, a string or a number.
pub mod option_u64_string {
    use std::fmt;

    use serde::de::{self, Visitor};

    use super::{Deserializer, Serializer, U64Visitor};

    /// Writes `None` as `null`, a value as a decimal string.
    ///
    /// # Errors
    /// Whatever the serializer fails with.
    pub fn serialize<S: Serializer>(value: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => serializer.collect_str(value),
            None => serializer.serialize_none(),
        }
    }

    struct OptionVisitor;

    impl<'de> Visitor<'de> for OptionVisitor {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("null, or an unsigned 64-bit integer as a decimal string or a JSON number")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(U64Visitor).map(Some)
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
            U64Visitor.visit_u64(value).map(Some)
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
            U64Visitor.visit_i64(value).map(Some)
        }

        fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
            U64Visitor.visit_f64(value).map(Some)
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
            U64Visitor.visit_str(value).map(Some)
        }
    }

    /// Reads `null`, a decimal string or a non-negative integer.
    ///
    /// # Errors
    /// Anything else, naming what is allowed.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        deserializer.deserialize_option(OptionVisitor)
    }
}

/// Regular expression of the decimal texts of `min..=max` (`min` 0 or 1), leading zeros
/// allowed as the parser allows them: `^0*(?:…)$`.
#[must_use]
pub fn decimal_pattern(min: u64, max: u64) -> String {
    let digits: Vec<u8> = max.to_string().into_bytes();
    let len = digits.len();
    let mut alternatives = Vec::new();
    if min == 0 {
        alternatives.push("0".to_owned());
    }
    if len > 1 {
        alternatives.push(if len == 2 {
            "[1-9]".to_owned()
        } else {
            format!("[1-9][0-9]{{0,{}}}", len - 2)
        });
    }
    // Numbers of `len` digits at most `max`: equal to it up to position `i`, smaller there.
    for i in 0..len {
        let low = if i == 0 { b'1' } else { b'0' };
        let high = digits[i];
        if high > low {
            let rest = len - 1 - i;
            let tail = match rest {
                0 => String::new(),
                1 => "[0-9]".to_owned(),
                n => format!("[0-9]{{{n}}}"),
            };
            alternatives.push(format!(
                "{}[{}-{}]{tail}",
                String::from_utf8_lossy(&digits[..i]),
                low as char,
                (high - 1) as char
            ));
        }
    }
    alternatives.push(String::from_utf8_lossy(&digits).into_owned());
    format!("^0*(?:{})$", alternatives.join("|"))
}

/// OpenAPI schemas of the wire format's 64-bit integers (feature `openapi`), as components
/// the server's document refers to.
#[cfg(feature = "openapi")]
pub mod schema {
    use std::borrow::Cow;

    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};
    use utoipa::openapi::{KnownFormat, RefOr};
    use utoipa::{Number, PartialSchema, ToSchema};

    use super::decimal_pattern;

    fn string(min: u64, max: u64, description: &str) -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(decimal_pattern(min, max)))
            .description(Some(description))
    }

    fn integer(min: u64, max: u64) -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(Number::UInt(min as usize)))
            .maximum(Some(Number::UInt(max as usize)))
    }

    /// `what` as a request may give it: `min..=max` as a decimal string, or a JSON number.
    #[must_use]
    pub fn u64_input(min: u64, max: u64, what: &str) -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(string(
                min,
                max,
                &format!("{what} as a decimal string (the wire form)"),
            ))
            .item(integer(min, max).description(Some(format!(
                "{what} as a JSON number (older agents; accepted on input only)"
            ))))
            .description(Some(format!(
                "{what}, {min}..={max}: a decimal string, or on input a JSON number"
            )))
            .into()
    }

    /// An unsigned 64-bit integer as the server writes it: a decimal string
    /// (`"15365700884095386388"`).
    #[derive(Debug)]
    pub struct U64;

    impl PartialSchema for U64 {
        fn schema() -> RefOr<Schema> {
            string(
                0,
                u64::MAX,
                "An unsigned 64-bit integer as a decimal string (JSON numbers above 2^53 lose precision)",
            )
            .build()
            .into()
        }
    }

    impl ToSchema for U64 {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("Uint64")
        }
    }

    /// An unsigned 64-bit integer as a request may give it: a decimal string, or a JSON number.
    #[derive(Debug)]
    pub struct U64Input;

    impl PartialSchema for U64Input {
        fn schema() -> RefOr<Schema> {
            u64_input(0, u64::MAX, "An unsigned 64-bit integer")
        }
    }

    impl ToSchema for U64Input {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("Uint64Input")
        }
    }

    /// A batch sequence number on input: 1..=2^63-1, a decimal string or a JSON number.
    #[derive(Debug)]
    pub struct SequenceInput;

    impl PartialSchema for SequenceInput {
        fn schema() -> RefOr<Schema> {
            u64_input(1, i64::MAX as u64, "A batch sequence number")
        }
    }

    impl ToSchema for SequenceInput {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("SequenceInput")
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        #[serde(with = "super::u64_string")]
        value: u64,
        #[serde(default, with = "super::option_u64_string")]
        maybe: Option<u64>,
    }

    #[test]
    fn u64_is_written_as_a_string_and_read_from_a_string_or_a_number() {
        let big = Sample {
            value: 15_365_700_884_095_386_388,
            maybe: Some(u64::MAX),
        };
        let json = serde_json::to_string(&big).unwrap();
        assert_eq!(
            json,
            r#"{"value":"15365700884095386388","maybe":"18446744073709551615"}"#
        );
        assert_eq!(serde_json::from_str::<Sample>(&json).unwrap(), big);
        let numbers: Sample =
            serde_json::from_str(r#"{"value":15365700884095386388,"maybe":7}"#).unwrap();
        assert_eq!(numbers.value, 15_365_700_884_095_386_388);
        assert_eq!(numbers.maybe, Some(7));
        let absent: Sample = serde_json::from_str(r#"{"value":"0"}"#).unwrap();
        assert_eq!(absent.maybe, None);
        let null: Sample = serde_json::from_str(r#"{"value":"1","maybe":null}"#).unwrap();
        assert_eq!(null.maybe, None);
        assert_eq!(
            serde_json::to_string(&null).unwrap(),
            r#"{"value":"1","maybe":null}"#
        );
    }

    #[test]
    fn the_decimal_pattern_lists_shorter_numbers_then_each_smaller_digit_then_the_maximum() {
        assert_eq!(
            super::decimal_pattern(1, 120),
            "^0*(?:[1-9][0-9]{0,1}|1[0-1][0-9]|120)$"
        );
        assert_eq!(
            super::decimal_pattern(0, 500),
            "^0*(?:0|[1-9][0-9]{0,1}|[1-4][0-9]{2}|500)$"
        );
        assert_eq!(super::decimal_pattern(0, 5), "^0*(?:0|[1-4]|5)$");
    }

    #[test]
    fn anything_but_a_decimal_u64_is_refused_naming_what_is_allowed() {
        for bad in [
            r#"{"value":-1}"#,
            r#"{"value":1.5}"#,
            r#"{"value":"-1"}"#,
            r#"{"value":"+1"}"#,
            r#"{"value":" 1"}"#,
            r#"{"value":""}"#,
            r#"{"value":"0x10"}"#,
            r#"{"value":"18446744073709551616"}"#,
            r#"{"value":18446744073709551616}"#,
            r#"{"value":true}"#,
            r#"{"value":"1","maybe":"x"}"#,
        ] {
            let error = serde_json::from_str::<Sample>(bad).unwrap_err().to_string();
            assert!(error.contains("unsigned 64-bit integer"), "{bad}: {error}");
        }
    }
}
