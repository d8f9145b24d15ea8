//! This cluster as a benchmark backend: three `bookingd` nodes on 127.0.0.1-3, ports from
//! 7600, data on disk (a fresh directory per invocation), peers dialled directly (no fault
//! proxies), driven only through the `client` SDK.
//!
//! Owns the run's shows (created through the operator API, sales open, a hold TTL that outlasts
//! the run, 64 live holds per session), the workers' sessions (each rotates to a fresh session
//! before it reaches that limit) and reading the final seat maps back linearizably. Never
//! reaches into a node: everything goes through the public API.

use std::fmt::Write as _;
use std::time::Duration;

use futures_util::StreamExt as _;

use client::{Client, Error, ErrorCode, LiveSeatMap, NewShow, SeatStatus, ShowPolicy};
use tempfile::TempDir;
use testkit::{Addressing, Cluster, ClusterOptions};

use crate::bench::cdn::{self, Cdn, OriginReads, Origins};
use crate::bench::driver::RunSpec;
use crate::bench::workload::{Attempt, Request, WorkloadKind};
use crate::bench::{
    Backend, BenchError, Browsed, HeldSeat, Options, Outcome, SnapshotPoint, StateCosts, Target,
};

/// The backend's name in the report.
const NAME: &str = "cluster";
/// The same cluster without TLS on its client port.
const PLAIN_NAME: &str = "cluster-plain";
/// The same cluster driven over REST, as a front end in another language would.
const REST_NAME: &str = "cluster-rest";

/// Live holds one session may have in a show: the cluster's maximum.
pub const HOLDS_PER_SESSION: u32 = statemachine::limits::HOLDS_PER_SESSION_MAX;

/// Node `i` listens on `127.0.0.(IP_BASE + i)`.
const IP_BASE: u8 = 0;

/// Every node serves on this port of its own address.
const PORT_BASE: u16 = 7600;

/// The shortest hold TTL: the default 5 minutes, well past any run.
const HOLD_TTL_MIN: Duration = Duration::from_secs(300);

/// The price of every seat, minor units.
const PRICE_MINOR: u64 = 5_000;

/// Show ids of run `r` are `(r + 1) * SHOW_IDS_PER_RUN + 1` and up: room for the shows
/// sweep's 10,000 shows per run.
const SHOW_IDS_PER_RUN: u64 = 100_000;

/// How many shows are made, or read back, at once.
const SHOW_SETUP_PARALLELISM: usize = 64;

/// How long a new show may take to be readable on its group's replicas.
const SHOW_READY_WAIT: Duration = Duration::from_secs(20);

/// The started cluster.
pub struct ClusterBackend {
    /// `cluster`, `cluster-plain` without TLS on the client port, or `cluster-rest`.
    name: &'static str,
    /// Whether the workers hold over REST (`cluster-rest`) rather than through the SDK.
    rest: bool,
    cluster: Cluster,
    groups: u64,
    snapshot_logs: u64,
    /// Arguments given to every node beyond the benchmark's own.
    args: Vec<String>,
    /// nginx, the first minute's CDN.
    nginx_bin: std::path::PathBuf,
    dir: TempDir,
}

impl ClusterBackend {
    /// Starts three nodes with `options.cluster_groups` data groups, serving their clients
    /// over TLS when `tls` (the SDK then trusts the cluster's CA), and waits for leaders; with
    /// `rest`, its runs hold over REST.
    ///
    /// # Errors
    ///
    /// When the data directory cannot be made, `bookingd` is missing, or the cluster does not
    /// come up.
    pub async fn start(
        options: &Options,
        tls: bool,
        rest: bool,
    ) -> Result<ClusterBackend, BenchError> {
        ClusterBackend::start_tuned(options, tls, rest, |_| {}).await
    }

