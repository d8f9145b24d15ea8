//! Node addresses: the one spelling (`host:port`) the SDK uses as a key for channels, leader
//! caches and hints.
//!
//! Owns parsing and normalizing. Never resolves names or opens connections.

use crate::error::{Error, Result};

/// Normalizes a node address to `host:port`.
///
/// Accepts `host:port`, `[v6]:port` and the same with an `http://` or `https://` prefix or a
/// trailing `/`; any other scheme is refused. Whether the client speaks TLS is the client's
/// setting ([`crate::Client::with_ca_certificate`]), not the address's.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when the text is not such an address.
pub(crate) fn normalize(text: &str) -> Result<String> {
    let invalid = |why: &str| Error::InvalidArgument(format!("node address {text:?}: {why}"));
    let trimmed = text.trim();
    let bare = ["http://", "https://"]
        .iter()
        .find_map(|scheme| trimmed.strip_prefix(scheme))
        .unwrap_or(trimmed);
    if bare.contains("://") {
        return Err(invalid("nodes serve http or https, use host:port"));
    }
    let bare = bare.strip_suffix('/').unwrap_or(bare);
    let (host, port) = bare.rsplit_once(':').ok_or_else(|| invalid("expected host:port"))?;
    if host.is_empty() || host.contains(['/', ' ', '@', '?', '#']) {
        return Err(invalid("bad host"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(invalid("an IPv6 host must be in brackets"));
    }
    match port.parse::<u16>() {
        Ok(port) if port != 0 => Ok(format!("{host}:{port}")),
        _ => Err(invalid("bad port")),
    }
}

/// What separates a membership address's client part from its peer part (the nodes'
/// `raft::tls::membership_address`).
const PEER_MARK: &str = " peer=";

/// Normalizes the address a membership carries for a node: its client address, then, on a
/// cluster with peer ports, ` peer=` and its peer address (`10.0.0.4:7101 peer=10.0.0.4:7201`);
/// each part as [`normalize`] does.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when a part is not an address.
pub(crate) fn normalize_member(text: &str) -> Result<String> {
    match text.trim().split_once(PEER_MARK) {
        Some((client, peer)) => {
            Ok(format!("{}{PEER_MARK}{}", normalize(client)?, normalize(peer)?))
        }
        None => normalize(text),
    }
}

/// The URI tonic connects to for a normalized address, over TLS or not.
pub(crate) fn uri(address: &str, tls: bool) -> String {
    if tls { format!("https://{address}") } else { format!("http://{address}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_spellings_normalize_to_host_port() {
        for (text, expected) in [
            ("127.0.0.1:7101", "127.0.0.1:7101"),
            (" http://127.0.0.1:7101/ ", "127.0.0.1:7101"),
            ("https://127.0.0.1:7101", "127.0.0.1:7101"),
            ("node-2.local:80", "node-2.local:80"),
            ("[::1]:7101", "[::1]:7101"),
        ] {
            assert_eq!(normalize(text).unwrap(), expected);
        }
    }

    #[test]
    fn a_member_address_may_name_its_peer_port() {
        let member = normalize_member(" http://10.0.0.4:7101/ peer=10.0.0.4:7201").unwrap();
        assert_eq!(member, "10.0.0.4:7101 peer=10.0.0.4:7201");
        assert_eq!(normalize_member("10.0.0.4:7101").unwrap(), "10.0.0.4:7101");
        assert!(normalize_member("10.0.0.4:7101 peer=").is_err());
        assert!(normalize_member("10.0.0.4:7101 peer=h:0").is_err());
    }

    #[test]
    fn malformed_addresses_are_refused() {
        for text in [
            "",
            "127.0.0.1",
            ":7101",
            "host:0",
            "host:65536",
            "host:port",
            "ftp://host:7101",
            "::1:7101",
            "a b:1",
        ] {
            assert!(matches!(normalize(text), Err(Error::InvalidArgument(_))), "{text:?}");
        }
    }
}
