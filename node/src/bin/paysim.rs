//! `paysim`: the simulated payment provider (see `node::paysim` and `paysim --help`).

use std::process::ExitCode;

use clap::Parser;
use node::paysim::{Args, run};

#[tokio::main]
async fn main() -> ExitCode {
    run(Args::parse()).await
}