    /// As [`ClusterBackend::start`], with `tune` changing the nodes' options last (the failover
    /// measurement's Raft timing and ports).
    ///
    /// # Errors
    ///
    /// As [`ClusterBackend::start`].
    pub async fn start_tuned(
        options: &Options,
        tls: bool,
        rest: bool,
        tune: impl FnOnce(&mut ClusterOptions),
    ) -> Result<ClusterBackend, BenchError> {
        let name = match (rest, tls) {
            (true, _) => REST_NAME,
            (false, true) => NAME,
            (false, false) => PLAIN_NAME,
        };
        std::fs::create_dir_all(&options.data_dir)
            .map_err(BenchError::io(format!("create {}", options.data_dir.display())))?;
        let dir = tempfile::Builder::new()
            .prefix("cluster-")
            .tempdir_in(&options.data_dir)
            .map_err(BenchError::io("make the cluster's directory"))?;
        let mut cluster_options = ClusterOptions {
            groups: options.cluster_groups,
            addressing: Addressing::Fixed { ip_base: IP_BASE, port_base: PORT_BASE },
            clock_skew: false,
            direct_peers: true,
            log_filter: "warn".to_owned(),
            client_tls: tls,
            extra_args: ["--snapshot-logs".to_owned(), options.snapshot_logs.to_string()]
                .into_iter()
                .chain(options.cluster_args.iter().cloned())
                .collect(),
            ..ClusterOptions::new(3, dir.path())
        };
        tune(&mut cluster_options);
        refuse_a_verify_build(&mut cluster_options)?;
        let cluster = Cluster::start(cluster_options)
            .await
            .map_err(|error| BenchError::backend(name, error))?;
        Ok(ClusterBackend {
            name,
            rest,
            cluster,
            groups: options.cluster_groups,
            snapshot_logs: options.snapshot_logs,
            args: options.cluster_args.clone(),
            nginx_bin: options.nginx_bin.clone(),
            dir,
        })
    }
}

impl ClusterBackend {
    /// The nodes, for what a benchmark does to them beside its load (the failover
    /// measurement kills and restarts them).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

impl Backend for ClusterBackend {
    type Run = ClusterRun;

    fn name(&self) -> &'static str {
        self.name
    }

    async fn prepare(&self, spec: &RunSpec) -> Result<ClusterRun, BenchError> {
        let client = self.cluster.new_client().map_err(|error| BenchError::backend(NAME, error))?;
        let hold_ttl = HOLD_TTL_MIN.max(spec.duration * 2 + Duration::from_secs(60));
        let hold_ttl_ms = u64::try_from(hold_ttl.as_millis()).unwrap_or(u64::MAX);
        let spread =
            spec.workload != WorkloadKind::OnSale && spec.workload != WorkloadKind::MapReads;
        // Shows are made and awaited SHOW_SETUP_PARALLELISM at a time (the shows sweep makes
        // 10,000 of them).
        let made = futures_util::stream::iter(0..spec.layout.shows)
            .map(|index| {
                let client = &client;
                async move {
                    let show_id =
                        u64::from(spec.index + 1) * SHOW_IDS_PER_RUN + u64::from(index) + 1;
                    let mut show =
                        NewShow::uniform(show_id, spec.layout.seats_per_show, PRICE_MINOR, "EUR");
                    show.open_sales = true;
                    show.hold_ttl_ms = hold_ttl_ms;
                    show.policy =
                        ShowPolicy { holds_per_session_max: HOLDS_PER_SESSION, ..show.policy };
                    // Several shows go round-robin over the data groups; the on-sale's one show
                    // is placed by the cluster.
                    if spread {
                        show.group_id = u64::from(index) % self.groups + 1;
                    }
                    client.create_show(&show, None).await.map_err(|error| {
                        BenchError::backend(NAME, format!("create show {show_id}: {error}"))
                    })?;
                    let price_version = ready_price_version(client, show_id).await?;
                    Ok::<_, BenchError>((show_id, price_version))
                }
            })
            .buffered(SHOW_SETUP_PARALLELISM)
            .collect::<Vec<_>>()
            .await;
        let mut shows = Vec::new();
        let mut price_versions = Vec::new();
        for result in made {
            let (show_id, price_version) = result?;
            shows.push(show_id);
            price_versions.push(price_version);
        }
        let readers = self
            .cluster
            .node_ids()
            .into_iter()
            .map(|id| self.cluster.client_of(&[id]).map(|client| (id, client)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| BenchError::backend(NAME, error))?;
        // Each node's base URL: its /metrics, and with cluster-rest where its workers send.
        let bases = self
            .cluster
            .node_ids()
            .into_iter()
            .map(|id| self.cluster.url(id, ""))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| BenchError::backend(self.name, error))?;
        let metrics = bases.iter().map(|base| format!("{base}/metrics")).collect();
        let ca = self.cluster.options().client_tls.then(|| self.cluster.ca_certificate());
        let http = crate::http::client(ca).map_err(|error| BenchError::backend(NAME, error))?;
        // The first minute goes through a CDN: every request of its workers, reads and holds,
        // goes to nginx, which spreads what it does not serve itself over the nodes.
        let cdn = if self.rest && spec.workload == WorkloadKind::FirstMinute {
            Some(self.start_cdn(spec).await?)
        } else {
            None
        };
        let rest = match &cdn {
            Some(cdn) => Some(vec![cdn.url().to_owned()]),
            None => self.rest.then_some(bases),
        };
        Ok(ClusterRun {
            cdn,
            seats_per_show: spec.layout.seats_per_show,
            rest,
            client,
            readers,
            metrics,
            http,
            snapshot_logs: self.snapshot_logs,
            args: self.args.clone(),
            shows,
            price_versions,
            run: spec.index,
            groups: self.groups,
            hold_ttl,
        })
    }

