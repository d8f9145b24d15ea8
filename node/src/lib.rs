//! `bookingd`: configuration, the gRPC and HTTP APIs, proto ↔ domain conversion, the one table
//! that maps rejection codes to HTTP and gRPC statuses, leader-only workers and placement.
//!
//! Empty until issue 3 (the daemon and its groups) and issue 4 (the client API). Nothing imports
//! this crate.
