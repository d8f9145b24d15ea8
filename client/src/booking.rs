//! A buyer's calls: sessions, holds, checkout, bookings, the admission queue, the waitlist and
//! its offers, and status watches.
//!
//! Owns building these requests: the session token on every call, one idempotency key per
//! logical mutation (the caller's, or a fresh one kept across every retry), and routing by
//! show. Never decides anything (the nodes do) and never stores a token or a key.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use proto::booking::{
    BookingRef, BookingReply, CheckoutReply, CreateSessionRequest, EntryRef, GetHoldRequest,
    HoldRef, HoldReply, HoldRequest, JoinWaitlistRequest, OfferRef, OfferReply, PaymentRef,
    PaymentReply, ShowRef, TicketRef, TicketReply, WaitlistEntryReply,
};
use tokio::sync::oneshot;
use tonic::Status;

use crate::batch::HoldJob;
use crate::client::{Client, Kind};
use crate::error::{self, Error, Result};
use crate::key::CallMetadata;
use crate::route::Route;

/// A status watch: the current state first, then one item per change, ending when the watched
/// entity is final or the node goes away (an `Err` item says why).
pub type Watch<T> = Pin<Box<dyn Stream<Item = Result<T>> + Send + 'static>>;

impl Client {
    /// A fresh guest session token from the cluster: the bearer token of every buyer call.
    /// Any node issues one; every node accepts it.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// let token = client.create_session().await?;
    /// let hold = client.hold(&token, 42, &[54, 55], 1, None).await?;
    /// println!("hold {} expires at {}", hold.hold_id, hold.deadline_ms);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when no node answered.
    pub async fn create_session(&self) -> Result<String> {
        let metadata = CallMetadata::default();
        let (reply, _) = self
            .booking_call(
                Route::Any,
                Kind::Read,
                &metadata,
                CreateSessionRequest {},
                |mut c, r| async move { c.create_session(r).await },
            )
            .await?;
        Ok(reply.token)
    }

    /// Holds exactly `seats` of a show for the session of `token`, all or nothing, at the
    /// quoted `price_version`.
    ///
    /// `key` is the idempotency key: give one to be able to retry the hold after an
    /// [`Error::Unavailable`] (which also carries the key the client made when `key` is `None`).
    ///
    /// ```no_run
    /// # async fn run(client: client::Client, token: String) -> client::Result<()> {
    /// use client::{Error, ErrorCode};
    ///
    /// match client.hold(&token, 42, &[54, 55, 56], 1, Some("buyer-7-try-1")).await {
    ///     Ok(hold) => println!("hold {} until {}", hold.hold_id, hold.deadline_ms),
    ///     Err(Error::Rejected { code: ErrorCode::SeatUnavailable, .. }) => println!("taken"),
    ///     Err(error) => return Err(error),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] with `seat_unavailable`, `price_version_mismatch`, `grant_required`,
    /// ...; [`Error::Unavailable`] (check [`Error::is_outcome_unknown`]);
    /// [`Error::InvalidArgument`] for a malformed key or token.
    pub async fn hold(
        &self,
        token: &str,
        show_id: u64,
        seats: &[u32],
        price_version: u32,
        key: Option<&str>,
    ) -> Result<HoldReply> {
        self.hold_with_grant(token, show_id, seats, price_version, 0, key).await
    }

