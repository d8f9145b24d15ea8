//! Backups of a whole cluster and restores into a fresh one (`bookctl backup`, `bookctl
//! restore`).
//!
//! Owns the backup file and the calls that fill and empty it. A backup is one tar archive
//! (`tar tf` lists it) holding `manifest.json` (format `booking-cluster-backup`, version 1:
//! when it was taken and, per group, the file of its state, the log index and term the state
//! is at, its log time, size, SHA-256, state format and voters) and one `group-<id>.state` per
//! group: the group's whole state as its leader encoded it (`statemachine`'s snapshot format,
//! which carries its own magic and version). Reading checks the manifest's format and version
//! and every file's size and checksum.
//!
//! Taking a backup asks each group's leader for its state at a committed index (a linearizable
//! read: every write acknowledged before the call is in it) while writes go on. The data
//! groups are taken first and the metadata group (placement and catalog) last, so every show
//! whose state is in the backup is placed in it; a show placed but not yet created in its group
//! (a creation under way) is finished by retrying its creation, as after any failure.
//!
//! Restoring founds each group on fresh nodes (started without `--bootstrap`): each group's
//! state goes to its first voter, which installs it at the backup's log index and stands for
//! election; the other voters catch up from it by snapshot. Voters are chosen as a bootstrap
//! chooses them: every node for group 0, and for data group `g` as many nodes as the backup's
//! group had (or `replicas`), starting at position `(g - 1) mod n` of the nodes in id order.
//! Never touches a cluster that has any of the backup's groups already.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proto::booking::admin_service_client::AdminServiceClient;
use proto::booking::{BackupHeader, BackupRequest, RestoreChunk, RestoreMember, RestoreReply};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tonic::{Code, Status};

use crate::client::{Client, Kind};
use crate::error::{self, Error, Result};
use crate::route::Route;

/// The `format` of a backup's manifest.
pub const BACKUP_FORMAT: &str = "booking-cluster-backup";
/// The manifest version this SDK writes and reads.
pub const BACKUP_VERSION: u32 = 1;
/// The manifest's name inside the archive.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The metadata group: placement and catalog.
const METADATA_GROUP: u64 = 0;
/// How many bytes of state one restore chunk carries.
const CHUNK_BYTES: usize = 1 << 20;
/// The least time a restore gives each group's install and the election after it (more when
/// the client's retry budget is longer): a large state takes a while to send, check and sync.
const RESTORE_TIME_MIN: Duration = Duration::from_secs(120);

/// A backup's manifest: what it holds and how to check it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`BACKUP_FORMAT`].
    pub format: String,
    /// [`BACKUP_VERSION`] when written by this SDK.
    pub version: u32,
    /// When the backup was taken (ms since the Unix epoch, the client's clock).
    pub created_ms: u64,
    /// The groups, in the order they were taken.
    pub groups: Vec<ManifestGroup>,
}

/// One group in a backup's manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestGroup {
    /// The group's id.
    pub group_id: u64,
    /// The archive member holding its state.
    pub file: String,
    /// The last log entry the state includes, and its term.
    pub log_index: u64,
    /// The term of the leader that wrote that entry.
    pub log_term: u64,
    /// The group's log time at that entry (ms).
    pub log_time_ms: u64,
    /// The state's size in bytes.
    pub state_bytes: u64,
    /// The state's SHA-256, hex.
    pub state_sha256: String,
    /// The state's encoding version (the state machine's snapshot format).
    pub state_format: u32,
    /// The group's voters when it was taken.
    pub voters: Vec<u64>,
}

/// One group's backed-up state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBackup {
    /// Where the state is in the group's log and how to check it.
    pub header: BackupHeader,
    /// The encoded state.
    pub state: Vec<u8>,
}

/// A whole cluster's backup: every group's state at a committed index of its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backup {
    /// When it was taken (ms since the Unix epoch).
    pub created_ms: u64,
    /// The groups, in the order they were taken (the metadata group last).
    pub groups: Vec<GroupBackup>,
}

