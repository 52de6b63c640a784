//! Named schemas the operations' annotations refer to (time parameters, cursors, event kind
//! names, coordination names): their own module, so that the operations and the document
//! that lists them (`openapi.rs`) do not import each other.

use troupe_protocol::{EventCategory, EventKind};
use utoipa::openapi::KnownFormat;
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, SchemaFormat, Type};

use crate::time::EPOCH_MS_DIGITS;

/// A unit type whose schema is `$schema`, named `$name` in the document.
macro_rules! named_schema {
    ($(#[$doc:meta])* $type:ident = $name:literal, $schema:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $type;

        impl utoipa::PartialSchema for $type {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                $schema
            }
        }

        impl utoipa::ToSchema for $type {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed($name)
            }
        }
    };
}

named_schema!(
    /// A time parameter: RFC 3339 (`2026-11-30T03:00:00Z`) or epoch milliseconds.
    TimeParameter = "TimeParameter",
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                .description(Some("RFC 3339 (`2026-11-30T03:00:00Z`, `2026-11-30T04:00:00.5+01:00`)")),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(format!("^-?[0-9]{{1,{EPOCH_MS_DIGITS}}}$")))
                .description(Some("Unix epoch milliseconds")),
        )
        .description(Some("A time: RFC 3339, or Unix epoch milliseconds (`-`, then at most 18 digits)"))
        .into()
);

named_schema!(
    /// The paging cursor: the `next_cursor` of a previous page.
    PageCursor = "PageCursor",
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!(
            "^-?[0-9]{{1,{EPOCH_MS_DIGITS}}}\\.-?[0-9]{{1,{EPOCH_MS_DIGITS}}}$"
        )))
        .description(Some("The `next_cursor` of a previous page (opaque)"))
        .into()
);

named_schema!(
    /// An event kind's name.
    EventKindName = "EventKindName",
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(EventKind::ALL.iter().map(|k| k.as_str())))
        .description(Some("An event kind"))
        .into()
);

named_schema!(
    /// An event category's name.
    EventCategoryName = "EventCategoryName",
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(EventCategory::ALL.iter().map(|c| c.as_str())))
        .description(Some("An event category"))
        .into()
);

named_schema!(
    /// A name the coordination API takes: not empty, at most 512 bytes, no control characters.
    CoordinationName = "CoordinationName",
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(troupe_lease::lease::MAX_NAME_BYTES))
        .pattern(Some(PRINTABLE))
        .description(Some("Not empty, at most 512 bytes (UTF-8); no control characters (U+0000-U+001F, U+007F-U+009F)"))
        .into()
);

/// The pattern of text without control characters (what `char::is_control` refuses).
pub const PRINTABLE: &str = "^[^\\x00-\\x1f\\x7f-\\x9f]+$";

pub(crate) use named_schema;