    async fn stop(&mut self) {
        self.cluster.stop().await;
    }

    fn processes(&self) -> Vec<u32> {
        self.cluster.node_ids().into_iter().filter_map(|id| self.cluster.pid(id)).collect()
    }
}

impl ClusterBackend {
    /// nginx in front of the nodes, its files in a directory of run `spec`'s own.
    async fn start_cdn(&self, spec: &RunSpec) -> Result<Cdn, BenchError> {
        let dir = self.dir.path().join(format!("cdn-{}", spec.index));
        std::fs::create_dir_all(&dir)
            .map_err(BenchError::io(format!("create {}", dir.display())))?;
        let ca_file = if self.cluster.options().client_tls {
            Some(self.cluster.ca_file().map_err(|error| BenchError::backend(REST_NAME, error))?)
        } else {
            None
        };
        let origins = Origins {
            addresses: self.cluster.addresses(),
            ca_file,
            tls_name: "localhost".to_owned(),
        };
        Cdn::start(&self.nginx_bin, &dir, &origins).await
    }
}

/// Refuses to measure a `bookingd` built with `statemachine/verify` (its `--version` says
/// `(verify)`): it checks every invariant of the whole state after every entry, which on a
/// show of 50,000 seats is most of the machine. `cargo test` builds the binaries that way (the
/// feature is the tests' dev-dependency), so a `bookingd` left by a test run must be rebuilt
/// with `cargo build --release --workspace --bins` before a benchmark.
fn refuse_a_verify_build(options: &mut ClusterOptions) -> Result<(), BenchError> {
    let binary = options.binary_path().map_err(|error| BenchError::backend(NAME, error))?;
    let output = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .map_err(BenchError::io(format!("{} --version", binary.display())))?;
    let version = String::from_utf8_lossy(&output.stdout);
    if version.contains("(verify)") {
        return Err(BenchError::backend(
            NAME,
            format!(
                "{} is a verify build ({}), which checks every invariant after every entry; \
                 rebuild it without: cargo build --release --workspace --bins",
                binary.display(),
                version.trim()
            ),
        ));
    }
    options.bin_dir = binary.parent().map(std::path::Path::to_path_buf);
    Ok(())
}

