//! The `payments` workload's world outside the cluster: the payment provider as a real
//! process, the provider nemesis, and the end of a run judged against the provider's ledger.
//!
//! - [`Paysim`]: the project's simulated provider (`paysim`, next to `bookingd`) on
//!   `127.0.0.10` at the run's port base (no node listens there: nodes are `127.0.0.11` and
//!   up), its ledger on disk in the run's data folder, its webhooks signed with the cluster's
//!   secret and sent to any node. Every node is started with `--provider-url` pointing at it,
//!   so the data groups' leader-only payment and refund workers charge and refund through it;
//!   nobody else does.
//! - [`run_faults`]: the provider nemesis (`--provider-faults`), which runs beside whichever
//!   node nemesis the run has: quiet and fault periods of seeded lengths, each fault one of an
//!   outage, slowness (up to past the node's call timeout, so outcomes become unknown),
//!   duplicate webhooks, late webhooks, out-of-order (stale) webhooks, charge calls that time
//!   out after charging, and webhooks delivered before the charge call returns, set and undone
//!   through paysim's `PUT /control`. A tenth of new charges are declined throughout, so that
//!   holds come back and are checked out again.
//! - [`judge`]: after the faults are healed and the clients have read back, the kit's
//!   [`testkit::ledger::judge`] (shared with the simulator) on paysim's `GET /ledger`: it waits
//!   for the payments to settle (past [`QUIESCE_MAX`] that is itself a failure), reads the
//!   cluster's state and runs `statemachine::check::ledger`.
//!
//! Never judges by itself (the ledger checker does) and never stops a process it did not
//! start: paysim is killed through its own child handle.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use client::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use statemachine::check::ledger::LedgerRecord;
pub use testkit::ledger::Judged;
use testkit::workload::Buyer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::nemesis::{Phase, StepStatus};

/// Where the provider listens: an address of the loopback no node uses.
pub const PROVIDER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 10);
/// How long paysim may take to say it listens.
const START_MAX: Duration = Duration::from_secs(10);
/// How long one call to paysim may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the payments may take to settle once every fault is healed; past it the run is
/// invalid (a payment stuck `unknown`, a refund never made).
pub const QUIESCE_MAX: Duration = Duration::from_secs(90);

/// The provider's address for a run on `port_base`.
pub fn provider_address(port_base: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(PROVIDER_IP), port_base)
}

/// A running paysim, killed (SIGKILL) by [`Paysim::stop`] or when dropped.
pub struct Paysim {
    child: Child,
    address: SocketAddr,
    dir: PathBuf,
    http: reqwest::Client,
}

impl Paysim {
    /// Starts `binary` on `listen` with its ledger in `dir`, sending webhooks signed with
    /// `secret` to every node of `nodes` (base URLs, `https://host:port`, verified against the
    /// CA in `ca_file`), its draws seeded with `seed`.
    ///
    /// # Errors
    ///
    /// A message when it cannot be started or does not say it listens in time.
    pub async fn start(
        binary: &Path,
        listen: SocketAddr,
        dir: &Path,
        nodes: &[String],
        ca_file: &Path,
        secret: &str,
        seed: u64,
    ) -> Result<Paysim, String> {
        if !binary.is_file() {
            return Err(format!(
                "{} not found; build it first: cargo build --release --workspace --bins",
                binary.display()
            ));
        }
        std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let log = dir.join("stderr.log");
        let stderr =
            std::fs::File::create(&log).map_err(|error| format!("{}: {error}", log.display()))?;
        let mut command = Command::new(binary);
        command
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--seed")
            .arg(seed.to_string());
        for node in nodes {
            command.arg("--webhook-url").arg(format!("{node}/v1/payments/webhook"));
        }
        command.arg("--webhook-ca-file").arg(ca_file);
        let mut child = command
            .env("PAYSIM_WEBHOOK_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("{}: {error}", binary.display()))?;
        let stdout = child.stdout.take().ok_or("paysim's stdout is not piped")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = match tokio::time::timeout(START_MAX, lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                return Err(format!("paysim exited before listening; see {}", log.display()));
            }
            Ok(Err(error)) => return Err(format!("paysim's stdout: {error}")),
            Err(_) => return Err(format!("paysim did not listen within {START_MAX:?}")),
        };
        if line.strip_prefix("paysim listening=") != Some(listen.to_string().as_str()) {
            return Err(format!("paysim said {line:?}, expected it to listen on {listen}"));
        }
        // Whatever else it prints is read, so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|error| format!("an HTTP client: {error}"))?;
        Ok(Paysim { child, address: listen, dir: dir.to_path_buf(), http })
    }

    /// The provider's base URL, as the nodes' `--provider-url` names it.
    pub fn url(address: SocketAddr) -> String {
        format!("http://{address}")
    }

