//! The configuration of one `bookingd` node: its command line (clap) and an optional TOML file
//! with the same keys, the command line winning.
//!
//! Owns parsing and checking the settings, and turning them into openraft's config. Never opens
//! a file other than the config file, and never starts anything.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use raft::{GroupId, NodeId};
use serde::Deserialize;
use statemachine::SinkName;
use statemachine::limits::SINKS_PER_GROUP_MAX;

use crate::secrets::{SecretFiles, Secrets};
use crate::serve;

/// The groups a cluster has by default: the metadata group 0 and this many data groups.
pub const DATA_GROUPS_DEFAULT: u64 = 4;
/// The most data groups a cluster may have (each costs every hosting node a few tasks).
pub const DATA_GROUPS_MAX: u64 = 256;
/// Voters of each data group by default.
pub const REPLICAS_DEFAULT: usize = 3;
/// The leader's heartbeat interval by default, ms.
pub const HEARTBEAT_MS_DEFAULT: u64 = 50;
/// The shortest election timeout by default, ms.
///
/// openraft makes the leader's lease as long as the longest election timeout, and a follower
/// stands (pre-vote first) only once the lease and then its own random timeout have passed
/// since it last heard from the leader: 600-800 ms after a leader's death with these defaults,
/// and its groups acknowledge writes again 0.6-0.8 s after a kill -9 (`scripts/failover.sh`,
/// with and without load; the README has the distribution). 150/600/1,200 took 1.8-2.2 s. Four
/// heartbeats fit in the shortest timeout, and none of the measured runs, at up to 4,000 hold
/// attempts/s on two cores, had a spurious election.
pub const ELECTION_MIN_MS_DEFAULT: u64 = 200;
/// The longest election timeout by default, ms (also the leader's lease).
pub const ELECTION_MAX_MS_DEFAULT: u64 = 400;

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for these settings.
    #[error("config file {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: Box<toml::de::Error>,
    },
    /// A setting is missing or out of range.
    #[error("{0}")]
    Invalid(String),
}

/// Seconds after a show ended at which its leader archives it, once settled: a week.
pub const ARCHIVE_AFTER_S_DEFAULT: u64 = 7 * 24 * 3_600;

/// Seconds after which a live show's terminal records are compacted: 30 days.
pub const RETENTION_S_DEFAULT: u64 = 30 * 24 * 3_600;

