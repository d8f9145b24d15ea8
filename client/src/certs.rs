//! The cluster's certificates: a CA of its own, and a certificate per node signed by it
//! (`bookctl certs init|node`; the test kit makes its clusters' with the same code).
//!
//! Owns the contract the nodes check: a node certificate names its node as the DNS name
//! `node-<id>.peers.booking` (the `raft` crate's `peer_name`, which reads it back), carries the
//! client and server uses both (a node presents it when it serves its peer port and when it
//! dials a peer), and may name the host names and IP addresses clients reach the node at.
//! Keys are ECDSA P-256; the CA's key signs node certificates and nothing else.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The DNS suffix of node names (`raft::tls::PEER_DOMAIN`).
pub const PEER_DOMAIN: &str = "peers.booking";

/// How long a CA certificate is valid by default.
pub const CA_DAYS_DEFAULT: u32 = 3_650;
/// How long a node certificate is valid by default.
pub const NODE_DAYS_DEFAULT: u32 = 825;

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("certificates: {0}")]
pub struct CertError(String);

impl From<rcgen::Error> for CertError {
    fn from(error: rcgen::Error) -> CertError {
        CertError(error.to_string())
    }
}

/// The name node `id`'s certificate carries.
pub fn node_name(id: u64) -> String {
    format!("node-{id}.{PEER_DOMAIN}")
}

/// A certificate and its private key, PEM. `Debug` shows the certificate only.
#[derive(Clone)]
pub struct Issued {
    /// The certificate.
    pub certificate_pem: String,
    /// Its private key (PKCS#8): keep it in a file only its owner reads.
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("certificate_pem", &self.certificate_pem).finish()
    }
}

/// A new CA named `name`, valid for `days` from an hour ago.
///
/// # Errors
///
/// When the key or the certificate cannot be made.
pub fn new_authority(name: &str, days: u32) -> Result<Issued, CertError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, days)?;
    let certificate = params.self_signed(&key)?;
    Ok(Issued { certificate_pem: certificate.pem(), key_pem: key.serialize_pem() })
}

/// A certificate for node `id` (≥ 1) signed by `authority`, naming the node and `hosts` (host
/// names or IP addresses clients reach it at), valid for `days` from an hour ago.
///
/// # Errors
///
/// When `id` is 0, `days` is 0, a host is not an IA5 string, the CA does not parse, or signing
/// fails.
pub fn issue_node(
    authority: &Issued,
    id: u64,
    hosts: &[String],
    days: u32,
) -> Result<Issued, CertError> {
    if id == 0 {
        return Err(CertError("node ids start at 1".into()));
    }
    let ca_key = KeyPair::from_pem(&authority.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&authority.certificate_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut names = vec![node_name(id)];
    names.extend(hosts.iter().cloned());
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name.push(DnType::CommonName, node_name(id));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages =
        vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days)?;
    let certificate = params.signed_by(&key, &issuer)?;
    Ok(Issued { certificate_pem: certificate.pem(), key_pem: key.serialize_pem() })
}

/// Valid from an hour ago (clocks differ a little) for `days`.
fn validity(params: &mut CertificateParams, days: u32) -> Result<(), CertError> {
    if days == 0 {
        return Err(CertError("a certificate is valid for at least a day".into()));
    }
    let now = SystemTime::now();
    let from = now - Duration::from_secs(3_600);
    let until = now + Duration::from_secs(u64::from(days) * 86_400);
    params.not_before = from.into();
    params.not_after = until.into();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_certificate_names_its_node_and_hosts() {
        let ca = new_authority("test cluster", 1).expect("a CA");
        let node = issue_node(&ca, 3, &["127.0.0.1".into(), "localhost".into()], 1)
            .expect("a node certificate");
        assert!(node.certificate_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(node.key_pem.contains("PRIVATE KEY"));
        assert!(!format!("{node:?}").contains("PRIVATE KEY"), "Debug hides the key");
        assert!(issue_node(&ca, 0, &[], 1).is_err());
        assert!(issue_node(&ca, 1, &[], 0).is_err());
    }
}
