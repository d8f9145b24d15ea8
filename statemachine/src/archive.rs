//! Archiving: a show that has ended and whose money is settled leaves the replicated state for
//! an archive, so that memory, snapshots, restarts and catch-up stop growing with every sale.
//!
//! Owns when a show may be archived (`judge_archive`), the archive's format (JSON Lines, one
//! record per line, versioned by its header), the `ArchiveShow` command's effect (the show and
//! its audit leave the group; a small [`ArchivedShow`] record stays, so a later command about it
//! is told `show_archived` rather than `show_not_found`), and reading an audit trail back from
//! an archive. Never writes a file: the node writes the bytes `archive_export` returns, before
//! the command that removes the show is applied on its replica.
//!
//! # The archive format, version 1
//!
//! UTF-8 JSON Lines. Every line is one JSON object with exactly one key, the record's kind:
//!
//! - `header` (first line, once): `{"format": "booking-show-archive", "version": 1, "show": id}`;
//! - `show` (once): the show's final settings and seat counts;
//! - `hold`, `booking`, `payment`, `ticket`, `waitlist_entry`, `offer`: each entity in its final
//!   state, in id order, with the fields of the state machine's own types;
//! - `provider_event`: a provider event id and the payment it settled;
//! - `audit`: one entity's whole audit trail (`{"entity": {...}, "records": [...]}`).
//!
//! Idempotency records are not archived: they serve retries of a live show only. Identifiers
//! are numbers (a session id is a 128-bit number; readers that parse JSON numbers as doubles
//! must read it as a string). The bytes are deterministic, so every replica exports the same
//! archive and the command carries its SHA-256 digest: the show is removed only if the state
//! it is removed from is the state that was archived.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::audit::{AuditRecord, EntityKind, EntityRef};
use crate::command::ShowPolicy;
use crate::ids::{Currency, PaymentId, ProviderEventId, ShowId};
use crate::moving::ShowMove;
use crate::outcome::{Outcome, Rejection, Reply};
use crate::retention::COMPACTION_FORMAT;
use crate::snapshot::Digest;
use crate::state::{
    Booking, BookingState, Group, Hold, Offer, PaymentAttempt, SeatCounts, Show, ShowStatus,
    Ticket, WaitlistEntry, WaitlistPolicy,
};

/// The archive format's name, in its header.
pub const ARCHIVE_FORMAT: &str = "booking-show-archive";

/// The archive format version this build writes (and the only one it reads).
pub const ARCHIVE_FORMAT_VERSION: u32 = 1;

/// What stays of an archived show in its group: enough to answer about it and to find and check
/// its archive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedShow {
    /// The show.
    pub show: ShowId,
    /// The log index of the command that archived it.
    pub index: u64,
    /// The log time it was archived.
    pub archived_ms: u64,
    /// The SHA-256 of its archive's bytes.
    pub digest: Digest,
    /// The archive's length in bytes.
    pub bytes: u64,
    /// Its final sales status.
    pub status: ShowStatus,
    /// Its seats.
    pub seat_count: u32,
    /// Its confirmed bookings when archived.
    pub bookings_confirmed: u32,
}

/// The show's own record in an archive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowRecord {
    /// The show.
    pub id: ShowId,
    /// Its final sales status.
    pub status: ShowStatus,
    /// The currency of its prices.
    pub currency: Currency,
    /// One price per class, minor units.
    pub prices_minor: Vec<u64>,
    /// The last price version.
    pub price_version: u32,
    /// Its deadlines and rules.
    pub policy: ShowPolicy,
    /// Each seat's class.
    pub seat_classes: Vec<u8>,
    /// Seat counts per allocation state.
    pub counts: SeatCounts,
    /// Whether the admission lane was on, and its window.
    pub lane: (bool, u32),
    /// Whether the waitlist was on, and its policy version.
    pub waitlist: (bool, u32),
    /// The waitlist's rules, their history and lottery draws.
    pub waitlist_policy: WaitlistPolicy,
}

/// The archive's first line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveHeader {
    /// Always [`ARCHIVE_FORMAT`].
    pub format: String,
    /// The format version.
    pub version: u32,
    /// The show.
    pub show: ShowId,
}

/// One entity's audit trail in an archive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditLine {
    /// The entity.
    pub entity: EntityRef,
    /// Its records, oldest first.
    pub records: Vec<AuditRecord>,
}

/// One line of an archive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveLine {
    /// The header (first line).
    Header(ArchiveHeader),
    /// The show.
    Show(ShowRecord),
    /// A hold.
    Hold(Hold),
    /// A booking.
    Booking(Booking),
    /// A payment attempt.
    Payment(PaymentAttempt),
    /// A provider event and the payment it settled.
    ProviderEvent {
        /// The provider's event id.
        event: ProviderEventId,
        /// The payment attempt.
        payment: PaymentId,
    },
    /// An admission ticket.
    Ticket(Ticket),
    /// A waitlist entry.
    WaitlistEntry(WaitlistEntry),
    /// A waitlist offer.
    Offer(Offer),
    /// An entity's audit trail.
    Audit(AuditLine),
    /// In a compaction segment (second line): the records in it ended before this log time.
    Before {
        /// The command's bound, log time.
        before_ms: u64,
    },
}

