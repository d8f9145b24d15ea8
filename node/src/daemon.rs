//! The `bookingd` process around a [`Node`]: logs on stderr, start-up, the line that says it
//! serves, and a clean stop on SIGINT or SIGTERM.
//!
//! Owns what the daemon binaries share, so that `bookingd` and the test-only
//! `bookingd-unsafe` (the `unsafe-modes` feature) run the same code and differ only in the
//! planted bugs the latter may switch on first. Never parses a command line: each binary parses
//! its own.

use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, ConfigError};
use crate::node::Node;

/// Makes every panic end the process (after the default hook has printed it). A panic is a bug,
/// and tokio would otherwise end only the task that panicked: a node whose apply panicked went
/// on running with that group's state poisoned, answering nothing for it and logging the same
/// error every second, while its process looked healthy. Stopped, it is restarted by its
/// supervisor, and the other replicas carry the group meanwhile (the Jepsen suite found this
/// with a planted bug, `bookingd-unsafe --inject two-offers`).
fn fail_stop_on_panic() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        print(info);
        eprintln!("bookingd: stopping: a panic is a bug, and a node does not carry on after one");
        std::process::abort();
    }));
}

/// The exit code of a node whose storage failed (BSD's `EX_IOERR`).
pub const EXIT_STORAGE_FAILED: u8 = 74;

/// Ends the process at once after a failed write or sync: it may not acknowledge anything more
/// (the storage already refuses to), and a clean stop would try to write. Everything it did
/// acknowledge was synced before; the restarted node recovers it, once the disk works again.
fn fail_stop_on_storage(reason: &str) -> ! {
    tracing::error!(%reason, "storage failed: stopping now; restart the node once the disk works");
    eprintln!("bookingd: stopping: storage failed: {reason}");
    std::process::exit(i32::from(EXIT_STORAGE_FAILED));
}

/// The log filter unless `RUST_LOG` says otherwise: the daemon's events, and only openraft's
/// warnings.
const LOG_FILTER_DEFAULT: &str = "info,openraft=warn";

/// Runs a node with `config` until SIGINT or SIGTERM, then stops it cleanly. Prints
/// `bookingd node=<id> listening=<address>` on stdout once it serves (scripts and tests wait
/// for that line).
///
/// Returns exit code 2 for an unusable configuration, 1 when the node cannot start, and 0
/// after a clean stop; exits with [`EXIT_STORAGE_FAILED`] at once when its storage fails.
pub async fn run(config: Result<Config, ConfigError>) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new(LOG_FILTER_DEFAULT)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    fail_stop_on_panic();
    let config = match config {
        Ok(config) => config,
        Err(error) => {
            eprintln!("bookingd: {error}");
            return ExitCode::from(2);
        }
    };
    let id = config.id;
    // Every setting, for whoever reads the log later; the secrets show as `[REDACTED]`.
    tracing::info!(?config, "bookingd starting");
    if statemachine::VERIFY {
        tracing::info!("verify build: every invariant is checked after every applied entry");
    }
    let node = match Node::start(config).await {
        Ok(node) => node,
        Err(error) => {
            eprintln!("bookingd: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("bookingd node={id} listening={}", node.address());
    tokio::select! {
        () = wait_for_signal() => {}
        reason = node.storage_failure() => fail_stop_on_storage(&reason),
    }
    tracing::info!("stopping");
    node.shutdown().await;
    ExitCode::SUCCESS
}

/// Waits for SIGINT or SIGTERM.
async fn wait_for_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot watch SIGTERM; stopping on SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
