//! `bookingd-unsafe`: `bookingd` with deliberately unsafe modes, for the Jepsen suite to prove
//! that it catches them. Built only with the `unsafe-modes` feature:
//!
//! ```text
//! cargo build --release -p node --features unsafe-modes --bin bookingd-unsafe
//! ```
//!
//! It takes every option of `bookingd` and runs the same code (`node::daemon`); the unsafe
//! options exist only here, so `bookingd` cannot be started with them even when the feature is
//! on. Never run it for real sales.

use std::process::ExitCode;

use clap::Parser;
use node::{Args, Config};

/// `bookingd-unsafe`: a booking cluster node with deliberately unsafe modes, for testing the
/// Jepsen suite only. Without an unsafe flag it behaves as `bookingd`.
#[derive(Debug, Parser)]
#[command(name = "bookingd-unsafe", version = node::VERSION, long_about = None)]
struct UnsafeArgs {
    /// Every option of `bookingd`.
    #[command(flatten)]
    node: Args,
    /// UNSAFE: serve every read that should be linearizable (a hold and its payment, a
    /// booking, ticket, waitlist entry or offer, a linearizable seat map, an audit trail) from
    /// this node's replica, without ReadIndex and without checking leadership, so an isolated
    /// old leader serves stale reads.
    #[arg(long)]
    unsafe_stale_reads: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = UnsafeArgs::parse();
    let config = Config::load(args.node).map(|mut config| {
        config.unsafe_stale_reads = args.unsafe_stale_reads;
        config
    });
    node::daemon::run(config).await
}
