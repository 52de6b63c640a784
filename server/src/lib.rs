//! The Troupe control-plane server: ingests agent reports, stores history, serves the
//! management API and dashboard (built by the control-plane issue; this crate is its seat).

/// What the server binary prints until the control plane lands.
#[must_use]
pub fn status_line() -> String {
    format!(
        "{} control plane (protocol v{}): not built yet; see the README for what runs today",
        troupe_web::PRODUCT,
        troupe_protocol::PROTOCOL_VERSION
    )
}
