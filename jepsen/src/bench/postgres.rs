//! PostgreSQL 15 as a benchmark backend, in the two classic designs of an all-or-nothing seat
//! hold, each on a freshly initialised server of its own (initdb in a temporary directory,
//! 127.0.0.1:5460, fsync and synchronous_commit on), reached through a bounded connection pool.
//!
//! - [`Design::ForUpdate`]: `BEGIN; SELECT ... ORDER BY seat FOR UPDATE` (locks the seat rows
//!   in seat order, so two attempts never deadlock), check that every seat is free, `INSERT`
//!   the hold row, `UPDATE` the seats, `COMMIT` (or `ROLLBACK` on a taken seat).
//! - [`Design::ConditionalUpdate`]: `BEGIN; UPDATE seats SET hold_id = $1 WHERE show = $2 AND
//!   seat = ANY($3) AND hold_id IS NULL`, `COMMIT` if it changed all k rows, else `ROLLBACK`.
//!
//! Owns the server process (started as the `postgres` user when run as root: PostgreSQL
//! refuses to run as root), the schema, the pool and reading the seats back. Never tunes away
//! durability: fsync, synchronous_commit and full_page_writes stay on.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};

use tempfile::TempDir;
use tokio::process::Command;
use tokio::sync::Semaphore;
use tokio_postgres::{Client, NoTls, Statement};

use crate::bench::driver::RunSpec;
use crate::bench::workload::Attempt;
use crate::bench::{Backend, BenchError, HeldSeat, Options, Outcome, Target};

/// The server's port on 127.0.0.1.
pub const PORT: u16 = 5460;

/// The role the benchmark connects as (made by initdb, trusted on loopback).
const USER: &str = "bench";

/// Connections beyond the pool (the admin connection, the map readers, psql by hand).
const SPARE_CONNECTIONS: u32 = 24;

/// How many pool connections are opened at once.
const CONNECT_PARALLELISM: usize = 32;

/// Which design of the hold transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    /// Lock the seats in order with `SELECT ... FOR UPDATE`, check, insert, update, commit.
    ForUpdate,
    /// One conditional `UPDATE`, committed iff it changed every seat.
    ConditionalUpdate,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::ForUpdate => "pg-for-update",
            Design::ConditionalUpdate => "pg-conditional-update",
        }
    }
}

/// A PostgreSQL server this process started, and stops.
struct Server {
    bin: PathBuf,
    root: TempDir,
    /// Whether its commands run as the `postgres` user (this process is root).
    as_postgres: bool,
    running: bool,
}

