//! Retention: the terminal records of a live show that ended longer ago than a window leave
//! the replicated state for an archive segment, as archived shows do (`archive.rs`), so that a
//! show on sale for months does not carry every expired hold of its first day.
//!
//! Owns which records may leave (`compactable`): a cancelled or expired hold that no booking,
//! no open money and no accepted offer refers to, with its payment attempts and their provider
//! events; a ticket that left or expired; a waitlist entry that declined, expired or left,
//! with its offer if it had one (never an accepted one, which names its hold). A record leaves
//! when its last audit record, and those of the records leaving with it, are older than the
//! command's `before_ms`. Owns the `CompactShow` command's effect and the segment's bytes (the
//! archive format, with its own header name). Never writes a file (the node writes the bytes
//! before the command is applied) and never compacts an archived show (it is gone whole).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::archive::{ArchiveLine, AuditLine, archive_digest, push_line};
use crate::audit::{Audit, EntityKind, EntityRef};
use crate::ids::{EntryId, HoldId, OfferId, PaymentId, ShowId, TicketId};
use crate::outcome::{Outcome, Rejection, Reply};
use crate::snapshot::Digest;
use crate::state::{
    Group, HoldState, OfferState, PaymentState, Show, TicketState, WaitlistEntryState,
};

/// An archive segment's format name, in its header.
pub const COMPACTION_FORMAT: &str = "booking-show-compaction";

/// The records of one show that may leave the state.
#[derive(Debug, Default, PartialEq, Eq)]
struct Compactable {
    holds: BTreeSet<HoldId>,
    payments: BTreeSet<PaymentId>,
    tickets: BTreeSet<TicketId>,
    entries: BTreeSet<EntryId>,
    offers: BTreeSet<OfferId>,
}

impl Compactable {
    fn len(&self) -> usize {
        self.holds.len()
            + self.payments.len()
            + self.tickets.len()
            + self.entries.len()
            + self.offers.len()
    }
}

/// Whether the entity's last audit record is older than `before_ms` (an entity with none is
/// not judged old: it is never compacted).
fn ended_before(audit: &Audit, show: ShowId, kind: EntityKind, id: u64, before_ms: u64) -> bool {
    audit.of(EntityRef { show, kind, id }).last().is_some_and(|last| last.log_time_ms < before_ms)
}

fn compactable(show: &Show, audit: &Audit, before_ms: u64) -> Compactable {
    let old = |kind, id| ended_before(audit, show.id, kind, id, before_ms);
    let mut found = Compactable::default();
    for hold in show.holds.values() {
        let ended = matches!(hold.state, HoldState::Cancelled | HoldState::Expired);
        // A hold from an offer is named by its accepted offer, which stays.
        if !ended || hold.offer.is_some() || !old(EntityKind::Hold, hold.id.0) {
            continue;
        }
        let settled = hold.payments.iter().all(|payment| {
            show.payments.get(payment).is_some_and(|attempt| {
                matches!(
                    attempt.state,
                    PaymentState::Declined
                        | PaymentState::Refunded
                        | PaymentState::Succeeded { refund_required: false }
                ) && old(EntityKind::Payment, payment.0)
            })
        });
        if settled {
            found.holds.insert(hold.id);
            found.payments.extend(hold.payments.iter().copied());
        }
    }
    for ticket in show.lane.tickets.values() {
        let ended = matches!(ticket.state, TicketState::Left { .. } | TicketState::Expired { .. });
        if ended && old(EntityKind::Ticket, ticket.id.0) {
            found.tickets.insert(ticket.id);
        }
    }
    for entry in show.waitlist.entries.values() {
        let ended = matches!(
            entry.state,
            WaitlistEntryState::Declined { .. }
                | WaitlistEntryState::Expired { .. }
                | WaitlistEntryState::Left { .. }
        );
        if !ended || !old(EntityKind::WaitlistEntry, entry.id.0) {
            continue;
        }
        match entry.offer() {
            None => {
                found.entries.insert(entry.id);
            }
            Some(offer) => {
                let closed = show.waitlist.offers.get(&offer).is_some_and(|made| {
                    matches!(
                        made.state,
                        OfferState::Declined | OfferState::Expired | OfferState::Withdrawn
                    ) && old(EntityKind::Offer, offer.0)
                });
                if closed {
                    found.entries.insert(entry.id);
                    found.offers.insert(offer);
                }
            }
        }
    }
    found
}

