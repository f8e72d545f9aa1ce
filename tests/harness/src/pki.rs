//! A throwaway certificate authority and the server certificates it signs, for tests that need
//! TLS: the simulated API server and a TLS-only nats-server.
//!
//! In a pod, kube2nats trusts servers through a CA file, not the system roots; a per-server CA
//! written to a file lets tests exercise exactly that path (and fail if the client ignores the
//! file or checks the wrong host name).

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA, one server certificate for `localhost` and `127.0.0.1` and one client certificate, both
/// signed by it.
pub struct ServerPki {
    /// The CA certificate, PEM: what a client must trust.
    pub ca_pem: String,
    /// The server certificate, PEM.
    pub cert_pem: String,
    /// The server certificate, DER.
    pub cert_der: Vec<u8>,
    /// The server's private key, PEM.
    pub key_pem: String,
    /// The server's private key, PKCS#8 DER.
    pub key_der: Vec<u8>,
    /// A client certificate (CN `kube2nats`, client-auth usage) signed by the same CA, PEM: what
    /// a client presents to a server that verifies client certificates against that CA.
    pub client_cert_pem: String,
    /// The client certificate's private key, PEM.
    pub client_key_pem: String,
}

impl ServerPki {
    /// Generates a fresh CA and a certificate named `common_name` for `localhost` and `127.0.0.1`.
    pub fn generate(common_name: &str) -> anyhow::Result<ServerPki> {
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
            .push(DnType::CommonName, common_name);
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .context("signing the server certificate")?;

        let client_key = KeyPair::generate().context("generating the client key")?;
        let mut client_params = CertificateParams::new(Vec::<String>::new())?;
        client_params
            .distinguished_name
            .push(DnType::CommonName, "kube2nats");
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client_params
            .signed_by(&client_key, &issuer)
            .context("signing the client certificate")?;
        Ok(ServerPki {
            ca_pem,
            cert_pem: server_cert.pem(),
            cert_der: server_cert.der().to_vec(),
            key_pem: server_key.serialize_pem(),
            key_der: server_key.serialize_der(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }
}
