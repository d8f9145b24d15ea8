//! Backups and restores of whole groups, for `AdminService`'s `Backup` and `Restore`.
//!
//! Owns taking a group's state at a committed index on its leader (a linearizable read, then
//! the applied state encoded outside the lock while writes go on) and founding a group on a
//! fresh node from such a state (checked by size, checksum and decoding before openraft
//! installs it as a snapshot). Never writes a backup file: that is the client's
//! (`client::backup`), and the restored cluster's other voters catch up by snapshot as usual.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use openraft::BasicNode;
use openraft::async_runtime::WatchReceiver;
use proto::booking::{BackupChunk, BackupHeader, RestoreChunk, RestoreReply};
use raft::NodeId;
use sha2::{Digest, Sha256};
use statemachine::{Group, SNAPSHOT_FORMAT_VERSION};
use tonic::{Status, Streaming};

use crate::error::ApiError;
use crate::group::HostedGroup;
use crate::names::hex;
use crate::node::Shared;

/// How many bytes of state one streamed chunk carries.
pub const CHUNK_BYTES: usize = 1 << 20;
/// How long a restored group's state may take to be installed.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The chunks of a group's backup: the header, then the state.
pub type BackupStream = Pin<Box<dyn Stream<Item = Result<BackupChunk, Status>> + Send + 'static>>;

/// Takes `hosted`'s state at a committed index, on its leader: every write acknowledged before
/// the call is in it. The state is encoded off the async workers; applies go on meanwhile (the
/// ones copy what they write to while the view is held, as for a snapshot being built).
///
/// # Errors
///
/// `NotLeader` off the leader, `Unavailable` when leadership cannot be confirmed.
pub async fn take(hosted: &HostedGroup) -> Result<BackupStream, ApiError> {
    hosted.read_linearizable(|_| ()).await?;
    let (group, last_applied) = hosted.reader.view()?;
    let Some(log_id) = last_applied else {
        return Err(ApiError::Unavailable(format!("group {}: nothing applied yet", hosted.id)));
    };
    let log_time_ms = group.log_time_ms();
    let state = tokio::task::spawn_blocking(move || group.encode_snapshot())
        .await
        .map_err(|error| ApiError::Internal(format!("encoding the state: {error}")))?;
    let metrics = hosted.raft.metrics().borrow_watched().clone();
    let header = BackupHeader {
        group_id: hosted.id,
        log_index: log_id.index,
        log_term: log_id.leader_id.term,
        log_time_ms,
        state_bytes: state.len() as u64,
        state_sha256: hex(&Sha256::digest(&state)),
        voters: metrics.membership_config.membership().voter_ids().collect(),
        state_format: u32::from(SNAPSHOT_FORMAT_VERSION),
    };
    tracing::info!(group = hosted.id, index = log_id.index, bytes = state.len(), "backup taken");
    let first = BackupChunk { header: Some(header), data: Vec::new() };
    // Each chunk is copied out of the state as the stream is polled, not all at once.
    let state = Arc::new(state);
    let chunks = (0..state.len().div_ceil(CHUNK_BYTES)).map(move |at| {
        let end = ((at + 1) * CHUNK_BYTES).min(state.len());
        Ok(BackupChunk { header: None, data: state[at * CHUNK_BYTES..end].to_vec() })
    });
    Ok(Box::pin(futures_util::stream::iter(std::iter::once(Ok(first)).chain(chunks))))
}

