//! etcd 3.4 as a benchmark backend: three members on 127.0.0.1 (clients on ports 2480, 2482,
//! 2484, peers on 2481, 2483, 2485), data on disk, fsync on (etcd's default), one key per
//! seat, and a hold as one transaction: compare every seat key's version to 0 (the key does
//! not exist) and put them all, with the attempt id as the value.
//!
//! Owns the member processes (stopped when the backend stops or is dropped), the key layout
//! (`b` + run + show + seat, big-endian, so that a show is one key prefix) and reading the keys
//! back. Never weakens etcd's durability (`--unsafe-no-fsync` stays off).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, KvClient, Txn, TxnOp};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::bench::driver::RunSpec;
use crate::bench::workload::Attempt;
use crate::bench::{Backend, BenchError, HeldSeat, Options, Outcome, Target};

/// The backend's name in the report.
const NAME: &str = "etcd";

/// Member `i` (0-based) serves clients on `CLIENT_PORT_BASE + 2 i` and peers on the next port.
const CLIENT_PORT_BASE: u16 = 2480;

/// Members of the etcd cluster.
const MEMBERS: u16 = 3;

/// How long the members may take to elect a leader and serve.
const START_WAIT: Duration = Duration::from_secs(30);

/// The client's timeout of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Workers per client connection: each client is one HTTP/2 connection per member, and a
/// single connection would serialise thousands of workers behind one socket.
const WORKERS_PER_CONNECTION: u32 = 32;

/// Keys per page when the final state is read back (well under the 4 MiB message limit).
const PAGE_KEYS: i64 = 10_000;

/// The largest message the client decodes (a seat map of a whole show).
const DECODE_MAX_BYTES: usize = 256 << 20;

/// The etcd members this process started.
pub struct EtcdBackend {
    members: Vec<Child>,
    endpoints: Vec<String>,
    _dir: TempDir,
}

impl EtcdBackend {
    /// Starts three members and waits until they serve a write.
    ///
    /// # Errors
    ///
    /// When the binary is missing, a port is taken, or no leader serves in time.
    pub async fn start(options: &Options) -> Result<EtcdBackend, BenchError> {
        std::fs::create_dir_all(&options.data_dir)
            .map_err(BenchError::io(format!("create {}", options.data_dir.display())))?;
        let dir = tempfile::Builder::new()
            .prefix("etcd-")
            .tempdir_in(&options.data_dir)
            .map_err(BenchError::io("make etcd's directory"))?;
        let peer_url =
            |member: u16| format!("http://127.0.0.1:{}", CLIENT_PORT_BASE + 2 * member + 1);
        let client_url =
            |member: u16| format!("http://127.0.0.1:{}", CLIENT_PORT_BASE + 2 * member);
        let initial_cluster: Vec<String> =
            (0..MEMBERS).map(|member| format!("m{member}={}", peer_url(member))).collect();
        let token = format!("bench-{}", std::process::id());
        let mut members = Vec::new();
        for member in 0..MEMBERS {
            let data: PathBuf = dir.path().join(format!("m{member}"));
            let log = std::fs::File::create(dir.path().join(format!("m{member}.log")))
                .map_err(BenchError::io("create an etcd log"))?;
            let log_err = log.try_clone().map_err(BenchError::io("clone an etcd log"))?;
            let child = Command::new(&options.etcd_bin)
                .arg("--name")
                .arg(format!("m{member}"))
                .arg("--data-dir")
                .arg(&data)
                .arg("--listen-client-urls")
                .arg(client_url(member))
                .arg("--advertise-client-urls")
                .arg(client_url(member))
                .arg("--listen-peer-urls")
                .arg(peer_url(member))
                .arg("--initial-advertise-peer-urls")
                .arg(peer_url(member))
                .arg("--initial-cluster")
                .arg(initial_cluster.join(","))
                .arg("--initial-cluster-state")
                .arg("new")
                .arg("--initial-cluster-token")
                .arg(&token)
                // Room for every run's keys (the default quota is 2 GiB).
                .arg("--quota-backend-bytes")
                .arg("8589934592")
                .arg("--logger")
                .arg("zap")
                .arg("--log-level")
                .arg("warn")
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log_err)
                .kill_on_drop(true)
                .spawn()
                .map_err(BenchError::io(format!("start {}", options.etcd_bin.display())))?;
            members.push(child);
        }
        let endpoints: Vec<String> = (0..MEMBERS).map(client_url).collect();
        let backend = EtcdBackend { members, endpoints, _dir: dir };
        backend.wait_serving().await?;
        Ok(backend)
    }

    /// Waits until a write through every endpoint succeeds.
    async fn wait_serving(&self) -> Result<(), BenchError> {
        let deadline = tokio::time::Instant::now() + START_WAIT;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            match connect(&self.endpoints).await {
                Ok(client) => match client.kv_client().put("bench-ready", "1", None).await {
                    Ok(_) => return Ok(()),
                    Err(error) => last = error.to_string(),
                },
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(BenchError::backend(NAME, format!("no leader within {START_WAIT:?}: {last}")))
    }
}

