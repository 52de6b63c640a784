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
