//! TLS for the simulator: a throwaway CA and a server certificate it signs.
//!
//! In a pod, kube2nats trusts the API server through the mounted `ca.crt`, not the system roots;
//! a per-server CA written to a file lets tests exercise exactly that path (and fail if the
//! client ignores the file or checks the wrong host name).

use std::sync::Arc;

use anyhow::Context as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// Builds a TLS acceptor for `localhost` and `127.0.0.1`, and returns it with the CA's PEM.
pub fn acceptor() -> anyhow::Result<(tokio_rustls::TlsAcceptor, String)> {
    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kube2nats-harness-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .context("self-signing the CA")?;
    let ca_pem = ca_cert.pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().context("generating the server key")?;
    let mut server_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    server_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .context("signing the server certificate")?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )
        .context("building the TLS server config")?;
    // Offer HTTP/2 first, as kube-apiserver does: clients that support it will multiplex
    // their watches over one connection, and tests should see what production sees.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca_pem))
}
