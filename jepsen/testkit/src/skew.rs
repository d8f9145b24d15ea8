//! Clock skew through libfaketime: a node started under it reads its wall clock's offset from
//! its own skew file (re-read about every second), so that [`Cluster::skew`] moves one node's
//! clock without touching the machine's. The monotonic clock is left alone, so that Raft's and
//! tokio's timers are undisturbed.
//!
//! Owns the skew files and libfaketime's leftovers in `/dev/shm`: it removes only the files of
//! its own unreaped children, or of pids that no longer exist. Never changes the system clock
//! and never signals a process.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tokio::process::{Child, Command};

use crate::NodeId;
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::ClusterError;

/// Where Debian and a few other systems put libfaketime, searched in order when
/// [`ClusterOptions::faketime_library`] is `None`.
pub const LIBFAKETIME_PATHS: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
];

/// How many seconds libfaketime keeps the offset it read from a node's skew file, so that the
/// file is not read on every clock call. It compares whole seconds, so a skew takes effect
/// within about two seconds.
const FAKETIME_CACHE_SECONDS: &str = "1";

impl ClusterOptions {
    /// The libfaketime library the nodes would run under, if clock skew is on and it exists.
    pub fn faketime_path(&self) -> Option<PathBuf> {
        if !self.clock_skew {
            return None;
        }
        match &self.faketime_library {
            Some(path) => path.is_file().then(|| path.clone()),
            None => LIBFAKETIME_PATHS.iter().map(PathBuf::from).find(|path| path.is_file()),
        }
    }
}

impl Cluster {
    /// The libfaketime library the nodes run under; `None` when clock skew is unavailable.
    pub fn faketime_library(&self) -> Option<&Path> {
        self.faketime.as_deref()
    }

    /// Whether [`Cluster::skew`] can work.
    pub fn skew_supported(&self) -> bool {
        self.faketime.is_some()
    }

    /// Each node's wall-clock skew, ms (0 for none).
    pub fn skews(&self) -> BTreeMap<NodeId, i64> {
        self.nodes.values().map(|node| (node.id, node.state().skew_ms)).collect()
    }

    /// Sets node `id`'s wall clock `ms` milliseconds off the real one (negative: behind); 0
    /// removes the skew. Takes effect within about two seconds (libfaketime's cache).
    ///
    /// # Errors
    ///
    /// [`ClusterError::SkewUnavailable`] when the nodes do not run under libfaketime.
    pub fn skew(&self, id: NodeId, ms: i64) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        if self.faketime.is_none() {
            let why = if self.options.clock_skew {
                format!("libfaketime not found (looked at {LIBFAKETIME_PATHS:?}); install it")
            } else {
                "the cluster was started without it".to_owned()
            };
            return Err(ClusterError::SkewUnavailable(why));
        }
        write_skew_file(&node.skew_file, ms)?;
        node.state().skew_ms = ms;
        Ok(())
    }

    /// Removes the names of the shared memory and semaphore libfaketime made for `child`
    /// (`/dev/shm/faketime_shm_<pid>`, `/dev/shm/sem.faketime_sem_<pid>`): it removes them
    /// itself only on a clean exit, which SIGKILL never is, and a leftover name makes a later
    /// process with the same pid fail to start under libfaketime. Called before the child is
    /// killed, while the pid is certainly still this child's (unreaped), so that no other
    /// process's files are ever touched; the process keeps its mapping.
    pub(crate) fn forget_faketime_files(&self, child: &Child) {
        if self.faketime.is_none() {
            return;
        }
        let Some(pid) = child.id() else { return };
        for name in [format!("faketime_shm_{pid}"), format!("sem.faketime_sem_{pid}")] {
            let path = Path::new("/dev/shm").join(name);
            if let Err(error) = fs::remove_file(&path)
                && error.kind() != io::ErrorKind::NotFound
            {
                tracing::debug!(path = %path.display(), %error, "cannot remove a libfaketime file");
            }
        }
    }
}

/// Makes `command` run under `library` with its wall clock following `skew_file`, after
/// removing what dead processes left of libfaketime (see [`sweep_stale_faketime_files`]).
pub(crate) fn run_under_faketime(command: &mut Command, library: &Path, skew_file: &Path) {
    command
        .env("LD_PRELOAD", library)
        .env("FAKETIME_TIMESTAMP_FILE", skew_file)
        .env("FAKETIME_CACHE_DURATION", FAKETIME_CACHE_SECONDS)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    sweep_stale_faketime_files();
}

/// Removes the libfaketime files of processes that no longer exist, whoever started them (a
/// node that crashed, a runner that was killed before it could kill its nodes): libfaketime
/// creates `/dev/shm/faketime_shm_<pid>` (and its semaphore) exclusively at start, so a
/// leftover name makes the next process that gets the same pid (pids wrap at 32768 here) exit
/// at once. Only names of exactly that form whose pid has no `/proc` entry are removed, as
/// libfaketime's README advises; a process alive under that pid keeps its files.
fn sweep_stale_faketime_files() {
    let Ok(entries) = fs::read_dir("/dev/shm") else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let pid = name
            .strip_prefix("faketime_shm_")
            .or_else(|| name.strip_prefix("sem.faketime_sem_"))
            .filter(|pid| !pid.is_empty() && pid.bytes().all(|byte| byte.is_ascii_digit()));
        let Some(pid) = pid else { continue };
        if !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The text of a skew file: libfaketime's relative offset, in seconds with milliseconds.
pub fn skew_text(ms: i64) -> String {
    if ms == 0 {
        return "+0".to_owned();
    }
    let sign = if ms < 0 { '-' } else { '+' };
    let magnitude = ms.unsigned_abs();
    format!("{sign}{}.{:03}", magnitude / 1_000, magnitude % 1_000)
}

/// Writes a skew file whole: to a temporary file renamed over it, so that libfaketime never
/// reads half of one.
pub(crate) fn write_skew_file(path: &Path, ms: i64) -> Result<(), ClusterError> {
    let temporary = path.with_extension("new");
    fs::write(&temporary, format!("{}\n", skew_text(ms)))
        .map_err(ClusterError::io(format!("write {}", temporary.display())))?;
    fs::rename(&temporary, path).map_err(ClusterError::io(format!("rename to {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_files_hold_libfaketime_offsets_in_seconds() {
        assert_eq!(skew_text(0), "+0");
        assert_eq!(skew_text(1_500), "+1.500");
        assert_eq!(skew_text(-30_000), "-30.000");
        assert_eq!(skew_text(-7), "-0.007");
    }
}
