//! Multi-node tests of the raft crate, in one binary so RocksDB is linked once: three nodes in
//! one process, each with its own database, its own gRPC server on loopback (real sockets) and
//! one transport shared by all its groups. Replication, convergence, failover, catch-up of a
//! wiped node by snapshot install, fencing of writes by the committed leader id, the proposer
//! (coalescing of concurrent writes, leader hints), and the transport's failure modes (unknown
//! group, dead peer), and partitions made by a fault-injecting transport (a leader cut off from
//! the majority cannot acknowledge a write), and the gRPC transport over an in-memory network
//! (the simulator's seam).

#[path = "../support/commands.rs"]
mod commands;
mod faults;
mod fencing;
mod harness;
mod memory;
mod partition;
mod proposer;
mod replication;
mod transport;