/// A client of every member.
async fn connect(endpoints: &[String]) -> Result<Client, BenchError> {
    let options = ConnectOptions::new()
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(Duration::from_secs(2));
    Client::connect(endpoints, Some(options))
        .await
        .map_err(|error| BenchError::backend(NAME, format!("connect: {error}")))
}

impl Backend for EtcdBackend {
    type Run = EtcdRun;

    fn name(&self) -> &'static str {
        NAME
    }

    async fn prepare(&self, spec: &RunSpec) -> Result<EtcdRun, BenchError> {
        let connections = spec.clients.div_ceil(WORKERS_PER_CONNECTION).max(1);
        let mut clients = Vec::new();
        for _ in 0..connections {
            let client = connect(&self.endpoints).await?;
            clients.push(client.kv_client().max_decoding_message_size(DECODE_MAX_BYTES));
        }
        let mut readers = Vec::new();
        for member in &self.endpoints {
            let client = connect(std::slice::from_ref(member)).await?;
            readers.push(client.kv_client().max_decoding_message_size(DECODE_MAX_BYTES));
        }
        Ok(EtcdRun { clients, readers, run: spec.index, shows: spec.layout.shows })
    }

    fn processes(&self) -> Vec<u32> {
        self.members.iter().filter_map(Child::id).collect()
    }

    async fn stop(&mut self) {
        for member in &mut self.members {
            let _ = member.start_kill();
            let _ = member.wait().await;
        }
    }
}

/// One run: its key prefix (the run's number) and its connections.
pub struct EtcdRun {
    /// Connections shared round-robin by the workers.
    clients: Vec<KvClient>,
    /// One connection per member, for the readers.
    readers: Vec<KvClient>,
    run: u32,
    shows: u32,
}

impl EtcdRun {
    /// The prefix of every key of show `show` in this run.
    fn prefix(&self, show: u32) -> [u8; 9] {
        let mut prefix = [0u8; 9];
        prefix[0] = b'b';
        prefix[1..5].copy_from_slice(&self.run.to_be_bytes());
        prefix[5..9].copy_from_slice(&show.to_be_bytes());
        prefix
    }

    /// The key of one seat.
    fn key(&self, show: u32, seat: u32) -> Vec<u8> {
        let mut key = Vec::with_capacity(13);
        key.extend_from_slice(&self.prefix(show));
        key.extend_from_slice(&seat.to_be_bytes());
        key
    }

    /// The first key after every key of show `show` (the prefix's range end).
    fn prefix_end(&self, show: u32) -> Vec<u8> {
        // Show indexes are far below u32::MAX, so adding one to the show never carries into the
        // run's bytes.
        let mut end = self.prefix(show).to_vec();
        end[5..9].copy_from_slice(&(show + 1).to_be_bytes());
        end
    }
}

/// gRPC codes (numbered as in the gRPC spec) that say a request was refused before it took
/// effect: INVALID_ARGUMENT, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION,
/// OUT_OF_RANGE. Any other failure of a transaction may have taken effect.
const REFUSED_CODES: [i32; 5] = [3, 7, 8, 9, 11];

