//! What the Jepsen suite's and the simulator's client processes share about their workloads:
//! the test show's policy and set-up as the model sees them, the mutations processes make and
//! the commands those become in the log, and which rejection codes are refusals.
//!
//! Pure, like the rest of the crate: the SDK calls and the recording stay with each driver.
//! Never judges anything: the checkers do.

use crate::{
    BookingId, ClientCommand, ClientRequest, Command, Currency, HoldId, IdempotencyKey, OfferId,
    OperatorCommand, SeatRange, SeatSet, SessionId, ShowId, ShowPolicy, ShowSpec, TicketId,
};

/// Every deadline of a test show: an hour, far beyond any test (the model has no clock).
pub const DEADLINE_MS: u64 = 60 * 60 * 1_000;
/// The price of every seat of a test show, in cents.
pub const PRICE_MINOR: u64 = 1_000;
/// The currency of every test show.
pub const CURRENCY: &str = "EUR";

/// The policy of every test show: hour-long deadlines, cancellable bookings.
pub fn test_policy() -> ShowPolicy {
    ShowPolicy {
        hold_ttl_ms: DEADLINE_MS,
        payment_grace_ms: DEADLINE_MS,
        grant_ttl_ms: DEADLINE_MS,
        ticket_wait_ms: DEADLINE_MS,
        offer_ttl_ms: DEADLINE_MS,
        idempotency_retention_ms: 24 * DEADLINE_MS,
        holds_per_session_max: 64,
        booking_cancel_allowed: true,
    }
}

/// A short-deadline show's hold deadline: a few of a buyer's operations on the show, so that
/// holds expire while buyers still use them (the shortest deadline a show may have is 1 s).
pub const SHORT_HOLD_TTL_MS: u64 = 1_500;
/// A short-deadline show's payment grace: payments race it.
pub const SHORT_PAYMENT_GRACE_MS: u64 = 1_000;

/// A short-deadline show's grant deadline: a granted buyer who dawdles loses the grant.
pub const SHORT_GRANT_TTL_MS: u64 = 1_500;
/// A short-deadline show's waiting limit: a ticket waits a few grants' time at most.
pub const SHORT_TICKET_WAIT_MS: u64 = 4_000;
/// A short-deadline show's offer deadline: a waiter who dawdles loses the offer, which passes to
/// the next in line.
pub const SHORT_OFFER_TTL_MS: u64 = 2_000;
/// The admission window of a short-deadline show with a lane: two grants out at once, so that
/// grants end, by use, leave or expiry, while others wait.
pub const SHORT_ADMISSION_WINDOW: u32 = 2;

/// The policy of a show whose deadlines race its buyers (judged by the deadline checks, never by
/// the model, which has no clock): the hold, payment, grant, waiting and offer deadlines are
/// short, the others as [`test_policy`]'s.
pub fn short_deadline_policy() -> ShowPolicy {
    ShowPolicy {
        hold_ttl_ms: SHORT_HOLD_TTL_MS,
        payment_grace_ms: SHORT_PAYMENT_GRACE_MS,
        grant_ttl_ms: SHORT_GRANT_TTL_MS,
        ticket_wait_ms: SHORT_TICKET_WAIT_MS,
        offer_ttl_ms: SHORT_OFFER_TTL_MS,
        ..test_policy()
    }
}

/// The commands that set the model up as the cluster creates a test show of `seats` seats,
/// with an admission lane of `admission_window` if given and a waitlist if `waitlist`, on sale.
pub fn show_setup(
    show: u64,
    seats: u32,
    admission_window: Option<u32>,
    waitlist: bool,
) -> Vec<Command> {
    let show = ShowId(show);
    let mut commands = vec![Command::Operator(OperatorCommand::CreateShow(ShowSpec {
        show,
        currency: Currency(*b"EUR"),
        prices_minor: vec![PRICE_MINOR],
        layout: vec![SeatRange { count: seats, class: 0 }],
        policy: test_policy(),
    }))];
    if let Some(window) = admission_window {
        commands.push(Command::Operator(OperatorCommand::ConfigureAdmission {
            show,
            enabled: true,
            window,
        }));
    }
    if waitlist {
        commands.push(Command::Operator(OperatorCommand::ConfigureWaitlist {
            show,
            enabled: true,
            policy_version: 1,
        }));
    }
    commands.push(Command::Operator(OperatorCommand::OpenSales { show }));
    commands
}

