//! Moving a show between data groups, fenced: the source group freezes it, the target group
//! imports its frozen state, the metadata group flips its placement, the target activates it
//! and the source drops it.
//!
//! Owns each group's record of its shows' moves ([`ShowMove`]) and the four commands that move
//! them through it: `FreezeShow` (source: the show stops changing; every command and read about
//! it is refused `show_moving`), `ImportShow` (target: the frozen state arrives, checked by its
//! digest, and waits refused `show_moving`), `ActivateShow` (target: it serves), `DropShow`
//! (source: it leaves; everything about it is redirected `show_moved` to the target). Also owns
//! the transfer format: the show and its audit trails in postcard behind a magic and the
//! snapshot format version. The metadata group's placement flip is `Placement::relocate`.
//!
//! The rule that makes a move safe is an order the node keeps (the target is activated only
//! after the flip, which is made only after the import of the state frozen at the source) and
//! one this module keeps: a frozen show never changes (ticks skip it, every command is refused),
//! so the state imported is the state the source last served, and at no moment do two groups
//! serve the show. Never chooses where a show goes (the operator or the node's rebalance does).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::audit::{AuditRecord, EntityRef};
use crate::ids::ShowId;
use crate::limits::{LOG_TIME_MS_MAX, SHOW_TRANSFER_BYTES_MAX, SHOWS_PER_GROUP_MAX};
use crate::outcome::{Outcome, Rejection, Reply};
use crate::placement::METADATA_GROUP;
use crate::snapshot::{Digest, SNAPSHOT_FORMAT_VERSION};
use crate::state::{Group, Show};

/// Where a show of this group is in a move (a show that never moved has no record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShowMove {
    /// Frozen for a move to group `to`: refused `show_moving` until dropped.
    Leaving {
        /// The target group.
        to: u64,
        /// The SHA-256 of its transfer bytes (`Group::show_transfer`).
        digest: Digest,
        /// Their length.
        bytes: u64,
        /// The log index of the freeze.
        index: u64,
        /// The log time of the freeze, which the transfer carries.
        time_ms: u64,
    },
    /// Gone to group `to`: redirected `show_moved`.
    Left {
        /// The group it went to.
        to: u64,
        /// The log index of the drop.
        index: u64,
    },
    /// Imported from group `from`, not serving yet: refused `show_moving` until activated.
    Arriving {
        /// The source group.
        from: u64,
        /// The SHA-256 of the transfer bytes imported.
        digest: Digest,
        /// Their length.
        bytes: u64,
        /// The log index of the import.
        index: u64,
        /// The source's log time at the freeze.
        frozen_ms: u64,
    },
    /// Came from group `from` and serves here.
    Arrived {
        /// The source group.
        from: u64,
        /// The SHA-256 of the transfer bytes imported.
        digest: Digest,
        /// Their length.
        bytes: u64,
        /// The log index of the activation.
        index: u64,
        /// The source's log time at the freeze.
        frozen_ms: u64,
        /// The log time of the activation: from the freeze until then, no group served it.
        activated_ms: u64,
    },
}

/// The bytes a show travels in: its state and audit trails, and the source's log time.
#[derive(Serialize, Deserialize)]
struct Transfer {
    show: Show,
    audit: Vec<(EntityRef, Vec<AuditRecord>)>,
    log_time_ms: u64,
}

const TRANSFER_MAGIC: [u8; 4] = *b"BKSX";
const TRANSFER_HEADER_LEN: usize = TRANSFER_MAGIC.len() + 2;

impl Group {
    /// Every show of this group that is moving or has moved, with its record.
    pub fn moves(&self) -> &BTreeMap<ShowId, ShowMove> {
        &self.moves
    }

