//! The model the linearizability checker runs operations against: the booking state machine
//! itself, one show at a time.
//!
//! Owns the mapping from a [`Call`] to what the state machine answers for it, as an
//! [`Observed`]: a write is applied as a log entry of its own, a read is answered from the
//! state. Never invents rules: every answer comes from [`Group::apply`] and the read views, so a
//! history is judged by exactly the rules the replicas apply.
//!
//! The model has no clock: every entry is stamped with the one time given at construction, so
//! nothing expires in the model. Histories checked against it must keep every deadline (hold,
//! grant, offer, payment grace, idempotency retention) beyond the end of the test; the workloads
//! of the Jepsen suite and the simulator do.

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::audit::StateName;
use crate::command::{Command, Entry};
use crate::outcome::{Outcome, PaymentEffect, Reply};
use crate::state::Group;

use super::history::{Call, Observed, Read};

/// The state of the model: a group holding the shows under test.
#[derive(Clone, Debug)]
pub struct Model {
    group: Group,
    time_ms: u64,
}

/// Why a model cannot be set up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A set-up command was rejected.
    #[error("set-up command {index} was rejected: {code}")]
    SetupRejected {
        /// Its position in the set-up.
        index: usize,
        /// The rejection code.
        code: String,
    },
}

impl Model {
    /// A model after the set-up commands (creating and configuring the shows), all stamped
    /// `time_ms`, which stays the model's time for good.
    ///
    /// # Errors
    ///
    /// `SetupRejected` if a set-up command is rejected: the history's set-up is wrong.
    pub fn new(setup: &[Command], time_ms: u64) -> Result<Model, ModelError> {
        let mut model = Model { group: Group::new(), time_ms };
        for (index, command) in setup.iter().enumerate() {
            if let Err(rejection) = model.apply(command) {
                return Err(ModelError::SetupRejected { index, code: rejection.code().to_owned() });
            }
        }
        Ok(model)
    }

    /// The group the model keeps.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Runs `call`: the model after it (`None` if a read left it unchanged) and what it answers.
    pub fn step(&self, call: &Call) -> (Option<Model>, Observed) {
        match call {
            Call::Write(command) => {
                let mut next = self.clone();
                let outcome = next.apply(command);
                (Some(next), observe_outcome(&outcome))
            }
            Call::Read(read) => (None, observe_read(&self.group, read)),
        }
    }

    /// A fingerprint of everything that decides future answers: the applied index and the
    /// shows. The audit log and the outbox are left out (they never change an answer), which
    /// keeps fingerprinting cheap as they grow.
    pub fn fingerprint(&self) -> [u8; 32] {
        #[derive(Serialize)]
        struct Decisive<'a> {
            applied_index: u64,
            shows: &'a std::collections::BTreeMap<
                crate::ids::ShowId,
                std::sync::Arc<crate::state::Show>,
            >,
        }
        let decisive =
            Decisive { applied_index: self.group.applied_index, shows: &self.group.shows };
        let bytes = postcard::to_stdvec(&decisive).expect("encoding to a vector cannot fail");
        Sha256::digest(bytes).into()
    }

    fn apply(&mut self, command: &Command) -> Outcome {
        let entry = Entry {
            index: self.group.applied_index + 1,
            time_ms: self.time_ms,
            commands: vec![command.clone()],
        };
        let mut outcomes = self.group.apply(&entry);
        outcomes.pop().expect("one outcome per command")
    }
}

