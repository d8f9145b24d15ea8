//! `bookingd`: runs one node until SIGINT or SIGTERM. See `bookingd --help`.

use std::process::ExitCode;

use clap::Parser;
use node::{Args, Config};

#[tokio::main]
async fn main() -> ExitCode {
    node::daemon::run(Config::load(Args::parse())).await
}
