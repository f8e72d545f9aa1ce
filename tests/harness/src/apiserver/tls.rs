//! TLS for the simulator: a throwaway CA and a server certificate it signs.
//!
//! In a pod, kube2nats trusts the API server through the mounted `ca.crt`, not the system roots;
//! a per-server CA written to a file lets tests exercise exactly that path (and fail if the
//! client ignores the file or checks the wrong host name).

use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::pki::ServerPki;

/// Builds a TLS acceptor for `localhost` and `127.0.0.1`, and returns it with the CA's PEM.
pub fn acceptor() -> anyhow::Result<(tokio_rustls::TlsAcceptor, String)> {
    let pki = ServerPki::generate("kube-apiserver")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(pki.cert_der)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.key_der)),
        )
        .context("building the TLS server config")?;
    // Offer HTTP/2 first, as kube-apiserver does: clients that support it will multiplex
    // their watches over one connection, and tests should see what production sees.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        pki.ca_pem,
    ))
}
