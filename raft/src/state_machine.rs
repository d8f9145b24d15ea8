//! The replicated state machine of one group, as openraft drives it: applying committed entries
//! to a `statemachine::Group` held in memory, and building, persisting and installing snapshots.
//!
//! Owns the group's in-memory state (the `Group`, the last applied log id and membership) and its
//! record in the `snapshots` column family. Never decides a booking rule: every normal entry goes
//! to `Group::apply` (or `Group::apply_answering`) unchanged, and this adapter stays small.
//!
//! What an implementation of `RaftStateMachine` must do, and how this one does it:
//!
//! - Answer every applied entry through its responder, if it has one: normal entries answer the
//!   answers of `Group::apply_answering` (each command's outcome and the view of what it wrote;
//!   an entry nobody waits for, as on a follower, is applied without building the views); blank
//!   and membership entries advance the group with `Group::apply_empty` and answer an empty
//!   vector.
//! - Record the last applied log id, and the membership of a membership entry.
//! - Report through `applied_state()` only what survives a restart. The state lives in memory
//!   and only snapshots are persisted (durably, beside the log's write-ahead log rather than
//!   through it: `Engine::put_durable`), so a store opened on a restarted node starts
//!   from its persisted snapshot and reports that snapshot's last log id. While the process
//!   runs, the in-memory applied state is reported: openraft asks for it only at start-up
//!   (`StorageHelper::get_initial_state`), and a fresh process always builds a fresh store. The
//!   log store persists the committed log id (`save_committed`), so on start-up openraft
//!   re-applies the log from the snapshot up to the last committed entry before serving. To
//!   restart a group inside a running process (say after it went fatal), open a new store with
//!   `Storage::state_machine`: it starts from the persisted snapshot like a restarted node.
//! - Make `get_current_snapshot` return the snapshot just built or installed, durably: a snapshot
//!   is synced before openraft learns of it, because openraft purges the log it covers.
//! - Never let an older snapshot replace a newer one: a build runs in the background and may
//!   finish after an install from the leader; it persists only if it is newer than what is
//!   persisted, otherwise a restart would find the log purged beyond its snapshot.

use std::io;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use statemachine::inject::{self, Bug};
use statemachine::{Command, Group, OperatorCommand, ShowEncodings};
use tokio::sync::Mutex as AsyncMutex;

use crate::codec::{self, ColumnFamily, snapshot_key};
use crate::error::StoreError;
use crate::runtime::BookingRuntime;
use crate::state_costs::{StateCostCounts, StateCosts};
use crate::storage::Storage;
use crate::types::{
    Entry, GroupId, LogId, Proposal, Response, Snapshot, SnapshotData, SnapshotMeta,
    StoredMembership, TypeConfig,
};

/// The state-machine store of one group.
pub struct StateMachineStore {
    storage: Storage,
    group_id: GroupId,
    state: Arc<RwLock<Applied>>,
    persisted: Arc<AsyncMutex<PersistedSnapshot>>,
    /// What the last snapshot built here found of each show, for the next build to reuse.
    encodings: Arc<Mutex<ShowEncodings>>,
    costs: Arc<StateCosts>,
}

/// The group's in-memory state.
struct Applied {
    /// Shared with snapshot builders: a builder keeps the state it was created from, and while it
    /// holds it an apply copies the group (`Arc::make_mut`): a cheap copy that shares every show
    /// and chunk, of which the apply then copies only what it writes to (`statemachine::CowMap`).
    group: Arc<Group>,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    /// Every how many entries a checkpoint is kept (0: none).
    checkpoint_every: u64,
    /// The state right after the last entry whose index is a multiple of `checkpoint_every`,
    /// until an auditor takes it: every replica keeps one at the same indexes, so their
    /// digests can be compared. Shared like a snapshot builder's state.
    checkpoint: Option<(u64, Arc<Group>)>,
}

/// The last log id of the persisted snapshot: `None` if none is persisted.
type PersistedSnapshot = Option<Option<LogId>>;

impl Applied {
    fn snapshot_meta(&self) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.last_membership.clone(),
        }
    }
}

