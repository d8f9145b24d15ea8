//! The CDN stand-in of the first-minute workload: Debian's nginx with `proxy_cache` in front of
//! the cluster's nodes, as the seed's architecture puts a CDN in front of the read tier (browse
//! from the cache, stale allowed; claim at the origin, exact).
//!
//! Owns the nginx configuration, the process (started on a free loopback port, stopped with
//! `nginx -s stop` when dropped) and its record of what reached the origin. Decides nothing
//! about freshness: what it caches and for how long comes from the node's `Cache-Control` (no
//! `proxy_cache_valid`), a request with `Authorization` is never answered from or stored in
//! the cache, and everything but GET and HEAD passes through. Concurrent misses of one URL
//! wait for one origin request (`proxy_cache_lock`), and an expired entry is refreshed by one
//! background request while the others get the entry being refreshed
//! (`proxy_cache_use_stale updating`, `proxy_cache_background_update`) and revalidated with its
//! `ETag` (`proxy_cache_revalidate`). Every answer says how the cache served it
//! (`X-Cache-Status`); every GET or HEAD that reached the origin, background refreshes
//! included, is one line of `origin.log`.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::bench::BenchError;

/// The name errors carry.
const NAME: &str = "nginx";

/// The header in which every answer says how the cache served it.
pub const CACHE_STATUS_HEADER: &str = "x-cache-status";

/// How long nginx may take to listen.
const START_WAIT: Duration = Duration::from_secs(15);

/// Idle keep-alive connections nginx keeps to the origins (per worker): as many as the holds
/// it may have in flight, so that a burst does not end in new TLS handshakes with the nodes.
const ORIGIN_KEEPALIVE: u32 = 1_024;

/// The nginx binary: `nginx` on the `PATH`, else Debian's `/usr/sbin/nginx` (not on a
/// non-root user's `PATH`).
pub fn default_bin() -> PathBuf {
    let debian = PathBuf::from("/usr/sbin/nginx");
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join("nginx")).find(|path| path.is_file())
    });
    on_path.unwrap_or(debian)
}

/// How nginx reaches the origins.
#[derive(Clone, Debug)]
pub struct Origins {
    /// Each node's client address, `host:port`.
    pub addresses: Vec<String>,
    /// The CA that signed the nodes' certificates (PEM file) when they serve https; `None`:
    /// plain http.
    pub ca_file: Option<PathBuf>,
    /// The name every node's certificate carries, checked against it (the cluster's node
    /// certificates name `localhost` beside their address).
    pub tls_name: String,
}

/// nginx's configuration for a cache in `dir` that listens on `listen`, in front of
/// `origins`; `run_as_root` when the master runs as root (its workers then do too, to reach
/// `dir`; nginx ignores `user` otherwise). Pure: the tests read it.
pub fn config(dir: &Path, listen: SocketAddr, origins: &Origins, run_as_root: bool) -> String {
    let dir = dir.display();
    let mut servers = String::new();
    for address in &origins.addresses {
        let _ = writeln!(servers, "        server {address};");
    }
    let (scheme, tls) = match &origins.ca_file {
        Some(ca) => (
            "https",
            format!(
                "            proxy_ssl_trusted_certificate {};\n\
                 \x20           proxy_ssl_verify on;\n\
                 \x20           proxy_ssl_verify_depth 2;\n\
                 \x20           proxy_ssl_name {};\n\
                 \x20           proxy_ssl_server_name on;\n\
                 \x20           proxy_ssl_session_reuse on;\n",
                ca.display(),
                origins.tls_name
            ),
        ),
        None => ("http", String::new()),
    };
    let user = if run_as_root { "user root;\n" } else { "" };
    format!(
        "# Written by the benchmark (jepsen/src/bench/cdn.rs): the first-minute workload's CDN.
{user}worker_processes 2;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
worker_rlimit_nofile 16384;
events {{
    worker_connections 8192;
}}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    # What is cached, and for how long, is the origin's Cache-Control alone.
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=booking:16m max_size=512m inactive=10m use_temp_path=off;
    log_format origin '$request_method $uri $status $upstream_cache_status';
    # A GET or HEAD that went to an origin (a cache hit has no upstream address).
    map \"$request_method $upstream_addr\" $origin_read {{
        \"~^(GET|HEAD) .\" 1;
        default 0;
    }}
    upstream booking {{
{servers}        keepalive {ORIGIN_KEEPALIVE};
    }}
    server {{
        listen {listen} backlog=4096;
        location / {{
            proxy_pass {scheme}://booking;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
{tls}            proxy_buffer_size 16k;
            proxy_buffers 32 16k;
            proxy_cache booking;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 2s;
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;
            proxy_cache_revalidate on;
            # A caller's own answers are never shared.
            proxy_cache_bypass $http_authorization;
            proxy_no_cache $http_authorization;
            add_header X-Cache-Status $upstream_cache_status always;
            log_subrequest on;
            access_log {dir}/origin.log origin if=$origin_read;
        }}
    }}
}}
"
    )
}

/// The origin reads in an `origin.log`, by what they read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OriginReads {
    /// Reads of a show's page (`/v1/shows/{id}`).
    pub show_pages: u64,
    /// Reads of a show's availability (`/v1/shows/{id}/availability`).
    pub seat_maps: u64,
    /// Any other GET or HEAD.
    pub other: u64,
}

impl OriginReads {
    /// Every origin read.
    pub fn total(&self) -> u64 {
        self.show_pages + self.seat_maps + self.other
    }

    /// What was read between `before` and `self`.
    pub fn since(&self, before: &OriginReads) -> OriginReads {
        OriginReads {
            show_pages: self.show_pages.saturating_sub(before.show_pages),
            seat_maps: self.seat_maps.saturating_sub(before.seat_maps),
            other: self.other.saturating_sub(before.other),
        }
    }