/// Why a backup file cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum BackupFileError {
    /// The file system refused.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The file is not a backup this SDK reads, or is damaged.
    #[error("{path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl Backup {
    /// The backup of `group_id`, if it holds one.
    pub fn group(&self, group_id: u64) -> Option<&GroupBackup> {
        self.groups.iter().find(|group| group.header.group_id == group_id)
    }

    /// Its manifest.
    pub fn manifest(&self) -> Manifest {
        let groups = self
            .groups
            .iter()
            .map(|group| {
                let header = &group.header;
                ManifestGroup {
                    group_id: header.group_id,
                    file: state_file(header.group_id),
                    log_index: header.log_index,
                    log_term: header.log_term,
                    log_time_ms: header.log_time_ms,
                    state_bytes: header.state_bytes,
                    state_sha256: header.state_sha256.clone(),
                    state_format: header.state_format,
                    voters: header.voters.clone(),
                }
            })
            .collect();
        Manifest {
            format: BACKUP_FORMAT.to_owned(),
            version: BACKUP_VERSION,
            created_ms: self.created_ms,
            groups,
        }
    }

    /// Writes the backup to `path` durably: into `<path>.part`, synced, then renamed.
    ///
    /// # Errors
    ///
    /// [`BackupFileError::Io`] when the file cannot be written.
    pub fn write(&self, path: &Path) -> std::result::Result<(), BackupFileError> {
        let io = |source| BackupFileError::Io { path: path.to_path_buf(), source };
        let mut part = path.as_os_str().to_owned();
        part.push(".part");
        let part = PathBuf::from(part);
        let file = File::create(&part).map_err(io)?;
        let mut archive = tar::Builder::new(file);
        let manifest = serde_json::to_vec_pretty(&self.manifest())
            .map_err(|error| io(io::Error::other(error)))?;
        append(&mut archive, MANIFEST_FILE, &manifest).map_err(io)?;
        for group in &self.groups {
            append(&mut archive, &state_file(group.header.group_id), &group.state).map_err(io)?;
        }
        let mut file = archive.into_inner().map_err(io)?;
        file.flush().map_err(io)?;
        file.sync_all().map_err(io)?;
        fs::rename(&part, path).map_err(io)?;
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            File::open(dir).and_then(|dir| dir.sync_all()).map_err(io)?;
        }
        Ok(())
    }

    /// Reads a backup from `path`, checking its manifest and every group's size and checksum.
    ///
    /// # Errors
    ///
    /// [`BackupFileError::Io`] when it cannot be read, [`BackupFileError::Invalid`] when it is
    /// not a backup of this format and version, or a group's state is missing or damaged.
    pub fn read(path: &Path) -> std::result::Result<Backup, BackupFileError> {
        let io = |source| BackupFileError::Io { path: path.to_path_buf(), source };
        let invalid = |why: String| BackupFileError::Invalid { path: path.to_path_buf(), why };
        let mut archive = tar::Archive::new(File::open(path).map_err(io)?);
        let mut members = BTreeMap::new();
        for entry in archive.entries().map_err(io)? {
            let mut entry = entry.map_err(io)?;
            let name = entry.path().map_err(io)?.to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).map_err(io)?;
            members.insert(name, bytes);
        }
        let manifest = members
            .get(MANIFEST_FILE)
            .ok_or_else(|| invalid(format!("no {MANIFEST_FILE}: not a backup")))?;
        let manifest: Manifest = serde_json::from_slice(manifest)
            .map_err(|error| invalid(format!("{MANIFEST_FILE}: {error}")))?;
        if manifest.format != BACKUP_FORMAT || manifest.version != BACKUP_VERSION {
            return Err(invalid(format!(
                "format {} version {}: this bookctl reads {BACKUP_FORMAT} version \
                 {BACKUP_VERSION}",
                manifest.format, manifest.version
            )));
        }
        let mut groups = Vec::new();
        let mut seen = BTreeSet::new();
        for group in manifest.groups {
            if !seen.insert(group.group_id) {
                return Err(invalid(format!("group {} appears twice", group.group_id)));
            }
            let state = members
                .remove(&group.file)
                .ok_or_else(|| invalid(format!("{} is missing", group.file)))?;
            if state.len() as u64 != group.state_bytes {
                return Err(invalid(format!(
                    "{}: {} bytes, the manifest says {}",
                    group.file,
                    state.len(),
                    group.state_bytes
                )));
            }
            let sha256 = hex(&Sha256::digest(&state));
            if sha256 != group.state_sha256 {
                return Err(invalid(format!(
                    "{}: SHA-256 {sha256}, the manifest says {}: the file is damaged",
                    group.file, group.state_sha256
                )));
            }
            let header = BackupHeader {
                group_id: group.group_id,
                log_index: group.log_index,
                log_term: group.log_term,
                log_time_ms: group.log_time_ms,
                state_bytes: group.state_bytes,
                state_sha256: group.state_sha256,
                voters: group.voters,
                state_format: group.state_format,
            };
            groups.push(GroupBackup { header, state });
        }
        Ok(Backup { created_ms: manifest.created_ms, groups })
    }
}

