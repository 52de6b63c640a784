//! Reading the kube client's errors: the API server's `Status` code, and a one-line description.

/// The HTTP code of an API-server `Status` answer (`404`, `409`, …), if the error is one.
#[must_use]
pub fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// One line saying what went wrong, for error messages and logs.
#[must_use]
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!(
            "{} {} ({})",
            status.code,
            if status.reason.is_empty() {
                "Failure"
            } else {
                &status.reason
            },
            status.message
        ),
        kube::Error::SerdeError(e) => {
            format!("the API server's answer is not a valid Lease object: {e}")
        }
        other => other.to_string(),
    }
}
