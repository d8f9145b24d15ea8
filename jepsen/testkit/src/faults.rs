//! Link faults on a [`Cluster`] (isolate a node, partition, cut one directed link, cut one client
//! off from one node, heal), and [`Cluster::heal_all`], which undoes every kind of fault the kit
//! can make: links, client cuts, pauses, clock skew, nodes down, memberships removed.
//!
//! Owns the order of healing and nothing else: the links are the [`crate::links`] mesh's, the
//! client doors [`crate::proxy`]'s, the processes [`crate::process`]'s, the memberships
//! [`crate::membership`]'s. Never judges whether the cluster recovered: the caller waits for
//! that ([`crate::observe`]).

use std::net::IpAddr;

use crate::cluster::Cluster;
use crate::error::ClusterError;
use crate::{GroupId, NodeId};

impl Cluster {
    /// Cuts every link to and from node `id` (clients still reach it directly).
    pub fn isolate(&self, id: NodeId) {
        self.links.isolate(id);
    }

    /// Cuts every link whose two ends share none of `sets` (see
    /// [`crate::links::Links::partition`]).
    pub fn partition(&self, sets: &[Vec<NodeId>]) {
        self.links.partition(sets);
    }

    /// Cuts the one directed link `from → to`.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Invalid`] when there is no such link.
    pub fn block_link(&self, from: NodeId, to: NodeId) -> Result<(), ClusterError> {
        if self.links.block(from, to) {
            Ok(())
        } else {
            Err(ClusterError::Invalid(format!("no link {from} -> {to}")))
        }
    }

    /// Opens every link.
    pub fn heal(&self) {
        self.links.heal_all();
    }

    /// Cuts the client that dials from `source` off from node `id` (its door holds that
    /// client's connections, and drops those it carried), while the node stays in the cluster
    /// and every other client still reaches it.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Invalid`] when the cluster has no client doors
    /// ([`crate::ClusterOptions::client_doors`]) or no node `id`.
    pub fn cut_client(&self, id: NodeId, source: IpAddr) -> Result<(), ClusterError> {
        match self.doors.get(&id) {
            Some(door) => {
                door.cut_source(source);
                Ok(())
            }
            None if self.doors.is_empty() => {
                Err(ClusterError::Invalid("the cluster has no client doors".into()))
            }
            None => Err(ClusterError::Invalid(format!("node {id} has no client door"))),
        }
    }

    /// Lets every client cut off by [`Cluster::cut_client`] reach every node again.
    pub fn restore_clients(&self) {
        for door in self.doors.values() {
            door.restore_sources();
        }
    }

    /// The clients cut off, as (node, the client's address), in order.
    pub fn cut_clients(&self) -> Vec<(NodeId, IpAddr)> {
        self.doors
            .iter()
            .flat_map(|(&id, door)| door.cut_sources().into_iter().map(move |ip| (id, ip)))
            .collect()
    }

    /// Whether the cluster has client doors, so that clients can be cut off.
    pub fn has_client_doors(&self) -> bool {
        !self.doors.is_empty()
    }

    /// Undoes every fault: opens every link, resumes paused nodes, removes clock skew, restarts
    /// the nodes that are down (killed or crashed) and waits until they serve, and readmits the
    /// nodes [`Cluster::remove`] took out of a group. Every step is tried even when an earlier
    /// one failed.
    ///
    /// # Errors
    ///
    /// The first step that failed, with how many did.
    pub async fn heal_all(&self) -> Result<(), ClusterError> {
        let mut errors = Vec::new();
        self.links.heal_all();
        self.restore_clients();
        for id in self.paused() {
            if let Err(error) = self.resume(id).await {
                errors.push(error);
            }
        }
        for (id, skew) in self.skews() {
            if skew != 0
                && let Err(error) = self.skew(id, 0)
            {
                errors.push(error);
            }
        }
        // A crashed node is recorded (see `crashes`) before it is started again.
        let _ = self.check_alive();
        let down = self.down();
        if !down.is_empty()
            && let Err(error) = self.restart_all(&down).await
        {
            errors.push(error);
        }
        let removed: Vec<(GroupId, NodeId)> = self.removed();
        for (group, id) in removed {
            if let Err(error) = self.readmit(group, id).await {
                errors.push(error);
            }
        }
        let count = errors.len();
        match errors.into_iter().next() {
            None => Ok(()),
            Some(first) if count == 1 => Err(first),
            Some(first) => Err(ClusterError::Invalid(format!(
                "{count} healing steps failed; the first: {first}"
            ))),
        }
    }
}