impl Client {
    /// One group's state at a committed index, from its leader (found by a status round when
    /// not known, and followed on hints): every write acknowledged before the call is in it.
    /// The state's size and checksum are checked against the header.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (no such group, not the operator), [`Error::Unavailable`].
    pub async fn backup_group(&self, group_id: u64) -> Result<GroupBackup> {
        if self.routes().leader(Route::Group(group_id)).is_none() {
            self.cluster_status(false).await;
        }
        let metadata = self.operator_metadata(false, None)?;
        let (backup, _) = self
            .call(Route::Group(group_id), Kind::LongMutation, &metadata, |channel| {
                let request = metadata.request(BackupRequest { group_id });
                async move {
                    let mut stream = AdminServiceClient::new(channel)
                        .max_decoding_message_size(2 * CHUNK_BYTES)
                        .backup(request)
                        .await?
                        .into_inner();
                    let header = stream
                        .message()
                        .await?
                        .and_then(|chunk| chunk.header)
                        .ok_or_else(|| Status::internal("the backup stream has no header"))?;
                    let mut state = Vec::with_capacity(
                        usize::try_from(header.state_bytes).unwrap_or(0).min(1 << 30),
                    );
                    while let Some(chunk) = stream.message().await? {
                        state.extend_from_slice(&chunk.data);
                    }
                    Ok(tonic::Response::new(GroupBackup { header, state }))
                }
            })
            .await?;
        let header = &backup.header;
        let sha256 = hex(&Sha256::digest(&backup.state));
        if backup.state.len() as u64 != header.state_bytes || sha256 != header.state_sha256 {
            return Err(Error::Transport {
                address: String::new(),
                status: Code::DataLoss,
                message: format!(
                    "group {group_id}: received {} bytes with SHA-256 {sha256}, the header says {} \
                     bytes with {}",
                    backup.state.len(),
                    header.state_bytes,
                    header.state_sha256
                ),
            });
        }
        Ok(backup)
    }