/// What a client sees of a write's outcome.
pub fn observe_outcome(outcome: &Outcome) -> Observed {
    let reply = match outcome {
        Err(rejection) => return Observed::rejected(rejection.code()),
        Ok(reply) => reply,
    };
    match reply {
        Reply::Held(receipt) | Reply::OfferAccepted { hold: receipt, .. } => {
            Observed::Held { hold: receipt.hold, seats: receipt.seats.to_vec() }
        }
        Reply::HoldCancelled { .. }
        | Reply::BookingCancelled { .. }
        | Reply::RefundRecorded { .. }
        | Reply::QueueLeft { .. }
        | Reply::WaitlistLeft { .. }
        | Reply::OfferDeclined { .. } => Observed::Done,
        Reply::CheckoutStarted { hold, payment, .. } => {
            Observed::CheckoutStarted { hold: *hold, payment: *payment }
        }
        Reply::PaymentRecorded { payment, effect } => {
            let (effect, booking) = match effect {
                PaymentEffect::Confirmed { booking } => ("confirmed", Some(*booking)),
                PaymentEffect::RefundRequired => ("refund_required", None),
                PaymentEffect::Declined { .. } => ("declined", None),
                PaymentEffect::Unknown => ("unknown", None),
                PaymentEffect::Duplicate { .. } => ("duplicate", None),
            };
            Observed::PaymentRecorded { payment: *payment, effect: effect.to_owned(), booking }
        }
        Reply::Queued { ticket, .. } => Observed::Queued { ticket: *ticket },
        Reply::WaitlistJoined { entry, .. } => Observed::WaitlistJoined { entry: *entry },
        Reply::ShowCreated { .. }
        | Reply::Placed { .. }
        | Reply::ShowStatusChanged { .. }
        | Reply::ShowCancelled { .. }
        | Reply::ShowArchived { .. }
        | Reply::ShowCompacted { .. }
        | Reply::SessionErased { .. }
        | Reply::PricesSet { .. }
        | Reply::AdmissionConfigured { .. }
        | Reply::WaitlistConfigured { .. }
        | Reply::CapacityReleased { .. }
        | Reply::Ticked { .. }
        | Reply::OutboxAcked { .. }
        | Reply::SinkAdded { .. }
        | Reply::SinkRemoved { .. }
        | Reply::DeliveryRecorded { .. }
        | Reply::ReplayRequested { .. }
        | Reply::DigestRecorded { .. }
        | Reply::CatalogChanged { .. }
        | Reply::WaitlistPolicySet { .. }
        | Reply::LotteryDrawn { .. }
        | Reply::ShowFrozen { .. }
        | Reply::ShowImported { .. }
        | Reply::ShowActivated { .. }
        | Reply::ShowDropped { .. }
        | Reply::Relocated { .. }
        | Reply::FeatureLevelSet { .. } => Observed::Managed,
    }
}

/// What a client sees of a read of `group`.
pub fn observe_read(group: &Group, read: &Read) -> Observed {
    let observed = match *read {
        Read::SeatMap { show } => {
            group.seat_map(show).map(|map| Observed::Seats { seats: map.seats })
        }
        Read::Hold { show, session, hold } => {
            group.hold(show, hold, Some(session)).map(|view| Observed::Entity {
                state: StateName::from(view.state),
                seats: view.hold.seats.to_vec(),
                offer: None,
            })
        }
        Read::Booking { show, session, booking } => {
            group.booking(show, booking, Some(session)).map(|view| Observed::Entity {
                state: StateName::from(view.booking.state),
                seats: view.booking.seats.to_vec(),
                offer: None,
            })
        }
        Read::Ticket { show, session, ticket } => {
            group.ticket(show, ticket, Some(session)).map(|view| Observed::Entity {
                state: StateName::from(view.state),
                seats: Vec::new(),
                offer: None,
            })
        }
        Read::Entry { show, session, entry } => {
            group.waitlist_entry(show, entry, Some(session)).map(|view| Observed::Entity {
                state: StateName::from(view.state),
                seats: Vec::new(),
                offer: view.entry.offer(),
            })
        }
        Read::Offer { show, session, offer } => {
            group.offer(show, offer, Some(session)).map(|view| Observed::Entity {
                state: StateName::from(view.state),
                seats: view.offer.seats.to_vec(),
                offer: None,
            })
        }
    };
    observed.unwrap_or_else(|rejection| Observed::rejected(rejection.code()))
}