    /// As [`Client::hold`], presenting the admission grant `grant_ticket_id` (a granted ticket
    /// of [`Client::join_queue`]; 0 for none), which the show requires while its admission lane
    /// is on. The hold consumes the grant.
    ///
    /// # Errors
    ///
    /// As [`Client::hold`], and `grant_expired`, `ticket_not_active`, `not_owner` for the grant.
    pub async fn hold_with_grant(
        &self,
        token: &str,
        show_id: u64,
        seats: &[u32],
        price_version: u32,
        grant_ticket_id: u64,
        key: Option<&str>,
    ) -> Result<HoldReply> {
        let message = HoldRequest {
            show_id,
            seats: seats.to_vec(),
            price_version,
            grant_ticket_id,
            seat_labels: Vec::new(),
        };
        if self.config().hold_batches_in_flight_max == 0 {
            return self
                .buyer_mutation(
                    token,
                    show_id,
                    key,
                    message,
                    |mut c, r| async move { c.hold(r).await },
                )
                .await;
        }
        let key = self.key_or_fresh(key);
        let metadata = CallMetadata::mutation(key.as_deref())?.with_token(Some(token))?;
        let (reply, answer) = oneshot::channel();
        let token = token.trim().to_owned();
        let job = HoldJob { show_id, token, metadata, message, reply };
        if let Err(unsent) = self.hold_queue().send(job) {
            // The batching task is gone (it panicked): the hold was never sent.
            let HoldJob { token, metadata, message, .. } = unsent.0;
            let key = metadata.key().map(str::to_owned);
            return self
                .buyer_mutation(&token, show_id, key.as_deref(), message, |mut c, r| async move {
                    c.hold(r).await
                })
                .await;
        }
        answer.await.unwrap_or_else(|_dropped| {
            Err(Error::Unavailable {
                attempts: 1,
                elapsed: Duration::ZERO,
                status: tonic::Code::Internal,
                booking_code: None,
                message: "the hold-batching task stopped with the hold in flight".into(),
                outcome_unknown: true,
                idempotency_key: key,
            })
        })
    }

