//! Templates, page view-models and static assets of the Troupe dashboard (filled by the
//! dashboard issue; today it only names the product for the server's landing text).

/// The product name shown in page titles.
pub const PRODUCT: &str = "Troupe";