/// A mutation a client process asks the cluster for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Hold these seats, with a grant of the admission lane if given.
    Hold {
        /// The show.
        show: u64,
        /// The seats.
        seats: Vec<u32>,
        /// The granted ticket.
        grant: Option<u64>,
    },
    /// Cancel a hold.
    CancelHold {
        /// The show.
        show: u64,
        /// The hold.
        hold: u64,
    },
    /// Check a hold out.
    Checkout {
        /// The show.
        show: u64,
        /// The hold.
        hold: u64,
    },
    /// Cancel a confirmed booking (its money is then owed back).
    CancelBooking {
        /// The show.
        show: u64,
        /// The booking.
        booking: u64,
    },
    /// Join the admission lane.
    JoinQueue {
        /// The show.
        show: u64,
    },
    /// Leave the admission lane.
    LeaveQueue {
        /// The show.
        show: u64,
        /// The ticket.
        ticket: u64,
    },
    /// Join the waitlist for one seat.
    JoinWaitlist {
        /// The show.
        show: u64,
    },
    /// Accept a waitlist offer.
    AcceptOffer {
        /// The show.
        show: u64,
        /// The offer.
        offer: u64,
    },
    /// Decline a waitlist offer.
    DeclineOffer {
        /// The show.
        show: u64,
        /// The offer.
        offer: u64,
    },
}

impl Mutation {
    /// The command this mutation becomes in the log, as the model sees it: by `session`, under
    /// the key numbered `key`, holds quoting `price_version`.
    ///
    /// # Panics
    ///
    /// For a hold whose seats are not a `SeatSet` (none, more than 10, or one named twice):
    /// the node refuses those before proposing, so a workload must not record one as a write.
    pub fn command(&self, session: SessionId, key: u128, price_version: u32) -> Command {
        let (show, request) = match self {
            Mutation::Hold { show, seats, grant } => {
                let seats = SeatSet::new(seats.iter().copied())
                    .expect("a workload holds 1..=10 distinct seats");
                (*show, ClientRequest::Hold { seats, price_version, grant: grant.map(TicketId) })
            }
            Mutation::CancelHold { show, hold } => {
                (*show, ClientRequest::CancelHold { hold: HoldId(*hold) })
            }
            Mutation::Checkout { show, hold } => {
                (*show, ClientRequest::Checkout { hold: HoldId(*hold) })
            }
            Mutation::CancelBooking { show, booking } => {
                (*show, ClientRequest::CancelBooking { booking: BookingId(*booking) })
            }
            Mutation::JoinQueue { show } => (*show, ClientRequest::JoinQueue),
            Mutation::LeaveQueue { show, ticket } => {
                (*show, ClientRequest::LeaveQueue { ticket: TicketId(*ticket) })
            }
            Mutation::JoinWaitlist { show } => {
                (*show, ClientRequest::JoinWaitlist { quantity: 1, band: 0 })
            }
            Mutation::AcceptOffer { show, offer } => {
                (*show, ClientRequest::AcceptOffer { offer: OfferId(*offer) })
            }
            Mutation::DeclineOffer { show, offer } => {
                (*show, ClientRequest::DeclineOffer { offer: OfferId(*offer) })
            }
        };
        Command::Client(ClientCommand {
            show: ShowId(show),
            session,
            key: IdempotencyKey(key),
            request,
        })
    }
}

/// Whether an error code is one a node answers without the state machine (the call had no
/// effect): an operation answered so is `fail`, any other rejection is an answer (`ok`).
pub fn is_refusal(code: &str) -> bool {
    matches!(
        code,
        "unauthenticated"
            | "permission_denied"
            | "rate_limited"
            | "resource_exhausted"
            | "not_leader"
            | "no_leader"
            | "unavailable"
            | "internal"
            | "disk_full"
    )
}