    /// As [`Client::hold_with_grant`], naming the seats by their labels in the show's hall
    /// (`B12`), for a show in the catalog; the node turns them into seat numbers, and the reply
    /// names both. Sent as a call of its own (never batched).
    ///
    /// # Errors
    ///
    /// As [`Client::hold`], and `invalid_argument` for a label the hall does not have or a
    /// show that is not in the catalog.
    pub async fn hold_labels(
        &self,
        token: &str,
        show_id: u64,
        seat_labels: &[&str],
        price_version: u32,
        grant_ticket_id: u64,
        key: Option<&str>,
    ) -> Result<HoldReply> {
        let message = HoldRequest {
            show_id,
            seats: Vec::new(),
            price_version,
            grant_ticket_id,
            seat_labels: seat_labels.iter().map(|label| (*label).to_owned()).collect(),
        };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move { c.hold(r).await })
            .await
    }

    /// Reads one of the session's holds, linearizably (from the group's leader).
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`hold_not_found`, `not_owner`, ...), [`Error::Unavailable`],
    /// [`Error::InvalidArgument`] for a malformed token.
    pub async fn get_hold(&self, token: &str, show_id: u64, hold_id: u64) -> Result<HoldReply> {
        let message = GetHoldRequest { show_id, hold_id };
        self.buyer_read(token, show_id, message, |mut c, r| async move { c.get_hold(r).await })
            .await
    }

    /// Cancels one of the session's held holds; its seats are released at once.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`hold_expired`, `hold_not_active`, `payment_in_progress`,
    /// `not_owner`, ...), [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn cancel_hold(
        &self,
        token: &str,
        show_id: u64,
        hold_id: u64,
        key: Option<&str>,
    ) -> Result<HoldReply> {
        let message = HoldRef { show_id, hold_id };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.cancel_hold(r).await
        })
        .await
    }

    /// Starts paying for one of the session's held holds: the hold becomes `processing` and
    /// the reply names the payment attempt, the amount and the deadline. A retry under the same
    /// key (or a second checkout of the same hold) gets the same attempt.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client, token: String) -> client::Result<()> {
    /// let checkout = client.checkout(&token, 42, 3, None).await?;
    /// println!("pay {} {} by {}", checkout.amount_minor, checkout.currency, checkout.deadline_ms);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`hold_expired`, `payment_attempts_exhausted`, ...),
    /// [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn checkout(
        &self,
        token: &str,
        show_id: u64,
        hold_id: u64,
        key: Option<&str>,
    ) -> Result<CheckoutReply> {
        let message = HoldRef { show_id, hold_id };
        self.buyer_mutation(
            token,
            show_id,
            key,
            message,
            |mut c, r| async move { c.checkout(r).await },
        )
        .await
    }

    /// Reads one of the session's bookings, linearizably.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`booking_not_found`, `not_owner`), [`Error::Unavailable`],
    /// [`Error::InvalidArgument`].
    pub async fn get_booking(
        &self,
        token: &str,
        show_id: u64,
        booking_id: u64,
    ) -> Result<BookingReply> {
        let message = BookingRef { show_id, booking_id };
        self.buyer_read(token, show_id, message, |mut c, r| async move { c.get_booking(r).await })
            .await
    }

    /// Cancels one of the session's bookings, when the show allows it: the seats return (to
    /// the waitlist first) and refund work is queued.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`booking_not_cancellable`, `not_owner`, ...),
    /// [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn cancel_booking(
        &self,
        token: &str,
        show_id: u64,
        booking_id: u64,
        key: Option<&str>,
    ) -> Result<BookingReply> {
        let message = BookingRef { show_id, booking_id };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.cancel_booking(r).await
        })
        .await
    }

    /// Reads a payment attempt linearizably (from the group's leader): with `token`, one of
    /// that session's own; without, any, as the operator (the client's operator token, see
    /// [`Client::with_operator_token`]). The reply says the attempt's state (`pending`,
    /// `unknown`, `succeeded`, `declined`, `refunded`) and whether its money is owed back.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client, token: String) -> client::Result<()> {
    /// let checkout = client.checkout(&token, 42, 3, None).await?;
    /// let payment = client.get_payment(Some(&token), 42, checkout.payment_id).await?;
    /// println!("payment {}: {}", payment.payment_id, payment.state);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`payment_not_found`, `not_owner`, `unauthenticated` with neither a
    /// session token nor the operator token), [`Error::Unavailable`], [`Error::InvalidArgument`]
    /// for a malformed token.
    pub async fn get_payment(
        &self,
        token: Option<&str>,
        show_id: u64,
        payment_id: u64,
    ) -> Result<PaymentReply> {
        let message = PaymentRef { show_id, payment_id };
        // The owner's session token when given, else the operator token (if any): the node
        // lets either read, and says `unauthenticated` to a call with neither.
        let metadata = match token {
            Some(token) => CallMetadata::default().with_token(Some(token))?,
            None => self.operator_metadata(false, None)?,
        };
        let (reply, _) = self
            .booking_call(
                Route::Show(show_id),
                Kind::Read,
                &metadata,
                message,
                |mut c, r| async move { c.get_payment(r).await },
            )
            .await?;
        Ok(reply)
    }

    /// Joins a show's admission lane. The ticket is `granted` at once when the window has room
    /// (its id is then the grant to pass to [`Client::hold_with_grant`] before
    /// `grant_deadline_ms`), else `waiting` with `ahead` tickets in front.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client, token: String) -> client::Result<()> {
    /// let mut ticket = client.join_queue(&token, 42, None).await?;
    /// while ticket.state == "waiting" {
    ///     tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    ///     ticket = client.get_ticket(&token, 42, ticket.ticket_id).await?;
    /// }
    /// if ticket.state == "granted" {
    ///     client.hold_with_grant(&token, 42, &[7], 1, ticket.ticket_id, None).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`admission_disabled`, `already_queued`, `queue_full`, ...),
    /// [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn join_queue(
        &self,
        token: &str,
        show_id: u64,
        key: Option<&str>,
    ) -> Result<TicketReply> {
        let message = ShowRef { show_id };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.join_queue(r).await
        })
        .await
    }

    /// Reads one of the session's admission tickets and its place in line, linearizably.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`ticket_not_found`, `not_owner`), [`Error::Unavailable`],
    /// [`Error::InvalidArgument`].
    pub async fn get_ticket(
        &self,
        token: &str,
        show_id: u64,
        ticket_id: u64,
    ) -> Result<TicketReply> {
        let message = TicketRef { show_id, ticket_id };
        self.buyer_read(token, show_id, message, |mut c, r| async move { c.get_ticket(r).await })
            .await
    }

    /// Leaves the admission lane; an unused grant is given back to the next in line.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`ticket_not_active`, `not_owner`, ...), [`Error::Unavailable`],
    /// [`Error::InvalidArgument`].
    pub async fn leave_queue(
        &self,
        token: &str,
        show_id: u64,
        ticket_id: u64,
        key: Option<&str>,
    ) -> Result<TicketReply> {
        let message = TicketRef { show_id, ticket_id };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.leave_queue(r).await
        })
        .await
    }

    /// Joins the waitlist of a sold-out show for `quantity` seats together (1..=10).
    ///
    /// ```no_run
    /// # async fn run(client: client::Client, token: String) -> client::Result<()> {
    /// let entry = client.join_waitlist(&token, 42, 2, None).await?;
    /// println!("entry {}: {} ahead", entry.entry_id, entry.ahead);
    /// let entry = client.get_waitlist_entry(&token, 42, entry.entry_id).await?;
    /// if let Some(offer) = entry.offer.filter(|offer| offer.state == "open") {
    ///     let hold = client.accept_offer(&token, 42, offer.offer_id, None).await?;
    ///     println!("seats {:?} held until {}", hold.seats, hold.deadline_ms);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`waitlist_disabled`, `not_sold_out`, `already_on_waitlist`, ...),
    /// [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn join_waitlist(
        &self,
        token: &str,
        show_id: u64,
        quantity: u32,
        key: Option<&str>,
    ) -> Result<WaitlistEntryReply> {
        self.join_waitlist_with_claim(token, show_id, quantity, None, key).await
    }

    /// As [`Client::join_waitlist`], with a priority-band claim the operator issued for this
    /// session and show ([`Client::issue_band_claim`]).
    ///
    /// # Errors
    ///
    /// As [`Client::join_waitlist`]; `forbidden` for a claim not issued for this session and
    /// show, or expired.
    pub async fn join_waitlist_with_claim(
        &self,
        token: &str,
        show_id: u64,
        quantity: u32,
        claim: Option<&str>,
        key: Option<&str>,
    ) -> Result<WaitlistEntryReply> {
        let message = JoinWaitlistRequest { show_id, quantity, claim: claim.map(str::to_owned) };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.join_waitlist(r).await
        })
        .await
    }

    /// Reads one of the session's waitlist entries, its place in line and its offer,
    /// linearizably.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`entry_not_found`, `not_owner`), [`Error::Unavailable`],
    /// [`Error::InvalidArgument`].
    pub async fn get_waitlist_entry(
        &self,
        token: &str,
        show_id: u64,
        entry_id: u64,
    ) -> Result<WaitlistEntryReply> {
        let message = EntryRef { show_id, entry_id };
        self.buyer_read(
            token,
            show_id,
            message,
            |mut c, r| async move { c.get_waitlist_entry(r).await },
        )
        .await
    }

    /// Leaves the waitlist; an open offer is declined and passed on.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`entry_not_active`, `not_owner`, ...), [`Error::Unavailable`],
    /// [`Error::InvalidArgument`].
    pub async fn leave_waitlist(
        &self,
        token: &str,
        show_id: u64,
        entry_id: u64,
        key: Option<&str>,
    ) -> Result<WaitlistEntryReply> {
        let message = EntryRef { show_id, entry_id };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.leave_waitlist(r).await
        })
        .await
    }

    /// Reads one of the session's offers, linearizably.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`offer_not_found`, `not_owner`), [`Error::Unavailable`],
    /// [`Error::InvalidArgument`].
    pub async fn get_offer(&self, token: &str, show_id: u64, offer_id: u64) -> Result<OfferReply> {
        let message = OfferRef { show_id, offer_id };
        self.buyer_read(token, show_id, message, |mut c, r| async move { c.get_offer(r).await })
            .await
    }

    /// Accepts an offer: its seats become a hold of the session in the same step (the reply).
    /// Accepting twice under the same key returns the same hold.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (`offer_expired`, `offer_not_active`, `not_owner`, ...),
    /// [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn accept_offer(
        &self,
        token: &str,
        show_id: u64,
        offer_id: u64,
        key: Option<&str>,
    ) -> Result<HoldReply> {
        let message = OfferRef { show_id, offer_id };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.accept_offer(r).await
        })
        .await
    }

    /// Declines an offer: its seats go to the next waiter.
    ///
    /// # Errors
    ///
    /// As [`Client::accept_offer`].
    pub async fn decline_offer(
        &self,
        token: &str,
        show_id: u64,
        offer_id: u64,
        key: Option<&str>,
    ) -> Result<OfferReply> {
        let message = OfferRef { show_id, offer_id };
        self.buyer_mutation(token, show_id, key, message, |mut c, r| async move {
            c.decline_offer(r).await
        })
        .await
    }

    /// Watches one of the session's holds: the current state, then every change (checkout,
    /// payment, expiry, cancellation) until the hold is final. Opening the watch follows leader
    /// hints and retries like any read; once open, an `Err` item ends it.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client, token: String) -> client::Result<()> {
    /// use futures_util::StreamExt;
    ///
    /// let mut watch = client.watch_hold(&token, 42, 3).await?;
    /// while let Some(hold) = watch.next().await {
    ///     println!("hold 3 is {}", hold?.state);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Client::get_hold`], when the watch cannot be opened.
    pub async fn watch_hold(
        &self,
        token: &str,
        show_id: u64,
        hold_id: u64,
    ) -> Result<Watch<HoldReply>> {
        let metadata = CallMetadata::default().with_token(Some(token))?;
        let message = GetHoldRequest { show_id, hold_id };
        let (stream, address) = self
            .booking_call(
                Route::Show(show_id),
                Kind::LocalRead,
                &metadata,
                message,
                |mut c, r| async move { c.watch_hold(r).await },
            )
            .await?;
        Ok(watch(stream, address))
    }

    /// Watches one of the session's admission tickets: its state and place in line now, then
    /// every change, until it is final (consumed, left, expired).
    ///
    /// # Errors
    ///
    /// As [`Client::get_ticket`], when the watch cannot be opened.
    pub async fn watch_ticket(
        &self,
        token: &str,
        show_id: u64,
        ticket_id: u64,
    ) -> Result<Watch<TicketReply>> {
        let metadata = CallMetadata::default().with_token(Some(token))?;
        let message = TicketRef { show_id, ticket_id };
        let (stream, address) = self
            .booking_call(
                Route::Show(show_id),
                Kind::LocalRead,
                &metadata,
                message,
                |mut c, r| async move { c.watch_ticket(r).await },
            )
            .await?;
        Ok(watch(stream, address))
    }

    /// Runs a buyer's mutation about a show under `token` and `key` (a fresh one when `None`),
    /// the same key on every attempt.
    async fn buyer_mutation<M, T, F, Fut>(
        &self,
        token: &str,
        show_id: u64,
        key: Option<&str>,
        message: M,
        rpc: F,
    ) -> Result<T>
    where
        M: Clone,
        F: Fn(
            proto::booking::booking_service_client::BookingServiceClient<tonic::transport::Channel>,
            tonic::Request<M>,
        ) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let key = self.key_or_fresh(key);
        let metadata = CallMetadata::mutation(key.as_deref())?.with_token(Some(token))?;
        let (reply, _) = self
            .booking_call(Route::Show(show_id), Kind::Mutation, &metadata, message, rpc)
            .await?;
        Ok(reply)
    }

    /// Runs a buyer's linearizable read about a show under `token`.
    async fn buyer_read<M, T, F, Fut>(
        &self,
        token: &str,
        show_id: u64,
        message: M,
        rpc: F,
    ) -> Result<T>
    where
        M: Clone,
        F: Fn(
            proto::booking::booking_service_client::BookingServiceClient<tonic::transport::Channel>,
            tonic::Request<M>,
        ) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let metadata = CallMetadata::default().with_token(Some(token))?;
        let (reply, _) =
            self.booking_call(Route::Show(show_id), Kind::Read, &metadata, message, rpc).await?;
        Ok(reply)
    }
}

/// A server stream as a [`Watch`]: a status with a `booking-code` is the node's answer
/// ([`Error::Rejected`]); any other is the stream breaking ([`Error::Transport`]).
fn watch<T: Send + 'static>(stream: tonic::Streaming<T>, address: String) -> Watch<T> {
    Box::pin(stream.map(move |item| {
        item.map_err(|status| match error::booking_code(&status) {
            Some(_) => Error::rejected(&status),
            None => Error::Transport {
                address: address.clone(),
                status: status.code(),
                message: error::describe(&status),
            },
        })
    }))
}
