//! The node processes of a [`Cluster`]: spawn, kill -9, restart (one or all at once), wipe, a
//! node outside the initial set, pause and resume (SIGSTOP, SIGCONT), log tails, crash
//! detection, and the end of the cluster (stop, shutdown, drop).
//!
//! Owns the children it spawned and nothing else: a signal goes only to its own child's pid,
//! while that child is certainly unreaped (the pid cannot have been reused), never to a process
//! found by name; every child still running is killed when the cluster is dropped. Never builds
//! the binary and never judges what a node did: the tests and checkers do.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::process::{Child, Command};

use crate::NodeId;
use crate::cluster::Cluster;
use crate::error::ClusterError;
use crate::skew::{self, write_skew_file};
use crate::wait::Waiting;

/// What a node prints on stdout once it serves.
const LISTENING: &str = "listening=";

/// How many lines of a node's log an error about its crash carries.
const LOG_TAIL_LINES: usize = 30;

/// How many lines of each node's log a failed test prints.
const FAILED_TEST_TAIL_LINES: usize = 40;

/// What one node is doing, as far as the cluster did it.
#[derive(Debug, Default)]
pub(crate) struct NodeState {
    /// The running process (paused or not); `None` once killed, stopped or found exited.
    pub(crate) child: Option<Child>,
    /// Whether it was stopped with SIGSTOP and not continued.
    pub(crate) paused: bool,
    /// How many times it was started.
    pub(crate) starts: u32,
    /// The wall-clock offset it runs with, ms.
    pub(crate) skew_ms: i64,
}

/// One node: where it listens, its files, and its process.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: NodeId,
    /// Its client port.
    pub(crate) listen: SocketAddr,
    /// Its peer port (Raft between nodes, mutual TLS).
    pub(crate) peer_listen: SocketAddr,
    /// Its directory: `data/`, the logs and the skew file.
    pub(crate) dir: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) stdout: PathBuf,
    pub(crate) stderr: PathBuf,
    pub(crate) skew_file: PathBuf,
    /// Its `--peers`: the proxies of its outgoing links (or its peers' own addresses).
    pub(crate) peers: String,
    /// Changed by one step at a time, never held across an await.
    pub(crate) state: Mutex<NodeState>,
    /// Held across a whole process operation (kill, restart, pause, resume), so that two of
    /// them never interleave and a signal never targets a pid that was reaped meanwhile.
    pub(crate) operation: tokio::sync::Mutex<()>,
}

impl Node {
    /// Node `id`'s record, not started, with its directory `root/node-<id>` made and its skew
    /// file written (no skew).
    ///
    /// # Errors
    ///
    /// When its data directory exists already (a cluster is founded once), or a file cannot be
    /// made.
    pub(crate) fn create(
        root: &Path,
        id: NodeId,
        (listen, peer_listen): (SocketAddr, SocketAddr),
        peers: String,
    ) -> Result<Node, ClusterError> {
        let dir = root.join(format!("node-{id}"));
        let data = dir.join("data");
        if data.exists() {
            return Err(ClusterError::Invalid(format!(
                "{} exists: a cluster is founded in a fresh directory",
                data.display()
            )));
        }
        fs::create_dir_all(&dir).map_err(ClusterError::io(format!("create {}", dir.display())))?;
        let node = Node {
            id,
            listen,
            peer_listen,
            data,
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
            skew_file: dir.join("faketime"),
            dir,
            peers,
            state: Mutex::new(NodeState::default()),
            operation: tokio::sync::Mutex::new(()),
        };
        write_skew_file(&node.skew_file, 0)?;
        Ok(node)
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, NodeState> {
        // Each change is a few assignments without a panic between them.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The last `lines` lines of its stderr (its log) and of its stdout.
    fn log_tail(&self, lines: usize) -> String {
        let mut tail = String::new();
        for (name, path) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let text = fs::read_to_string(path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            let _ = writeln!(tail, "----- node {} {name} ({}) -----", self.id, path.display());
            for line in &all[from..] {
                let _ = writeln!(tail, "{line}");
            }
        }
        tail
    }
}

impl Cluster {
    /// The last `lines` lines of node `id`'s logs (empty for an unknown node).
    pub fn log_tail(&self, id: NodeId, lines: usize) -> String {
        self.nodes.get(&id).map(|node| node.log_tail(lines)).unwrap_or_default()
    }

    /// The nodes whose process runs (paused ones included), as far as the cluster knows.
    pub fn running(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|node| node.state().child.is_some())
            .map(|node| node.id)
            .collect()
    }

    /// The nodes that run and are not paused: those that can answer.
    pub fn available(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|node| {
                let state = node.state();
                state.child.is_some() && !state.paused
            })
            .map(|node| node.id)
            .collect()
    }

