//! Status watches, independent of any transport: a stream of a hold's, an admission ticket's, a
//! booking's, a payment attempt's or a waitlist entry's view that yields the current view at
//! once, then one view each time what a client waits for changes (a hold's state or deadline; a
//! ticket's state, place in line or grant deadline; a booking's state; a payment's state and
//! whether money is owed back; an entry's state, place in line and offer), and ends after a
//! terminal state. The REST server-sent events (`rest/events.rs`) and the gRPC
//! streaming watches are thin skins over it.
//!
//! Owns when a watcher wakes and what counts as a change. A watcher wakes when its group's
//! applied index moves (openraft's data metrics) and at least every [`WAKE_INTERVAL`] (a
//! safety net: expiries arrive as `Tick` entries, so they move the applied index too), and
//! reads this replica's applied state: views may be stale and say so with `as_of`; any node
//! serves a watch, the leader is never asked. The owner check happens on the first read,
//! before the stream exists, so a transport can answer it as an ordinary error. A follower
//! that does not know the entity yet (a buyer who joined on the leader a moment ago and opened
//! the watch here) waits for its replica to apply more, up to [`REPLICA_LAG_MAX`], before it
//! answers not found. Never writes and never decides a state: the state machine's read views
//! do.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use futures_util::stream;
use openraft::alias::WatchReceiverOf;
use openraft::async_runtime::WatchReceiver;
use openraft::metrics::RaftDataMetrics;
use statemachine::{
    BookingId, BookingState, BookingView, EntryId, EntryWithOffer, Group, HoldId, HoldStatus,
    HoldView, OfferStatus, PaymentId, PaymentStatus, PaymentView, Rejection, SessionId, ShowId,
    TicketId, TicketStatus, TicketView, WaitlistEntryStatus,
};

use crate::error::ApiError;
use crate::group::HostedGroup;
use crate::service::Service;

/// The longest a watcher sleeps without looking at its entity again.
pub const WAKE_INTERVAL: Duration = Duration::from_secs(1);

/// How long a follower that does not know a watched entity yet waits for its replica to catch
/// up before answering not found: the staleness a replica's reads are allowed
/// (shared/DESIGN.md, "Ordering, acknowledgement and fencing").
pub const REPLICA_LAG_MAX: Duration = Duration::from_secs(2);

/// A watch: views of one entity, the first at once, then one per change; it ends after the
/// first terminal view, after an error (yielded once), or when the group shuts down.
pub type WatchStream<V> = Pin<Box<dyn Stream<Item = Result<V, ApiError>> + Send + 'static>>;

/// A view that can be watched: what counts as a change of it, and when it is final.
pub trait Watched: Clone + Send + 'static {
    /// The part of the view whose change is worth an event (never `as_of`).
    type Key: PartialEq + Send + 'static;

    /// The change key of this view.
    fn key(&self) -> Self::Key;

    /// Whether the entity can never change again (the watch ends after this view).
    fn is_terminal(&self) -> bool;
}

impl Watched for HoldView {
    /// State, the deadline in force (a checkout sets the payment deadline), payment attempt
    /// and booking.
    type Key = (HoldStatus, u64, Option<u64>, Option<u64>);

    fn key(&self) -> Self::Key {
        let hold = &self.hold;
        let deadline_ms = if self.state.is_live() { hold.deadline_ms() } else { 0 };
        (
            self.state,
            deadline_ms,
            hold.payment().map(|payment| payment.0),
            hold.booking().map(|booking| booking.0),
        )
    }

    fn is_terminal(&self) -> bool {
        !self.state.is_live()
    }
}

impl Watched for TicketView {
    /// State, waiting tickets ahead, and the grant deadline while granted.
    type Key = (TicketStatus, u32, Option<u64>);

    fn key(&self) -> Self::Key {
        let granted = self.state == TicketStatus::Granted;
        (self.state, self.ahead, self.grant_deadline_ms.filter(|_| granted))
    }

    fn is_terminal(&self) -> bool {
        matches!(self.state, TicketStatus::Consumed | TicketStatus::Left | TicketStatus::Expired)
    }
}

impl Watched for BookingView {
    /// The booking's state.
    type Key = BookingState;

    fn key(&self) -> Self::Key {
        self.booking.state
    }

    fn is_terminal(&self) -> bool {
        self.booking.state == BookingState::Cancelled
    }
}

impl Watched for PaymentView {
    /// The attempt's state and whether money is owed back (a success can become refund work
    /// when its booking is cancelled, then be refunded).
    type Key = (PaymentStatus, bool);