impl Group {
    /// The archive segment of `show`'s records that ended before `before_ms`, and how many
    /// records it holds: the bytes every replica writes before applying `CompactShow` with
    /// their digest.
    ///
    /// # Errors
    ///
    /// `show_archived` or `show_not_found`.
    pub fn compaction_export(
        &self,
        show: ShowId,
        before_ms: u64,
    ) -> Result<(Vec<u8>, u32), Rejection> {
        let found = self.show_or_archived(show)?;
        let records = compactable(found, &self.audit, before_ms);
        Ok((self.export_compaction(found, &records, before_ms), records.len() as u32))
    }

    /// Applies `CompactShow`: removes `show`'s records that ended before `before_ms`, if the
    /// segment they make has `digest`.
    pub(crate) fn compact_show(&mut self, show: ShowId, before_ms: u64, digest: Digest) -> Outcome {
        if before_ms > self.log_time_ms {
            return Err(Rejection::invalid("before_ms: after the log time"));
        }
        let found = self.show_or_archived(show)?;
        let records = compactable(found, &self.audit, before_ms);
        let bytes = self.export_compaction(found, &records, before_ms);
        if archive_digest(&bytes) != digest {
            return Err(Rejection::ArchiveChanged);
        }
        // From here on every step succeeds.
        let found = Arc::make_mut(self.shows.get_mut(&show).expect("found above"));
        let mut forget =
            |kind: EntityKind, id: u64| self.audit.remove(EntityRef { show, kind, id });
        for hold in &records.holds {
            found.holds.remove(hold);
            forget(EntityKind::Hold, hold.0);
        }
        for payment in &records.payments {
            found.payments.remove(payment);
            forget(EntityKind::Payment, payment.0);
        }
        found.provider_events.retain(|_, payment| !records.payments.contains(payment));
        for ticket in &records.tickets {
            found.lane.tickets.remove(ticket);
            forget(EntityKind::Ticket, ticket.0);
        }
        for entry in &records.entries {
            found.waitlist.entries.remove(entry);
            forget(EntityKind::WaitlistEntry, entry.0);
        }
        for offer in &records.offers {
            found.waitlist.offers.remove(offer);
            forget(EntityKind::Offer, offer.0);
        }
        Ok(Reply::ShowCompacted { show, records: records.len() as u32, bytes: bytes.len() as u64 })
    }

    fn export_compaction(&self, show: &Show, records: &Compactable, before_ms: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + records.len() * 256);
        let mut line = |record: ArchiveLine| push_line(&mut out, &record);
        line(ArchiveLine::header(COMPACTION_FORMAT, show.id));
        line(ArchiveLine::Before { before_ms });
        let audit = |kind: EntityKind, id: u64| {
            let entity = EntityRef { show: show.id, kind, id };
            ArchiveLine::Audit(AuditLine { entity, records: self.audit.of(entity).to_vec() })
        };
        for hold in &records.holds {
            line(ArchiveLine::Hold(show.holds[hold].clone()));
            line(audit(EntityKind::Hold, hold.0));
        }
        for payment in &records.payments {
            line(ArchiveLine::Payment(show.payments[payment].clone()));
            line(audit(EntityKind::Payment, payment.0));
        }
        for (&event, &payment) in &show.provider_events {
            if records.payments.contains(&payment) {
                line(ArchiveLine::ProviderEvent { event, payment });
            }
        }
        for ticket in &records.tickets {
            line(ArchiveLine::Ticket(show.lane.tickets[ticket].clone()));
            line(audit(EntityKind::Ticket, ticket.0));
        }
        for entry in &records.entries {
            line(ArchiveLine::WaitlistEntry(show.waitlist.entries[entry].clone()));
            line(audit(EntityKind::WaitlistEntry, entry.0));
        }
        for offer in &records.offers {
            line(ArchiveLine::Offer(show.waitlist.offers[offer].clone()));
            line(audit(EntityKind::Offer, offer.0));
        }
        out
    }

    /// The live shows with at least `min` (and at least one) records that ended before
    /// `before_ms`: what a leader's retention worker compacts, each with its segment's digest.
    pub fn compactions_due(&self, before_ms: u64, min: u32) -> Vec<(ShowId, Digest)> {
        self.shows
            .values()
            .filter(|show| self.serves(show.id))
            .filter_map(|show| {
                let records = compactable(show, &self.audit, before_ms);
                let enough = records.len() as u32 >= min.max(1);
                enough.then(|| {
                    (show.id, archive_digest(&self.export_compaction(show, &records, before_ms)))
                })
            })
            .collect()
    }
}