impl StateMachineStore {
    /// Opens `group_id`'s store: restored from its persisted snapshot if there is one, empty
    /// otherwise.
    pub(crate) fn open(
        storage: Storage,
        group_id: GroupId,
    ) -> Result<StateMachineStore, StoreError> {
        let (applied, persisted) = match read_snapshot(&storage, group_id)? {
            None => {
                let applied = Applied {
                    group: Arc::new(Group::new()),
                    last_applied: None,
                    last_membership: StoredMembership::default(),
                    checkpoint_every: 0,
                    checkpoint: None,
                };
                (applied, None)
            }
            Some((meta, data)) => {
                let group = restore(group_id, &meta, &data)?;
                let persisted = Some(meta.last_log_id);
                let applied = Applied {
                    group: Arc::new(group),
                    last_applied: meta.last_log_id,
                    last_membership: meta.last_membership,
                    checkpoint_every: 0,
                    checkpoint: None,
                };
                (applied, persisted)
            }
        };
        Ok(StateMachineStore {
            storage,
            group_id,
            state: Arc::new(RwLock::new(applied)),
            persisted: Arc::new(AsyncMutex::new(persisted)),
            encodings: Arc::default(),
            costs: Arc::default(),
        })
    }

    /// The group this store belongs to.
    pub fn group_id(&self) -> GroupId {
        self.group_id
    }

    /// A read handle on the group's applied state, for the node's reads.
    pub fn reader(&self) -> GroupReader {
        GroupReader { state: Arc::clone(&self.state), costs: Arc::clone(&self.costs) }
    }

    /// Applies one entry and returns its answers if `answering` (someone waits for them: the
    /// leader that proposed it); otherwise the views are not built and the answer is empty.
    fn apply_entry(&self, entry: Entry, answering: bool) -> Result<Response, StoreError> {
        let mut guard = self.state.write().map_err(|_| StoreError::Poisoned)?;
        let applied = &mut *guard;
        let log_id = entry.log_id;
        let index = log_id.index();
        // Replays are idempotent through the applied index: an entry at or below it was applied
        // before, changes nothing, and must not move the applied position back. openraft does
        // not replay; this keeps a replay harmless if it ever did.
        if applied.last_applied.is_some_and(|last| index <= last.index())
            && !inject::on(Bug::ApplyTwice)
        {
            tracing::warn!(group = self.group_id, %log_id, "ignored an entry applied before");
            return Ok(Vec::new());
        }
        // A snapshot builder, backup or checkpoint still holding the state makes this apply copy
        // it, under the lock. The group shares its shows and chunks, so the copy is of what
        // this entry writes to (see `statemachine::CowMap`), but it is still the stall to watch.
        let copying = Arc::strong_count(&applied.group) > 1;
        let started = copying.then(Instant::now);
        let group = Arc::make_mut(&mut applied.group);
        if let Some(started) = started {
            self.costs.copied(started.elapsed());
        }
        if inject::on(Bug::ApplyTwice) && group.applied_index() >= index {
            let what = match &entry.payload {
                EntryPayload::Normal(proposal) => format!("{:?}", proposal.commands),
                other => format!("{other:?}"),
            };
            let what: String = what.chars().take(300).collect();
            tracing::warn!(group = self.group_id, index, what, "planted bug apply-twice: again");
        }
        let response = match entry.payload {
            EntryPayload::Normal(Proposal { time_ms, commands }) => {
                self.write_archives(group, index, &commands)?;
                let entry = statemachine::Entry { index, time_ms, commands };
                if answering {
                    group.apply_answering(&entry)
                } else {
                    group.apply(&entry);
                    Vec::new()
                }
            }
            // Blank and membership entries carry no leader stamp: time 0 leaves log time as it
            // is (it only ever moves to the maximum).
            EntryPayload::Blank => {
                group.apply_empty(index, 0);
                Vec::new()
            }
            EntryPayload::Membership(membership) => {
                group.apply_empty(index, 0);
                applied.last_membership = StoredMembership::new(Some(log_id), membership);
                Vec::new()
            }
        };
        // Every entry, of any kind, moves the group's applied index: the two positions agree.
        assert_eq!(group.applied_index(), index, "group {} applied {log_id}", self.group_id);
        applied.last_applied = Some(log_id);
        if applied.checkpoint_every > 0 && index.is_multiple_of(applied.checkpoint_every) {
            applied.checkpoint = Some((index, Arc::clone(&applied.group)));
        }
        Ok(response)
    }
}