/// Waits until show `show_id` is readable and returns its price version.
pub(crate) async fn ready_price_version(client: &Client, show_id: u64) -> Result<u32, BenchError> {
    let deadline = tokio::time::Instant::now() + SHOW_READY_WAIT;
    loop {
        match client.get_seat_map(show_id).await {
            Ok(map) => return Ok(map.price_version),
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(BenchError::backend(NAME, format!("show {show_id}: {error}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// One run's shows and clients.
pub struct ClusterRun {
    /// With `cluster-rest`: each node's base URL; worker `i` sends to node `i` mod their number,
    /// as a load balancer in front of the nodes would spread buyers. In the first minute: the
    /// CDN's URL alone.
    rest: Option<Vec<String>>,
    /// The first minute's CDN (stopped when the run is dropped).
    cdn: Option<Cdn>,
    /// Seats of each show (a whole seat map has a character per seat).
    seats_per_show: u32,
    /// Shared by every worker: clones share its channels and leader cache, and the SDK may
    /// batch concurrent holds into one call.
    client: Client,
    /// One client per node, for the readers (each reads from its node only).
    readers: Vec<(u64, Client)>,
    /// Each node's `/metrics`, read before and after the run.
    metrics: Vec<String>,
    http: reqwest::Client,
    snapshot_logs: u64,
    args: Vec<String>,
    /// Show ids, by show index.
    shows: Vec<u64>,
    /// Each show's price version.
    price_versions: Vec<u32>,
    run: u32,
    groups: u64,
    hold_ttl: Duration,
}

/// A worker: its session and how many holds it may still have in it.
pub struct ClusterWorker {
    /// With `cluster-rest`: the base URL of the node it sends to.
    base: Option<String>,
    token: String,
    /// Holds made in this session that may be live (acknowledged or of unknown outcome).
    live_holds: u32,
    /// The idempotency key of the current attempt, written in place.
    key: String,
}

/// A reader: a client of one node and the maps it keeps, by show index.
pub struct ClusterReader {
    client: Client,
    maps: Vec<Option<LiveSeatMap>>,
}

impl ClusterRun {
    /// A new session: over REST from the node at `base`, else through the SDK.
    async fn new_session(&self, base: Option<&str>) -> Result<String, BenchError> {
        let Some(base) = base else {
            return self
                .client
                .create_session()
                .await
                .map_err(|error| BenchError::backend(NAME, format!("create a session: {error}")));
        };
        let failed = |error: String| BenchError::backend(REST_NAME, format!("a session: {error}"));
        let answer = self.http.post(format!("{base}/v1/sessions")).json(&serde_json::json!({}));
        let answer = answer.send().await.map_err(|error| failed(error.to_string()))?;
        let answer = answer.error_for_status().map_err(|error| failed(error.to_string()))?;
        let body: serde_json::Value =
            answer.json().await.map_err(|error| failed(error.to_string()))?;
        body["token"].as_str().map(str::to_owned).ok_or_else(|| failed(format!("{body}")))
    }

    /// `attempt` as one REST request from `worker`'s session with its own idempotency key: 201
    /// held, 409 `seat_unavailable` a conflict, another 4xx refused (nothing changed), and a
    /// 5xx or a lost request of unknown outcome.
    async fn rest_attempt(&self, worker: &mut ClusterWorker, attempt: &Attempt) -> Outcome {
        let index = attempt.show as usize;
        let (Some(base), Some(&show_id), Some(&price_version)) =
            (worker.base.as_deref(), self.shows.get(index), self.price_versions.get(index))
        else {
            return Outcome::Failed("no such show".to_owned());
        };
        let (seats, used) = attempt.seat_array();
        worker.key.clear();
        let _ = write!(worker.key, "bench-{}-{:x}", self.run, attempt.id);
        let body = serde_json::json!({"seats": &seats[..used], "price_version": price_version});
        let sent = self
            .http
            .post(format!("{base}/v1/shows/{show_id}/holds"))
            .bearer_auth(&worker.token)
            .header("idempotency-key", &worker.key)
            .json(&body)
            .send()
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(error) => {
                worker.live_holds += 1;
                return Outcome::Unknown(format!("http {}", error_kind(&error)));
            }
        };
        let status = answer.status();
        if status == reqwest::StatusCode::CREATED {
            worker.live_holds += 1;
            return Outcome::Held;
        }
        let code = answer
            .json::<serde_json::Value>()
            .await
            .ok()
            .and_then(|body| body["code"].as_str().map(str::to_owned))
            .unwrap_or_default();
        if status.is_client_error() {
            if code == "seat_unavailable" {
                Outcome::Conflict
            } else {
                Outcome::Failed(format!("{} {code}", status.as_u16()))
            }
        } else {
            worker.live_holds += 1;
            Outcome::Unknown(format!("{} {code}", status.as_u16()))
        }
    }

    /// Whether `error` is a clean seat conflict, and otherwise its label.
    fn outcome_of(error: &Error) -> Outcome {
        match error {
            Error::Rejected { code: ErrorCode::SeatUnavailable, .. } => Outcome::Conflict,
            Error::Rejected { code_name, .. } => Outcome::Failed(format!("rejected {code_name}")),
            Error::Unavailable { outcome_unknown: true, booking_code, .. } => Outcome::Unknown(
                format!("unavailable {}", booking_code.as_deref().unwrap_or("(no code)")),
            ),
            Error::Unavailable { booking_code, .. } => Outcome::Failed(format!(
                "unavailable {}",
                booking_code.as_deref().unwrap_or("(no code)")
            )),
            Error::Transport { status, .. } => Outcome::Unknown(format!("transport {status:?}")),
            Error::InvalidArgument(message) => Outcome::Failed(format!("invalid: {message}")),
        }
    }
}

impl Target for ClusterRun {
    type Worker = ClusterWorker;
    type Reader = ClusterReader;

    async fn worker(&self, index: u32) -> Result<ClusterWorker, BenchError> {
        let base = self.rest.as_ref().map(|bases| bases[index as usize % bases.len()].clone());
        let token = self.new_session(base.as_deref()).await?;
        Ok(ClusterWorker { base, token, live_holds: 0, key: String::with_capacity(48) })
    }

    async fn maintain(&self, worker: &mut ClusterWorker) -> Result<(), BenchError> {
        // A session may have at most HOLDS_PER_SESSION live holds per show; holds outlive the
        // run, so a worker moves to a fresh session before it would be refused.
        if worker.live_holds >= HOLDS_PER_SESSION {
            worker.token = self.new_session(worker.base.as_deref()).await?;
            worker.live_holds = 0;
        }
        Ok(())
    }

    async fn attempt(&self, worker: &mut ClusterWorker, attempt: &Attempt) -> Outcome {
        if worker.base.is_some() {
            return self.rest_attempt(worker, attempt).await;
        }
        let index = attempt.show as usize;
        let (Some(&show_id), Some(&price_version)) =
            (self.shows.get(index), self.price_versions.get(index))
        else {
            return Outcome::Failed("no such show".to_owned());
        };
        let (seats, used) = attempt.seat_array();
        worker.key.clear();
        // Writing to a String cannot fail.
        let _ = write!(worker.key, "bench-{}-{:x}", self.run, attempt.id);
        let answer = self
            .client
            .hold(&worker.token, show_id, &seats[..used], price_version, Some(&worker.key))
            .await;
        match answer {
            Ok(_) => {
                worker.live_holds += 1;
                Outcome::Held
            }
            Err(error) => {
                let outcome = ClusterRun::outcome_of(&error);
                if matches!(outcome, Outcome::Unknown(_)) {
                    worker.live_holds += 1;
                }
                outcome
            }
        }
    }

    fn browses(&self) -> bool {
        self.cdn.is_some()
    }

    async fn browse(&self, lane: u32, request: Request, show: u32) -> Result<Browsed, String> {
        let base = self.rest.as_ref().map(|bases| bases[lane as usize % bases.len()].as_str());
        let (Some(base), Some(&show_id)) = (base, self.shows.get(show as usize)) else {
            return Err("no such show".to_owned());
        };
        // As an anonymous buyer's browser asks: no session, so that the CDN may share it.
        let url = match request {
            Request::ShowPage => format!("{base}/v1/shows/{show_id}"),
            Request::SeatMap => format!("{base}/v1/shows/{show_id}/availability"),
            Request::Hold => return Err("a hold is not a read".to_owned()),
        };
        let mut answer = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|error| format!("http {}", error_kind(&error)))?;
        let status = answer.status();
        let cache = answer
            .headers()
            .get(cdn::CACHE_STATUS_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        if status != reqwest::StatusCode::OK {
            let body = answer.text().await.unwrap_or_default();
            return Err(format!("{} {body}", status.as_u16()));
        }
        // Read as it arrives rather than gathered (a map is tens of KB): a whole answer is a
        // JSON object, and a whole map has a character per seat.
        let (mut length, mut first, mut last) = (0usize, None, None);
        while let Some(chunk) =
            answer.chunk().await.map_err(|error| format!("body {}", error_kind(&error)))?
        {
            length += chunk.len();
            first = first.or_else(|| chunk.first().copied());
            last = chunk.last().copied().or(last);
        }
        let whole = first == Some(b'{')
            && last == Some(b'}')
            && (request != Request::SeatMap || length > self.seats_per_show as usize);
        if !whole {
            return Err(format!("a {} of {length} bytes is not whole", request.name()));
        }
        Ok(Browsed::labelled(cache.as_deref()))
    }

    fn helper_processes(&self) -> Vec<u32> {
        self.cdn.iter().filter_map(Cdn::pid).collect()
    }

    fn origin_reads(&self) -> Option<OriginReads> {
        self.cdn.as_ref().map(Cdn::origin_reads)
    }

    async fn reader(&self, index: u32) -> Result<Option<ClusterReader>, BenchError> {
        if self.rest.is_some() {
            return Ok(None);
        }
        let (_, client) = &self.readers[index as usize % self.readers.len()];
        Ok(Some(ClusterReader { client: client.clone(), maps: vec![None; self.shows.len()] }))
    }

    async fn read_map(&self, reader: &mut ClusterReader, show: u32) -> Result<u64, String> {
        let show_id = self.shows.get(show as usize).copied().ok_or("no such show")?;
        let kept = reader.maps.get_mut(show as usize).ok_or("no such show")?;
        // As a front end keeps a map: the whole map once, then what changed since the map's
        // position (or, when the node cannot tell, the whole map in 2 bits per seat).
        let map = match kept {
            Some(map) => {
                reader.client.refresh_seat_map(map).await.map_err(|error| error.to_string())?;
                map
            }
            None => {
                let map = reader.client.follow_seat_map(show_id).await;
                kept.insert(map.map_err(|error| error.to_string())?)
            }
        };
        Ok((map.seats.len() - map.count(SeatStatus::Free)) as u64)
    }

    async fn final_state(&self) -> Result<Vec<HeldSeat>, BenchError> {
        let maps = futures_util::stream::iter(self.shows.clone())
            .map(|show_id| {
                let client = self.client.clone();
                async move {
                    client.get_seat_map_linearizable(show_id).await.map_err(|error| {
                        BenchError::backend(
                            NAME,
                            format!("read show {show_id}'s seat map: {error}"),
                        )
                    })
                }
            })
            .buffered(SHOW_SETUP_PARALLELISM)
            .collect::<Vec<_>>()
            .await;
        let mut held = Vec::new();
        for (show, map) in (0u32..).zip(maps) {
            for (seat, &status) in (0u32..).zip(&map?.seats) {
                if status != SeatStatus::Free as i32 {
                    held.push(HeldSeat { show, seat, owner: None });
                }
            }
        }
        Ok(held)
    }

    async fn state_costs(&self) -> Option<StateCosts> {
        let mut costs = StateCosts::default();
        for url in &self.metrics {
            let response = self.http.get(url).send().await.ok()?.error_for_status().ok()?;
            let text = response.text().await.ok()?;
            let sum = |name: &str| metric_sum(&text, name);
            costs.snapshots_built += sum("booking_snapshots_built_total") as u64;
            costs.state_copies += sum("booking_state_copies_total") as u64;
            costs.copy_seconds += sum("booking_state_copy_seconds_total");
            costs.copy_max_seconds =
                costs.copy_max_seconds.max(metric_max(&text, "booking_state_copy_max_seconds"));
        }
        Some(costs)
    }

    async fn snapshot_points(&self) -> Vec<SnapshotPoint> {
        let mut points = Vec::new();
        for url in &self.metrics {
            let Ok(response) = self.http.get(url).send().await else { continue };
            let Ok(text) = response.text().await else { continue };
            points.extend(snapshot_points(&text));
        }
        points
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(cdn) = &self.cdn {
            notes.push(format!(
                "first minute, cluster-rest: every request, reads and holds, goes over plain \
                 HTTP/1.1 to nginx {} (Debian's) on 127.0.0.1, the CDN stand-in \
                 (jepsen/src/bench/cdn.rs: 2 workers, proxy_cache with what the node's \
                 Cache-Control says and nothing else, one origin request per missing or expired \
                 entry (proxy_cache_lock, use_stale updating, background update, revalidation \
                 by ETag), requests with Authorization never cached), which spreads what it \
                 does not serve over the 3 nodes (https, verified against the cluster's CA, \
                 keep-alive); reads are anonymous (the show page /v1/shows/{{id}} and the whole \
                 compact seat map /v1/shows/{{id}}/availability), holds carry the worker's \
                 session; origin reads are nginx's own log of the GETs it sent to a node \
                 (background refreshes included)",
                cdn.version(),
            ));
        }
        if self.rest.is_some() && self.cdn.is_none() {
            notes.push(
                "cluster-rest: the cluster below, but every attempt is one REST request (POST \
                 /v1/shows/{id}/holds with the worker's session token and its own \
                 Idempotency-Key) over https with one connection pool shared by the workers, \
                 worker i sending to node i mod 3 as a load balancer would spread buyers (a \
                 node that does not lead the show forwards the request to its leader, one hop); \
                 201 is a hold, 409 seat_unavailable a conflict, another 4xx a refusal, a 5xx or \
                 a lost request an unknown outcome; no map readers"
                    .to_owned(),
            );
        }
        notes.push(format!(
            "cluster: 3 bookingd nodes on 127.0.0.1-3:{PORT_BASE}, {} data groups, peers dialled \
             directly (no fault proxies), one SDK client shared by every worker, a fresh \
             session every {HOLDS_PER_SESSION} holds, hold TTL {} s; final state from \
             linearizable seat maps (status only: any seat not free counts as held); map \
             readers read any replica, spread over the nodes, each keeping its map and asking \
             for what changed since its position (follow_seat_map, then refresh_seat_map: the \
             changed seats, or the whole map in 2 bits per seat when the node cannot tell); a snapshot every {} entries per group{}",
            self.groups,
            self.hold_ttl.as_secs(),
            self.snapshot_logs,
            if self.args.is_empty() {
                String::new()
            } else {
                format!("; nodes also run with {}", self.args.join(" "))
            },
        ));
        notes
    }
}

/// A short label of a failed HTTP request.
fn error_kind(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else {
        "transport"
    }
}

/// The values of metric `name` in an OpenMetrics text, one per label set.
fn metric_values<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = f64> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        // `name{labels} value` or `name value`; not a longer name that starts with `name`.
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            return None;
        }
        line.rsplit(' ').next()?.parse().ok()
    })
}

/// The label sets of metric `name` with their values: `name{labels} value` as `(labels, value)`.
fn labelled_values<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (labels, value) = rest.split_once("} ")?;
        Some((labels, value.trim().parse().ok()?))
    })
}