    fn key(&self) -> Self::Key {
        (self.payment.state.status(), self.payment.refund_required())
    }

    fn is_terminal(&self) -> bool {
        matches!(self.payment.state.status(), PaymentStatus::Declined | PaymentStatus::Refunded)
    }
}

impl Watched for EntryWithOffer {
    /// The entry's state and place in line, and its latest offer's id, state and deadline.
    type Key = (WaitlistEntryStatus, u32, Option<(u64, OfferStatus, u64)>);

    fn key(&self) -> Self::Key {
        let offer = self
            .offer
            .as_ref()
            .map(|offer| (offer.offer.id.0, offer.state, offer.offer.deadline_ms));
        (self.entry.state, self.entry.ahead, offer)
    }

    fn is_terminal(&self) -> bool {
        !matches!(self.entry.state, WaitlistEntryStatus::Waiting | WaitlistEntryStatus::Offered)
    }
}

/// Watches hold `hold` of `show` as `viewer` (`None`: an operator) on this node's replica.
///
/// # Errors
///
/// Before any view: a routing error (`NotLeader` for the metadata group when this replica
/// does not know the show yet), `show_not_found`, `hold_not_found`, `not_owner`.
pub async fn watch_hold(
    service: &Service,
    show: ShowId,
    hold: HoldId,
    viewer: Option<SessionId>,
) -> Result<WatchStream<HoldView>, ApiError> {
    let hosted = service.group_of(show).await?.clone();
    watch(hosted, move |group| group.hold(show, hold, viewer)).await
}

/// Watches admission ticket `ticket` of `show` as `viewer` (`None`: an operator) on this
/// node's replica.
///
/// # Errors
///
/// Before any view: a routing error, `show_not_found`, `ticket_not_found`, `not_owner`.
pub async fn watch_ticket(
    service: &Service,
    show: ShowId,
    ticket: TicketId,
    viewer: Option<SessionId>,
) -> Result<WatchStream<TicketView>, ApiError> {
    let hosted = service.group_of(show).await?.clone();
    watch(hosted, move |group| group.ticket(show, ticket, viewer)).await
}

/// Watches booking `booking` of `show` as `viewer` (`None`: an operator) on this node's
/// replica.
///
/// # Errors
///
/// Before any view: a routing error, `show_not_found`, `booking_not_found`, `not_owner`.
pub async fn watch_booking(
    service: &Service,
    show: ShowId,
    booking: BookingId,
    viewer: Option<SessionId>,
) -> Result<WatchStream<BookingView>, ApiError> {
    let hosted = service.group_of(show).await?.clone();
    watch(hosted, move |group| group.booking(show, booking, viewer)).await
}

/// Watches payment attempt `payment` of `show` as `viewer` (`None`: an operator) on this
/// node's replica.
///
/// # Errors
///
/// Before any view: a routing error, `show_not_found`, `payment_not_found`, `not_owner`.
pub async fn watch_payment(
    service: &Service,
    show: ShowId,
    payment: PaymentId,
    viewer: Option<SessionId>,
) -> Result<WatchStream<PaymentView>, ApiError> {
    let hosted = service.group_of(show).await?.clone();
    watch(hosted, move |group| group.payment(show, payment, viewer)).await
}

/// Watches waitlist entry `entry` of `show` and its offers as `viewer` (`None`: an operator)
/// on this node's replica.
///
/// # Errors
///
/// Before any view: a routing error, `show_not_found`, `entry_not_found`, `not_owner`.
pub async fn watch_entry(
    service: &Service,
    show: ShowId,
    entry: EntryId,
    viewer: Option<SessionId>,
) -> Result<WatchStream<EntryWithOffer>, ApiError> {
    let hosted = service.group_of(show).await?.clone();
    watch(hosted, move |group| group.waitlist_entry_with_offer(show, entry, viewer)).await
}

/// Subscribes to `hosted`'s applied-state changes, reads the first view (the owner check),
/// and follows the entity.
async fn watch<V: Watched>(
    hosted: Arc<HostedGroup>,
    read: impl Fn(&Group) -> Result<V, Rejection> + Send + 'static,
) -> Result<WatchStream<V>, ApiError> {
    // Subscribed before the first read, so no change after that read can be missed.
    let mut wake = AppliedChanges { data: hosted.raft.data_metrics(), interval: WAKE_INTERVAL };
    let is_leader = hosted.is_leader();
    let read_view = move || hosted.read_local(&read)?.map_err(ApiError::from);
    let first = match read_view() {
        Err(error) if !is_leader && is_not_found(&error) => {
            first_view_once_applied(&mut wake, &read_view, error).await?
        }
        first => first?,
    };
    Ok(follow(first, wake, read_view))
}