impl Server {
    fn data(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// A command running PostgreSQL's `program`, as the `postgres` user if needed.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.arg("-u").arg("postgres").arg("--").arg(path);
            command
        } else {
            Command::new(path)
        };
        command.stdin(Stdio::null()).kill_on_drop(true);
        command
    }

    /// Runs `command` to completion, failing with its output if it fails.
    async fn run(
        mut command: Command,
        what: &str,
        backend: &'static str,
    ) -> Result<(), BenchError> {
        let output = command.output().await.map_err(BenchError::io(what.to_owned()))?;
        if output.status.success() {
            return Ok(());
        }
        Err(BenchError::backend(
            backend,
            format!(
                "{what}: {}\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        ))
    }

    /// Initialises a cluster and starts the server with `max_connections`.
    async fn start(
        options: &Options,
        max_connections: u32,
        backend: &'static str,
    ) -> Result<Server, BenchError> {
        std::fs::create_dir_all(&options.data_dir)
            .map_err(BenchError::io(format!("create {}", options.data_dir.display())))?;
        let root = tempfile::Builder::new()
            .prefix("pg-")
            .tempdir_in(&options.data_dir)
            .map_err(BenchError::io("make PostgreSQL's directory"))?;
        let as_postgres = running_as_root();
        let mut server = Server { bin: options.pg_bin.clone(), root, as_postgres, running: false };
        if as_postgres {
            let mut chown = Command::new("chown");
            chown.arg("-R").arg("postgres:postgres").arg(server.root.path());
            Server::run(chown, "chown the data directory to postgres", backend).await?;
        }
        let mut initdb = server.command("initdb");
        initdb
            .arg("-D")
            .arg(server.data())
            .arg("-U")
            .arg(USER)
            .arg("--auth=trust")
            .arg("-E")
            .arg("UTF8")
            .arg("--locale=C")
            // Only initdb's own files skip fsync; the server below runs with fsync on.
            .arg("--no-sync");
        Server::run(initdb, "initdb", backend).await?;
        let settings = [
            format!("-p {PORT}"),
            "-c listen_addresses=127.0.0.1".to_owned(),
            format!("-c unix_socket_directories={}", server.root.path().display()),
            "-c fsync=on".to_owned(),
            "-c synchronous_commit=on".to_owned(),
            "-c full_page_writes=on".to_owned(),
            format!("-c max_connections={max_connections}"),
            "-c shared_buffers=256MB".to_owned(),
            // Fewer checkpoints during a run (a DBA's usual setting for write-heavy loads);
            // every commit still waits for its WAL flush.
            "-c max_wal_size=4GB".to_owned(),
            "-c checkpoint_timeout=30min".to_owned(),
            "-c log_min_messages=warning".to_owned(),
        ];
        let mut pg_ctl = server.command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(server.data())
            .arg("-l")
            .arg(server.root.path().join("server.log"))
            .arg("-w")
            .arg("-t")
            .arg("60")
            .arg("-o")
            .arg(settings.join(" "))
            .arg("start");
        Server::run(pg_ctl, "pg_ctl start", backend).await?;
        server.running = true;
        Ok(server)
    }

    /// Stops the server (fast shutdown: open transactions are rolled back).
    async fn stop(&mut self) {
        if !self.running {
            return;
        }
        let mut pg_ctl = self.command("pg_ctl");
        pg_ctl.arg("-D").arg(self.data()).arg("-m").arg("fast").arg("-w").arg("stop");
        if let Err(error) = Server::run(pg_ctl, "pg_ctl stop", "postgres").await {
            eprintln!("{error}");
        }
        self.running = false;
    }
}

impl Drop for Server {
    /// Stops a server that [`Server::stop`] did not (an early return), synchronously, before
    /// its directory is removed.
    fn drop(&mut self) {
        if !self.running {
            return;
        }
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        let mut command = if self.as_postgres {
            let mut command = std::process::Command::new("runuser");
            command.arg("-u").arg("postgres").arg("--").arg(pg_ctl);
            command
        } else {
            std::process::Command::new(pg_ctl)
        };
        let _ = command
            .arg("-D")
            .arg(data)
            .arg("-m")
            .arg("immediate")
            .arg("-w")
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether this process runs as root (PostgreSQL then has to run as another user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0)
}

/// The connection string of the server.
fn connection_string() -> String {
    format!("host=127.0.0.1 port={PORT} user={USER} dbname=postgres application_name=bench")
}

/// Opens a connection and drives it on its own task.
async fn connect(backend: &'static str) -> Result<Client, BenchError> {
    let (client, connection) = tokio_postgres::connect(&connection_string(), NoTls)
        .await
        .map_err(|error| BenchError::backend(backend, format!("connect: {error}")))?;
    tokio::spawn(async move {
        // The connection ends when its client is dropped; an error then is of no interest.
        let _ = connection.await;
    });
    Ok(client)
}

/// A started server running one design.
pub struct PostgresBackend {
    design: Design,
    server: Server,
    pool_max: u32,
}

impl PostgresBackend {
    /// Initialises and starts a server for `design`.
    ///
    /// # Errors
    ///
    /// When initdb or the server fails (missing binaries, port 5460 taken, ...).
    pub async fn start(options: &Options, design: Design) -> Result<PostgresBackend, BenchError> {
        let pool_max = options.pg_pool_max.max(1);
        let max_connections = pool_max + options.readers + SPARE_CONNECTIONS;
        let server = Server::start(options, max_connections, design.name()).await?;
        Ok(PostgresBackend { design, server, pool_max })
    }
}

impl Backend for PostgresBackend {
    type Run = PostgresRun;

    fn name(&self) -> &'static str {
        self.design.name()
    }

    async fn prepare(&self, spec: &RunSpec) -> Result<PostgresRun, BenchError> {
        let name = self.name();
        let admin = connect(name).await?;
        let fail = |what: &str| {
            let what = what.to_owned();
            move |error: tokio_postgres::Error| {
                BenchError::backend(name, format!("{what}: {error}"))
            }
        };
        // A fresh schema per run. fillfactor 70 leaves room on each page so that setting a
        // seat's hold_id is a HOT update (no index change), as a DBA would set it for a table
        // that is mostly updated.
        admin
            .batch_execute(
                "DROP TABLE IF EXISTS holds, seats;
                 CREATE TABLE seats (show integer NOT NULL, seat integer NOT NULL,
                   hold_id bigint, PRIMARY KEY (show, seat)) WITH (fillfactor = 70);
                 CREATE TABLE holds (hold_id bigint PRIMARY KEY, show integer NOT NULL,
                   seats integer[] NOT NULL);",
            )
            .await
            .map_err(fail("create the schema"))?;
        let shows = i32::try_from(spec.layout.shows).unwrap_or(i32::MAX);
        let seats = i32::try_from(spec.layout.seats_per_show).unwrap_or(i32::MAX);
        admin
            .execute(
                "INSERT INTO seats (show, seat) SELECT s, n FROM generate_series(0, $1 - 1) s, \
                 generate_series(0, $2 - 1) n",
                &[&shows, &seats],
            )
            .await
            .map_err(fail("insert the seats"))?;
        admin.batch_execute("VACUUM ANALYZE seats").await.map_err(fail("vacuum"))?;
        // The run starts from a clean checkpoint rather than paying for the load's.
        admin.batch_execute("CHECKPOINT").await.map_err(fail("checkpoint"))?;

        let size = spec.clients.min(self.pool_max) as usize;
        let mut connections = Vec::with_capacity(size);
        let mut pending = tokio::task::JoinSet::new();
        let mut opened = 0;
        while connections.len() < size {
            while opened < size && pending.len() < CONNECT_PARALLELISM {
                let design = self.design;
                pending.spawn(async move { Connection::open(design, name).await });
                opened += 1;
            }
            match pending.join_next().await {
                Some(Ok(connection)) => connections.push(connection?),
                Some(Err(error)) => return Err(BenchError::backend(name, error)),
                None => break,
            }
        }
        Ok(PostgresRun {
            design: self.design,
            admin,
            pool: Mutex::new(connections),
            permits: Semaphore::new(size),
            size,
            clients: spec.clients,
        })
    }

    fn processes(&self) -> Vec<u32> {
        // The postmaster's pid is the first line of its pid file; its backends are its
        // children.
        let pid_file = self.server.data().join("postmaster.pid");
        std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse().ok())
            .into_iter()
            .collect()
    }

    async fn stop(&mut self) {
        self.server.stop().await;
    }
}

/// One pooled connection and its prepared statements.
struct Connection {
    client: Client,
    /// `SELECT seat, hold_id ... ORDER BY seat FOR UPDATE` (for-update design).
    lock: Option<Statement>,
    /// `INSERT INTO holds` (for-update design).
    insert: Option<Statement>,
    /// The update: unconditional after the locks, or conditional.
    update: Statement,
}

impl Connection {
    async fn open(design: Design, name: &'static str) -> Result<Connection, BenchError> {
        let client = connect(name).await?;
        let prepare = |sql: &'static str| {
            let client = &client;
            async move {
                client
                    .prepare(sql)
                    .await
                    .map_err(|error| BenchError::backend(name, format!("prepare: {error}")))
            }
        };
        let connection = match design {
            Design::ForUpdate => Connection {
                lock: Some(
                    prepare(
                        "SELECT seat, hold_id FROM seats WHERE show = $1 AND seat = ANY($2) \
                         ORDER BY seat FOR UPDATE",
                    )
                    .await?,
                ),
                insert: Some(
                    prepare("INSERT INTO holds (hold_id, show, seats) VALUES ($1, $2, $3)").await?,
                ),
                update: prepare("UPDATE seats SET hold_id = $1 WHERE show = $2 AND seat = ANY($3)")
                    .await?,
                client,
            },
            Design::ConditionalUpdate => Connection {
                lock: None,
                insert: None,
                update: prepare(
                    "UPDATE seats SET hold_id = $1 WHERE show = $2 AND seat = ANY($3) \
                     AND hold_id IS NULL",
                )
                .await?,
                client,
            },
        };
        Ok(connection)
    }
}