/// `bookingd`: one node of the booking cluster.
///
/// Every node hosts the metadata group 0 and every data group (a replica it is not a member of
/// waits idle until an operator adds it). Start the initial nodes of a new cluster with
/// `--bootstrap`, once; never pass it again (a wiped node restarted with it would found its
/// groups anew).
#[derive(Clone, Debug, Default, Parser, Deserialize)]
#[command(name = "bookingd", version = crate::VERSION, about, long_about = None)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Args {
    /// A TOML file with any of these settings (kebab-case keys); the command line wins.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// This node's id (non-zero, unique in the cluster, never reused).
    #[arg(long)]
    pub id: Option<NodeId>,
    /// The directory of this node's database (created if missing).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Where to serve the client APIs (gRPC and REST) and the admin API.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<SocketAddr>,
    /// The address clients reach this node at; defaults to --listen.
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Where to serve Raft traffic between nodes (and the admin API, for the bootstrap), behind
    /// mutual TLS with --tls-ca-file, --tls-cert-file and --tls-key-file. Required unless --dev,
    /// which serves Raft on the client port without TLS.
    #[arg(long, value_name = "HOST:PORT")]
    pub peer_listen: Option<SocketAddr>,
    /// The address other nodes reach this node's peer port at; defaults to --peer-listen.
    #[arg(long, value_name = "HOST:PORT")]
    pub peer_advertise: Option<String>,
    /// The cluster's CA certificate (PEM, `bookctl certs init`): a peer's certificate must be
    /// signed by it.
    #[arg(long, value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// This node's certificate (PEM, `bookctl certs node`), naming `node-<id>.peers.booking`:
    /// presented on the peer port and when dialing peers, whose certificates must name the node
    /// they are dialed as.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// This node's private key (PEM), in a file only the node's user reads.
    #[arg(long, value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Serve the client port (REST, gRPC, the pages) over TLS with this node's certificate
    /// (--tls-cert-file, --tls-key-file; `bookctl certs node --host` names the hosts clients
    /// reach it by). Clients then speak https and trust the cluster's CA (`bookctl --ca-file`).
    #[arg(long)]
    #[serde(default)]
    pub client_tls: bool,
    /// For a process that embeds nodes on a network of its own (the simulator): Raft on the
    /// client port without TLS, outside --dev. Neither a flag nor a config key.
    #[arg(skip)]
    #[serde(skip)]
    pub plain_peers: bool,
    /// This node's address book: ID=HOST:PORT,... Peers are dialled at these addresses (their
    /// peer ports, or their client ports under --dev) whatever the groups' memberships say.
    /// With --bootstrap, these ids (and this node) are the initial members.
    #[arg(long, value_name = "ID=HOST:PORT,...", value_delimiter = ',', value_parser = parse_peer)]
    #[serde(default, deserialize_with = "peers_from_table")]
    pub peers: Vec<(NodeId, String)>,
    /// Found the cluster's groups on first start (only on a node with an empty database).
    #[arg(long)]
    #[serde(default)]
    pub bootstrap: bool,
    /// Data groups (1 and up), the same on every node of a cluster.
    #[arg(long)]
    pub groups: Option<u64>,
    /// Voters of each data group at bootstrap.
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Raft heartbeat interval, ms [default: 50].
    #[arg(long, value_name = "MS")]
    pub heartbeat_ms: Option<u64>,
    /// Shortest election timeout, ms [default: 200].
    #[arg(long, value_name = "MS")]
    pub election_min_ms: Option<u64>,
    /// Longest election timeout, ms, also the leader's lease [default: 400].
    #[arg(long, value_name = "MS")]
    pub election_max_ms: Option<u64>,
    /// Entries between snapshots of a group (the log before a snapshot is purged).
    #[arg(long, value_name = "N")]
    pub snapshot_logs: Option<u64>,
    /// How often a leader's tick worker looks for overdue holds, grants and offers, ms.
    #[arg(long, value_name = "MS")]
    pub tick_ms: Option<u64>,
    /// Seconds after a show's last change of status (closed or cancelled) at which a leader
    /// archives it, once its money is settled; 0 never archives by itself (`bookctl show
    /// archive` still does). Default 604,800 (a week).
    #[arg(long, value_name = "S")]
    pub archive_after_s: Option<u64>,
    /// Seconds after which the terminal records of a live show (cancelled and expired holds
    /// with their settled payments, tickets and waitlist entries that ended) leave its state
    /// for an archive segment; 0 keeps them. Default 2,592,000 (30 days).
    #[arg(long, value_name = "S")]
    pub retention_s: Option<u64>,
    /// A file holding the secret session tokens are signed with (or `BOOKING_SESSION_SECRET`):
    /// the same on every node, at least 32 bytes.
    #[arg(long, value_name = "FILE")]
    pub session_secret_file: Option<PathBuf>,
    /// While rotating the session secret: a file holding the previous one (or
    /// `BOOKING_SESSION_SECRET_PREVIOUS`). Tokens it signed are still accepted; new ones are
    /// signed with --session-secret-file. Remove it once --session-ttl-s has passed.
    #[arg(long, value_name = "FILE")]
    pub session_secret_previous_file: Option<PathBuf>,
    /// How long a session token is good for after it is issued, in seconds (default 86,400: a
    /// day; at least 60); an older one is refused as expired, and the buyer starts a new
    /// session.
    #[arg(long, value_name = "S")]
    pub session_ttl_s: Option<u64>,
    /// A file holding the bearer token every operator call needs, gRPC `AdminService` included
    /// (or `BOOKING_OPERATOR_TOKEN`): at least 32 bytes.
    #[arg(long, value_name = "FILE")]
    pub operator_token_file: Option<PathBuf>,
    /// A file holding the secret payment provider webhooks are signed with (or
    /// `BOOKING_WEBHOOK_SECRET`; the header is `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." +
    /// raw body>`): at least 32 bytes.
    #[arg(long, value_name = "FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Development mode: the public development secrets stand in for any secret not given, and
    /// only a loopback --listen address is accepted. Never for a cluster others can reach.
    #[arg(long)]
    #[serde(default)]
    pub dev: bool,
    /// How far a webhook signature's timestamp may be from this node's clock, either way, in
    /// seconds (default 300, at most 86400); an older delivery is refused as a replay.
    #[arg(long, value_name = "S")]
    pub webhook_tolerance_s: Option<u64>,
    /// The payment provider's API (`http://HOST:PORT`, e.g. paysim's): each data group's
    /// leader charges every payment attempt through it and records the outcomes. Without it,
    /// outcomes arrive only as webhooks.
    #[arg(long, value_name = "URL")]
    pub provider_url: Option<String>,
    /// An outbox sink: NAME=URL (repeatable, or comma-separated). Each data group's leader
    /// delivers every outbox event to every sink, signed with the sink secret; the same sinks
    /// on every node. Without any, the leader acknowledges the outbox instead.
    #[arg(long = "sink", value_name = "NAME=URL", value_delimiter = ',', value_parser = parse_sink)]
    #[serde(default, deserialize_with = "sinks_from_table")]
    pub sinks: Vec<(String, String)>,
    /// A file holding the secret sink deliveries are signed with, as the payment provider signs
    /// webhooks (or `BOOKING_SINK_SECRET`): at least 32 bytes; required with --sink.
    #[arg(long, value_name = "FILE")]
    pub sink_secret_file: Option<PathBuf>,
    /// Failed attempts of a batch before its events become dead letters (default 8).
    #[arg(long, value_name = "N")]
    pub sink_attempts: Option<u32>,
    /// Age after which a failing event becomes a dead letter at once, seconds (default 600).
    #[arg(long, value_name = "S")]
    pub sink_age_max_s: Option<u64>,
    /// Requests in flight at once per sink (default 4).
    #[arg(long, value_name = "N")]
    pub sink_concurrency: Option<usize>,
    /// Requests per second per sink (default 50).
    #[arg(long, value_name = "N")]
    pub sink_rate: Option<u32>,
    /// How often the auditor looks for a new checkpoint of each group, ms (default 1,000).
    #[arg(long, value_name = "MS")]
    pub audit_interval_ms: Option<u64>,
    /// Every how many log entries each replica keeps a checkpoint of a group's state for the
    /// auditor (invariants, digest compared with the leader's); 0 turns the auditor off
    /// (default 10,000, as snapshots: each audit reads the whole state, and at 1,000 it took a
    /// fifth of the throughput of a loaded 2-core node).
    #[arg(long, value_name = "N")]
    pub audit_checkpoint_entries: Option<u64>,
    /// Requests per second one session may make (token bucket; bursts of twice as many).
    #[arg(long, value_name = "N")]
    pub rate_per_session: Option<u32>,
    /// Requests per second one client address may make (token bucket; bursts of twice as many);
    /// an IPv6 address counts as its /64.
    #[arg(long, value_name = "N")]
    pub rate_per_address: Option<u32>,
    /// Sessions per second one client address may create (default 100; bursts of twice as
    /// many).
    #[arg(long, value_name = "N")]
    pub rate_new_sessions_per_address: Option<u32>,
    /// A class of routes with a rate of its own, per session (per address for a caller without
    /// one), on top of the session and address buckets: CLASS=N requests a second (repeatable,
    /// or comma-separated; bursts of twice as many). Classes: holds (HoldMany pays per item),
    /// checkout, queue, waitlist, search, seat-maps, webhook. In a config file:
    /// `route-rate = { holds = 20, search = 100 }`.
    #[arg(long = "route-rate", value_name = "CLASS=N", value_delimiter = ',', value_parser = crate::limits::parse_route_rate)]
    #[serde(default, deserialize_with = "route_rates_from_table")]
    pub route_rate: Vec<(crate::limits::RouteClass, u32)>,
    /// The largest snapshot this node accepts from a leader, in bytes (default 4 GiB, at least
    /// 1 MiB): a stream announcing more is refused on its first message. A snapshot is
    /// written to the data directory while it arrives and read into memory once whole, to be
    /// installed, so this bounds the disk and the memory one transfer takes (one transfer per
    /// group at a time).
    #[arg(long, value_name = "BYTES")]
    pub snapshot_max_bytes: Option<u64>,
    /// Free space the data directory's file system keeps in reserve, in bytes (default 64 MiB):
    /// while it has less, client writes are refused with 507 / RESOURCE_EXHAUSTED `disk_full`
    /// (nothing changed) and reads still served, so that Raft's own traffic, expiries and
    /// snapshots still have room. Writes are taken again as soon as there is room. 0: never
    /// refuse (a node whose disk really fills stops, losing nothing acknowledged).
    #[arg(long, value_name = "BYTES")]
    pub disk_reserve_bytes: Option<u64>,
    /// Client connections served at once (default 10,000); a connection past the cap is closed
    /// as soon as it is accepted.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Client requests (REST and gRPC) running at once (default 1,024); a request past the cap
    /// is answered at once with 503 / UNAVAILABLE `overloaded` and `Retry-After: 1`, never
    /// queued. Health checks, metrics and Raft traffic are not counted.
    #[arg(long, value_name = "N")]
    pub max_in_flight: Option<usize>,
    /// Concurrent HTTP/2 streams one client connection may open (default 256).
    #[arg(long, value_name = "N")]
    pub max_streams_per_connection: Option<u32>,
    /// How long a client request may take, reading its body included, before it is answered
    /// 503 `unavailable` (outcome unknown: retry with the same idempotency key), ms (default
    /// 30,000). A stream's deadline is to its first message.
    #[arg(long, value_name = "MS")]
    pub request_deadline_ms: Option<u64>,
    /// How long a client may take to send an HTTP/1 request's headers, ms (default 10,000).
    #[arg(long, value_name = "MS")]
    pub header_deadline_ms: Option<u64>,
}

