//! `bookingd`: runs one node until SIGINT or SIGTERM. See `bookingd --help`.

use std::process::ExitCode;

use clap::Parser;
use node::{Args, Config};

/// mimalloc rather than glibc's malloc: allocation was about a sixth of a loaded node
/// (README, performance: the allocator trial).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    node::daemon::run(Config::load(Args::parse())).await
}