    /// The nodes that do not run (killed, or found exited).
    pub fn down(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|node| node.state().child.is_none())
            .map(|node| node.id)
            .collect()
    }

    /// The nodes paused with SIGSTOP.
    pub fn paused(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|node| node.state().paused).map(|node| node.id).collect()
    }

    /// Node `id`'s pid while it runs.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.nodes.get(&id).and_then(|node| node.state().child.as_ref().and_then(Child::id))
    }

    /// The nodes that exited without being killed, with their exit status, since the start.
    pub fn crashes(&self) -> Vec<(NodeId, String)> {
        self.crashes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Spawns node `id`'s process, with `--bootstrap` if `bootstrap`, its output appended to
    /// its files after a line that says which start this is.
    pub(crate) fn spawn(&self, id: NodeId, bootstrap: bool) -> Result<(), ClusterError> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(ClusterError::WrongState {
                node: id,
                state: "belongs to a stopped cluster".into(),
            });
        }
        let options = &self.options;
        let node = self.node(id)?;
        let mut state = node.state();
        if state.child.is_some() {
            return Err(ClusterError::WrongState { node: id, state: "runs already".into() });
        }
        let mut command = Command::new(&self.binary);
        command
            .arg("--id")
            .arg(id.to_string())
            .arg("--data")
            .arg(&node.data)
            .arg("--listen")
            .arg(node.listen.to_string())
            .arg("--peer-listen")
            .arg(node.peer_listen.to_string())
            .arg("--peers")
            .arg(&node.peers)
            .arg("--groups")
            .arg(options.groups.to_string())
            .arg("--replicas")
            .arg(options.replicas.to_string())
            .arg("--heartbeat-ms")
            .arg(options.heartbeat_ms.to_string())
            .arg("--election-min-ms")
            .arg(options.election_min_ms.to_string())
            .arg("--election-max-ms")
            .arg(options.election_max_ms.to_string());
        // The secrets go in files only the owner reads: never on the command line (which the
        // banner below logs, and every local user can list).
        let secrets = node.dir.join("secrets");
        fs::create_dir_all(&secrets).map_err(ClusterError::io("create the secrets directory"))?;
        for (flag, name, value) in options.secret_files() {
            let path = secrets.join(name);
            write_private(&path, value)?;
            command.arg(flag).arg(&path);
        }
        // The node's certificate, issued once by the cluster's CA.
        let tls = node.dir.join("tls");
        if !tls.join("node.key").exists() {
            fs::create_dir_all(&tls).map_err(ClusterError::io("create the tls directory"))?;
            let issued = client::certs::issue_node(
                &self.authority,
                id,
                &[node.listen.ip().to_string(), "localhost".into()],
                client::certs::NODE_DAYS_DEFAULT,
            )
            .map_err(|error| ClusterError::Invalid(error.to_string()))?;
            write_private(&tls.join("ca.crt"), &self.authority.certificate_pem)?;
            write_private(&tls.join("node.crt"), &issued.certificate_pem)?;
            write_private(&tls.join("node.key"), &issued.key_pem)?;
        }
        for (flag, name) in [
            ("--tls-ca-file", "ca.crt"),
            ("--tls-cert-file", "node.crt"),
            ("--tls-key-file", "node.key"),
        ] {
            command.arg(flag).arg(tls.join(name));
        }
        if options.client_tls {
            command.arg("--client-tls");
        }
        // Clients, and the leader hints they follow, go through the node's door.
        if let Some(door) = self.doors.get(&id) {
            command.arg("--advertise").arg(door.address().to_string());
        }
        let optional = [
            ("--rate-per-session", options.rate_per_session.map(|rate| rate.to_string())),
            ("--rate-per-address", options.rate_per_address.map(|rate| rate.to_string())),
            (
                "--rate-new-sessions-per-address",
                options.rate_new_sessions_per_address.map(|rate| rate.to_string()),
            ),
            ("--snapshot-logs", options.snapshot_logs.map(|entries| entries.to_string())),
            ("--tick-ms", options.tick_ms.map(|tick| tick.to_string())),
        ];
        for (flag, value) in optional {
            if let Some(value) = value {
                command.arg(flag).arg(value);
            }
        }
        if bootstrap {
            command.arg("--bootstrap");
        }
        command.args(&options.extra_args);
        command.env("RUST_LOG", &options.log_filter);
        if let Some(library) = &self.faketime {
            skew::run_under_faketime(&mut command, library, &node.skew_file);
        }
        for (name, value) in options.node_env.get(&id).into_iter().flatten() {
            command.env(name, value);
        }
        state.starts += 1;
        let banner = format!("===== start {} of node {id}: {command:?}\n", state.starts);
        let mut stdout = append(&node.stdout)?;
        let mut stderr = append(&node.stderr)?;
        stdout.write_all(banner.as_bytes()).map_err(ClusterError::io("write a log banner"))?;
        stderr.write_all(banner.as_bytes()).map_err(ClusterError::io("write a log banner"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // A cluster dropped without `stop` (a panicking runner) still kills its nodes.
            .kill_on_drop(true)
            .spawn()
            .map_err(ClusterError::io(format!("spawn {}", self.binary.display())))?;
        state.child = Some(child);
        state.paused = false;
        Ok(())
    }

    /// Waits (until [`crate::ClusterOptions::wait`]) for node `id`'s latest start to print
    /// that it serves, and to answer a status call.
    pub(crate) async fn wait_serving(&self, id: NodeId) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        let banner = format!("===== start {} of node {id}:", node.state().starts);
        let address = node.listen.to_string();
        let waiting = self.waiting(format!("node {id} to serve"), self.options.wait);
        loop {
            self.check_alive()?;
            let text = fs::read_to_string(&node.stdout).unwrap_or_default();
            let latest = text.rsplit_once(&banner).map_or("", |(_, after)| after);
            let last = if latest.contains(LISTENING) {
                match self.status_client.status(&address, false).await {
                    Ok(_) => return Ok(()),
                    Err(error) => error.to_string(),
                }
            } else {
                format!("no `{LISTENING}` line on stdout yet")
            };
            waiting.again(last).await?;
        }
    }

    /// A wait for `what` of at most `within`, polled as [`crate::ClusterOptions::poll`] says.
    pub(crate) fn waiting(&self, what: String, within: std::time::Duration) -> Waiting {
        Waiting::new(what, within).every(self.options.poll)
    }

    /// Fails if a node the cluster started has exited by itself (crashed), with its log's
    /// tail; the node is then counted as down (and recorded in [`Cluster::crashes`]).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Exited`] for the first node found exited.
    pub fn check_alive(&self) -> Result<(), ClusterError> {
        for node in self.nodes.values() {
            let exited = {
                let mut state = node.state();
                let status = match state.child.as_mut() {
                    Some(child) => child.try_wait().map_err(ClusterError::io("wait for a node"))?,
                    None => None,
                };
                if status.is_some() {
                    state.child = None;
                    state.paused = false;
                }
                status
            };
            if let Some(status) = exited {
                let status = status.to_string();
                self.crashes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((node.id, status.clone()));
                return Err(ClusterError::Exited {
                    node: node.id,
                    status,
                    log_tail: node.log_tail(LOG_TAIL_LINES),
                });
            }
        }
        Ok(())
    }

    /// Kills node `id` with SIGKILL (no chance to flush or say goodbye) and reaps it. A paused
    /// node is killed too.
    ///
    /// # Errors
    ///
    /// When it does not run.
    pub async fn kill(&self, id: NodeId) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        let _operation = node.operation.lock().await;
        let child = {
            let mut state = node.state();
            state.paused = false;
            state.child.take()
        };
        let Some(mut child) = child else {
            return Err(ClusterError::WrongState { node: id, state: "does not run".into() });
        };
        self.forget_faketime_files(&child);
        // SIGKILL to this child's pid only; it also ends a stopped process.
        child.start_kill().map_err(ClusterError::io(format!("kill node {id}")))?;
        child.wait().await.map_err(ClusterError::io(format!("reap node {id}")))?;
        Ok(())
    }

    /// Starts node `id` again on its data (without `--bootstrap`) and waits until it serves.
    ///
    /// # Errors
    ///
    /// When it runs already, or does not serve within [`crate::ClusterOptions::wait`].
    pub async fn restart(&self, id: NodeId) -> Result<(), ClusterError> {
        self.restart_all(&[id]).await
    }

    /// Starts nodes `ids` again on their data, all at once (a majority restarted one at a time
    /// could not elect anyone until the last), and waits until each serves.
    ///
    /// # Errors
    ///
    /// As [`Cluster::restart`].
    pub async fn restart_all(&self, ids: &[NodeId]) -> Result<(), ClusterError> {
        // In id order and once each: the locks are taken in one order by everyone, and a
        // second lock of the same node would wait forever.
        let ids: std::collections::BTreeSet<NodeId> = ids.iter().copied().collect();
        let mut guards = Vec::with_capacity(ids.len());
        for &id in &ids {
            guards.push(self.node(id)?.operation.lock().await);
        }
        for &id in &ids {
            self.spawn(id, false)?;
        }
        drop(guards);
        for &id in &ids {
            self.wait_serving(id).await?;
        }
        Ok(())
    }

    /// Deletes node `id`'s data directory (its whole database: log, vote, snapshots); the node
    /// must not run.
    ///
    /// # Errors
    ///
    /// When it runs, or the directory cannot be removed.
    pub async fn wipe(&self, id: NodeId) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        let _operation = node.operation.lock().await;
        if node.state().child.is_some() {
            return Err(ClusterError::WrongState {
                node: id,
                state: "runs: kill it before wiping it".into(),
            });
        }
        match fs::remove_dir_all(&node.data) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(ClusterError::Io {
                context: format!("remove {}", node.data.display()),
                source: error,
            }),
            _ => Ok(()),
        }
    }

    /// Starts node `id`, not one of the initial nodes, with an empty database: it hosts no
    /// group until an operator adds it (see [`Cluster::add_learner`]). It dials the other
    /// nodes' peer ports directly (no proxy), and they dial it at the peer address its
    /// membership carries. The
    /// cluster's clients are made again to know it.
    ///
    /// # Errors
    ///
    /// When `id` is taken, or the node does not serve within [`crate::ClusterOptions::wait`].
    pub async fn start_extra(&mut self, id: NodeId) -> Result<(), ClusterError> {
        if self.nodes.contains_key(&id) {
            return Err(ClusterError::Invalid(format!("node {id} exists already")));
        }
        // An ephemeral port stays bound until the node is spawned.
        let (listen, held) = self.options.listen(id)?;
        let (peer_listen, peer_held) = self.options.peer_listen(id, listen)?;
        let mut peers: Vec<String> =
            self.nodes.values().map(|node| format!("{}={}", node.id, node.peer_listen)).collect();
        peers.push(format!("{id}={peer_listen}"));
        self.add_node(id, (listen, peer_listen), peers.join(","))?;
        if self.options.client_doors {
            let door = crate::cluster::start_door(&self.options, id, listen).await?;
            self.doors.insert(id, door);
        }
        self.renew_clients()?;
        drop((held, peer_held));
        self.spawn(id, false)?;
        self.wait_serving(id).await
    }

    /// Pauses node `id` with SIGSTOP: it neither answers nor times anything out until resumed.
    ///
    /// # Errors
    ///
    /// When it does not run, is paused already, or the signal cannot be sent.
    pub async fn pause(&self, id: NodeId) -> Result<(), ClusterError> {
        self.signal(id, true).await
    }

    /// Continues node `id` with SIGCONT.
    ///
    /// # Errors
    ///
    /// When it does not run, is not paused, or the signal cannot be sent.
    pub async fn resume(&self, id: NodeId) -> Result<(), ClusterError> {
        self.signal(id, false).await
    }

    /// Sends SIGSTOP (`stop`) or SIGCONT to node `id`'s own pid, with the system's `kill`
    /// command (the workspace forbids the unsafe code a direct call would need).
    async fn signal(&self, id: NodeId, stop: bool) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        // Held until the signal is sent: the pid cannot be reaped (and reused) meanwhile.
        let _operation = node.operation.lock().await;
        let pid = {
            let state = node.state();
            if state.paused == stop {
                let phrase = if stop { "is paused already" } else { "is not paused" };
                return Err(ClusterError::WrongState { node: id, state: phrase.into() });
            }
            state.child.as_ref().and_then(Child::id)
        };
        let Some(pid) = pid else {
            return Err(ClusterError::WrongState { node: id, state: "does not run".into() });
        };
        let name = if stop { "STOP" } else { "CONT" };
        let status = Command::new("kill")
            .arg("-s")
            .arg(name)
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .status()
            .await
            .map_err(ClusterError::io(format!("run kill -s {name} for node {id}")))?;
        if !status.success() {
            return Err(ClusterError::Io {
                context: format!("kill -s {name} {pid} (node {id})"),
                source: io::Error::other(status.to_string()),
            });
        }
        node.state().paused = stop;
        Ok(())
    }

    /// Kills every node the cluster started and still runs (paused ones too), by its own
    /// handle, and reaps it; nothing is started again afterwards. Links stay as they are.
    pub async fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        for node in self.nodes.values() {
            let _operation = node.operation.lock().await;
            let child = node.state().child.take();
            if let Some(mut child) = child {
                self.forget_faketime_files(&child);
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            node.state().paused = false;
        }
    }

    /// Ends a test's cluster: notes a node that crashed unnoticed, stops every node, and marks
    /// the cluster finished, so that its temporary directory is deleted and no log is printed.
    ///
    /// # Errors
    ///
    /// When a node exited by itself before (a crash the test did not notice); the directory is
    /// then kept.
    pub async fn shutdown(mut self) -> Result<(), ClusterError> {
        let crashed = self.check_alive();
        self.stop().await;
        crashed?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for Cluster {
    /// Kills every process still running (a runner that failed before [`Cluster::stop`]);
    /// tokio reaps them. A test's cluster in a temporary directory that was not shut down (a
    /// failed test) prints every node's log tail and keeps the directory.
    fn drop(&mut self) {
        for node in self.nodes.values() {
            let child = node.state().child.take();
            if let Some(mut child) = child {
                self.forget_faketime_files(&child);
                let _ = child.start_kill();
            }
        }
        if self.finished {
            return;
        }
        if let Some(temporary) = self.temporary.take() {
            for node in self.nodes.values() {
                eprintln!("{}", node.log_tail(FAILED_TEST_TAIL_LINES));
            }
            eprintln!("cluster files kept in {}", temporary.keep().display());
        }
    }
}

/// Opens `path` for appending, creating it.
fn append(path: &Path) -> Result<File, ClusterError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(ClusterError::io(format!("open {}", path.display())))
}

/// Writes `value` to `path`, readable and writable by the owner only.
fn write_private(path: &Path, value: &str) -> Result<(), ClusterError> {
    use std::os::unix::fs::OpenOptionsExt;
    let what = || format!("write {}", path.display());
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(ClusterError::io(what()))?;
    file.write_all(value.as_bytes()).map_err(ClusterError::io(what()))
}