    /// Why `show` may not be served here although this group knows it: frozen or arriving
    /// (`show_moving`), or gone (`show_moved` to its group). `None` for a show that serves here
    /// (or never was here).
    pub fn inactive(&self, show: ShowId) -> Option<Rejection> {
        match self.moves.get(&show)? {
            ShowMove::Leaving { .. } | ShowMove::Arriving { .. } => Some(Rejection::ShowMoving),
            &ShowMove::Left { to, .. } => Some(Rejection::ShowMoved { group: to }),
            ShowMove::Arrived { .. } => None,
        }
    }

    /// Whether `show` is here and serves (not frozen, arriving or gone).
    pub(crate) fn serves(&self, show: ShowId) -> bool {
        self.shows.contains_key(&show) && self.inactive(show).is_none()
    }

    /// The transfer bytes of a frozen show and their digest: what `ImportShow` carries.
    /// Deterministic, and a frozen show never changes, so every replica that applied the freeze
    /// exports the same bytes, with the digest the freeze recorded.
    ///
    /// # Errors
    ///
    /// `show_not_found`; `invalid_argument` when the show is not frozen for a move.
    pub fn show_transfer(&self, show: ShowId) -> Result<(Vec<u8>, Digest), Rejection> {
        let time_ms = match self.moves.get(&show) {
            Some(ShowMove::Leaving { time_ms, .. }) => *time_ms,
            Some(ShowMove::Left { to, .. }) => return Err(Rejection::ShowMoved { group: *to }),
            _ => return Err(Rejection::invalid("show: not frozen for a move")),
        };
        let found = self.shows.get(&show).ok_or(Rejection::ShowNotFound)?;
        let bytes = self.transfer_bytes(found, time_ms);
        let digest = Sha256::digest(&bytes).into();
        Ok((bytes, digest))
    }

    /// The transfer bytes of `show` as frozen at log time `time_ms`.
    fn transfer_bytes(&self, show: &Show, time_ms: u64) -> Vec<u8> {
        let audit = self
            .audit
            .of_show(show.id)
            .map(|(entity, records)| (*entity, records.to_vec()))
            .collect();
        let transfer = TransferRef { show, audit, log_time_ms: time_ms };
        let mut bytes = Vec::with_capacity(TRANSFER_HEADER_LEN + 1024);
        bytes.extend_from_slice(&TRANSFER_MAGIC);
        bytes.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
        postcard::to_extend(&transfer, bytes).expect("encoding to a vector cannot fail")
    }

    /// Applies `FreezeShow`: the show stops changing here, for a move to group `to`. Refused
    /// for a show that does not serve here, or whose state is larger than a move carries.
    /// Freezing it again for the same group is a duplicate.
    pub(crate) fn freeze_show(&mut self, show: ShowId, to: u64) -> Outcome {
        if to == METADATA_GROUP {
            return Err(Rejection::invalid("to: shows move between data groups (1 and up)"));
        }
        match self.moves.get(&show) {
            Some(&ShowMove::Leaving { to: leaving, digest, bytes, .. }) if leaving == to => {
                return Ok(Reply::ShowFrozen { show, to, digest, bytes, duplicate: true });
            }
            Some(ShowMove::Leaving { .. }) => return Err(Rejection::ShowMoving),
            _ => {}
        }
        let found = self.show_or_archived(show)?;
        let time_ms = self.log_time_ms;
        let encoded = self.transfer_bytes(found, time_ms);
        if encoded.len() > SHOW_TRANSFER_BYTES_MAX {
            return Err(Rejection::invalid(format!(
                "show: its state is {} bytes, more than a move carries ({SHOW_TRANSFER_BYTES_MAX}); \
                 archive or compact it first",
                encoded.len()
            )));
        }
        let digest: Digest = Sha256::digest(&encoded).into();
        let bytes = encoded.len() as u64;
        let index = self.applied_index;
        self.moves.insert(show, ShowMove::Leaving { to, digest, bytes, index, time_ms });
        Ok(Reply::ShowFrozen { show, to, digest, bytes, duplicate: false })
    }