    /// The reads counted in `log`, one line per read (`METHOD URI STATUS CACHE-STATUS`).
    pub fn parse(log: &str) -> OriginReads {
        let mut reads = OriginReads::default();
        for line in log.lines() {
            let Some(uri) = line.split(' ').nth(1) else { continue };
            match uri.trim_start_matches("/v1/shows/").split('/').collect::<Vec<_>>()[..] {
                [id] if uri.starts_with("/v1/shows/") && !id.is_empty() => reads.show_pages += 1,
                [_, "availability"] if uri.starts_with("/v1/shows/") => reads.seat_maps += 1,
                _ => reads.other += 1,
            }
        }
        reads
    }
}

/// A running nginx. Dropping it stops it.
pub struct Cdn {
    bin: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    url: String,
    version: String,
}

impl Cdn {
    /// Starts nginx (`bin`) with its files in `dir` (which must exist) on a free port of
    /// 127.0.0.1, in front of `origins`, and waits until it listens.
    ///
    /// # Errors
    ///
    /// When nginx is missing, refuses its configuration, or does not listen in time.
    pub async fn start(bin: &Path, dir: &Path, origins: &Origins) -> Result<Cdn, BenchError> {
        let listen = free_port()?;
        let run_as_root = std::fs::metadata(dir)
            .map_err(BenchError::io(format!("read {}", dir.display())))?
            .uid()
            == 0;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, listen, origins, run_as_root))
            .map_err(BenchError::io(format!("write {}", conf.display())))?;
        let child = Command::new(bin)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(BenchError::io(format!("start {}", bin.display())))?;
        let mut cdn = Cdn {
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            child: Some(child),
            url: format!("http://{listen}"),
            version: version(bin),
        };
        let deadline = tokio::time::Instant::now() + START_WAIT;
        loop {
            if tokio::net::TcpStream::connect(listen).await.is_ok() {
                return Ok(cdn);
            }
            let exited = cdn.child.as_mut().and_then(|child| child.try_wait().ok().flatten());
            if exited.is_some() || tokio::time::Instant::now() >= deadline {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                return Err(BenchError::backend(
                    NAME,
                    format!("did not listen on {listen} ({exited:?}): {}", log.trim()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its base URL, `http://127.0.0.1:port`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// nginx's version, as `nginx -v` says it (empty if it does not).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The master's pid (its workers count with it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// What reached the origin so far.
    pub fn origin_reads(&self) -> OriginReads {
        OriginReads::parse(
            &std::fs::read_to_string(self.dir.join("origin.log")).unwrap_or_default(),
        )
    }
}

impl Drop for Cdn {
    fn drop(&mut self) {
        // `nginx -s stop` makes the master stop its workers; killing the master alone would
        // leave them running.
        let _ = std::process::Command::new(&self.bin)
            .arg("-p")
            .arg(&self.dir)
            .arg("-c")
            .arg(self.dir.join("nginx.conf"))
            .arg("-e")
            .arg(self.dir.join("error.log"))
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(mut child) = self.child.take() {
            let deadline = std::time::Instant::now() + START_WAIT;
            while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.start_kill();
        }
    }
}

/// The version of nginx `bin` (`nginx -v` prints it on stderr), or nothing.
fn version(bin: &Path) -> String {
    let output = std::process::Command::new(bin).arg("-v").output();
    output
        .ok()
        .and_then(|output| {
            let text = String::from_utf8_lossy(&output.stderr).into_owned();
            text.trim().strip_prefix("nginx version: nginx/").map(str::to_owned)
        })
        .unwrap_or_default()
}

/// A port of 127.0.0.1 free a moment ago.
fn free_port() -> Result<SocketAddr, BenchError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(BenchError::io("find a free port for nginx"))?;
    listener.local_addr().map_err(BenchError::io("find a free port for nginx"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_reads_are_counted_by_what_they_read() {
        let log = "GET /v1/shows/7 200 MISS\n\
                   GET /v1/shows/7/availability 200 EXPIRED\n\
                   GET /v1/shows/7/availability 304 REVALIDATED\n\
                   HEAD /v1/shows/7 200 -\n\
                   GET /v1/search 200 -\n\
                   GET /v1/shows/ 404 MISS\n";
        let reads = OriginReads::parse(log);
        assert_eq!(reads, OriginReads { show_pages: 2, seat_maps: 2, other: 2 });
        assert_eq!(reads.total(), 6);
    }

    #[test]
    fn the_configuration_verifies_the_origins_and_never_shares_a_callers_answers() {
        let origins = Origins {
            addresses: vec!["127.0.0.1:7600".to_owned(), "127.0.0.2:7600".to_owned()],
            ca_file: Some(PathBuf::from("/d/ca.crt")),
            tls_name: "localhost".to_owned(),
        };
        let listen: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let text = config(Path::new("/d"), listen, &origins, false);
        for line in [
            "server 127.0.0.1:7600;",
            "server 127.0.0.2:7600;",
            "proxy_pass https://booking;",
            "proxy_ssl_verify on;",
            "proxy_ssl_trusted_certificate /d/ca.crt;",
            "proxy_ssl_name localhost;",
            "proxy_cache_bypass $http_authorization;",
            "proxy_no_cache $http_authorization;",
            "listen 127.0.0.1:9000",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("proxy_cache_valid"), "the origin alone says what is fresh");
        assert!(!text.contains("user root"));
        let plain = Origins { ca_file: None, ..origins };
        let text = config(Path::new("/d"), listen, &plain, true);
        assert!(text.contains("proxy_pass http://booking;") && !text.contains("proxy_ssl"));
        assert!(text.starts_with("# Written") && text.contains("\nuser root;\n"));
    }
}