/// Node `id`'s peer TLS from the files named by the three `--tls-*` flags, all required.
fn peer_tls(
    id: NodeId,
    files: [(&str, Option<PathBuf>); 3],
) -> Result<raft::tls::PeerTls, ConfigError> {
    let mut pems = Vec::new();
    for (flag, path) in files {
        let path =
            path.ok_or_else(|| ConfigError::Invalid(format!("--peer-listen needs {flag}")))?;
        let pem = std::fs::read(&path)
            .map_err(|error| ConfigError::Invalid(format!("{flag} {}: {error}", path.display())))?;
        pems.push(pem);
    }
    let [ca, certificate, key]: [Vec<u8>; 3] =
        pems.try_into().map_err(|_| ConfigError::Invalid("three TLS files".into()))?;
    raft::tls::PeerTls::from_pem(id, ca, certificate, key)
        .map_err(|error| ConfigError::Invalid(format!("--tls-*: {error}")))
}

/// The client port's TLS from the node's certificate and key files, both required.
fn client_tls(
    certificate: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> Result<crate::serve::ClientTls, ConfigError> {
    let read = |flag: &str, path: Option<&std::path::Path>| {
        let path =
            path.ok_or_else(|| ConfigError::Invalid(format!("--client-tls needs {flag}")))?;
        std::fs::read(path)
            .map_err(|error| ConfigError::Invalid(format!("{flag} {}: {error}", path.display())))
    };
    let certificate = read("--tls-cert-file", certificate)?;
    let key = read("--tls-key-file", key)?;
    crate::serve::ClientTls::from_pem(&certificate, &key)
        .map_err(|error| ConfigError::Invalid(format!("--client-tls: {error}")))
}

/// What a node trusts when it calls another node's client port over TLS: the cluster's CA.
fn node_roots(ca: Option<&std::path::Path>) -> Result<crate::http_client::Roots, ConfigError> {
    let path = ca.ok_or_else(|| {
        ConfigError::Invalid(
            "--client-tls needs --tls-ca-file: nodes call each other's client port (forwarding \
             to a leader) over TLS too"
                .into(),
        )
    })?;
    let pem = std::fs::read(path).map_err(|error| {
        ConfigError::Invalid(format!("--tls-ca-file {}: {error}", path.display()))
    })?;
    crate::http_client::Roots::from_pem(&pem)
        .map_err(|error| ConfigError::Invalid(format!("--tls-ca-file {}: {error}", path.display())))
}

fn parse_peer(text: &str) -> Result<(NodeId, String), String> {
    let (id, address) =
        text.split_once('=').ok_or_else(|| format!("`{text}`: expected ID=HOST:PORT"))?;
    let id = id.trim().parse::<NodeId>().map_err(|error| format!("`{id}`: {error}"))?;
    let address = address.trim();
    if address.is_empty() {
        return Err(format!("peer {id}: empty address"));
    }
    Ok((id, address.to_owned()))
}

fn parse_sink(text: &str) -> Result<(String, String), String> {
    let (name, url) = text.split_once('=').ok_or_else(|| format!("`{text}`: expected NAME=URL"))?;
    Ok((name.trim().to_owned(), url.trim().to_owned()))
}

/// `route-rate = { holds = 20, ... }` in TOML.
fn route_rates_from_table<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(crate::limits::RouteClass, u32)>, D::Error> {
    let table = BTreeMap::<String, u32>::deserialize(deserializer)?;
    table
        .into_iter()
        .map(|(class, rate)| {
            crate::limits::parse_route_rate(&format!("{class}={rate}"))
                .map_err(serde::de::Error::custom)
        })
        .collect()
}

/// `sinks = { crm = "http://...", ... }` in TOML.
fn sinks_from_table<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(String, String)>, D::Error> {
    Ok(BTreeMap::<String, String>::deserialize(deserializer)?.into_iter().collect())
}

/// `peers = { 1 = "127.0.0.1:7101", ... }` in TOML.
fn peers_from_table<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(NodeId, String)>, D::Error> {
    let table = BTreeMap::<String, String>::deserialize(deserializer)?;
    table
        .into_iter()
        .map(|(id, address)| {
            parse_peer(&format!("{id}={address}")).map_err(serde::de::Error::custom)
        })
        .collect()
}

/// The checked settings of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node.
    pub id: NodeId,
    /// Its database directory.
    pub data: PathBuf,
    /// Where it serves clients.
    pub listen: SocketAddr,
    /// Where clients reach it.
    pub advertise: String,
    /// Its peer port, or `None` when Raft traffic is served on the client port without TLS
    /// (`--dev`, the simulator).
    pub peer: Option<PeerPort>,
    /// The client port's TLS (`--client-tls`), or `None` for plain HTTP.
    pub client_tls: Option<crate::serve::ClientTls>,
    /// With `--client-tls`, how this node verifies the others' client ports when it calls
    /// them (forwarding to a leader, the operator's overview): the cluster's CA
    /// (`--tls-ca-file`). `None`: it calls them over plain HTTP.
    pub node_roots: Option<crate::http_client::Roots>,
    /// Its address book (without itself).
    pub peers: BTreeMap<NodeId, String>,
    /// Whether to found the groups this node is the first replica of.
    pub bootstrap: bool,
    /// Data groups: ids `1..=data_groups`.
    pub data_groups: u64,
    /// Voters per data group at bootstrap.
    pub replicas: usize,
    /// Raft timing, ms.
    pub heartbeat_ms: u64,
    /// Shortest election timeout, ms.
    pub election_min_ms: u64,
    /// Longest election timeout, ms.
    pub election_max_ms: u64,
    /// Entries between snapshots.
    pub snapshot_logs: u64,
    /// The tick worker's period, ms.
    pub tick_ms: u64,
    /// Seconds after a show ended at which its leader archives it, once settled (0: never).
    pub archive_after_s: u64,
    /// Seconds after which a live show's terminal records are compacted (0: never).
    pub retention_s: u64,
    /// The session secret, the operator credential, the webhook and sink secrets (their
    /// `Debug` shows none of them).
    pub secrets: Secrets,
    /// Development mode (`--dev`): loopback only, development secrets allowed.
    pub dev: bool,
    /// How far a webhook signature's timestamp may be from this node's clock, in seconds
    /// (1..=[`crate::signature::TOLERANCE_S_MAX`]).
    pub webhook_tolerance_s: u64,
    /// How long a session token is good for, in seconds.
    pub session_ttl_s: u64,
    /// The payment provider's API, if configured (checked to be an http(s) URL).
    pub provider_url: Option<String>,
    /// The outbox sinks: name and URL (checked), in the order given.
    pub sinks: Vec<(SinkName, String)>,
    /// Failed attempts of a batch before its events become dead letters.
    pub sink_attempts: u32,
    /// Age after which a failing event becomes a dead letter, seconds.
    pub sink_age_max_s: u64,
    /// Requests in flight per sink.
    pub sink_concurrency: usize,
    /// Requests per second per sink.
    pub sink_rate: u32,
    /// How often the auditor looks for new checkpoints, ms.
    pub audit_interval_ms: u64,
    /// Entries between checkpoints (0: no auditor).
    pub audit_checkpoint_entries: u64,
    /// Requests per second per session.
    pub rate_per_session: u32,
    /// Requests per second per client address.
    pub rate_per_address: u32,
    /// Sessions created per second per client address.
    pub rate_new_sessions_per_address: u32,
    /// The largest snapshot accepted from a leader (`--snapshot-max-bytes`).
    pub snapshot_max_bytes: u64,
    /// The free space below which client writes are refused (`--disk-reserve-bytes`).
    pub disk_reserve_bytes: u64,
    /// The classes of routes with a rate of their own (`--route-rate`), requests per second.
    pub route_rates: BTreeMap<crate::limits::RouteClass, u32>,
    /// Client connections served at once.
    pub max_connections: usize,
    /// Client requests running at once; more are shed.
    pub max_in_flight: usize,
    /// HTTP/2 streams per client connection.
    pub max_streams_per_connection: u32,
    /// How long a client request may take.
    pub request_deadline: Duration,
    /// How long an HTTP/1 client may take to send a request's headers.
    pub header_deadline: Duration,
}