    /// Applies `ImportShow`: the frozen state of a show from group `from` arrives here, not
    /// serving until activated. Refused when the bytes do not have the digest, do not decode to
    /// a consistent show of that id, or the show already serves (or is frozen) here. A second
    /// import of the same bytes is a duplicate; other bytes replace an import never activated.
    /// Log time moves up to the source's at the freeze, so the show's time never goes back.
    pub(crate) fn import_show(
        &mut self,
        show: ShowId,
        from: u64,
        state: &[u8],
        digest: Digest,
    ) -> Outcome {
        if from == METADATA_GROUP {
            return Err(Rejection::invalid("from: shows move between data groups (1 and up)"));
        }
        if <[u8; 32]>::from(Sha256::digest(state)) != digest {
            return Err(Rejection::invalid("state: does not have the digest given"));
        }
        match self.moves.get(&show) {
            Some(&ShowMove::Arriving { digest: arrived, .. }) if arrived == digest => {
                return Ok(Reply::ShowImported { show, from, digest, duplicate: true });
            }
            Some(ShowMove::Arriving { .. }) | Some(ShowMove::Left { .. }) | None => {}
            Some(ShowMove::Leaving { .. }) => return Err(Rejection::ShowMoving),
            Some(ShowMove::Arrived { .. }) => return Err(Rejection::ShowExists),
        }
        let replacing = matches!(self.moves.get(&show), Some(ShowMove::Arriving { .. }));
        if !replacing && (self.shows.contains_key(&show) || self.archived.contains_key(&show)) {
            return Err(Rejection::ShowExists);
        }
        if !replacing && self.shows.len() >= SHOWS_PER_GROUP_MAX {
            return Err(Rejection::GroupFull);
        }
        let transfer = decode_transfer(show, state)?;
        // From here on every step succeeds.
        self.audit.remove_show(show);
        for (entity, records) in transfer.audit {
            for record in records {
                self.audit.append(entity, record);
            }
        }
        self.shows.insert(show, Arc::new(transfer.show));
        let frozen_ms = transfer.log_time_ms.min(LOG_TIME_MS_MAX);
        self.log_time_ms = self.log_time_ms.max(frozen_ms);
        let (index, bytes) = (self.applied_index, state.len() as u64);
        self.moves.insert(show, ShowMove::Arriving { from, digest, bytes, index, frozen_ms });
        Ok(Reply::ShowImported { show, from, digest, duplicate: false })
    }

    /// Applies `ActivateShow`: an imported show serves here (the node proposes it only once the
    /// metadata group placed the show here). A second activation is a duplicate.
    pub(crate) fn activate_show(&mut self, show: ShowId) -> Outcome {
        match self.moves.get(&show) {
            Some(&ShowMove::Arriving { from, digest, bytes, frozen_ms, .. }) => {
                let (index, activated_ms) = (self.applied_index, self.log_time_ms);
                self.moves.insert(
                    show,
                    ShowMove::Arrived { from, digest, bytes, index, frozen_ms, activated_ms },
                );
                Ok(Reply::ShowActivated { show, from, duplicate: false })
            }
            Some(&ShowMove::Arrived { from, .. }) => {
                Ok(Reply::ShowActivated { show, from, duplicate: true })
            }
            Some(ShowMove::Leaving { .. }) => Err(Rejection::ShowMoving),
            Some(&ShowMove::Left { to, .. }) => Err(Rejection::ShowMoved { group: to }),
            None if self.shows.contains_key(&show) => {
                Err(Rejection::invalid("show: was not imported for a move"))
            }
            None => Err(self.missing(show)),
        }
    }

