//! The suite's HTTP client of the nodes' REST port (for what the payment provider posts): https
//! trusting the cluster's CA when the nodes serve TLS, plain HTTP otherwise.

/// A client that trusts `ca` (PEM; the cluster's CA) and no other authority, or a plain one
/// without it.
///
/// # Errors
///
/// When `ca` is not a PEM certificate, or the client cannot be made.
pub fn client(ca: Option<&str>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder().tls_built_in_root_certs(false);
    if let Some(ca) = ca {
        // reqwest takes a PEM without a certificate in it as no certificate at all.
        if !ca.contains("-----BEGIN CERTIFICATE-----") {
            return Err("the cluster's CA: no PEM certificate".into());
        }
        let certificate = reqwest::Certificate::from_pem(ca.as_bytes())
            .map_err(|error| format!("the cluster's CA: {error}"))?;
        builder = builder.add_root_certificate(certificate);
    }
    builder.build().map_err(|error| format!("an HTTP client: {error}"))
}

/// The base URL of a node given as `host:port` (then `https` when `tls`) or as a URL already
/// (`https://host:port/`), without a trailing slash.
pub fn base_url(node: &str, tls: bool) -> String {
    let node = node.trim().trim_end_matches('/');
    if node.contains("://") {
        node.to_owned()
    } else if tls {
        format!("https://{node}")
    } else {
        format!("http://{node}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_address_gets_the_cluster_scheme_and_a_url_keeps_its_own() {
        assert_eq!(base_url("127.0.0.1:7101", true), "https://127.0.0.1:7101");
        assert_eq!(base_url("127.0.0.1:7101", false), "http://127.0.0.1:7101");
        assert_eq!(base_url(" https://n1:7101/ ", false), "https://n1:7101");
        assert_eq!(base_url("http://n1:7101", true), "http://n1:7101");
    }

    #[test]
    fn a_ca_that_is_not_pem_is_refused() {
        assert!(client(Some("not a certificate")).is_err());
        assert!(client(None).is_ok());
    }
}