impl StateMachineStore {
    /// Writes the archive of every show an entry's commands archive (and the segment of every
    /// compaction), before the entry is applied, so that no replica forgets a show whose archive it has not made durable. An
    /// archive is written only if this replica's export has the command's digest (the state
    /// the command was judged on); if the entry's own earlier commands change the show, the
    /// command is refused by the state machine and the file left is overwritten by the next
    /// successful archive of that show. The node reads an archive only for an archived show.
    fn write_archives(
        &self,
        group: &Group,
        index: u64,
        commands: &[Command],
    ) -> Result<(), StoreError> {
        let Some(archives) = self.storage.archives() else { return Ok(()) };
        for command in commands {
            if let &Command::Operator(OperatorCommand::CompactShow { show, before_ms, digest }) =
                command
                && let Ok((bytes, records)) = group.compaction_export(show, before_ms)
                && statemachine::archive_digest(&bytes) == digest
            {
                archives.write_segment(show, index, &bytes)?;
                tracing::debug!(group = self.group_id, show = show.0, records, "compacted a show");
                continue;
            }
            let &Command::Operator(OperatorCommand::ArchiveShow { show, digest }) = command else {
                continue;
            };
            let Ok(bytes) = group.archive_export(show) else { continue };
            if statemachine::archive_digest(&bytes) == digest {
                archives.write(show, &bytes)?;
                tracing::info!(
                    group = self.group_id,
                    show = show.0,
                    bytes = bytes.len(),
                    "archived a show"
                );
            }
        }
        Ok(())
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let applied = self.state.read().map_err(|_| StoreError::Poisoned)?;
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = self.apply_entry(entry, responder.is_some())?;
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // The view is taken now: later applies do not change what the builder encodes.
        let view = self
            .state
            .read()
            .ok()
            .map(|applied| (Arc::clone(&applied.group), applied.snapshot_meta()));
        SnapshotBuilder {
            storage: self.storage.clone(),
            group_id: self.group_id,
            view,
            persisted: Arc::clone(&self.persisted),
            encodings: Arc::clone(&self.encodings),
            costs: Arc::clone(&self.costs),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        // Garbage from a peer is an error for openraft to report, never a panic or a half
        // replaced state: decode and check everything before changing anything.
        let started = Instant::now();
        let group = restore(self.group_id, meta, &snapshot)?;
        persist(&self.storage, self.group_id, &self.persisted, meta, &snapshot, Persist::Always)
            .await?;
        self.costs.installed(started.elapsed(), snapshot.len());
        let mut applied = self.state.write().map_err(|_| StoreError::Poisoned)?;
        applied.group = Arc::new(group);
        applied.last_applied = meta.last_log_id;
        applied.last_membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let snapshot = read_snapshot(&self.storage, self.group_id)?;
        Ok(snapshot.map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

/// Builds a snapshot of the state its store had when the builder was made, in the background.
pub struct SnapshotBuilder {
    storage: Storage,
    group_id: GroupId,
    /// The group and its position, or `None` if the state was poisoned.
    view: Option<(Arc<Group>, SnapshotMeta)>,
    persisted: Arc<AsyncMutex<PersistedSnapshot>>,
    encodings: Arc<Mutex<ShowEncodings>>,
    costs: Arc<StateCosts>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let Some((group, meta)) = self.view.clone() else {
            return Err(StoreError::Poisoned.into());
        };
        let started = Instant::now();
        // Encoding a large group takes a while: keep it off the async workers, at a lower
        // priority than serving. Only the shows written to since the last build are encoded
        // and checked again.
        let encodings = Arc::clone(&self.encodings);
        let (data, shows) = BookingRuntime::spawn_background(move || {
            let mut encodings = encodings.lock().unwrap_or_else(PoisonError::into_inner);
            let data = group.encode_snapshot_reusing(&mut encodings);
            (data, (encodings.reused, encodings.encoded))
        })
        .await?;
        persist(&self.storage, self.group_id, &self.persisted, &meta, &data, Persist::IfNewer)
            .await?;
        self.costs.built(started.elapsed(), data.len(), shows);
        Ok(Snapshot { meta, snapshot: data })
    }
}

/// A cloneable read handle on one group's applied state.
#[derive(Clone)]
pub struct GroupReader {
    state: Arc<RwLock<Applied>>,
    costs: Arc<StateCosts>,
}

impl GroupReader {
    /// Runs `read` on the group's applied state. The group's `applied_index()` and
    /// `log_time_ms()` say how fresh it is. Keep `read` short: applies wait for it.
    ///
    /// # Errors
    ///
    /// `Poisoned` if an apply panicked (the state is not trustworthy any more).
    pub fn read<T>(&self, read: impl FnOnce(&Group) -> T) -> Result<T, StoreError> {
        let applied = self.state.read().map_err(|_| StoreError::Poisoned)?;
        Ok(read(&applied.group))
    }

    /// What keeping the state has cost on this node so far: snapshots built and installed,
    /// and the copies applies made of state something else still shared.
    pub fn costs(&self) -> StateCostCounts {
        self.costs.counts()
    }

    /// Keeps a checkpoint of the state after every entry whose index is a multiple of
    /// `entries` (0: none), for [`GroupReader::take_checkpoint`]. A held checkpoint shares the
    /// state as a snapshot being built does: applies meanwhile copy what they write to.
    ///
    /// # Errors
    ///
    /// `Poisoned` if an apply panicked.
    pub fn keep_checkpoints(&self, entries: u64) -> Result<(), StoreError> {
        let mut applied = self.state.write().map_err(|_| StoreError::Poisoned)?;
        applied.checkpoint_every = entries;
        if entries == 0 {
            applied.checkpoint = None;
        }
        Ok(())
    }

    /// Takes the latest checkpoint, if one was kept since the last take: the log index it is
    /// the state after, and that state, to be read outside the lock (applies go on meanwhile).
    ///
    /// # Errors
    ///
    /// `Poisoned` if an apply panicked.
    pub fn take_checkpoint(&self) -> Result<Option<(u64, Arc<Group>)>, StoreError> {
        let mut applied = self.state.write().map_err(|_| StoreError::Poisoned)?;
        Ok(applied.checkpoint.take())
    }

    /// The applied state as it is now, with the log id of its last entry, to be read (say,
    /// encoded for a backup) outside the lock while applies go on: like a snapshot builder's
    /// view, it makes applies copy what they write to while it is held.
    ///
    /// # Errors
    ///
    /// `Poisoned` if an apply panicked.
    pub fn view(&self) -> Result<(Arc<Group>, Option<LogId>), StoreError> {
        let applied = self.state.read().map_err(|_| StoreError::Poisoned)?;
        Ok((Arc::clone(&applied.group), applied.last_applied))
    }

    /// The log id of the last applied entry.
    ///
    /// # Errors
    ///
    /// `Poisoned` if an apply panicked.
    pub fn last_applied(&self) -> Result<Option<LogId>, StoreError> {
        let applied = self.state.read().map_err(|_| StoreError::Poisoned)?;
        Ok(applied.last_applied)
    }
}

/// Whether a snapshot replaces the persisted one unconditionally.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Persist {
    /// An install: the leader's snapshot is always ahead of this store.
    Always,
    /// A local build: only if newer than the persisted snapshot.
    IfNewer,
}

/// Persists a snapshot of `group_id` and waits until it is durable. It is written beside the
/// Raft log rather than through its write-ahead log (`Engine::put_durable`): tens of megabytes
/// there would make every append synced meanwhile wait for them.
async fn persist(
    storage: &Storage,
    group_id: GroupId,
    persisted: &AsyncMutex<PersistedSnapshot>,
    meta: &SnapshotMeta,
    data: &[u8],
    mode: Persist,
) -> Result<(), StoreError> {
    let record = codec::encode_snapshot_record(meta, data)?;
    // The check and the write are one step, so concurrent builds and installs leave the newest
    // snapshot in place. A failed write leaves the guarded value as it was.
    let mut last = persisted.lock().await;
    if mode == Persist::IfNewer
        && last.as_ref().is_some_and(|last_log_id| meta.last_log_id <= *last_log_id)
    {
        return Ok(());
    }
    let key = snapshot_key(group_id).to_vec();
    storage.engine().put_durable(ColumnFamily::Snapshots, key, record).await?;
    *last = Some(meta.last_log_id);
    Ok(())
}

/// Reads `group_id`'s persisted snapshot.
fn read_snapshot(
    storage: &Storage,
    group_id: GroupId,
) -> Result<Option<(SnapshotMeta, SnapshotData)>, StoreError> {
    let Some(bytes) = storage.engine().get(ColumnFamily::Snapshots, &snapshot_key(group_id))?
    else {
        return Ok(None);
    };
    let (mut meta, data) = codec::decode_snapshot_record(&bytes)?;
    // The planted bug: the snapshot claims to end where the log was purged, though its state
    // holds the entries after that, which openraft then applies again (after a restart, and on
    // a follower that installs it).
    if inject::on(Bug::ApplyTwice)
        && let Some(purged) = storage.log_store(group_id).last_purged()?
        && meta.last_log_id.is_some_and(|last| purged < last)
    {
        tracing::warn!(group = group_id, %purged, "planted bug apply-twice: a stale snapshot");
        meta.last_log_id = Some(purged);
    }
    Ok(Some((meta, data)))
}

/// Decodes snapshot bytes and checks that they hold the state `meta` describes.
fn restore(group_id: GroupId, meta: &SnapshotMeta, data: &[u8]) -> Result<Group, StoreError> {
    let group = Group::decode_snapshot(data)?;
    let expected = meta.last_log_id.as_ref().map_or(0, |log_id| log_id.index());
    if group.applied_index() != expected && !inject::on(Bug::ApplyTwice) {
        return Err(StoreError::Corrupt(format!(
            "group {group_id}: snapshot state is at index {}, its metadata says {expected}",
            group.applied_index()
        )));
    }
    Ok(group)
}
