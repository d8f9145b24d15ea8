//! Who a peer is and where it listens: the mutual TLS of the peer network, and the addresses
//! memberships carry.
//!
//! Owns the peer port's identity rule: a node's certificate, signed by the cluster's CA, names
//! the node as the DNS name [`peer_name`] (`node-<id>.peers.booking`). A node dialing peer `n`
//! accepts only a server whose certificate names `n`; a node serving the peer port accepts only
//! callers with a certificate of the CA, and reads the caller's id back from it
//! ([`caller_node`]) so that the Raft service can refuse a message that claims to come from
//! another node (a vote for node 3 sent with node 2's certificate). Never decides anything
//! about Raft.
//!
//! A membership names each node by one string: its client address, then, when the cluster has
//! a peer port, ` peer=` and its peer address (`10.0.0.1:7001 peer=10.0.0.1:7101`). Clients are
//! sent to the first part (leader hints), peers dial the second ([`client_address`],
//! [`peer_address`]). A membership without the second part (a cluster without a peer port, or a
//! log written before it existed) names one address for both.

use std::fmt;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use tonic::{Request, Status};

use crate::types::NodeId;

/// The DNS suffix of the names in node certificates.
pub const PEER_DOMAIN: &str = "peers.booking";

/// What separates a membership address's client part from its peer part.
const PEER_MARK: &str = " peer=";

/// The name node `id`'s certificate carries, and the name its peers expect when they dial it.
pub fn peer_name(id: NodeId) -> String {
    format!("node-{id}.{PEER_DOMAIN}")
}

/// The node a certificate (DER) names as [`peer_name`], if it names exactly one.
pub fn node_of_certificate(der: &[u8]) -> Option<NodeId> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    let names = certificate.subject_alternative_name().ok()??;
    let mut nodes = names.value.general_names.iter().filter_map(|name| match name {
        GeneralName::DNSName(name) => node_of_name(name),
        _ => None,
    });
    let node = nodes.next()?;
    // A certificate naming two nodes could speak for either: it names none.
    nodes.all(|other| other == node).then_some(node)
}

/// The node `name` names (`node-<id>.peers.booking`, id ≥ 1).
fn node_of_name(name: &str) -> Option<NodeId> {
    let id = name.strip_prefix("node-")?.strip_suffix(PEER_DOMAIN)?.strip_suffix('.')?;
    if id.starts_with('0') || !id.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

/// The node that made `request` on the peer port, by its client certificate.
///
/// # Errors
///
/// `UNAUTHENTICATED` without a certificate (the peer port is not TLS, or the caller sent none);
/// `PERMISSION_DENIED` when the certificate names no node.
pub fn caller_node<T>(request: &Request<T>) -> Result<NodeId, Status> {
    let certificates = request
        .peer_certs()
        .ok_or_else(|| Status::unauthenticated("the peer port takes callers with a certificate"))?;
    let first = certificates
        .first()
        .ok_or_else(|| Status::unauthenticated("the peer port takes callers with a certificate"))?;
    node_of_certificate(first).ok_or_else(|| {
        Status::permission_denied(format!("the certificate names no node (`{}`)", peer_name(0)))
    })
}

/// The membership address of a node reached by clients at `client` and by peers at `peer`.
pub fn membership_address(client: &str, peer: Option<&str>) -> String {
    match peer {
        Some(peer) => format!("{client}{PEER_MARK}{peer}"),
        None => client.to_owned(),
    }
}

/// Where clients reach the node a membership names with `address`.
pub fn client_address(address: &str) -> &str {
    address.split_once(PEER_MARK).map_or(address, |(client, _)| client)
}

/// Where peers reach the node a membership names with `address`.
pub fn peer_address(address: &str) -> &str {
    address.split_once(PEER_MARK).map_or(address, |(_, peer)| peer)
}

/// Whether `address` names a peer address of its own.
pub fn names_peer_address(address: &str) -> bool {
    address.contains(PEER_MARK)
}

/// This node's side of the peer network's mutual TLS: the cluster's CA and this node's
/// certificate and key (PEM). `Debug` shows neither the key nor the certificates.
#[derive(Clone)]
pub struct PeerTls {
    ca: Vec<u8>,
    certificate: Vec<u8>,
    key: Vec<u8>,
    node: NodeId,
}

impl fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerTls").field("node", &self.node).finish_non_exhaustive()
    }
}

