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
        integral(value)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| E::invalid_value(de::Unexpected::Float(value), &self))
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

/// The integer a JSON number with a zero fraction (`7.0`, as some JSON writers put integers)
/// stands for: only within ±2^53, where every integer has its own float (a larger one may be
/// the rounding of another number, such as an out-of-range `-9223372036854775809`).
fn integral(value: f64) -> Option<i128> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    (value.is_finite() && value.fract() == 0.0 && value.abs() <= EXACT).then_some(value as i128)
}

macro_rules! integral_module {
    ($(#[$doc:meta])* $module:ident, $int:ty) => {
        $(#[$doc])*
        pub mod $module {
            use std::fmt;

            use serde::Deserializer;
            use serde::de::{self, Visitor};

            struct IntVisitor;

            impl Visitor<'_> for IntVisitor {
                type Value = $int;

                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    write!(f, "an integer between {} and {}", <$int>::MIN, <$int>::MAX)
                }

                fn visit_u64<E: de::Error>(self, value: u64) -> Result<$int, E> {
                    <$int>::try_from(value)
                        .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(value), &self))
                }

                fn visit_i64<E: de::Error>(self, value: i64) -> Result<$int, E> {
                    <$int>::try_from(value)
                        .map_err(|_| E::invalid_value(de::Unexpected::Signed(value), &self))
                }

                fn visit_f64<E: de::Error>(self, value: f64) -> Result<$int, E> {
                    super::integral(value)
                        .and_then(|v| <$int>::try_from(v).ok())
                        .ok_or_else(|| E::invalid_value(de::Unexpected::Float(value), &self))
                }
            }

            /// Reads an integer, also written with a zero fraction (`7.0`).
            ///
            /// # Errors
            /// A fraction, a value out of range, or anything but a number.
            pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<$int, D::Error> {
                deserializer.deserialize_any(IntVisitor)
            }
        }
    };
}

integral_module!(
    /// An `i64` JSON number, also written with a zero fraction (`1700000000000.0`): JSON Schema
    /// counts those as integers.
    i64_number,
    i64
);

integral_module!(
    /// A `u32` JSON number, also written with a zero fraction (`3.0`).
    u32_number,
    u32
);

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

/// Regular expression of the decimal texts of `min..=max`, leading zeros allowed as the
/// parser allows them: `^0*(?:…)$`.
#[must_use]
pub fn decimal_pattern(min: u64, max: u64) -> String {
    let mut alternatives = Vec::new();
    if min == 0 {
        alternatives.push("0".to_owned());
    }
    let low = min.max(1);
    if low <= max {
        let (low, high) = (low.to_string(), max.to_string());
        if low.len() == high.len() {
            alternatives.push(same_length(low.as_bytes(), high.as_bytes()));
        } else {
            alternatives.push(same_length(
                low.as_bytes(),
                "9".repeat(low.len()).as_bytes(),
            ));
            for len in low.len() + 1..high.len() {
                alternatives.push(format!("[1-9]{}", any_digits(len - 1)));
            }
            let first = format!("1{}", "0".repeat(high.len() - 1));
            alternatives.push(same_length(first.as_bytes(), high.as_bytes()));
        }
    }
    format!("^0*(?:{})$", alternatives.join("|"))
}

fn any_digits(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => "[0-9]".to_owned(),
        n => format!("[0-9]{{{n}}}"),
    }
}

/// The numbers `low..=high` written with the same number of digits.
fn same_length(low: &[u8], high: &[u8]) -> String {
    if low.iter().all(|&d| d == b'0') && high.iter().all(|&d| d == b'9') {
        return any_digits(low.len());
    }
    let n = low.len() - 1;
    let (a, b) = (low[0], high[0]);
    if n == 0 {
        return format!("[{}-{}]", a as char, b as char);
    }
    if a == b {
        return format!("{}{}", a as char, same_length(&low[1..], &high[1..]));
    }
    let nines = vec![b'9'; n];
    let zeros = vec![b'0'; n];
    let mut parts = vec![format!("{}{}", a as char, same_length(&low[1..], &nines))];
    if a + 1 < b {
        parts.push(format!(
            "[{}-{}]{}",
            (a + 1) as char,
            (b - 1) as char,
            any_digits(n)
        ));
    }
    parts.push(format!("{}{}", b as char, same_length(&zeros, &high[1..])));
    format!("(?:{})", parts.join("|"))
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
        let integral: Sample = serde_json::from_str(r#"{"value":7.0,"maybe":1e3}"#).unwrap();
        assert_eq!((integral.value, integral.maybe), (7, Some(1000)));
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
    fn the_decimal_pattern_matches_exactly_the_texts_of_the_numbers_in_range() {
        let cases = [
            (0, u64::MAX),
            (1, i64::MAX as u64),
            (5, 86_400_000),
            (0, 60_000),
            (1, 120),
            (0, 5),
            (37, 42),
            (300, 7_000),
        ];
        for (min, max) in cases {
            let pattern = regex::Regex::new(&super::decimal_pattern(min, max)).unwrap();
            let mut probes: Vec<u64> = (0..200).collect();
            for edge in [min, max] {
                probes.extend(edge.saturating_sub(120)..=edge.saturating_add(120));
            }
            probes.extend((0..64).map(|shift| 1u64 << shift));
            probes.extend((1..20).map(|p| 10u64.pow(p) - 1));
            for n in probes {
                for text in [n.to_string(), format!("00{n}")] {
                    assert_eq!(
                        pattern.is_match(&text),
                        (min..=max).contains(&n),
                        "{text} against {min}..={max}: {pattern}"
                    );
                }
            }
            for bad in ["", "-1", "+1", "1.0", " 1", "1 ", "x"] {
                assert!(!pattern.is_match(bad), "{bad:?} against {pattern}");
            }
        }
        assert!(
            !regex::Regex::new(&super::decimal_pattern(0, u64::MAX))
                .unwrap()
                .is_match("18446744073709551616")
        );
    }

    #[test]
    fn anything_but_a_decimal_u64_is_refused_naming_what_is_allowed() {
        for bad in [
            r#"{"value":-1}"#,
            r#"{"value":1.5}"#,
            r#"{"value":18446744073709551616.0}"#,
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