/// Where a node serves Raft traffic between nodes, and its mutual TLS.
#[derive(Clone, Debug)]
pub struct PeerPort {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Where other nodes reach it.
    pub advertise: String,
    /// The CA, this node's certificate and key (`Debug` shows none of them).
    pub tls: raft::tls::PeerTls,
}

impl Config {
    /// Reads the config file named by `args` (if any), lets `args` override it, and checks the
    /// result.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the file cannot be read or parsed, or a setting is missing or out
    /// of range.
    pub fn load(args: Args) -> Result<Config, ConfigError> {
        Config::load_with(args, &|name| std::env::var(name).ok())
    }

    /// As [`Config::load`], with the secrets' environment variables looked up in `env` instead
    /// of the process's environment (a test's in-process node, the simulator's nodes).
    ///
    /// # Errors
    ///
    /// As [`Config::load`].
    pub fn load_with(
        args: Args,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| ConfigError::Read { path: path.clone(), source })?;
                toml::from_str::<Args>(&text).map_err(|source| ConfigError::Parse {
                    path: path.clone(),
                    source: Box::new(source),
                })?
            }
            None => Args::default(),
        };
        Config::merge(args, file, env)
    }

    fn merge(
        args: Args,
        file: Args,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid(message);
        let id = args.id.or(file.id).ok_or_else(|| invalid("--id is required".into()))?;
        if id == 0 {
            return Err(invalid("--id: node ids start at 1".into()));
        }
        let data = args.data.or(file.data).ok_or_else(|| invalid("--data is required".into()))?;
        let listen =
            args.listen.or(file.listen).ok_or_else(|| invalid("--listen is required".into()))?;
        let advertise = args.advertise.or(file.advertise).unwrap_or_else(|| listen.to_string());
        let dev = args.dev || file.dev;
        let peer_listen = args.peer_listen.or(file.peer_listen);
        for address in std::iter::once(listen).chain(peer_listen) {
            if dev && !address.ip().is_loopback() {
                return Err(invalid(format!(
                    "--dev: {address} is not a loopback address; development mode (public \
                     secrets) listens on loopback only"
                )));
            }
        }
        let mut peers = BTreeMap::new();
        let listed = if args.peers.is_empty() { file.peers } else { args.peers };
        for (peer, address) in listed {
            if peer == 0 {
                return Err(invalid("--peers: node ids start at 1".into()));
            }
            if let Some(previous) = peers.insert(peer, address.clone())
                && previous != address
            {
                return Err(invalid(format!("--peers: node {peer} listed twice")));
            }
        }
        peers.remove(&id);
        let data_groups = args.groups.or(file.groups).unwrap_or(DATA_GROUPS_DEFAULT);
        if !(1..=DATA_GROUPS_MAX).contains(&data_groups) {
            return Err(invalid(format!("--groups: 1..={DATA_GROUPS_MAX}")));
        }
        let replicas = args.replicas.or(file.replicas).unwrap_or(REPLICAS_DEFAULT);
        if replicas == 0 {
            return Err(invalid("--replicas: at least 1".into()));
        }
        let provider_url = args.provider_url.or(file.provider_url);
        if let Some(url) = &provider_url {
            crate::provider::Provider::new(url, None).map_err(invalid)?;
        }
        let heartbeat_ms = args.heartbeat_ms.or(file.heartbeat_ms).unwrap_or(HEARTBEAT_MS_DEFAULT);
        let election_min_ms =
            args.election_min_ms.or(file.election_min_ms).unwrap_or(ELECTION_MIN_MS_DEFAULT);
        let election_max_ms =
            args.election_max_ms.or(file.election_max_ms).unwrap_or(ELECTION_MAX_MS_DEFAULT);
        if heartbeat_ms == 0
            || election_min_ms <= heartbeat_ms
            || election_max_ms <= election_min_ms
        {
            return Err(invalid(
                "timing: need 0 < heartbeat-ms < election-min-ms < election-max-ms".into(),
            ));
        }
        let snapshot_logs = args.snapshot_logs.or(file.snapshot_logs).unwrap_or(10_000);
        if snapshot_logs == 0 {
            return Err(invalid("--snapshot-logs: at least 1".into()));
        }
        let tick_ms = args.tick_ms.or(file.tick_ms).unwrap_or(100).max(1);
        let listed_sinks = if args.sinks.is_empty() { file.sinks } else { args.sinks };
        let mut sinks: Vec<(SinkName, String)> = Vec::new();
        for (name, url) in listed_sinks {
            let name = SinkName::new(&name)
                .map_err(|rejection| invalid(format!("--sink {name}: {rejection}")))?;
            if sinks.iter().any(|(known, _)| *known == name) {
                return Err(invalid(format!("--sink: {name} named twice")));
            }
            crate::sink::Sink::new(name.clone(), &url, "", None).map_err(invalid)?;
            sinks.push((name, url));
        }
        if sinks.len() > SINKS_PER_GROUP_MAX {
            return Err(invalid(format!("--sink: at most {SINKS_PER_GROUP_MAX} sinks")));
        }
        let sink_attempts = args.sink_attempts.or(file.sink_attempts).unwrap_or(8);
        let sink_concurrency = args.sink_concurrency.or(file.sink_concurrency).unwrap_or(4);
        let sink_rate = args.sink_rate.or(file.sink_rate).unwrap_or(50);
        if sink_attempts == 0 || sink_concurrency == 0 || sink_rate == 0 {
            return Err(invalid(
                "--sink-attempts, --sink-concurrency, --sink-rate: at least 1".into(),
            ));
        }
        let files = SecretFiles {
            session: args.session_secret_file.or(file.session_secret_file),
            session_previous: args
                .session_secret_previous_file
                .or(file.session_secret_previous_file),
            operator: args.operator_token_file.or(file.operator_token_file),
            webhook: args.webhook_secret_file.or(file.webhook_secret_file),
            sink: args.sink_secret_file.or(file.sink_secret_file),
        };
        let secrets = Secrets::load(&files, env, dev, !sinks.is_empty())?;
        let tls_files = [
            ("--tls-ca-file", args.tls_ca_file.or(file.tls_ca_file)),
            ("--tls-cert-file", args.tls_cert_file.or(file.tls_cert_file)),
            ("--tls-key-file", args.tls_key_file.or(file.tls_key_file)),
        ];
        let (client_tls, node_roots) = if args.client_tls || file.client_tls {
            let served = client_tls(tls_files[1].1.as_deref(), tls_files[2].1.as_deref())?;
            (Some(served), Some(node_roots(tls_files[0].1.as_deref())?))
        } else {
            (None, None)
        };
        let peer = match peer_listen {
            Some(peer_listen) => {
                let advertise = args
                    .peer_advertise
                    .or(file.peer_advertise)
                    .unwrap_or_else(|| peer_listen.to_string());
                Some(PeerPort { listen: peer_listen, advertise, tls: peer_tls(id, tls_files)? })
            }
            None => {
                // Without a peer port the files serve only --client-tls.
                let unused = |_: &str| client_tls.is_none();
                if let Some((flag, _)) =
                    tls_files.iter().find(|(flag, path)| path.is_some() && unused(flag))
                {
                    return Err(invalid(format!("{flag} needs --peer-listen")));
                }
                if !dev && !args.plain_peers {
                    return Err(invalid(
                        "--peer-listen is required, with --tls-ca-file, --tls-cert-file and \
                         --tls-key-file (`bookctl certs`): nodes speak Raft to each other over \
                         mutual TLS on a port of its own. Only --dev (loopback) serves Raft on \
                         the client port without TLS"
                            .into(),
                    ));
                }
                None
            }
        };
        let sink_age_max_s = args.sink_age_max_s.or(file.sink_age_max_s).unwrap_or(600).max(1);
        let webhook_tolerance_s = args
            .webhook_tolerance_s
            .or(file.webhook_tolerance_s)
            .unwrap_or(crate::signature::TOLERANCE_S_DEFAULT);
        if !(1..=crate::signature::TOLERANCE_S_MAX).contains(&webhook_tolerance_s) {
            return Err(invalid(format!(
                "--webhook-tolerance-s: 1..={}",
                crate::signature::TOLERANCE_S_MAX
            )));
        }
        let snapshot_max_bytes =
            args.snapshot_max_bytes.or(file.snapshot_max_bytes).unwrap_or(raft::SNAPSHOT_BYTES_MAX);
        if snapshot_max_bytes < 1 << 20 {
            return Err(invalid("--snapshot-max-bytes: at least 1 MiB (1048576)".into()));
        }
        let session_ttl_s = args
            .session_ttl_s
            .or(file.session_ttl_s)
            .unwrap_or(crate::sessions::SESSION_TTL_S_DEFAULT);
        if session_ttl_s < 60 {
            return Err(invalid("--session-ttl-s: at least 60".into()));
        }
        Ok(Config {
            id,
            session_ttl_s,
            data,
            listen,
            advertise,
            peer,
            client_tls,
            node_roots,
            peers,
            bootstrap: args.bootstrap || file.bootstrap,
            data_groups,
            replicas,
            heartbeat_ms,
            election_min_ms,
            election_max_ms,
            snapshot_logs,
            tick_ms,
            archive_after_s: args
                .archive_after_s
                .or(file.archive_after_s)
                .unwrap_or(ARCHIVE_AFTER_S_DEFAULT),
            retention_s: args.retention_s.or(file.retention_s).unwrap_or(RETENTION_S_DEFAULT),
            secrets,
            dev,
            webhook_tolerance_s,
            provider_url,
            sinks,
            sink_attempts,
            sink_age_max_s,
            sink_concurrency,
            sink_rate,
            audit_interval_ms: args
                .audit_interval_ms
                .or(file.audit_interval_ms)
                .unwrap_or(1_000)
                .max(1),
            audit_checkpoint_entries: args
                .audit_checkpoint_entries
                .or(file.audit_checkpoint_entries)
                .unwrap_or(10_000),
            rate_per_session: args.rate_per_session.or(file.rate_per_session).unwrap_or(50).max(1),
            snapshot_max_bytes,
            disk_reserve_bytes: args
                .disk_reserve_bytes
                .or(file.disk_reserve_bytes)
                .unwrap_or(crate::disk::RESERVE_BYTES_DEFAULT),
            route_rates: if args.route_rate.is_empty() { file.route_rate } else { args.route_rate }
                .into_iter()
                .collect(),
            rate_new_sessions_per_address: args
                .rate_new_sessions_per_address
                .or(file.rate_new_sessions_per_address)
                .unwrap_or(crate::limits::NEW_SESSIONS_PER_ADDRESS_DEFAULT)
                .max(1),
            rate_per_address: args
                .rate_per_address
                .or(file.rate_per_address)
                .unwrap_or(20_000)
                .max(1),
            max_connections: args
                .max_connections
                .or(file.max_connections)
                .unwrap_or(serve::MAX_CONNECTIONS_DEFAULT)
                .max(1),
            max_in_flight: args
                .max_in_flight
                .or(file.max_in_flight)
                .unwrap_or(serve::MAX_IN_FLIGHT_DEFAULT)
                .max(1),
            max_streams_per_connection: args
                .max_streams_per_connection
                .or(file.max_streams_per_connection)
                .unwrap_or(serve::MAX_STREAMS_PER_CONNECTION_DEFAULT)
                .max(1),
            request_deadline: args
                .request_deadline_ms
                .or(file.request_deadline_ms)
                .map_or(serve::REQUEST_DEADLINE_DEFAULT, |ms| Duration::from_millis(ms.max(1))),
            header_deadline: args
                .header_deadline_ms
                .or(file.header_deadline_ms)
                .map_or(serve::HEADER_DEADLINE_DEFAULT, |ms| Duration::from_millis(ms.max(1))),
        })
    }

    /// The address memberships carry for this node: its client address, and its peer port's
    /// when it has one (`raft::tls::membership_address`).
    pub fn membership_address(&self) -> String {
        let peer = self.peer.as_ref().map(|peer| peer.advertise.as_str());
        raft::tls::membership_address(&self.advertise, peer)
    }

    /// Every group id of the cluster: the metadata group 0, then the data groups.
    pub fn group_ids(&self) -> impl Iterator<Item = GroupId> {
        0..=self.data_groups
    }

    /// The initial members at bootstrap: this node and its peers, in id order.
    pub fn initial_members(&self) -> Vec<NodeId> {
        let mut members: Vec<NodeId> = self.peers.keys().copied().collect();
        members.push(self.id);
        members.sort_unstable();
        members.dedup();
        members
    }

    /// The openraft config every group of this node runs with.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] if openraft refuses the timing.
    pub fn raft(&self) -> Result<Arc<openraft::Config>, ConfigError> {
        let config = openraft::Config {
            cluster_name: "booking".to_owned(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_min_ms,
            election_timeout_max: self.election_max_ms,
            // Not tied to the (short) election timeouts alone: a large state takes seconds.
            install_snapshot_timeout: (self.election_max_ms * 4).max(5_000),
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_logs),
            // Keep a little log behind the snapshot so a briefly lagging follower catches up by
            // log rather than by a whole snapshot.
            max_in_snapshot_log_to_keep: self.snapshot_logs.min(1_000),
            // A node back from a partition (or removed without hearing it) asks first whether
            // it could win, instead of raising every member's term and deposing a healthy
            // leader.
            enable_pre_vote: Some(true),
            // A restarted leader stands for election again instead of resuming its old term
            // (openraft's default). Resuming is unsafe after a power loss: the leader may have
            // lost log entries it appended but had not synced, which the followers hold and
            // the group committed; leading the same term again, it appends other entries at
            // those indexes, and a follower that already holds an entry with that log id keeps
            // the old one. The simulator found replicas diverging this way (32 of its first
            // 300 seeds).
            enable_leader_restore: Some(false),
            ..openraft::Config::default()
        };
        config.validate().map(Arc::new).map_err(|error| ConfigError::Invalid(error.to_string()))
    }
}