/// Where a transaction failed: before COMMIT was sent nothing took effect; during it the
/// outcome is unknown.
enum TxError {
    Before(tokio_postgres::Error),
    Commit(tokio_postgres::Error),
}

/// The label of a PostgreSQL error: its SQLSTATE, or the connection's failure.
fn label(error: &tokio_postgres::Error) -> String {
    match error.code() {
        Some(code) => format!("sqlstate {}", code.code()),
        None if error.is_closed() => "connection closed".to_owned(),
        None => "client error".to_owned(),
    }
}

/// One run: the schema is in place and the pool open.
pub struct PostgresRun {
    design: Design,
    /// For reading the final state back.
    admin: Client,
    /// Idle connections.
    pool: Mutex<Vec<Connection>>,
    /// One permit per pooled connection: a worker waits here when every connection is busy.
    permits: Semaphore,
    size: usize,
    clients: u32,
}

impl PostgresRun {
    /// Takes an idle connection, or opens one to replace a connection lost to a timeout.
    async fn take(&self) -> Result<Connection, BenchError> {
        let idle = self.pool.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match idle {
            Some(connection) => Ok(connection),
            None => Connection::open(self.design, self.design.name()).await,
        }
    }

    fn give_back(&self, connection: Connection) {
        if !connection.client.is_closed() {
            self.pool.lock().unwrap_or_else(PoisonError::into_inner).push(connection);
        }
    }