impl PeerTls {
    /// Node `node`'s TLS from the CA certificate, its certificate and its key (PEM).
    ///
    /// # Errors
    ///
    /// When a PEM does not parse, or the certificate does not name `node` as [`peer_name`].
    pub fn from_pem(
        node: NodeId,
        ca: Vec<u8>,
        certificate: Vec<u8>,
        key: Vec<u8>,
    ) -> Result<PeerTls, String> {
        use x509_parser::pem::parse_x509_pem;
        for (what, pem) in [("the CA certificate", &ca), ("the node certificate", &certificate)] {
            parse_x509_pem(pem)
                .map_err(|error| format!("{what} is not a PEM certificate: {error}"))?;
        }
        let (_, pem) = parse_x509_pem(&certificate)
            .map_err(|error| format!("the node certificate: {error}"))?;
        match node_of_certificate(&pem.contents) {
            Some(named) if named == node => {}
            Some(named) => {
                return Err(format!(
                    "the node certificate is node {named}'s (`{}`), not node {node}'s",
                    peer_name(named)
                ));
            }
            None => {
                return Err(format!(
                    "the node certificate does not name node {node} (`{}`)",
                    peer_name(node)
                ));
            }
        }
        if !String::from_utf8_lossy(&key).contains("PRIVATE KEY-----") {
            return Err("the node key is not a PEM private key".into());
        }
        Ok(PeerTls { ca, certificate, key, node })
    }

    /// The node this TLS speaks for.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The client side, dialing node `target`: present this node's certificate, accept only a
    /// server certificate of the cluster's CA that names `target`.
    pub fn client(&self, target: NodeId) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.certificate, &self.key))
            .domain_name(peer_name(target))
    }

    /// The server side of the peer port: present this node's certificate, and require a client
    /// certificate of the cluster's CA from every caller.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.certificate, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
            .client_auth_optional(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_back_exactly() {
        assert_eq!(node_of_name(&peer_name(7)), Some(7));
        assert_eq!(node_of_name(&peer_name(12345)), Some(12345));
        for name in [
            "node-0.peers.booking",
            "node-07.peers.booking",
            "node-7.peers.booking.evil",
            "node-7peers.booking",
            "xnode-7.peers.booking",
            "node-.peers.booking",
            "node-+7.peers.booking",
            "node-7.other.booking",
            "node-99999999999999999999.peers.booking",
        ] {
            assert_eq!(node_of_name(name), None, "{name}");
        }
    }

    #[test]
    fn a_node_certificate_names_its_node_and_no_other() {
        let ca = client::certs::new_authority("test", 1).unwrap();
        let node = client::certs::issue_node(&ca, 7, &["127.0.0.1".into()], 1).unwrap();
        let der = |pem: &str| x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1.contents;
        assert_eq!(node_of_certificate(&der(&node.certificate_pem)), Some(7));
        assert_eq!(node_of_certificate(&der(&ca.certificate_pem)), None, "the CA names no node");
        assert_eq!(node_of_certificate(b"not a certificate"), None);
        let tls = |id, certificate: &str, key: &str| {
            PeerTls::from_pem(id, ca.certificate_pem.clone().into(), certificate.into(), key.into())
        };
        let mine = tls(7, &node.certificate_pem, &node.key_pem).unwrap();
        assert_eq!(mine.node(), 7);
        assert!(!format!("{mine:?}").contains("PRIVATE"), "Debug shows no key");
        let error = tls(8, &node.certificate_pem, &node.key_pem).unwrap_err();
        assert!(error.contains("node 7's"), "{error}");
        let error = tls(7, &ca.certificate_pem, &ca.key_pem).unwrap_err();
        assert!(error.contains("does not name node 7"), "{error}");
        let error = tls(7, &node.certificate_pem, "junk").unwrap_err();
        assert!(error.contains("private key"), "{error}");
        let error = PeerTls::from_pem(7, b"junk".to_vec(), node.certificate_pem.into(), vec![]);
        assert!(error.unwrap_err().contains("CA certificate"));
    }

    #[test]
    fn membership_addresses_split_into_client_and_peer() {
        let both = membership_address("10.0.0.1:7001", Some("10.0.0.1:7101"));
        assert_eq!(both, "10.0.0.1:7001 peer=10.0.0.1:7101");
        assert_eq!(client_address(&both), "10.0.0.1:7001");
        assert_eq!(peer_address(&both), "10.0.0.1:7101");
        assert!(names_peer_address(&both));
        let one = membership_address("10.0.0.1:7001", None);
        assert_eq!((client_address(&one), peer_address(&one)), (one.as_str(), one.as_str()));
        assert!(!names_peer_address(&one));
    }
}
