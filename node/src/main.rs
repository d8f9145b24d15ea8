//! `bookingd`: runs one node until SIGINT or SIGTERM. See `bookingd --help`.

use std::process::ExitCode;

use clap::Parser;
use node::{Args, Config, Node};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = match Config::load(Args::parse()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("bookingd: {error}");
            return ExitCode::from(2);
        }
    };
    let id = config.id;
    let node = match Node::start(config).await {
        Ok(node) => node,
        Err(error) => {
            eprintln!("bookingd: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("bookingd node={id} listening={}", node.address());
    wait_for_signal().await;
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