    /// The for-update transaction: `Ok(true)` held, `Ok(false)` a seat was taken.
    async fn for_update(
        connection: &mut Connection,
        hold_id: i64,
        show: i32,
        seats: &[i32],
    ) -> Result<bool, TxError> {
        let (Some(lock), Some(insert)) = (connection.lock.clone(), connection.insert.clone())
        else {
            return Ok(false);
        };
        let update = connection.update.clone();
        let transaction = connection.client.transaction().await.map_err(TxError::Before)?;
        let rows = transaction.query(&lock, &[&show, &seats]).await.map_err(TxError::Before)?;
        let free = rows.len() == seats.len()
            && rows.iter().all(|row| row.get::<_, Option<i64>>(1).is_none());
        if !free {
            transaction.rollback().await.map_err(TxError::Before)?;
            return Ok(false);
        }
        transaction.execute(&insert, &[&hold_id, &show, &seats]).await.map_err(TxError::Before)?;
        transaction.execute(&update, &[&hold_id, &show, &seats]).await.map_err(TxError::Before)?;
        transaction.commit().await.map_err(TxError::Commit)?;
        Ok(true)
    }

    /// The conditional-update transaction: `Ok(true)` held, `Ok(false)` a seat was taken.
    async fn conditional(
        connection: &mut Connection,
        hold_id: i64,
        show: i32,
        seats: &[i32],
    ) -> Result<bool, TxError> {
        let update = connection.update.clone();
        let transaction = connection.client.transaction().await.map_err(TxError::Before)?;
        let changed = transaction
            .execute(&update, &[&hold_id, &show, &seats])
            .await
            .map_err(TxError::Before)?;
        if changed != seats.len() as u64 {
            transaction.rollback().await.map_err(TxError::Before)?;
            return Ok(false);
        }
        transaction.commit().await.map_err(TxError::Commit)?;
        Ok(true)
    }
}

/// A PostgreSQL worker needs no state of its own: connections come from the pool.
pub struct PostgresWorker;

/// A map reader: a connection of its own, outside the pool.
pub struct PostgresReader {
    client: Client,
    statement: Statement,
}

impl Target for PostgresRun {
    type Worker = PostgresWorker;
    type Reader = PostgresReader;

    async fn worker(&self, _index: u32) -> Result<PostgresWorker, BenchError> {
        Ok(PostgresWorker)
    }

    async fn maintain(&self, _worker: &mut PostgresWorker) -> Result<(), BenchError> {
        Ok(())
    }