    /// Applies `DropShow`: a show frozen for group `to` leaves this group (the node proposes it
    /// once `to` serves it), with its audit trails; a record stays that redirects to `to`. A
    /// second drop is a duplicate.
    pub(crate) fn drop_show(&mut self, show: ShowId, to: u64) -> Outcome {
        match self.moves.get(&show) {
            Some(&ShowMove::Leaving { to: leaving, .. }) if leaving == to => {
                self.shows.remove(&show);
                self.audit.remove_show(show);
                let index = self.applied_index;
                self.moves.insert(show, ShowMove::Left { to, index });
                Ok(Reply::ShowDropped { show, to, duplicate: false })
            }
            Some(&ShowMove::Left { to: left, .. }) if left == to => {
                Ok(Reply::ShowDropped { show, to, duplicate: true })
            }
            Some(ShowMove::Leaving { .. }) | Some(ShowMove::Left { .. }) => {
                Err(Rejection::invalid("to: the show is moving to another group"))
            }
            Some(_) | None if self.shows.contains_key(&show) => {
                Err(Rejection::invalid("show: not frozen for a move"))
            }
            Some(_) | None => Err(self.missing(show)),
        }
    }

    /// Checks the move records against the shows: a frozen, arriving or arrived show is here,
    /// a gone one is not, and a frozen one still has the digest it was frozen with.
    pub(crate) fn check_moves(&self) -> Result<(), String> {
        if !self.moves.is_empty() && self.feature_level < crate::FEATURE_LEVEL_MOVES {
            return Err(format!("moves at feature level {}", self.feature_level));
        }
        for (&show, record) in &self.moves {
            let here = self.shows.get(&show);
            match *record {
                ShowMove::Leaving { digest, bytes, time_ms, .. } => {
                    let Some(found) = here else {
                        return Err(format!("frozen show {show} is not in the group"));
                    };
                    let encoded = self.transfer_bytes(found, time_ms);
                    if encoded.len() as u64 != bytes
                        || <[u8; 32]>::from(Sha256::digest(&encoded)) != digest
                    {
                        return Err(format!("frozen show {show} changed after its freeze"));
                    }
                }
                ShowMove::Arriving { .. } | ShowMove::Arrived { .. } if here.is_none() => {
                    return Err(format!("imported show {show} is not in the group"));
                }
                ShowMove::Left { .. } if here.is_some() => {
                    return Err(format!("show {show} left the group but is still in it"));
                }
                ShowMove::Left { .. } if self.audit.of_show(show).next().is_some() => {
                    return Err(format!("show {show} left the group but its audit stayed"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The borrowed twin of [`Transfer`], so that encoding copies nothing.
#[derive(Serialize)]
struct TransferRef<'a> {
    show: &'a Show,
    audit: Vec<(EntityRef, Vec<AuditRecord>)>,
    log_time_ms: u64,
}

/// Decodes transfer bytes of `show`, refusing anything but a consistent show of that id in this
/// build's format (a move between builds of different formats waits for the upgrade).
fn decode_transfer(show: ShowId, state: &[u8]) -> Result<Transfer, Rejection> {
    if state.len() < TRANSFER_HEADER_LEN || state[..TRANSFER_MAGIC.len()] != TRANSFER_MAGIC {
        return Err(Rejection::invalid("state: not a show's transfer bytes"));
    }
    let version = u16::from_le_bytes([state[4], state[5]]);
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(Rejection::invalid(format!(
            "state: format version {version}, this build reads {SNAPSHOT_FORMAT_VERSION}"
        )));
    }
    let (transfer, rest): (Transfer, &[u8]) =
        postcard::take_from_bytes(&state[TRANSFER_HEADER_LEN..])
            .map_err(|error| Rejection::invalid(format!("state: does not decode: {error}")))?;
    if !rest.is_empty() {
        return Err(Rejection::invalid("state: trailing bytes"));
    }
    if transfer.show.id != show {
        return Err(Rejection::invalid("state: of another show"));
    }
    if transfer.audit.iter().any(|(entity, _)| entity.show != show) {
        return Err(Rejection::invalid("state: audit records of another show"));
    }
    transfer
        .show
        .check()
        .map_err(|violation| Rejection::invalid(format!("state: inconsistent: {violation}")))?;
    Ok(transfer)
}