/// One node's last snapshot of each group that built one: its size (which may be of a snapshot
/// installed after the build, rare in a benchmark) beside the build time.
fn snapshot_points(text: &str) -> Vec<SnapshotPoint> {
    labelled_values(text, "booking_snapshot_last_build_seconds")
        .filter(|&(_, seconds)| seconds > 0.0)
        .filter_map(|(labels, build_seconds)| {
            let (_, bytes) = labelled_values(text, "booking_snapshot_last_bytes")
                .find(|&(other, bytes)| other == labels && bytes > 0.0)?;
            Some(SnapshotPoint { bytes, build_seconds })
        })
        .collect()
}

/// The sum of metric `name` over its label sets (0 when absent).
fn metric_sum(text: &str, name: &str) -> f64 {
    metric_values(text, name).sum()
}

/// The largest value of metric `name` (0 when absent).
fn metric_max(text: &str, name: &str) -> f64 {
    metric_values(text, name).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_summed_over_label_sets_and_never_mixed_with_longer_names() {
        let text = "# TYPE booking_state_copies counter\n\
                    booking_state_copies_total{group=\"1\"} 3\n\
                    booking_state_copies_total{group=\"2\"} 4\n\
                    booking_state_copies_total_other 100\n\
                    booking_state_copy_max_seconds{group=\"1\"} 0.5\n\
                    booking_state_copy_max_seconds{group=\"2\"} 0.25\n";
        assert_eq!(metric_sum(text, "booking_state_copies_total"), 7.0);
        assert_eq!(metric_max(text, "booking_state_copy_max_seconds"), 0.5);
        assert_eq!(metric_sum(text, "booking_snapshots_built_total"), 0.0);
    }

    #[test]
    fn snapshot_sizes_pair_with_build_times_of_the_same_group() {
        let text = "booking_snapshot_last_build_seconds{group=\"1\"} 0.25\n\
                    booking_snapshot_last_build_seconds{group=\"2\"} 0\n\
                    booking_snapshot_last_build_seconds{group=\"3\"} 0.5\n\
                    booking_snapshot_last_bytes{group=\"3\"} 3000\n\
                    booking_snapshot_last_bytes{group=\"2\"} 2000\n\
                    booking_snapshot_last_bytes{group=\"1\"} 1000\n";
        let points = snapshot_points(text);
        assert_eq!(
            points,
            vec![
                SnapshotPoint { bytes: 1000.0, build_seconds: 0.25 },
                SnapshotPoint { bytes: 3000.0, build_seconds: 0.5 },
            ]
        );
    }
}