/// What an etcd error means for an attempt: a definite failure or an unknown outcome.
fn outcome_of(error: &etcd_client::Error) -> Outcome {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            let code = status.code();
            if REFUSED_CODES.contains(&(code as i32)) {
                Outcome::Failed(format!("grpc {code:?}"))
            } else {
                Outcome::Unknown(format!("grpc {code:?}"))
            }
        }
        etcd_client::Error::InvalidArgs(message) => Outcome::Failed(format!("invalid: {message}")),
        other => Outcome::Unknown(format!("client error: {other}")),
    }
}

/// A worker: its connection.
pub struct EtcdWorker {
    client: KvClient,
}

/// A reader: a connection to one member.
pub struct EtcdReader {
    client: KvClient,
}

impl Target for EtcdRun {
    type Worker = EtcdWorker;
    type Reader = EtcdReader;

    async fn worker(&self, index: u32) -> Result<EtcdWorker, BenchError> {
        let client = self.clients[index as usize % self.clients.len()].clone();
        Ok(EtcdWorker { client })
    }

    async fn maintain(&self, _worker: &mut EtcdWorker) -> Result<(), BenchError> {
        Ok(())
    }

    async fn attempt(&self, worker: &mut EtcdWorker, attempt: &Attempt) -> Outcome {
        let value = attempt.id.to_be_bytes();
        let count = usize::from(attempt.count);
        let mut compares = Vec::with_capacity(count);
        let mut puts = Vec::with_capacity(count);
        for seat in attempt.seats() {
            let key = self.key(attempt.show, seat);
            compares.push(Compare::version(key.clone(), CompareOp::Equal, 0));
            puts.push(TxnOp::put(key, value, None));
        }
        match worker.client.txn(Txn::new().when(compares).and_then(puts)).await {
            Ok(reply) if reply.succeeded() => Outcome::Held,
            Ok(_) => Outcome::Conflict,
            Err(error) => outcome_of(&error),
        }
    }

    async fn reader(&self, index: u32) -> Result<Option<EtcdReader>, BenchError> {
        let client = self.readers[index as usize % self.readers.len()].clone();
        Ok(Some(EtcdReader { client }))
    }

    async fn read_map(&self, reader: &mut EtcdReader, show: u32) -> Result<u64, String> {
        // A serializable read is served by the member asked, from its own state (no quorum),
        // like the cluster's any-replica seat map; keys only, since the key names the seat.
        let options = GetOptions::new()
            .with_range(self.prefix_end(show))
            .with_serializable()
            .with_keys_only();
        let reply = reader
            .client
            .get(self.prefix(show).to_vec(), Some(options))
            .await
            .map_err(|error| error.to_string())?;
        Ok(reply.kvs().len() as u64)
    }

    async fn final_state(&self) -> Result<Vec<HeldSeat>, BenchError> {
        let mut client = self.clients[0].clone();
        let mut held = Vec::new();
        for show in 0..self.shows {
            let end = self.prefix_end(show);
            let mut from = self.prefix(show).to_vec();
            loop {
                let options = GetOptions::new().with_range(end.clone()).with_limit(PAGE_KEYS);
                let reply = client.get(from.clone(), Some(options)).await.map_err(|error| {
                    BenchError::backend(NAME, format!("read show {show}'s keys: {error}"))
                })?;
                for kv in reply.kvs() {
                    let key = kv.key();
                    let seat = key
                        .get(9..13)
                        .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
                        .map(u32::from_be_bytes)
                        .unwrap_or(u32::MAX);
                    let owner = <[u8; 8]>::try_from(kv.value()).ok().map(u64::from_be_bytes);
                    held.push(HeldSeat { show, seat, owner });
                }
                match reply.kvs().last() {
                    Some(last) if reply.more() => {
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => break,
                }
            }
        }
        Ok(held)
    }

    fn notes(&self) -> Vec<String> {
        vec![format!(
            "etcd: 3.4, 3 members on 127.0.0.1:{CLIENT_PORT_BASE}-{} (default fsync, \
             heartbeat and snapshot settings, 8 GiB quota); {} client connections to all \
             members ({WORKERS_PER_CONNECTION} workers per connection); one key per seat, a \
             hold is one txn comparing each seat key's version to 0 and putting them all; map \
             reads are serializable keys-only range reads of the show's prefix from one member \
             (only held seats have keys)",
            CLIENT_PORT_BASE + 2 * MEMBERS - 1,
            self.clients.len()
        )]
    }
}
