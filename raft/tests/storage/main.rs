//! Storage tests of the raft crate, in one binary so RocksDB is linked once: openraft's
//! conformance suite, group isolation in the shared database, durability across reopen and
//! process kill, corruption found by checksums, group commit of WAL syncs, snapshots, a
//! one-node group under a real `openraft::Raft` (writes answered by apply, restart from
//! snapshot plus committed tail), the simulated disk's crash model, and the `verify` build of
//! the state machine. Tests of behaviour both backends share run on both.

#[path = "../support/commands.rs"]
mod commands;
mod common;
mod corruption;
mod durability;
mod group_commit;
mod isolation;
mod sim_disk;
mod single_node;
mod snapshots;
mod suite;
mod verify;
