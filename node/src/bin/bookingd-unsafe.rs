//! `bookingd-unsafe`: `bookingd` with deliberately planted bugs, for the Jepsen suite to prove
//! that it catches them. Built only with the `unsafe-modes` feature (which gives the state
//! machine its `inject` feature):
//!
//! ```text
//! cargo build --release -p node --features unsafe-modes --bin bookingd-unsafe
//! ```
//!
//! It takes every option of `bookingd` and runs the same code (`node::daemon`); only here can a
//! planted bug (`statemachine::inject`) be switched on, so `bookingd` cannot be started with one
//! even when the feature is on. Never run it for real sales.

use std::process::ExitCode;

use clap::Parser;
use node::{Args, Config};
use statemachine::inject::{self, Bug};

/// `bookingd-unsafe`: a booking cluster node with deliberately planted bugs, for testing the
/// Jepsen suite only. Without `--inject` it behaves as `bookingd`.
#[derive(Debug, Parser)]
#[command(name = "bookingd-unsafe", version = node::VERSION, long_about = None)]
struct UnsafeArgs {
    /// Every option of `bookingd`.
    #[command(flatten)]
    node: Args,
    /// UNSAFE: switch a planted bug on (repeatable): ack-before-commit (a leader counts
    /// entries stored on a follower once sent, so it commits without a quorum), stale-read
    /// (linearizable reads served from this replica without ReadIndex or a leadership check),
    /// fifo-skip (the admission lane grants the second waiter first), two-offers (two open
    /// waitlist offers for one seat). `--list-injections` names them all.
    #[arg(long = "inject", value_name = "BUG")]
    inject: Vec<Bug>,
    /// Print the planted bugs a process can have, one a line, and exit.
    #[arg(long)]
    list_injections: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = UnsafeArgs::parse();
    if args.list_injections {
        for bug in Bug::ALL.into_iter().filter(|bug| bug.in_processes()) {
            println!("{bug}");
        }
        return ExitCode::SUCCESS;
    }
    if let Some(bug) = args.inject.iter().find(|bug| !bug.in_processes()) {
        eprintln!("bookingd-unsafe: {bug} exists only in the simulator");
        return ExitCode::from(2);
    }
    inject::set(&args.inject);
    node::daemon::run(Config::load(args.node)).await
}