    async fn attempt(&self, _worker: &mut PostgresWorker, attempt: &Attempt) -> Outcome {
        let Ok(_permit) = self.permits.acquire().await else {
            return Outcome::Failed("pool closed".to_owned());
        };
        let mut connection = match self.take().await {
            Ok(connection) => connection,
            Err(error) => return Outcome::Failed(error.to_string()),
        };
        let mut seats = [0i32; 4];
        let mut used = 0;
        for (slot, seat) in seats.iter_mut().zip(attempt.seats()) {
            *slot = i32::try_from(seat).unwrap_or(i32::MAX);
            used += 1;
        }
        let hold_id = i64::try_from(attempt.id).unwrap_or(i64::MAX);
        let show = i32::try_from(attempt.show).unwrap_or(i32::MAX);
        let answer = match self.design {
            Design::ForUpdate => {
                PostgresRun::for_update(&mut connection, hold_id, show, &seats[..used]).await
            }
            Design::ConditionalUpdate => {
                PostgresRun::conditional(&mut connection, hold_id, show, &seats[..used]).await
            }
        };
        self.give_back(connection);
        match answer {
            Ok(true) => Outcome::Held,
            Ok(false) => Outcome::Conflict,
            Err(TxError::Before(error)) => Outcome::Failed(label(&error)),
            Err(TxError::Commit(error)) => Outcome::Unknown(format!("commit: {}", label(&error))),
        }
    }

    async fn reader(&self, _index: u32) -> Result<Option<PostgresReader>, BenchError> {
        let name = self.design.name();
        let client = connect(name).await?;
        let statement = client
            .prepare("SELECT seat, hold_id IS NOT NULL FROM seats WHERE show = $1 ORDER BY seat")
            .await
            .map_err(|error| BenchError::backend(name, format!("prepare: {error}")))?;
        Ok(Some(PostgresReader { client, statement }))
    }

    async fn read_map(&self, reader: &mut PostgresReader, show: u32) -> Result<u64, String> {
        let show = i32::try_from(show).map_err(|error| error.to_string())?;
        let rows = reader
            .client
            .query(&reader.statement, &[&show])
            .await
            .map_err(|error| label(&error))?;
        Ok(rows.iter().filter(|row| row.get::<_, bool>(1)).count() as u64)
    }

    async fn final_state(&self) -> Result<Vec<HeldSeat>, BenchError> {
        let name = self.design.name();
        let rows = self
            .admin
            .query("SELECT show, seat, hold_id FROM seats WHERE hold_id IS NOT NULL", &[])
            .await
            .map_err(|error| BenchError::backend(name, format!("read the seats: {error}")))?;
        let mut held = Vec::with_capacity(rows.len());
        for row in rows {
            let show: i32 = row.get(0);
            let seat: i32 = row.get(1);
            let owner: i64 = row.get(2);
            held.push(HeldSeat {
                show: u32::try_from(show).unwrap_or(u32::MAX),
                seat: u32::try_from(seat).unwrap_or(u32::MAX),
                owner: u64::try_from(owner).ok(),
            });
        }
        if self.design == Design::ForUpdate {
            // Every held seat must belong to a hold row that lists it: the two writes of the
            // transaction are all or nothing.
            let orphans: i64 = self
                .admin
                .query_one(
                    "SELECT count(*) FROM seats s LEFT JOIN holds h ON h.hold_id = s.hold_id \
                     WHERE s.hold_id IS NOT NULL AND (h.hold_id IS NULL OR s.seat <> ALL(h.seats))",
                    &[],
                )
                .await
                .map_err(|error| BenchError::backend(name, format!("read the holds: {error}")))?
                .get(0);
            if orphans != 0 {
                return Err(BenchError::backend(
                    name,
                    format!("{orphans} held seats have no hold row listing them"),
                ));
            }
        }
        Ok(held)
    }

    fn notes(&self) -> Vec<String> {
        vec![format!(
            "{}: PostgreSQL 15 on 127.0.0.1:{PORT}, fsync=on, synchronous_commit=on, \
             full_page_writes=on, shared_buffers=256MB, max_wal_size=4GB, READ COMMITTED; a pool \
             of {} connections for {} clients (clients beyond it wait for a connection, and \
             that wait is in their latency); seats table fillfactor 70",
            self.design.name(),
            self.size,
            self.clients
        )]
    }
}

/// The default location of PostgreSQL 15's binaries on Debian.
pub fn default_bin() -> PathBuf {
    Path::new("/usr/lib/postgresql/15/bin").to_path_buf()
}