/// Whether a first read found no such entity (or show), which a lagging replica may not know
/// yet.
fn is_not_found(error: &ApiError) -> bool {
    matches!(
        error,
        ApiError::Rejected(
            Rejection::ShowNotFound
                | Rejection::HoldNotFound
                | Rejection::TicketNotFound
                | Rejection::BookingNotFound
                | Rejection::PaymentNotFound
                | Rejection::EntryNotFound
        )
    )
}

/// Reads the first view again each time this replica applies more, for [`REPLICA_LAG_MAX`] at
/// most; then `not_found` stands.
async fn first_view_once_applied<V, W: Wake>(
    wake: &mut W,
    read_view: &impl Fn() -> Result<V, ApiError>,
    not_found: ApiError,
) -> Result<V, ApiError> {
    let deadline = tokio::time::Instant::now() + REPLICA_LAG_MAX;
    loop {
        match tokio::time::timeout_at(deadline, wake.wait()).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return Err(not_found),
        }
        match read_view() {
            Err(error) if is_not_found(&error) => {}
            found => return found,
        }
    }
}

/// What wakes a watcher to read its entity again.
trait Wake: Send + 'static {
    /// Waits for a possible change; `false` once no change can ever come (the group stopped).
    fn wait(&mut self) -> impl Future<Output = bool> + Send;
}

/// Wakes on every change of a group's applied index, and every `interval` at the latest.
struct AppliedChanges {
    data: WatchReceiverOf<raft::TypeConfig, RaftDataMetrics<raft::TypeConfig>>,
    interval: Duration,
}

impl Wake for AppliedChanges {
    async fn wait(&mut self) -> bool {
        tokio::select! {
            changed = self.data.changed() => changed.is_ok(),
            () = tokio::time::sleep(self.interval) => true,
        }
    }
}

/// Where a watch stands between two views.
struct Following<V: Watched, W, R> {
    /// The view to yield first, until it is yielded.
    first: Option<V>,
    /// The key of the last view yielded.
    last: Option<V::Key>,
    /// Whether the watch is over (a terminal view or an error was yielded).
    done: bool,
    wake: W,
    read: R,
}

