//! The mesh of fault proxies between a set of nodes: one [`LinkProxy`] per directed pair, so
//! that a nemesis or a test can cut one link, isolate a node, or partition the cluster the way
//! a network would, without the daemons knowing.
//!
//! A node dials peer `j` at the address its `--peers` names, so node `i`'s `--peers j=` points
//! at the proxy of the link `i → j`. The requests of a call `i` makes and the answers it gets
//! share that link's connection: blocking `i → j` cuts both. The proxy of `i → j` dials from
//! `i`'s own address. Owns only the links: never starts, stops or signals a process, and never
//! judges the cluster.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;

use crate::NodeId;
use crate::proxy::LinkProxy;

/// Every directed link between a set of nodes: the proxy of `from → to` forwards to `to`'s
/// address, dialing from `from`'s.
pub struct Links {
    proxies: BTreeMap<(NodeId, NodeId), LinkProxy>,
}

impl Links {
    /// Starts one open proxy per ordered pair of distinct nodes of `addresses` (node id → the
    /// address it listens on); the proxy of `from → to` listens on `listen(from, to)` and dials
    /// from `from`'s IP address.
    ///
    /// # Errors
    ///
    /// When a proxy cannot bind its address.
    pub async fn start(
        addresses: &BTreeMap<NodeId, SocketAddr>,
        listen: impl Fn(NodeId, NodeId) -> SocketAddr,
    ) -> io::Result<Links> {
        let mut proxies = BTreeMap::new();
        for (&from, source) in addresses {
            for (&to, &upstream) in addresses {
                if from == to {
                    continue;
                }
                let at = listen(from, to);
                let proxy =
                    LinkProxy::start(at, upstream, Some(source.ip())).await.map_err(|error| {
                        io::Error::new(
                            error.kind(),
                            format!("proxy {from} -> {to} on {at}: {error}"),
                        )
                    })?;
                proxies.insert((from, to), proxy);
            }
        }
        Ok(Links { proxies })
    }

    /// The address node `from` dials to reach node `to`.
    pub fn address(&self, from: NodeId, to: NodeId) -> Option<SocketAddr> {
        self.proxies.get(&(from, to)).map(LinkProxy::address)
    }

    /// Cuts the one directed link `from → to` (the calls `from` makes to `to`, and their
    /// answers). Returns whether the link exists.
    pub fn block(&self, from: NodeId, to: NodeId) -> bool {
        self.proxies.get(&(from, to)).map(LinkProxy::block).is_some()
    }

    /// Opens the one directed link `from → to` again. Returns whether the link exists.
    pub fn heal(&self, from: NodeId, to: NodeId) -> bool {
        self.proxies.get(&(from, to)).map(LinkProxy::heal).is_some()
    }

    /// Cuts every link to and from `node`.
    pub fn isolate(&self, node: NodeId) {
        for (&(from, to), proxy) in &self.proxies {
            if from == node || to == node {
                proxy.block();
            }
        }
    }

    /// Cuts every link whose two ends share none of `sets`; links within a set are left as
    /// they are (this only adds cuts). Sets may overlap: `[[1, 2, 3], [3, 4, 5]]` is a bridge
    /// through node 3, `[[1, 2], [2, 3], [3, 4], [4, 5], [5, 1]]` a ring; a node in no set is
    /// cut off from every other.
    pub fn partition(&self, sets: &[Vec<NodeId>]) {
        for (&(from, to), proxy) in &self.proxies {
            let connected = sets.iter().any(|set| set.contains(&from) && set.contains(&to));
            if !connected {
                proxy.block();
            }
        }
    }

    /// Opens every link.
    pub fn heal_all(&self) {
        for proxy in self.proxies.values() {
            proxy.heal();
        }
    }

    /// The links that are cut, as `(from, to)`, in order.
    pub fn blocked(&self) -> Vec<(NodeId, NodeId)> {
        self.proxies.iter().filter(|(_, proxy)| proxy.is_blocked()).map(|(&link, _)| link).collect()
    }
}

#[cfg(test)]
mod tests {
    //! The mesh against echo servers: every directed link, and its cuts.

    use std::collections::BTreeMap;
    use std::io;

    use tokio::net::TcpStream;

    use super::Links;
    use crate::proxy::tests::{ECHO_MAX, SILENCE, any_port, echo_server, round_trip};

    #[tokio::test]
    async fn mesh_isolates_partitions_and_cuts_single_links() -> io::Result<()> {
        let mut servers = Vec::new();
        let mut addresses = BTreeMap::new();
        for id in 1..=3 {
            let (address, server) = echo_server().await?;
            addresses.insert(id, address);
            servers.push(server);
        }
        let links = Links::start(&addresses, |_, _| any_port()).await?;
        assert!(links.address(1, 1).is_none(), "a node has no link to itself");
        for (&(from, to), proxy) in &links.proxies {
            assert_eq!(proxy.upstream(), addresses[&to], "link {from} -> {to}");
        }

        links.isolate(2);
        assert_eq!(links.blocked(), vec![(1, 2), (2, 1), (2, 3), (3, 2)]);
        let mut kept = TcpStream::connect(links.address(1, 3).expect("link 1 -> 3")).await?;
        assert_eq!(round_trip(&mut kept, b"13", ECHO_MAX).await?.as_deref(), Some(&b"13"[..]));
        let mut cut = TcpStream::connect(links.address(3, 2).expect("link 3 -> 2")).await?;
        assert_eq!(round_trip(&mut cut, b"32", SILENCE).await?, None, "isolated node answered");

        links.heal_all();
        assert!(links.blocked().is_empty());
        links.partition(&[vec![1], vec![2, 3]]);
        assert_eq!(links.blocked(), vec![(1, 2), (1, 3), (2, 1), (3, 1)]);
        let mut within = TcpStream::connect(links.address(2, 3).expect("link 2 -> 3")).await?;
        assert_eq!(round_trip(&mut within, b"23", ECHO_MAX).await?.as_deref(), Some(&b"23"[..]));

        // A bridge: node 2 sees both sides, 1 and 3 do not see each other.
        links.heal_all();
        links.partition(&[vec![1, 2], vec![2, 3]]);
        assert_eq!(links.blocked(), vec![(1, 3), (3, 1)]);

        // One direction only.
        links.heal_all();
        assert!(links.block(1, 2));
        assert!(!links.block(1, 1), "a node has no link to itself");
        assert_eq!(links.blocked(), vec![(1, 2)]);
        assert!(links.heal(1, 2));
        assert!(links.blocked().is_empty());
        Ok(())
    }
}