/// Why an archive's bytes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A line is not a record of this format.
    #[error("archive line {line}: {error}")]
    Line {
        /// The line number, from 1.
        line: usize,
        /// What is wrong.
        error: serde_json::Error,
    },
    /// The header is missing or names another format or version.
    #[error("not a version {ARCHIVE_FORMAT_VERSION} {ARCHIVE_FORMAT}")]
    Header,
}

impl Group {
    /// Whether `show` may be archived now, judged exactly as `ArchiveShow` judges it.
    ///
    /// # Errors
    ///
    /// `show_archived` or `show_not_found`; `show_not_settled` naming what remains.
    pub fn judge_archive(&self, show: ShowId) -> Result<&Show, Rejection> {
        let found = self.show_or_archived(show)?;
        let unsettled = |what: String| Err(Rejection::ShowNotSettled { what: what.into() });
        if !matches!(found.status, ShowStatus::Closed | ShowStatus::Cancelled) {
            return unsettled(format!(
                "its sales are {:?}: close or cancel it first",
                found.status
            ));
        }
        let live_holds = found.holds.values().filter(|hold| hold.state.is_live()).count();
        if live_holds > 0 {
            return unsettled(format!("{live_holds} holds are live"));
        }
        let open = found.payments.values().filter(|payment| !payment.state.is_final()).count();
        if open > 0 {
            return unsettled(format!("{open} payments await the provider"));
        }
        let refunds = found.payments.values().filter(|payment| payment.refund_required()).count();
        if refunds > 0 {
            return unsettled(format!("{refunds} refunds are owed"));
        }
        let tickets = found.lane.live_by_session.len();
        if tickets > 0 {
            return unsettled(format!("{tickets} admission tickets are live"));
        }
        let entries = found.waitlist.active_by_session.len();
        if entries > 0 {
            return unsettled(format!("{entries} waitlist entries are active"));
        }
        let undelivered = self.outbox.pending().filter(|event| event.show == show).count();
        if undelivered > 0 {
            return unsettled(format!("{undelivered} outbox events are undelivered"));
        }
        let dead = self
            .delivery
            .sinks()
            .flat_map(|(_, sink)| sink.dead_letters.values())
            .filter(|letter| letter.event.show == show)
            .count();
        if dead > 0 {
            return unsettled(format!("{dead} dead letters: replay them or remove their sink"));
        }
        Ok(found)
    }

    /// The archive of `show` as it stands, if it may be archived now: the bytes every replica
    /// would write for it.
    ///
    /// # Errors
    ///
    /// As [`Group::judge_archive`].
    pub fn archive_export(&self, show: ShowId) -> Result<Vec<u8>, Rejection> {
        let found = self.judge_archive(show)?;
        Ok(self.export(found))
    }

    /// The shows a leader's archive worker archives at `now_ms` (its clock): those that may be
    /// archived and whose last change by the operator (closing or cancelling it, at the
    /// latest) is at least `after_ms` old, each with its archive's digest.
    pub fn archives_due(&self, now_ms: u64, after_ms: u64) -> Vec<(ShowId, Digest)> {
        self.shows
            .values()
            .filter(|show| matches!(show.status, ShowStatus::Closed | ShowStatus::Cancelled))
            .filter(|show| {
                let changes = self.audit.of(EntityRef {
                    show: show.id,
                    kind: EntityKind::Show,
                    id: show.id.0,
                });
                changes
                    .last()
                    .is_some_and(|last| last.log_time_ms.saturating_add(after_ms) <= now_ms)
            })
            .filter_map(|show| {
                let bytes = self.archive_export(show.id).ok()?;
                Some((show.id, archive_digest(&bytes)))
            })
            .collect()
    }

    /// The archived shows of this group, by id.
    pub fn archived(&self) -> &BTreeMap<ShowId, ArchivedShow> {
        &self.archived
    }

    /// A show that serves in this group, or why not: moving or moved, archived, or never here.
    ///
    /// # Errors
    ///
    /// `show_moving`, `show_moved`, `show_archived` or `show_not_found`.
    pub fn show_or_archived(&self, show: ShowId) -> Result<&Show, Rejection> {
        if let Some(inactive) = self.inactive(show) {
            return Err(inactive);
        }
        self.shows.get(&show).map(Arc::as_ref).ok_or_else(|| self.missing(show))
    }

    /// Why `show` is not among the group's shows.
    pub(crate) fn missing(&self, show: ShowId) -> Rejection {
        if let Some(ShowMove::Left { to, .. }) = self.moves.get(&show) {
            Rejection::ShowMoved { group: *to }
        } else if self.archived.contains_key(&show) {
            Rejection::ShowArchived
        } else {
            Rejection::ShowNotFound
        }
    }

