//! The Rust SDK and the `bookctl` CLI: leader discovery, routing by show, retries with the same
//! idempotency key.
//!
//! Empty until issue 4 ("Client API, SDK and bookctl"). It will import only `proto`.