/// Founds a group on this node from a backup of it (the `Restore` call's stream): checks that
/// the node never was a member of the group and is among the given voters, receives the state
/// (no more than the node's snapshot cap), checks its size, checksum and decoding, installs it
/// as a snapshot at the backup's log index with a membership of the given voters, and stands
/// for election.
///
/// # Errors
///
/// `InvalidArgument` for a malformed or corrupt stream (nothing changed), `MembershipRefused`
/// when the group already exists on this node, `Internal` when the install failed.
pub async fn restore(
    shared: &Arc<Shared>,
    mut stream: Streaming<RestoreChunk>,
) -> Result<RestoreReply, ApiError> {
    let invalid = |why: String| ApiError::InvalidArgument(format!("restore: {why}"));
    let received = |status: Status| invalid(format!("the stream broke: {}", status.message()));
    let first = stream.message().await.map_err(received)?;
    let Some(RestoreChunk { header: Some(header), voters, data }) = first else {
        return Err(invalid("the first chunk must carry the header".into()));
    };
    let hosted = shared.group(header.group_id)?;
    let group_id = hosted.id;
    if hosted.raft.is_initialized().await.map_err(|error| ApiError::Internal(error.to_string()))? {
        return Err(ApiError::MembershipRefused(format!(
            "group {group_id} already exists on node {}: restore into fresh nodes, started \
             without --bootstrap",
            shared.config.id
        )));
    }
    let voters = restored_voters(shared, group_id, &voters)?;
    let cap = shared.config.snapshot_max_bytes;
    if header.state_bytes > cap {
        return Err(invalid(format!(
            "group {group_id}'s state is {} bytes, over this node's --snapshot-max-bytes ({cap})",
            header.state_bytes
        )));
    }
    let expected = usize::try_from(header.state_bytes)
        .map_err(|_| invalid("state_bytes does not fit in memory".into()))?;
    let mut state = Vec::with_capacity(expected);
    state.extend_from_slice(&data);
    while let Some(chunk) = stream.message().await.map_err(received)? {
        if chunk.header.is_some() || !chunk.voters.is_empty() {
            return Err(invalid("only the first chunk carries the header and voters".into()));
        }
        if state.len() + chunk.data.len() > expected {
            return Err(invalid(format!("more than the header's {expected} bytes of state")));
        }
        state.extend_from_slice(&chunk.data);
    }
    if state.len() != expected {
        return Err(invalid(format!("{} bytes of state, the header says {expected}", state.len())));
    }
    let sha256 = hex(&Sha256::digest(&state));
    if sha256 != header.state_sha256 {
        return Err(invalid(format!(
            "group {group_id}: the state's SHA-256 is {sha256}, the header says {}",
            header.state_sha256
        )));
    }
    let log_index = header.log_index;
    let (state, decoded) = tokio::task::spawn_blocking(move || {
        let decoded = Group::decode_snapshot(&state).map(|group| group.applied_index());
        (state, decoded)
    })
    .await
    .map_err(|error| ApiError::Internal(format!("decoding the state: {error}")))?;
    match decoded {
        Err(error) => return Err(invalid(format!("group {group_id}: the state: {error}"))),
        Ok(index) if index != log_index => {
            return Err(invalid(format!(
                "group {group_id}: the state is at log index {index}, the header says {log_index}"
            )));
        }
        Ok(_) => {}
    }
    let (vote, snapshot) = raft::founding_snapshot(
        group_id,
        shared.config.id,
        log_index,
        header.log_term,
        voters,
        state,
    )
    .map_err(invalid)?;
    hosted.raft.install_full_snapshot(vote, snapshot).await.map_err(internal)?;
    hosted
        .raft
        .wait(Some(INSTALL_TIMEOUT))
        .applied_index_at_least(Some(log_index), "the restored state")
        .await
        .map_err(internal)?;
    // Nothing else is applied before this node stands for election: its peers know no
    // membership of the group yet.
    let (installed_index, state_sha256) =
        hosted.read_local(|state| (state.applied_index(), hex(&state.digest())))?;
    if installed_index != log_index {
        return Err(ApiError::Internal(format!(
            "group {group_id}: installed at log index {installed_index}, not {log_index}"
        )));
    }
    hosted.raft.trigger().elect(false).await.map_err(internal)?;
    tracing::info!(group = group_id, index = log_index, "restored the group from a backup");
    Ok(RestoreReply { group_id, log_index, state_sha256 })
}

/// The voters of a restored group, checked: this node among them, each with an address that
/// reaches its peer port when the nodes have one.
fn restored_voters(
    shared: &Shared,
    group_id: u64,
    voters: &[proto::booking::RestoreMember],
) -> Result<BTreeMap<NodeId, BasicNode>, ApiError> {
    let mut restored = BTreeMap::new();
    for voter in voters {
        if voter.node_id == 0 || voter.address.is_empty() {
            return Err(ApiError::InvalidArgument(
                "restore: every voter needs a non-zero node_id and an address".into(),
            ));
        }
        if shared.config.peer.is_some() && !raft::tls::names_peer_address(&voter.address) {
            return Err(ApiError::InvalidArgument(format!(
                "restore: node {}'s address `{}` names no peer port (give the address its \
                 Status reports)",
                voter.node_id, voter.address
            )));
        }
        restored.insert(voter.node_id, BasicNode::new(voter.address.clone()));
    }
    if !restored.contains_key(&shared.config.id) {
        return Err(ApiError::InvalidArgument(format!(
            "restore: group {group_id}'s voters must include this node ({})",
            shared.config.id
        )));
    }
    Ok(restored)
}

fn internal(error: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(error.to_string())
}