    /// Applies `ArchiveShow`: removes the show and its audit trails, keeping an
    /// [`ArchivedShow`], if it may be archived and its archive's digest is `digest`. Archiving an
    /// archived show with the same digest is a duplicate that changes nothing.
    pub(crate) fn archive_show(&mut self, show: ShowId, digest: Digest) -> Outcome {
        if let Some(archived) = self.archived.get(&show) {
            return if archived.digest == digest {
                Ok(Reply::ShowArchived { show, digest, bytes: archived.bytes, duplicate: true })
            } else {
                Err(Rejection::ShowArchived)
            };
        }
        let found = self.judge_archive(show)?;
        let bytes = self.export(found);
        if archive_digest(&bytes) != digest {
            return Err(Rejection::ArchiveChanged);
        }
        // From here on every step succeeds.
        let removed = self.shows.remove(&show).expect("judged above");
        self.audit.remove_show(show);
        // An archived show moved here is no longer one that serves here.
        self.moves.remove(&show);
        let bookings_confirmed = removed
            .bookings
            .values()
            .filter(|booking| booking.state == BookingState::Confirmed)
            .count() as u32;
        let bytes = bytes.len() as u64;
        self.archived.insert(
            show,
            ArchivedShow {
                show,
                index: self.applied_index,
                archived_ms: self.log_time_ms,
                digest,
                bytes,
                status: removed.status,
                seat_count: removed.seat_count(),
                bookings_confirmed,
            },
        );
        Ok(Reply::ShowArchived { show, digest, bytes, duplicate: false })
    }

    /// The archive's bytes: deterministic, so equal on every replica at the same state.
    fn export(&self, show: &Show) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + show.holds.len() * 256);
        let mut line = |record: ArchiveLine| push_line(&mut out, &record);
        line(ArchiveLine::header(ARCHIVE_FORMAT, show.id));
        line(ArchiveLine::Show(ShowRecord {
            id: show.id,
            status: show.status,
            currency: show.currency,
            prices_minor: show.prices_minor.clone(),
            price_version: show.price_version,
            policy: show.policy,
            seat_classes: show.seat_classes.clone(),
            counts: show.counts,
            lane: (show.lane.enabled, show.lane.window),
            waitlist: (show.waitlist.enabled, show.waitlist.policy_version),
            waitlist_policy: show.waitlist.policy.clone(),
        }));
        show.holds.values().for_each(|hold| line(ArchiveLine::Hold(hold.clone())));
        show.bookings.values().for_each(|booking| line(ArchiveLine::Booking(booking.clone())));
        show.payments.values().for_each(|payment| line(ArchiveLine::Payment(payment.clone())));
        for (&event, &payment) in &show.provider_events {
            line(ArchiveLine::ProviderEvent { event, payment });
        }
        show.lane.tickets.values().for_each(|ticket| line(ArchiveLine::Ticket(ticket.clone())));
        for entry in show.waitlist.entries.values() {
            line(ArchiveLine::WaitlistEntry(entry.clone()));
        }
        show.waitlist.offers.values().for_each(|offer| line(ArchiveLine::Offer(offer.clone())));
        for (entity, records) in self.audit.of_show(show.id) {
            line(ArchiveLine::Audit(AuditLine { entity: *entity, records: records.to_vec() }));
        }
        out
    }
}

impl ArchiveLine {
    /// The header of an archive (or segment) of `format` for `show`, at this build's version.
    pub(crate) fn header(format: &str, show: ShowId) -> ArchiveLine {
        ArchiveLine::Header(ArchiveHeader {
            format: format.to_owned(),
            version: ARCHIVE_FORMAT_VERSION,
            show,
        })
    }
}

/// Appends one record and its line end.
pub(crate) fn push_line(out: &mut Vec<u8>, record: &ArchiveLine) {
    serde_json::to_writer(&mut *out, record).expect("archive records encode");
    out.push(b'\n');
}

/// The digest an `ArchiveShow` command carries for an archive's bytes: their SHA-256.
pub fn archive_digest(bytes: &[u8]) -> Digest {
    Sha256::digest(bytes).into()
}

/// Reads an archive's (or a compaction segment's) lines, checking its header.
///
/// # Errors
///
/// `ArchiveError` for a line that is not a record, or a missing or foreign header.
pub fn read_archive(bytes: &[u8]) -> Result<Vec<ArchiveLine>, ArchiveError> {
    let lines = bytes
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .enumerate()
        .map(|(number, line)| {
            serde_json::from_slice(line)
                .map_err(|error| ArchiveError::Line { line: number + 1, error })
        })
        .collect::<Result<Vec<ArchiveLine>, ArchiveError>>()?;
    match lines.first() {
        Some(ArchiveLine::Header(header))
            if (header.format == ARCHIVE_FORMAT || header.format == COMPACTION_FORMAT)
                && header.version == ARCHIVE_FORMAT_VERSION =>
        {
            Ok(lines)
        }
        _ => Err(ArchiveError::Header),
    }
}

/// The audit trail of one entity in an archive's lines, or `None` if it has none there.
pub fn archived_trail(lines: &[ArchiveLine], kind: EntityKind, id: u64) -> Option<&[AuditRecord]> {
    lines.iter().find_map(|line| match line {
        ArchiveLine::Audit(AuditLine { entity, records })
            if entity.kind == kind && entity.id == id =>
        {
            Some(records.as_slice())
        }
        _ => None,
    })
}