/// The voters each group starts with at bootstrap: group 0 has every initial member; data
/// group `g` has `replicas` members starting at position `(g - 1) mod n` of the id-ordered
/// members, so both replicas and first replicas (which become the first leaders) rotate over
/// the nodes.
pub fn initial_voters(group: GroupId, members: &[NodeId], replicas: usize) -> Vec<NodeId> {
    if group == statemachine::METADATA_GROUP || members.is_empty() {
        return members.to_vec();
    }
    let count = replicas.min(members.len());
    let start = usize::try_from((group - 1) % members.len() as u64).unwrap_or(0);
    (0..count).map(|offset| members[(start + offset) % members.len()]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::test_env;

    /// The command line `line`, with Raft on the client port (`plain_peers`): these tests are
    /// not about the peer port (`peers_speak_mutual_tls_on_a_port_of_their_own` is).
    fn args(line: &str) -> Args {
        Args { plain_peers: true, ..Args::try_parse_from(line.split_whitespace()).unwrap() }
    }

    #[test]
    fn peers_speak_mutual_tls_on_a_port_of_their_own() {
        let parse = |line: &str| Args::try_parse_from(line.split_whitespace()).unwrap();
        let refuse = |line: &str| {
            Config::merge(parse(line), Args::default(), &test_env).unwrap_err().to_string()
        };
        let base = "bookingd --id 1 --data /x --listen 127.0.0.1:1";
        assert!(refuse(base).contains("--peer-listen is required"));
        assert!(refuse(&format!("{base} --tls-ca-file /ca")).contains("needs --peer-listen"));
        let with_port = format!("{base} --peer-listen 127.0.0.1:2");
        assert!(refuse(&with_port).contains("--peer-listen needs --tls-ca-file"));
        // `--dev` keeps Raft on the client port, loopback only, peer port included.
        let dev = Config::merge(parse(&format!("{base} --dev")), Args::default(), &test_env);
        assert!(dev.unwrap().peer.is_none());
        let open = format!("{base} --dev --peer-listen 0.0.0.0:2");
        assert!(refuse(&open).contains("loopback"));

        let dir = tempfile::tempdir().unwrap();
        let ca = client::certs::new_authority("test", 1).unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let ca_file = write("ca.crt", &ca.certificate_pem);
        for id in [1, 2] {
            let node = client::certs::issue_node(&ca, id, &[], 1).unwrap();
            write(&format!("node-{id}.crt"), &node.certificate_pem);
            write(&format!("node-{id}.key"), &node.key_pem);
        }
        let tls = |cert: u64, key: u64| {
            let path = |name: String| dir.path().join(name).display().to_string();
            format!(
                "{with_port} --peer-advertise n1:2 --tls-ca-file {ca_file} --tls-cert-file {} \
                 --tls-key-file {}",
                path(format!("node-{cert}.crt")),
                path(format!("node-{key}.key"))
            )
        };
        let config = Config::merge(parse(&tls(1, 1)), Args::default(), &test_env).unwrap();
        assert_eq!(config.membership_address(), "127.0.0.1:1 peer=n1:2");
        assert!(!format!("{config:?}").contains("PRIVATE KEY"), "Debug shows no key");
        // Node 2's certificate does not make node 1.
        assert!(refuse(&tls(2, 2)).contains("node 2's"));
        let missing = tls(1, 1).replace(&ca_file, "/nonexistent/ca.crt");
        assert!(refuse(&missing).contains("--tls-ca-file /nonexistent/ca.crt"));
        let not_pem = tls(1, 1).replace(&ca_file, &write("junk", "junk"));
        assert!(refuse(&not_pem).contains("not a PEM certificate"));
    }

    #[test]
    fn command_line_wins_over_the_file() {
        let file: Args = toml::from_str(
            "id = 9\ndata = \"/x\"\nlisten = \"127.0.0.1:1\"\ngroups = 8\n\
             [peers]\n2 = \"127.0.0.1:2\"\n",
        )
        .unwrap();
        let config =
            Config::merge(args("bookingd --id 1 --listen 127.0.0.1:7101"), file, &test_env)
                .unwrap();
        assert_eq!(config.id, 1);
        assert_eq!(config.data_groups, 8);
        assert_eq!(config.listen.port(), 7101);
        assert_eq!(config.peers, [(2, "127.0.0.1:2".to_owned())].into());
        assert_eq!(config.initial_members(), vec![1, 2]);
        assert_eq!(config.webhook_tolerance_s, crate::signature::TOLERANCE_S_DEFAULT);
        assert_eq!(config.session_ttl_s, crate::sessions::SESSION_TTL_S_DEFAULT);
        assert_eq!(config.max_in_flight, crate::serve::MAX_IN_FLIGHT_DEFAULT);
        assert!(config.client_tls.is_none());
        assert!(config.route_rates.is_empty(), "no route has a rate of its own by default");
        assert_eq!(config.snapshot_max_bytes, raft::SNAPSHOT_BYTES_MAX);
        let config = Config::merge(
            args("bookingd --id 1 --data /x --listen 127.0.0.1:1 --route-rate holds=20,search=5"),
            toml::from_str("route-rate = { checkout = 3 }").unwrap(),
            &test_env,
        )
        .unwrap();
        let rates: Vec<_> = config.route_rates.into_iter().collect();
        use crate::limits::RouteClass;
        assert_eq!(rates, [(RouteClass::Holds, 20), (RouteClass::Search, 5)], "the flag wins");
        let config = Config::merge(
            args("bookingd --id 1 --data /x --listen 127.0.0.1:1"),
            toml::from_str("route-rate = { checkout = 3 }").unwrap(),
            &test_env,
        )
        .unwrap();
        assert_eq!(config.route_rates.into_iter().collect::<Vec<_>>(), [(RouteClass::Checkout, 3)]);
        assert!(toml::from_str::<Args>("route-rate = { nowhere = 3 }").is_err());
        let config = Config::merge(
            args("bookingd --id 1 --data /x --listen 127.0.0.1:1 --webhook-tolerance-s 60"),
            toml::from_str("webhook-tolerance-s = 900").unwrap(),
            &test_env,
        )
        .unwrap();
        assert_eq!(config.webhook_tolerance_s, 60);
    }

    #[test]
    fn bad_settings_are_refused_with_their_name() {
        let base = "bookingd --id 1 --data /x --listen 127.0.0.1:1";
        let refuse = |extra: &str| {
            let error = Config::merge(args(&format!("{base} {extra}")), Args::default(), &test_env);
            error.unwrap_err().to_string()
        };
        assert!(refuse("--groups 0").contains("--groups"));
        assert!(refuse("--heartbeat-ms 900").contains("timing"));
        assert!(refuse("--peers 0=a:1").contains("--peers"));
        assert!(refuse("--webhook-tolerance-s 0").contains("--webhook-tolerance-s"));
        assert!(refuse("--webhook-tolerance-s 86401").contains("--webhook-tolerance-s"));
        assert!(refuse("--session-ttl-s 59").contains("--session-ttl-s"));
        assert!(refuse("--client-tls").contains("--tls-cert-file"), "TLS needs the certificate");
        assert!(refuse("--snapshot-max-bytes 1000").contains("--snapshot-max-bytes"));
        let parse = |value: &str| {
            let error = Args::try_parse_from(["bookingd", "--route-rate", value]).unwrap_err();
            error.to_string()
        };
        assert!(parse("holds=0").contains("at least 1"));
        assert!(parse("nowhere=5").contains("no such route class"));
        assert!(Args::try_parse_from(["bookingd", "--peers", "2"]).is_err());
        let missing = Config::merge(args("bookingd --id 1"), Args::default(), &test_env);
        assert!(missing.unwrap_err().to_string().contains("--data"));
        assert!(toml::from_str::<Args>("color = 1").is_err());
    }

    #[test]
    fn secrets_come_from_files_or_the_environment_never_the_command_line() {
        // The old flags that took the value itself are gone.
        for flag in ["--session-secret", "--operator-token", "--webhook-secret", "--sink-secret"] {
            assert!(Args::try_parse_from(["bookingd", flag, "s3cret"]).is_err(), "{flag}");
        }
        let base = "bookingd --id 1 --data /x --listen 127.0.0.1:1";
        let none = |_: &str| None;
        let message = Config::merge(args(base), Args::default(), &none).unwrap_err().to_string();
        assert!(message.contains("missing secrets") && message.contains("--dev"), "{message}");
        let dev = Config::merge(args(&format!("{base} --dev")), Args::default(), &none).unwrap();
        assert!(dev.dev && dev.secrets.development);
        // The config file may name the files too.
        let dir = tempfile::tempdir().unwrap();
        let operator = dir.path().join("operator");
        std::fs::write(&operator, "o".repeat(40)).unwrap();
        let file: Args =
            toml::from_str(&format!("operator-token-file = {:?}", operator.display().to_string()))
                .unwrap();
        let config = Config::merge(args(&format!("{base} --dev")), file, &none).unwrap();
        use secrecy::ExposeSecret;
        assert_eq!(config.secrets.operator.expose_secret(), "o".repeat(40));
    }

    #[test]
    fn dev_mode_listens_on_loopback_only() {
        let none = |_: &str| None;
        for listen in ["0.0.0.0:7101", "10.0.0.5:7101", "[::]:7101"] {
            let line = format!("bookingd --id 1 --data /x --dev --listen {listen}");
            let error = Config::merge(args(&line), Args::default(), &none).unwrap_err();
            assert!(error.to_string().contains("loopback"), "{listen}: {error}");
        }
        let line = "bookingd --id 1 --data /x --dev --listen [::1]:7101";
        assert!(Config::merge(args(line), Args::default(), &none).is_ok());
        // With real secrets, any address.
        let line = "bookingd --id 1 --data /x --listen 0.0.0.0:7101";
        assert!(Config::merge(args(line), Args::default(), &test_env).is_ok());
    }

    #[test]
    fn replicas_and_first_leaders_rotate_over_the_nodes() {
        let members = [1, 2, 3, 4, 5];
        assert_eq!(initial_voters(0, &members, 3), vec![1, 2, 3, 4, 5]);
        assert_eq!(initial_voters(1, &members, 3), vec![1, 2, 3]);
        assert_eq!(initial_voters(2, &members, 3), vec![2, 3, 4]);
        assert_eq!(initial_voters(5, &members, 3), vec![5, 1, 2]);
        assert_eq!(initial_voters(6, &members, 3), vec![1, 2, 3]);
        assert_eq!(initial_voters(2, &[1, 2], 3), vec![2, 1]);
    }
}
