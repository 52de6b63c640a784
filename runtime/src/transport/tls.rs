//! Optional TLS for the TCP transport: mutual TLS in which every node presents a certificate
//! issued by the cluster's CA and verifies its peer's, under the same authenticated handshake.
//!
//! # What it adds
//! Without TLS the shared-secret handshake proves who opened a connection, but the frames
//! that follow travel in clear and could be altered or injected by someone on the path. With
//! TLS the whole connection is encrypted and integrity-protected, the dialled node must hold a
//! certificate valid for the host it was dialled at (DNS name or IP SAN), and the dialling
//! node must hold one issued by the same CA. The handshake still runs inside TLS and still
//! decides the peer's [`UniqueAddress`](crate::UniqueAddress).
//!
//! Only rustls with the `ring` provider is used, TLS 1.2 and 1.3 with rustls' safe defaults.

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::address::Address;

/// Certificates and keys for mutual TLS between nodes. Cheap to clone.
#[derive(Clone)]
pub struct TlsOptions {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsOptions(mutual, keys redacted)")
    }
}

/// Why a [`TlsOptions`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsOptionsError {
    /// The CA certificate is not usable as a trust anchor.
    #[error("the cluster CA certificate is not a usable trust anchor")]
    Ca(#[source] rustls::Error),
    /// The client-certificate verifier could not be built from the CA.
    #[error("cannot verify client certificates with the cluster CA")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    /// The node's certificate chain or key is not usable.
    #[error("the node certificate chain or private key is not usable")]
    Identity(#[source] rustls::Error),
}

impl TlsOptions {
    /// Mutual TLS: trust certificates issued by `cluster_ca`, and present `chain` (the node's
    /// certificate first) with its private `key`, both as server and as client.
    ///
    /// # Errors
    /// A [`TlsOptionsError`] naming the part that is not usable.
    pub fn mutual(
        cluster_ca: CertificateDer<'static>,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Self, TlsOptionsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(cluster_ca).map_err(TlsOptionsError::Ca)?;
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(TlsOptionsError::Verifier)?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsOptionsError::Identity)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(TlsOptionsError::Identity)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsOptionsError::Identity)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(TlsOptionsError::Identity)?;
        Ok(Self {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    pub(super) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.server.clone())
    }

    pub(super) fn connector(&self) -> TlsConnector {
        TlsConnector::from(self.client.clone())
    }
}

/// The name the dialled node's certificate must carry: its host, as an IP or a DNS name.
pub(super) fn server_name(peer: &Address) -> Option<ServerName<'static>> {
    ServerName::try_from(peer.host.trim_start_matches('[').trim_end_matches(']'))
        .ok()
        .map(|name| name.to_owned())
}