    /// The folder of its ledger and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    async fn call(&self, request: reqwest::RequestBuilder, what: &str) -> Result<Value, String> {
        let response = request.send().await.map_err(|error| format!("paysim {what}: {error}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|error| format!("paysim {what}: HTTP {status}: unreadable answer: {error}"))?;
        if !status.is_success() {
            return Err(format!("paysim {what}: HTTP {status}: {body}"));
        }
        Ok(body)
    }

    /// Sets the provider's behaviour (fields left out take their defaults: `{}` is a provider
    /// without faults).
    ///
    /// # Errors
    ///
    /// A message when paysim refuses or does not answer.
    pub async fn behave(&self, behaviour: &Value) -> Result<(), String> {
        let url = format!("http://{}/control", self.address);
        self.call(self.http.put(url).json(behaviour), "PUT /control").await.map(|_| ())
    }

    /// Every record of the ledger, oldest first.
    ///
    /// # Errors
    ///
    /// A message when paysim does not answer or its ledger does not parse.
    pub async fn ledger(&self) -> Result<Vec<LedgerRecord>, String> {
        let url = format!("http://{}/ledger", self.address);
        let body = self.call(self.http.get(url), "GET /ledger").await?;
        serde_json::from_value(body["records"].clone())
            .map_err(|error| format!("paysim GET /ledger: not a ledger: {error}"))
    }

    /// Kills it (SIGKILL, through its own child handle) and reaps it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// One step of the provider nemesis, as `provider.jsonl` records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderEvent {
    /// When the step began, ns since the run's start.
    pub time_ns: u64,
    /// When it finished.
    pub end_ns: u64,
    /// The fault the step injects or undoes (0: the baseline set at the start).
    pub step: u64,
    /// Fault or heal.
    pub phase: Phase,
    /// `baseline`, `outage`, `slow`, `duplicate-webhooks`, `late-webhooks`,
    /// `out-of-order-webhooks`, `timeouts`, `webhook-before-reply`, `heal` or `heal-all`.
    pub action: String,
    /// The behaviour set.
    pub behaviour: Value,
    /// Installed, or indeterminate when paysim did not confirm it.
    pub status: StepStatus,
    /// Why it is indeterminate.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

fn since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs the provider nemesis until `stop` completes: the baseline at once, then (when
/// `faults`) quiet periods of 2-4 s and faults of 2-5 s drawn from `seed`; then the provider
/// is healed for good (`{}`: no declines either, so that the run can settle). Returns the
/// steps, timed from `t0`.
pub async fn run_faults(
    paysim: &Paysim,
    faults: bool,
    seed: u64,
    t0: Instant,
    stop: impl Future<Output = ()>,
) -> Vec<ProviderEvent> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7061_7973_696d);
    let mut events = Vec::new();
    let mut step = 0;
    let set = |step: u64, phase: Phase, action: &'static str, behaviour: Value| {
        let began = since(t0);
        async move {
            let (status, detail) = match paysim.behave(&behaviour).await {
                Ok(()) => (StepStatus::Installed, String::new()),
                Err(error) => (StepStatus::Indeterminate, error),
            };
            tracing::info!(action, %behaviour, ?status, detail, "provider nemesis");
            ProviderEvent {
                time_ns: began,
                end_ns: since(t0),
                step,
                phase,
                action: action.to_owned(),
                behaviour,
                status,
                detail,
            }
        }
    };
    events.push(set(0, Phase::Heal, "baseline", testkit::provider::baseline()).await);
    let mut stop = std::pin::pin!(stop);
    let mut stopped = false;
    while faults && !stopped {
        let quiet = Duration::from_millis(rng.gen_range(2_000..=4_000));
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(quiet) => {}
        }
        step += 1;
        let (name, behaviour) = testkit::provider::draw_fault(&mut rng);
        events.push(set(step, Phase::Fault, name, behaviour).await);
        let period = Duration::from_millis(rng.gen_range(2_000..=5_000));
        tokio::select! {
            () = &mut stop => stopped = true,
            () = tokio::time::sleep(period) => {}
        }
        events.push(set(step, Phase::Heal, "heal", testkit::provider::baseline()).await);
    }
    if !stopped && !faults {
        stop.await;
    }
    events.push(set(step, Phase::Heal, "heal-all", json!({})).await);
    events
}

/// Waits for the payments to settle (at most [`QUIESCE_MAX`]), reads paysim's ledger and the
/// cluster's final state, and runs the ledger checker (see [`testkit::ledger::judge`]).
pub async fn judge(paysim: &Paysim, client: &Client, buyers: &[Buyer], shows: &[u64]) -> Judged {
    testkit::ledger::judge(|| paysim.ledger(), client, buyers, shows, QUIESCE_MAX).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_listens_where_no_node_does() {
        assert_eq!(provider_address(7600).to_string(), "127.0.0.10:7600");
        assert_eq!(Paysim::url(provider_address(7800)), "http://127.0.0.10:7800");
    }
}
