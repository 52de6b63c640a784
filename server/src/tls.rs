//! HTTPS on the server's listener: the certificate chain and key from PEM files (rustls).
//!
//! With `--tls-cert` and `--tls-key` every route (API, ingest, stream, dashboard, metrics,
//! probes) is served over TLS only: a plain-HTTP request on that port gets no HTTP answer.
//! Certificates are read once at start; rotate by restarting (a Kubernetes Secret update rolls
//! the pods with the chart's checksum annotation).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {reason}")]
    File {
        /// `--tls-cert` or `--tls-key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The certificate and key do not make a valid configuration (a key that does not match).
    #[error("--tls-cert and --tls-key do not fit together: {0}")]
    Config(#[from] rustls::Error),
}

/// The rustls configuration of the listener, from a PEM certificate chain and a PEM private
/// key (PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let file_error = |what, path: &Path, reason: String| TlsError::File {
        what,
        path: path.to_owned(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error("--tls-cert", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error("--tls-cert", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_error(
            "--tls-cert",
            cert,
            "no PEM certificate in the file".to_owned(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| file_error("--tls-key", key, format!("no usable PEM private key ({e})")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(config)
}
