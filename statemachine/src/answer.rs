//! What applying a command answers the caller that proposed it: its outcome and, for a client
//! command that wrote an entity, the view of that entity as the entry that decided it left it.
//!
//! A write answers from this and never reads again: a read after the write would take the
//! replica's lock once more and could see a later entry's state. Only the outcome is replicated
//! state (an idempotency record keeps the reply, so a retry gets the same reply); the view is
//! built by the replica that answers, in the same apply, and goes no further than its caller.
//! Never decides anything: the views are the reads of `read.rs`, taken at the entry's position.

use serde::{Deserialize, Serialize};

use crate::command::{ClientCommand, Command, Entry};
use crate::outcome::{Outcome, Rejection, Reply};
use crate::read::{BookingView, EntryWithOffer, HoldView, OfferView, TicketView};
use crate::state::Group;

/// One command's answer: its outcome and, if it wrote an entity, what that entity is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The command's outcome, as every replica decided it.
    pub outcome: Outcome,
    /// The entity the reply names, read right after the entry, with the reader the command's
    /// session: `None` for a rejection, a command that is not a client's, or a reply that
    /// names no entity; `Some(Err(..))` when the entity can no longer be read (a retry whose
    /// entity retention has since removed). Boxed, so that the answers of a batch of
    /// rejections stay small.
    pub written: Option<Box<Result<Written, Rejection>>>,
}

/// The entity a client command wrote, as of the entry that decided it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Written {
    /// The hold made (a hold, an accepted offer) or cancelled.
    Hold(HoldView),
    /// The booking cancelled.
    Booking(BookingView),
    /// The admission ticket taken or given up.
    Ticket(TicketView),
    /// The waitlist entry joined or left, with its latest offer.
    Entry(EntryWithOffer),
    /// The offer declined.
    Offer(OfferView),
}

impl Group {
    /// Applies `entry` as [`Group::apply`] does, and answers each command with its outcome and
    /// the view of what it wrote, every view as of this entry (a batch's commands are read
    /// after the whole batch, which is the position its `as_of` names).
    ///
    /// # Panics
    ///
    /// As [`Group::apply`].
    pub fn apply_answering(&mut self, entry: &Entry) -> Vec<Answer> {
        let outcomes = self.apply(entry);
        // An entry applied before answers nothing, as `apply` does.
        if outcomes.is_empty() {
            return Vec::new();
        }
        outcomes
            .into_iter()
            .zip(&entry.commands)
            .map(|(outcome, command)| {
                let written = match (command, &outcome) {
                    (Command::Client(client), Ok(reply)) => {
                        self.written(client, reply).map(Box::new)
                    }
                    _ => None,
                };
                Answer { outcome, written }
            })
            .collect()
    }

    /// The view of the entity `reply` says `command` wrote, read for `command`'s session.
    fn written(
        &self,
        command: &ClientCommand,
        reply: &Reply,
    ) -> Option<Result<Written, Rejection>> {
        let (show, viewer) = (command.show, Some(command.session));
        let written = match reply {
            Reply::Held(receipt) | Reply::OfferAccepted { hold: receipt, .. } => {
                self.hold(show, receipt.hold, viewer).map(Written::Hold)
            }
            Reply::HoldCancelled { hold } => self.hold(show, *hold, viewer).map(Written::Hold),
            Reply::BookingCancelled { booking } => {
                self.booking(show, *booking, viewer).map(Written::Booking)
            }
            Reply::Queued { ticket, .. } | Reply::QueueLeft { ticket } => {
                self.ticket(show, *ticket, viewer).map(Written::Ticket)
            }
            Reply::WaitlistJoined { entry, .. } | Reply::WaitlistLeft { entry } => {
                self.waitlist_entry_with_offer(show, *entry, viewer).map(Written::Entry)
            }
            Reply::OfferDeclined { offer } => self.offer(show, *offer, viewer).map(Written::Offer),
            _ => return None,
        };
        Some(written)
    }
}