/// The stream of `first`, then of each view read after a wake-up whose key differs from the
/// last one yielded, up to and including a terminal view or an error.
fn follow<V, W, R>(first: V, wake: W, read: R) -> WatchStream<V>
where
    V: Watched,
    W: Wake,
    R: FnMut() -> Result<V, ApiError> + Send + 'static,
{
    let start = Following { first: Some(first), last: None, done: false, wake, read };
    Box::pin(stream::unfold(start, |mut following| async move {
        if following.done {
            return None;
        }
        if let Some(first) = following.first.take() {
            following.done = first.is_terminal();
            following.last = Some(first.key());
            return Some((Ok(first), following));
        }
        loop {
            if !following.wake.wait().await {
                return None;
            }
            match (following.read)() {
                Ok(view) => {
                    let key = view.key();
                    if following.last.as_ref() == Some(&key) {
                        continue;
                    }
                    following.done = view.is_terminal();
                    following.last = Some(key);
                    return Some((Ok(view), following));
                }
                Err(error) => {
                    following.done = true;
                    return Some((Err(error), following));
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use futures_util::StreamExt;
    use statemachine::{
        BookingId, ClientRequest, Currency, Hold, HoldState, HoldStatus, Money, PaymentEffect,
        PaymentId, PaymentOutcome, PaymentResult, ProviderEventId, Rejection, SessionId,
        TicketStatus,
    };
    use tokio::sync::mpsc;

    use super::*;
    use crate::test_node;

    /// Wakes when the test says so; the channel closing is the group stopping.
    struct Scripted(mpsc::UnboundedReceiver<()>);

    impl Wake for Scripted {
        async fn wait(&mut self) -> bool {
            self.0.recv().await.is_some()
        }
    }

    fn hold_view(state: HoldStatus, log_index: u64) -> HoldView {
        let stored = match state {
            HoldStatus::Held => HoldState::Held,
            HoldStatus::Processing => {
                HoldState::Processing { payment: PaymentId(2), deadline_ms: 420_000 }
            }
            HoldStatus::Confirmed => HoldState::Confirmed { booking: BookingId(3) },
            HoldStatus::Cancelled => HoldState::Cancelled,
            HoldStatus::Expired => HoldState::Expired,
        };
        let checked_out = !matches!(state, HoldStatus::Held);
        HoldView {
            hold: Hold {
                id: HoldId(1),
                session: SessionId(7),
                seats: [3].as_slice().try_into().unwrap(),
                state: stored,
                created_ms: 0,
                hold_deadline_ms: 300_000,
                price_version: 1,
                price: Money { amount_minor: 2_500, currency: Currency(*b"EUR") },
                grant: None,
                offer: None,
                payments: checked_out.then_some(PaymentId(2)).into_iter().collect(),
            },
            state,
            as_of: statemachine::AsOf { log_index, log_time_ms: log_index },
        }
    }

    /// A watch over scripted reads: each wake-up reads the next view of `reads`.
    fn scripted(
        first: HoldView,
        reads: Vec<Result<HoldView, ApiError>>,
    ) -> (WatchStream<HoldView>, mpsc::UnboundedSender<()>) {
        let (wake, woken) = mpsc::unbounded_channel();
        let mut reads: VecDeque<_> = reads.into();
        let read = move || reads.pop_front().expect("read more often than woken");
        (follow(first, Scripted(woken), read), wake)
    }

    #[tokio::test]
    async fn yields_only_changes_and_ends_after_a_terminal_state() {
        let reads = vec![
            Ok(hold_view(HoldStatus::Held, 2)),
            Ok(hold_view(HoldStatus::Processing, 3)),
            Ok(hold_view(HoldStatus::Processing, 4)),
            Ok(hold_view(HoldStatus::Confirmed, 5)),
        ];
        let (mut watch, wake) = scripted(hold_view(HoldStatus::Held, 1), reads);
        for _ in 0..4 {
            wake.send(()).unwrap();
        }
        let mut seen = Vec::new();
        while let Some(view) = watch.next().await {
            let view = view.unwrap();
            seen.push((view.state, view.as_of.log_index));
        }
        assert_eq!(
            seen,
            [(HoldStatus::Held, 1), (HoldStatus::Processing, 3), (HoldStatus::Confirmed, 5)]
        );
    }

    /// A follower that does not know the entity yet reads again as it applies, and answers
    /// not found only once it has lagged for longer than a replica may.
    #[tokio::test(start_paused = true)]
    async fn a_lagging_follower_waits_for_the_entity_before_answering_not_found() {
        let missing = || Err(ApiError::from(Rejection::TicketNotFound));
        let (wake, woken) = mpsc::unbounded_channel();
        let mut woken = Scripted(woken);
        let reads =
            std::sync::Mutex::new(VecDeque::from([missing(), Ok(hold_view(HoldStatus::Held, 4))]));
        let read = || reads.lock().unwrap().pop_front().expect("read more often than woken");
        wake.send(()).unwrap();
        wake.send(()).unwrap();
        let found = first_view_once_applied(&mut woken, &read, missing().unwrap_err()).await;
        assert_eq!(found.unwrap().as_of.log_index, 4);

        let started = tokio::time::Instant::now();
        let never = || missing();
        let answer = first_view_once_applied(&mut woken, &never, missing().unwrap_err()).await;
        assert_eq!(answer.unwrap_err().code().name(), "ticket_not_found");
        assert!(started.elapsed() >= REPLICA_LAG_MAX, "gave up early: {:?}", started.elapsed());
        drop(wake);
    }

    #[tokio::test]
    async fn a_terminal_first_view_is_the_only_one() {
        let (mut watch, _wake) = scripted(hold_view(HoldStatus::Expired, 1), Vec::new());
        assert_eq!(watch.next().await.unwrap().unwrap().state, HoldStatus::Expired);
        assert!(watch.next().await.is_none());
    }

    #[tokio::test]
    async fn an_error_is_yielded_once_and_a_stopped_group_ends_the_watch() {
        let reads = vec![Err(ApiError::Internal("store failed".into()))];
        let (mut watch, wake) = scripted(hold_view(HoldStatus::Held, 1), reads);
        wake.send(()).unwrap();
        assert!(watch.next().await.unwrap().is_ok());
        assert_eq!(watch.next().await.unwrap().unwrap_err().code().name(), "internal");
        assert!(watch.next().await.is_none());

        let (mut watch, wake) = scripted(hold_view(HoldStatus::Held, 1), Vec::new());
        assert!(watch.next().await.unwrap().is_ok());
        drop(wake);
        assert!(watch.next().await.is_none());
    }

    #[test]
    fn a_ticket_changes_with_its_place_in_line_and_ends_when_consumed() {
        let ticket = |state, ahead, grant_deadline_ms| TicketView {
            ticket: TicketId(4),
            session: SessionId(1),
            state,
            ahead,
            grant_deadline_ms,
            as_of: statemachine::AsOf { log_index: 1, log_time_ms: 1 },
        };
        let waiting = ticket(TicketStatus::Waiting, 3, None);
        assert_ne!(waiting.key(), ticket(TicketStatus::Waiting, 2, None).key());
        assert_ne!(waiting.key(), ticket(TicketStatus::Granted, 0, Some(60_000)).key());
        assert!(!ticket(TicketStatus::Granted, 0, Some(60_000)).is_terminal());
        // A consumed ticket keeps its old grant deadline in the view; it is no change.
        assert_eq!(
            ticket(TicketStatus::Consumed, 0, Some(60_000)).key(),
            ticket(TicketStatus::Consumed, 0, None).key()
        );
        for terminal in [TicketStatus::Consumed, TicketStatus::Left, TicketStatus::Expired] {
            assert!(ticket(terminal, 0, None).is_terminal());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hold_watch_follows_the_group_to_its_booking() {
        let cluster = test_node::start().await;
        let show = cluster.open_show(5, 20).await;
        let (owner, stranger) = (SessionId(11), SessionId(12));
        let hold = cluster.hold(show, owner, &[3, 4]).await;

        let refused = watch_hold(&cluster.service, show, hold, Some(stranger)).await;
        assert_eq!(refused.err().unwrap().code().name(), Rejection::NotOwner.code());
        let missing = watch_hold(&cluster.service, show, HoldId(999), Some(owner)).await;
        assert_eq!(missing.err().unwrap().code().name(), "hold_not_found");

        let mut watch = watch_hold(&cluster.service, show, hold, Some(owner)).await.unwrap();
        let first = watch.next().await.unwrap().unwrap();
        assert_eq!(first.state, HoldStatus::Held);

        let payment: PaymentId = cluster.checkout(show, owner, hold).await;
        let processing = watch.next().await.unwrap().unwrap();
        assert_eq!(processing.state, HoldStatus::Processing);
        assert_eq!(processing.hold.payment(), Some(payment));

        let paid = PaymentOutcome {
            show,
            payment,
            event: ProviderEventId(1),
            result: PaymentResult::Succeeded { amount_minor: 5_000, currency: Currency(*b"EUR") },
        };
        let reply = cluster.service.payment(paid).await.unwrap();
        assert!(matches!(
            reply,
            statemachine::Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { .. }, .. }
        ));
        let confirmed = watch.next().await.unwrap().unwrap();
        assert_eq!(confirmed.state, HoldStatus::Confirmed);
        assert!(confirmed.as_of.log_index > first.as_of.log_index);
        assert!(watch.next().await.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ticket_watch_sees_its_grant_and_its_departure() {
        let cluster = test_node::start().await;
        let show = cluster.open_show(6, 20).await;
        let command =
            statemachine::OperatorCommand::ConfigureAdmission { show, enabled: true, window: 1 };
        cluster.service.operator(command).await.unwrap();
        let (first, second) = (SessionId(21), SessionId(22));
        let queued = |reply| match reply {
            statemachine::Reply::Queued { ticket, .. } => ticket,
            other => panic!("not queued: {other:?}"),
        };
        let granted = queued(cluster.client(show, first, ClientRequest::JoinQueue).await);
        let waiting = queued(cluster.client(show, second, ClientRequest::JoinQueue).await);

        let mut watch = watch_ticket(&cluster.service, show, waiting, Some(second)).await.unwrap();
        let view = watch.next().await.unwrap().unwrap();
        assert_eq!((view.state, view.ahead), (TicketStatus::Waiting, 0));

        cluster.client(show, first, ClientRequest::LeaveQueue { ticket: granted }).await;
        let view = watch.next().await.unwrap().unwrap();
        assert_eq!(view.state, TicketStatus::Granted);
        assert!(view.grant_deadline_ms.is_some());

        cluster.client(show, second, ClientRequest::LeaveQueue { ticket: waiting }).await;
        assert_eq!(watch.next().await.unwrap().unwrap().state, TicketStatus::Left);
        assert!(watch.next().await.is_none());
    }
}