    /// Every group's state (the groups any known node reports), the data groups first and the
    /// metadata group last.
    ///
    /// # Errors
    ///
    /// As [`Client::backup_group`]; [`Error::InvalidArgument`] when no node answers a status.
    pub async fn backup(&self) -> Result<Backup> {
        let created_ms =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis());
        let mut ids = BTreeSet::new();
        let mut answered = false;
        for node in self.cluster_status(false).await {
            if let Ok(reply) = node.result {
                answered = true;
                ids.extend(reply.groups.iter().map(|group| group.group_id));
            }
        }
        if !answered {
            return Err(Error::InvalidArgument("no node answered a status call".into()));
        }
        let mut groups = Vec::new();
        let data = ids.iter().copied().filter(|&id| id != METADATA_GROUP);
        for group_id in data.chain(ids.contains(&METADATA_GROUP).then_some(METADATA_GROUP)) {
            groups.push(self.backup_group(group_id).await?);
        }
        Ok(Backup { created_ms: u64::try_from(created_ms).unwrap_or(u64::MAX), groups })
    }

    /// Builds the cluster of the known nodes from `backup`: every node must answer and be
    /// fresh (no group of the backup founded on it); each group's state goes to its first
    /// voter, which installs it and stands for election. Data groups get `replicas` voters
    /// (default: as many as the backup's group had, at most the number of nodes). Returns once
    /// every group has a leader, or the retry budget (at least two minutes) is spent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when a node does not answer, is not fresh, or lacks a group
    /// of the backup (nothing was sent); [`Error::Rejected`] when a node refuses a group's
    /// state; [`Error::Unavailable`] when a group elects no leader in time.
    pub async fn restore(
        &self,
        backup: &Backup,
        replicas: Option<usize>,
    ) -> Result<Vec<RestoreReply>> {
        let mut nodes = BTreeMap::new();
        for node in self.cluster_status(false).await {
            let reply = node.result.map_err(|error| {
                Error::InvalidArgument(format!("node at {} did not answer: {error}", node.address))
            })?;
            for group in &backup.groups {
                let id = group.header.group_id;
                let Some(status) = reply.groups.iter().find(|status| status.group_id == id) else {
                    return Err(Error::InvalidArgument(format!(
                        "node {} hosts no group {id}: start it with as many groups as the \
                         backup has",
                        reply.node_id
                    )));
                };
                if status.member || status.last_log_index > 0 || !status.voters.is_empty() {
                    return Err(Error::InvalidArgument(format!(
                        "node {} already has group {id}: restore into fresh nodes, started \
                         without --bootstrap",
                        reply.node_id
                    )));
                }
            }
            nodes.insert(reply.node_id, (node.address, reply.address));
        }
        let ids: Vec<u64> = nodes.keys().copied().collect();
        let mut replies = Vec::new();
        for group in &backup.groups {
            let id = group.header.group_id;
            let count = replicas.unwrap_or(group.header.voters.len().max(1));
            let voters = voters_of(id, &ids, count);
            let members = voters
                .iter()
                .map(|&node_id| RestoreMember { node_id, address: nodes[&node_id].1.clone() })
                .collect();
            let founder = &nodes[&voters[0]].0;
            replies.push(self.restore_group(founder, group, members).await?);
        }
        self.wait_for_leaders(backup.groups.iter().map(|group| group.header.group_id)).await?;
        Ok(replies)
    }

    /// Sends one group's state to the node at `address`, which founds the group with
    /// `voters` (one attempt: the call is for that node).
    async fn restore_group(
        &self,
        address: &str,
        group: &GroupBackup,
        voters: Vec<RestoreMember>,
    ) -> Result<RestoreReply> {
        let channel = self.channel(address)?;
        let mut chunks =
            vec![RestoreChunk { header: Some(group.header.clone()), voters, data: Vec::new() }];
        chunks.extend(group.state.chunks(CHUNK_BYTES).map(|data| RestoreChunk {
            header: None,
            voters: Vec::new(),
            data: data.to_vec(),
        }));
        let request =
            self.operator_metadata(false, None)?.request(futures_util::stream::iter(chunks));
        let mut admin = AdminServiceClient::new(channel);
        let call = admin.restore(request);
        let within = self.config().retry_budget.max(RESTORE_TIME_MIN);
        let status = match tokio::time::timeout(within, call).await {
            Ok(Ok(reply)) => return Ok(reply.into_inner()),
            Ok(Err(status)) => status,
            Err(_) => Status::deadline_exceeded(format!("no answer within {within:?}")),
        };
        if error::booking_code(&status).is_some() {
            return Err(Error::rejected(&status));
        }
        Err(Error::Transport {
            address: address.to_owned(),
            status: status.code(),
            message: error::describe(&status),
        })
    }

    /// Polls the nodes' status until each of `groups` has a leader, within the retry budget.
    async fn wait_for_leaders(&self, groups: impl Iterator<Item = u64>) -> Result<()> {
        let mut waiting: BTreeSet<u64> = groups.collect();
        let started = Instant::now();
        let mut attempts = 0;
        while !waiting.is_empty() {
            attempts += 1;
            for node in self.cluster_status(false).await {
                for group in node.result.iter().flat_map(|reply| &reply.groups) {
                    if group.role == "leader" {
                        waiting.remove(&group.group_id);
                    }
                }
            }
            if waiting.is_empty() {
                break;
            }
            if started.elapsed() > self.config().retry_budget.max(RESTORE_TIME_MIN) {
                return Err(Error::Unavailable {
                    attempts,
                    elapsed: started.elapsed(),
                    status: Code::Unavailable,
                    booking_code: None,
                    message: format!("restored groups without a leader yet: {waiting:?}"),
                    outcome_unknown: false,
                    idempotency_key: None,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
}

/// The voters of group `group` among `nodes` (in id order), as a bootstrap chooses them:
/// every node for the metadata group; `count` nodes from position `(group - 1) mod n` for a
/// data group.
pub fn voters_of(group: u64, nodes: &[u64], count: usize) -> Vec<u64> {
    if group == METADATA_GROUP || nodes.is_empty() {
        return nodes.to_vec();
    }
    let count = count.clamp(1, nodes.len());
    let start = usize::try_from((group - 1) % nodes.len() as u64).unwrap_or(0);
    (0..count).map(|offset| nodes[(start + offset) % nodes.len()]).collect()
}

/// The archive member of a group's state.
fn state_file(group_id: u64) -> String {
    format!("group-{group_id}.state")
}

fn append(archive: &mut tar::Builder<File>, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o600);
    header.set_cksum();
    archive.append_data(&mut header, name, bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup() -> Backup {
        let group = |group_id: u64, state: &[u8]| GroupBackup {
            header: BackupHeader {
                group_id,
                log_index: 40 + group_id,
                log_term: 3,
                log_time_ms: 1_000,
                state_bytes: state.len() as u64,
                state_sha256: hex(&Sha256::digest(state)),
                voters: vec![1, 2, 3],
                state_format: 9,
            },
            state: state.to_vec(),
        };
        Backup { created_ms: 7, groups: vec![group(1, b"one"), group(0, b"metadata")] }
    }

    #[test]
    fn a_backup_file_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.backup");
        let backup = backup();
        backup.write(&path).unwrap();
        assert_eq!(Backup::read(&path).unwrap(), backup);
        assert!(!dir.path().join("cluster.backup.part").exists());
    }

    #[test]
    fn a_damaged_backup_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.backup");
        backup().write(&path).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        // Flip a byte of group 0's state ("metadata"), leaving the tar headers intact.
        let at = bytes.windows(8).position(|window| window == b"metadata").unwrap();
        bytes[at] ^= 0x20;
        fs::write(&path, &bytes).unwrap();
        let error = Backup::read(&path).unwrap_err().to_string();
        assert!(error.contains("group-0.state") && error.contains("damaged"), "{error}");
    }

    #[test]
    fn voters_rotate_over_the_nodes_like_a_bootstrap() {
        assert_eq!(voters_of(0, &[1, 2, 3], 1), vec![1, 2, 3]);
        assert_eq!(voters_of(1, &[1, 2, 3], 3), vec![1, 2, 3]);
        assert_eq!(voters_of(2, &[1, 2, 3], 3), vec![2, 3, 1]);
        assert_eq!(voters_of(5, &[1, 2, 3], 2), vec![2, 3]);
        assert_eq!(voters_of(2, &[4, 9], 5), vec![9, 4]);
    }
}
