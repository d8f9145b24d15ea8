//! `onsale`: runs a short on-sale against a running cluster and prints what happened.
//!
//! `scripts/demo.sh` runs it against the local 3-node cluster. Exit 0 when every end-of-run
//! check holds, 1 when one fails, 2 on bad usage or when the show cannot be set up.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use client::Client;
use indicatif::{ProgressBar, ProgressStyle};
use jepsen::onsale::{self, Plan};

/// Simulated buyers against a running booking cluster.
#[derive(Debug, Parser)]
#[command(name = "onsale", version, about)]
struct Args {
    /// Node addresses (host:port), comma-separated.
    #[arg(
        long,
        env = "BOOKCTL_NODES",
        value_delimiter = ',',
        default_value = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
    )]
    nodes: Vec<String>,
    /// The show to create; default: a fresh id from the clock.
    #[arg(long)]
    show: Option<u64>,
    /// Seats in the show.
    #[arg(long, default_value_t = 500)]
    seats: u32,
    /// Simulated buyers.
    #[arg(long, default_value_t = 2_000)]
    buyers: u32,
    /// Buyers active at once.
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Admission window: grants outstanding at once.
    #[arg(long, default_value_t = 100)]
    window: u32,
    /// Hold TTL, ms (short, so abandoned holds feed the waitlist during the run).
    #[arg(long, default_value_t = 5_000)]
    hold_ttl_ms: u64,
    /// Percent of holders who never pay.
    #[arg(long, default_value_t = 10)]
    abandon_percent: u32,
    /// Percent of payments declined.
    #[arg(long, default_value_t = 4)]
    decline_percent: u32,
    /// Percent of waitlist offers accepted.
    #[arg(long, default_value_t = 80)]
    accept_percent: u32,
    /// Percent of confirmed bookings their buyer cancels at once (refunded through the
    /// provider when there is one; the seats go to the waitlist).
    #[arg(long, default_value_t = 3)]
    cancel_percent: u32,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The longest the buyers may run, seconds.
    #[arg(long, default_value_t = 40)]
    time_limit_s: u64,
    /// A file holding the nodes' webhook secret (or the secret itself in
    /// BOOKING_WEBHOOK_SECRET; the nodes' development one by default).
    #[arg(long, value_name = "FILE")]
    webhook_secret_file: Option<PathBuf>,
    /// A file holding the cluster's operator credential (or the credential itself in
    /// BOOKING_OPERATOR_TOKEN; the nodes' development one by default).
    #[arg(long, value_name = "FILE")]
    operator_token_file: Option<PathBuf>,
    /// The payment provider's base URL (`paysim`, e.g. http://127.0.0.1:7100), which the
    /// cluster's nodes charge through (their `--provider-url`): buyers check out and wait, and
    /// `--decline-percent` is set as its decline ratio. Without it, each buyer posts the
    /// provider's webhook itself.
    #[arg(long, env = "BOOKING_PROVIDER")]
    provider: Option<String>,
    /// The cluster's CA certificate (PEM): the nodes serve TLS (`bookingd --client-tls`), and
    /// bare `host:port` nodes are reached over https.
    #[arg(long, env = "BOOKCTL_CA_FILE", value_name = "FILE")]
    ca_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let secrets =
        secret(args.webhook_secret_file.as_deref(), "BOOKING_WEBHOOK_SECRET", WEBHOOK_DEV)
            .and_then(|webhook| {
                let operator = secret(
                    args.operator_token_file.as_deref(),
                    "BOOKING_OPERATOR_TOKEN",
                    OPERATOR_DEV,
                )?;
                Ok((webhook, operator))
            });
    let (webhook_secret, operator_token) = match secrets {
        Ok(secrets) => secrets,
        Err(message) => {
            eprintln!("onsale: {message}");
            return ExitCode::from(2);
        }
    };
    let show_id = args.show.unwrap_or_else(|| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        now.as_secs()
    });
    let plan = Plan {
        show_id,
        seats: args.seats,
        buyers: args.buyers,
        concurrency: args.concurrency,
        window: args.window,
        hold_ttl_ms: args.hold_ttl_ms,
        abandon_percent: args.abandon_percent,
        decline_percent: args.decline_percent,
        accept_percent: args.accept_percent,
        cancel_percent: args.cancel_percent,
        seed: args.seed,
        time_limit: Duration::from_secs(args.time_limit_s),
        webhook_secret,
        operator_token: Some(operator_token.clone()),
        provider: args.provider.clone(),
    };
    if let Some(provider) = &args.provider
        && let Err(error) = onsale::configure_provider(provider, args.decline_percent).await
    {
        eprintln!("onsale: the provider at {provider}: {error}");
        return ExitCode::from(2);
    }
    let ca = match &args.ca_file {
        None => None,
        Some(path) => match std::fs::read_to_string(path) {
            Ok(pem) => Some(pem),
            Err(error) => {
                eprintln!("onsale: --ca-file {}: {error}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let nodes: Vec<String> =
        args.nodes.iter().map(|node| jepsen::http::base_url(node, ca.is_some())).collect();
    let connected = Client::connect(nodes.clone()).and_then(|client| match &ca {
        Some(ca) => client.with_ca_certificate(ca),
        None => Ok(client),
    });
    let client = match connected {
        Ok(client) => client,
        Err(error) => {
            eprintln!("onsale: {error}");
            return ExitCode::from(2);
        }
    };
    let http = match jepsen::http::client(ca.as_deref()) {
        Ok(http) => http,
        Err(error) => {
            eprintln!("onsale: {error}");
            return ExitCode::from(2);
        }
    };
    let client = match client.with_operator_token(&operator_token) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("onsale: the operator credential: {error}");
            return ExitCode::from(2);
        }
    };
    let group = match onsale::create_show(&client, &plan).await {
        Ok(group) => group,
        Err(error) => {
            eprintln!("onsale: cannot create show {show_id}: {error}");
            return ExitCode::from(2);
        }
    };
    println!(
        "show {show_id}: {} seats in group {group}, admission window {}, waitlist on; {} buyers",
        plan.seats, plan.window, plan.buyers
    );
    let bar = ProgressBar::new(u64::from(plan.buyers));
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} buyers  {msg}  [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let shown = bar.clone();
    let report = onsale::run(client.clone(), http, nodes, plan.clone(), move |done, sold| {
        shown.set_position(done);
        shown.set_message(format!("{sold} seats sold"));
    })
    .await;
    bar.finish();
    let tally = &report.tally;
    let sold: usize = tally.bookings.iter().map(|(_, seats)| seats.len()).sum();
    let percentile = |q: f64| report.hold_latency.value_at_quantile(q) as f64 / 1_000.0;
    println!("in {:.1} s:", report.elapsed.as_secs_f64());
    println!("  sold          {sold} of {} seats in {} bookings", plan.seats, tally.bookings.len());
    println!(
        "  holds         {} attempts, {} acknowledged, {} conflicts ({:.0}%), {} abandoned, {} declined",
        tally.hold_attempts,
        tally.holds,
        tally.conflicts,
        100.0 * tally.conflicts as f64 / tally.hold_attempts.max(1) as f64,
        tally.abandoned,
        tally.declined
    );
    println!(
        "  waitlist      {} joins, {} offers, {} accepted",
        tally.waitlist_joins, tally.offers, tally.offers_accepted
    );
    println!(
        "  cancelled     {} bookings by their buyers, {} seen refunded",
        tally.cancelled, tally.refunded
    );
    println!("  hold latency  p50 {:.1} ms, p99 {:.1} ms", percentile(0.5), percentile(0.99));
    println!(
        "  gave up       {} buyers; unfinished at the time limit: {}",
        tally.gave_up, report.unfinished
    );
    if !tally.errors.is_empty() {
        println!("  other errors  {:?}", tally.errors);
        for (code, error) in &tally.first_errors {
            println!("  first {code}: {error}");
        }
    }
    match onsale::check(&client, &plan, tally).await {
        Ok(lines) => {
            for line in lines {
                println!("  check ok      {line}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("  CHECK FAILED  {error}");
            ExitCode::FAILURE
        }
    }
}

/// The nodes' development webhook secret (`bookingd --dev`).
const WEBHOOK_DEV: &str = "booking-cluster-development-webhook-secret";
/// The nodes' development operator credential (`bookingd --dev`).
const OPERATOR_DEV: &str = "booking-cluster-development-operator-token";

/// A secret from `file` (without its final newline), else the environment variable `env`, else
/// `development`.
fn secret(file: Option<&Path>, env: &str, development: &str) -> Result<String, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        return Ok(text.trim_end_matches(['\n', '\r']).to_owned());
    }
    Ok(std::env::var(env)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| development.to_owned()))
}
