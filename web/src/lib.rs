//! Templates, page view-models and static assets of the Troupe dashboard.
//!
//! The control plane (`troupe-server`) reads its store, fills the view-models of
//! [`pages`] and renders them; this crate knows nothing about databases or HTTP.
//!
//! # Escaping
//! Every page is an askama `.html` template, so every expression is HTML-escaped (`<`, `>`,
//! `&`, `"`, `'`), inside text, quoted attributes and inline SVG text alike; no template uses
//! `|safe`. Links are built by [`format::href`], which percent-encodes every query value, so a
//! user-controlled string can never choose a URL scheme. The page script reads only `data-`
//! attributes and writes only `textContent`.

pub mod assets;
pub mod chart;
pub mod format;
pub mod map;
pub mod pages;

/// The product name shown in page titles.
pub const PRODUCT: &str = "Troupe";
