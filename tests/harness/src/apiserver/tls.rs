//! TLS for the simulator: a throwaway CA and a server certificate it signs.
//!
//! In a pod, kube2nats trusts the API server through the mounted `ca.crt`, not the system roots;
//! a per-server CA written to a file lets tests exercise exactly that path (and fail if the
//! client ignores the file or checks the wrong host name). With client verification on, the
//! server demands a client certificate signed by the same CA, as kube-apiserver does with
//! `--client-ca-file` for kubeconfigs that authenticate with `client-certificate`/`client-key`.

use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::pki::ServerPki;

/// Builds a TLS acceptor for `localhost` and `127.0.0.1` and returns it with its PKI (the CA a
/// client trusts, and a client certificate it may present). With `verify_clients`, a handshake
/// without a client certificate signed by the CA fails.
pub fn acceptor(verify_clients: bool) -> anyhow::Result<(tokio_rustls::TlsAcceptor, ServerPki)> {
    let pki = ServerPki::generate("kube-apiserver")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = if verify_clients {
        let mut roots = rustls::RootCertStore::empty();
        let ca_der = rustls::pki_types::pem::PemObject::from_pem_slice(pki.ca_pem.as_bytes())
            .context("reading back the CA certificate")?;
        roots.add(ca_der).context("trusting the CA for clients")?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .context("building the client certificate verifier")?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(
            vec![CertificateDer::from(pki.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.key_der.clone())),
        )
        .context("building the TLS server config")?;
    // Offer HTTP/2 first, as kube-apiserver does: clients that support it will multiplex
    // their watches over one connection, and tests should see what production sees.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), pki))
}
