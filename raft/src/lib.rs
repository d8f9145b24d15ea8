//! openraft glue for the booking cluster: type config, RocksDB log and state-machine stores, the
//! peer network and the multi-group router.
//!
//! Empty until issue 3 ("Replicated groups"). It will import `statemachine` (whose `Group::apply`
//! is the state machine every replica runs) and `proto`, and keep openraft behind this crate so
//! an upgrade touches one crate.
