//! Shows: browsing (list, summary, seat map) and the operator's calls (create a show; its
//! controls: open and close sales, cancel it, set prices, configure the admission lane and the
//! waitlist; capacity events, audit trails).
//!
//! Owns building these requests and routing them: reads any replica answers go to the show's
//! cached leader or the next node without caching who answered; the linearizable seat map and
//! the audit trail go to the show's group leader (following hints, caching who answered);
//! operator mutations go to the show's group leader (create: the metadata group's) with one
//! idempotency key and the operator token. Never interprets a reply beyond the placement it
//! names and whether a seat map is the linearizable one asked for.

use std::future::Future;

use proto::booking::booking_service_client::BookingServiceClient;
use proto::booking::{
    AdmissionConfig, AdmissionReply, AuditReply, BandClaimReply, CapacityReleasedReply,
    CapacityReleasedRequest, ConfigureAdmissionRequest, ConfigureWaitlistRequest,
    CreateShowRequest, DrawLotteryRequest, EraseSessionRequest, GetAuditRequest,
    IssueBandClaimRequest, ListShowsRequest, LotteryReply, MoveShowRequest, PricesReply,
    SalesReply, SeatMapReply, SeatMapRequest, SeatRange, SessionErasedReply, SetPricesRequest,
    SetWaitlistPolicyRequest, ShowArchivedReply, ShowCancelledReply, ShowListing, ShowMovedReply,
    ShowPlacement, ShowPolicy, ShowRef, ShowReply, WaitlistConfig, WaitlistPolicyReply,
    WaitlistReply, WaitlistRules,
};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::client::{Client, Kind};
use crate::error::{Error, Result, code_name};
use crate::key::CallMetadata;
use crate::route::Route;

/// A show to create: its id, currency, prices per class, seat layout, rules, and how to set it
/// up (admission lane, waitlist, sales).
///
/// ```
/// use client::NewShow;
///
/// // 500 seats at 45.00 EUR, a FIFO-ish admission lane of 100 grants, a waitlist, on sale.
/// let show = NewShow {
///     admission_window: Some(100),
///     waitlist: true,
///     open_sales: true,
///     ..NewShow::uniform(42, 500, 4_500, "EUR")
/// };
/// assert_eq!(show.layout, [(500, 0)]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewShow {
    /// The show's id, chosen by the operator; non-zero.
    pub show_id: u64,
    /// ISO 4217 code, three upper-case letters.
    pub currency: String,
    /// One price per seat class, in minor units.
    pub prices_minor: Vec<u64>,
    /// Consecutive runs of seats from seat 0: `(count, class)`.
    pub layout: Vec<(u32, u32)>,
    /// The data group to place the show in; 0 lets the cluster choose.
    pub group_id: u64,
    /// How long a hold keeps its seats, in milliseconds; 0 for the cluster's default.
    pub hold_ttl_ms: u64,
    /// The other deadlines and rules; each 0 (or `None`) keeps the cluster's default.
    pub policy: ShowPolicy,
    /// Turn the admission lane on with this window (outstanding grants, 1 = strict FIFO);
    /// `None` leaves it off.
    pub admission_window: Option<u32>,
    /// Turn the waitlist on.
    pub waitlist: bool,
    /// Open sales once created (otherwise call [`Client::open_sales`]).
    pub open_sales: bool,
    /// Its place in the catalog: an event in a hall at a time. Its seats and classes are then
    /// the hall's (leave `layout` empty) and `prices_minor` has one price per class of the hall.
    pub listing: Option<ShowListing>,
}

impl NewShow {
    /// A show of `seats` seats of one class at one price, placed by the cluster, with the
    /// default rules, no admission lane, no waitlist, and sales not yet open.
    pub fn uniform(show_id: u64, seats: u32, price_minor: u64, currency: &str) -> NewShow {
        NewShow {
            show_id,
            currency: currency.to_owned(),
            prices_minor: vec![price_minor],
            layout: vec![(seats, 0)],
            group_id: 0,
            hold_ttl_ms: 0,
            policy: ShowPolicy::default(),
            admission_window: None,
            waitlist: false,
            open_sales: false,
            listing: None,
        }
    }

    /// The wire request.
    pub(crate) fn to_request(&self) -> CreateShowRequest {
        CreateShowRequest {
            show_id: self.show_id,
            currency: self.currency.clone(),
            prices_minor: self.prices_minor.clone(),
            layout: self.layout.iter().map(|&(count, class)| SeatRange { count, class }).collect(),
            group_id: self.group_id,
            hold_ttl_ms: self.hold_ttl_ms,
            policy: (self.policy != ShowPolicy::default()).then_some(self.policy),
            admission: self
                .admission_window
                .map(|window| AdmissionConfig { enabled: true, window }),
            waitlist: self.waitlist.then_some(WaitlistConfig { enabled: true, policy_version: 0 }),
            open_sales: self.open_sales,
            listing: self.listing,
        }
    }
}

impl Client {
    /// Every show the answering node knows, in show id order, with its summary (status,
    /// prices, seat counts, rules), as of that node's replicas.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// for show in client.list_shows().await? {
    ///     println!("show {}: {} ({} of {} seats free)", show.show_id, show.status, show.seats_free, show.seat_count);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Unavailable`] when no node answered.
    pub async fn list_shows(&self) -> Result<Vec<ShowReply>> {
        let metadata = CallMetadata::default();
        let (reply, _) = self
            .booking_call(
                Route::Any,
                Kind::LocalRead,
                &metadata,
                ListShowsRequest {},
                |mut c, r| async move { c.list_shows(r).await },
            )
            .await?;
        Ok(reply.shows)
    }

    /// One show's summary, from any replica of its group (see `as_of_log_index`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] with `show_not_found`, [`crate::Error::Unavailable`].
    pub async fn get_show(&self, show_id: u64) -> Result<ShowReply> {
        let metadata = CallMetadata::default();
        let (reply, _) = self
            .booking_call(
                Route::Show(show_id),
                Kind::LocalRead,
                &metadata,
                ShowRef { show_id },
                |mut c, r| async move { c.get_show(r).await },
            )
            .await?;
        self.routes().learn_show_group(show_id, reply.group_id);
        Ok(reply)
    }

    /// One show's seat map (every seat's class and status), from any replica of its group,
    /// labelled with the log position it reflects.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// use client::SeatStatus;
    ///
    /// let map = client.get_seat_map(42).await?;
    /// let free = map.seats().filter(|status| *status == SeatStatus::Free).count();
    /// println!("{free} seats free as of log index {}", map.as_of_log_index);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] with `show_not_found`, [`crate::Error::Unavailable`].
    pub async fn get_seat_map(&self, show_id: u64) -> Result<SeatMapReply> {
        Ok(unpacked(self.read_packed_map(show_id, false).await?))
    }

    /// As [`Client::get_seat_map`], in the packed form a node serves from one encoding per
    /// applied log position: `seat_states` and `seat_classes` carry a byte per seat (a
    /// [`SeatStatus`](crate::SeatStatus) number and a class), and `seats` and `classes` are
    /// empty. For a front end that hands the map on as it is, or reads it often: the node may
    /// answer with the map it built last if that is at most 50 ms old (`as_of` says which
    /// position it reflects), so many readers of a hot show cost one build.
    ///
    /// # Errors
    ///
    /// As [`Client::get_seat_map`].
    pub async fn get_seat_map_packed(&self, show_id: u64) -> Result<SeatMapReply> {
        self.read_packed_map(show_id, true).await
    }

    /// A replica's packed map of a show; `cached`: the node's last build may do if recent.
    async fn read_packed_map(&self, show_id: u64, cached: bool) -> Result<SeatMapReply> {
        let metadata = CallMetadata::default();
        let (reply, _) = self
            .booking_call(
                Route::Show(show_id),
                Kind::LocalRead,
                &metadata,
                SeatMapRequest {
                    show_id,
                    linearizable: false,
                    packed: true,
                    cached,
                    ..SeatMapRequest::default()
                },
                |mut c, r| async move { c.get_seat_map(r).await },
            )
            .await?;
        Ok(reply)
    }

    /// One show's seat map read linearizably, on the leader of its group after it confirmed
    /// its leadership with a quorum (ReadIndex): it reflects every write acknowledged before
    /// the call, as [`Client::get_hold`] does. Routed like `get_hold`: to the show's cached
    /// leader, following a follower's leader hint. Costs a quorum round trip, so browsing
    /// should use [`Client::get_seat_map`].
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// let map = client.get_seat_map_linearizable(42).await?;
    /// assert!(map.linearizable);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] with `show_not_found`, or with `unimplemented` when the node
    /// that answered predates linearizable seat maps (it served its replica's map instead);
    /// [`crate::Error::Unavailable`].
    pub async fn get_seat_map_linearizable(&self, show_id: u64) -> Result<SeatMapReply> {
        let metadata = CallMetadata::default();
        let (reply, address) = self
            .booking_call(
                Route::Show(show_id),
                Kind::Read,
                &metadata,
                SeatMapRequest {
                    show_id,
                    linearizable: true,
                    packed: true,
                    ..SeatMapRequest::default()
                },
                |mut c, r| async move { c.get_seat_map(r).await },
            )
            .await?;
        let reply = unpacked(reply);
        // A node that does not know the request's `linearizable` field ignores it and serves
        // its replica's map; handing that out as linearizable would be a silent stale read.
        if !reply.linearizable {
            return Err(Error::Rejected {
                status: Code::Unimplemented,
                code: crate::ErrorCode::Unspecified,
                code_name: code_name(Code::Unimplemented).into(),
                message: format!("{address} served a replica's seat map, not a linearizable one"),
            });
        }
        Ok(reply)
    }

    /// Creates a show (idempotent by show id) and returns where the cluster placed it; sets up
    /// its admission lane and waitlist and opens sales as `show` asks (operator call).
    ///
    /// `key` is the idempotency key; `None` makes one for this call.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// use client::NewShow;
    ///
    /// let show = NewShow { open_sales: true, ..NewShow::uniform(42, 500, 4_500, "EUR") };
    /// let placement = client.create_show(&show, None).await?;
    /// println!("show {} lives in group {}", placement.show_id, placement.group_id);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] with the node's code (`invalid_argument` for a bad layout,
    /// `show_exists` when the id is placed elsewhere, `forbidden` without the operator token,
    /// ...), [`crate::Error::Unavailable`] when no leader answered,
    /// [`crate::Error::InvalidArgument`] for a malformed key.
    pub async fn create_show(&self, show: &NewShow, key: Option<&str>) -> Result<ShowPlacement> {
        let metadata = self.operator_metadata(true, key)?;
        // The metadata group (0) records the placement, so its leader takes the call.
        let (placement, _) = self
            .booking_call(
                Route::Group(0),
                Kind::Mutation,
                &metadata,
                show.to_request(),
                |mut c, r| async move { c.create_show(r).await },
            )
            .await?;
        self.routes().learn_show_group(placement.show_id, placement.group_id);
        Ok(placement)
    }

    /// Opens a show's sales (operator call); the reply says the status now (`on_sale`).
    /// Opening an open show changes nothing and says `duplicate`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] (`show_not_found`, `show_cancelled`, `unauthenticated` or
    /// `forbidden` without the operator token, ...), [`crate::Error::Unavailable`].
    pub async fn open_sales(&self, show_id: u64) -> Result<SalesReply> {
        let (reply, address) = self
            .operator_control(show_id, ShowRef { show_id }, |mut c, r| async move {
                c.open_sales(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Closes a show's sales: no new holds; existing holds may still be paid (operator call).
    /// Closing a closed show changes nothing and says `duplicate`.
    ///
    /// # Errors
    ///
    /// As [`Client::open_sales`].
    pub async fn close_sales(&self, show_id: u64) -> Result<SalesReply> {
        let (reply, address) = self
            .operator_control(show_id, ShowRef { show_id }, |mut c, r| async move {
                c.close_sales(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Cancels a show (operator call): every hold is released, every confirmed booking is
    /// cancelled and refunded by the group leader, every holder, booker and waiter is told.
    /// Terminal; a show cancelled before answers `duplicate` with nothing changed.
    ///
    /// # Errors
    ///
    /// As [`Client::open_sales`] (`show_not_found`, ...).
    pub async fn cancel_show(&self, show_id: u64) -> Result<ShowCancelledReply> {
        let (reply, address) = self
            .operator_control(show_id, ShowRef { show_id }, |mut c, r| async move {
                c.cancel_show(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Archives a show (operator call): a show whose sales are closed or cancelled and whose
    /// money is settled leaves its group's state for an archive on every replica; from then on
    /// every call about it answers `show_archived`, and its audit trails come from the archive.
    /// Again, it answers `duplicate` with nothing changed.
    ///
    /// # Errors
    ///
    /// `show_not_settled` (what remains, in the message), `archive_changed` (the show changed
    /// meanwhile: call again), and as [`Client::open_sales`].
    pub async fn archive_show(&self, show_id: u64) -> Result<ShowArchivedReply> {
        let (reply, address) = self
            .operator_control(show_id, ShowRef { show_id }, |mut c, r| async move {
                c.archive_show(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Moves a show to data group `to_group` (operator call), fenced: its group freezes it
    /// (calls about it answer `show_moving`, which this SDK retries), the target imports the
    /// frozen state checked by its SHA-256, group 0 places it there, the target serves it and
    /// the source drops it. The call follows each step to its group's leader; a call cut off
    /// half-way is finished by calling again, and a move made before answers `duplicate`.
    ///
    /// # Errors
    ///
    /// `invalid_argument` (no such data group, a show too large to carry), `show_not_found`,
    /// `show_moving` (it is moving to another group), and as [`Client::open_sales`].
    pub async fn move_show(&self, show_id: u64, to_group: u64) -> Result<ShowMovedReply> {
        let metadata = self.operator_metadata(true, None)?;
        let message = MoveShowRequest { show_id, to_group };
        let (reply, address) = self
            .booking_call(
                Route::Show(show_id),
                Kind::LongMutation,
                &metadata,
                message,
                |mut c, r| async move { c.move_show(r).await },
            )
            .await?;
        self.learn_control(reply.show_id, reply.to_group, &address);
        Ok(reply)
    }

    /// Erases a session from one show (operator call, deletion on demand): every record of
    /// the show that names it names a fresh random pseudonym instead, and its idempotency
    /// records are removed. `session_id` is 32 hex digits, as audit records name it.
    ///
    /// # Errors
    ///
    /// `invalid_argument` (a malformed id), `show_archived` (its archive was made before), and
    /// as [`Client::open_sales`].
    pub async fn erase_session_from_show(
        &self,
        show_id: u64,
        session_id: &str,
    ) -> Result<SessionErasedReply> {
        let message = EraseSessionRequest { show_id, session_id: session_id.to_owned() };
        let (reply, address) = self
            .operator_control(show_id, message, |mut c, r| async move { c.erase_session(r).await })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Erases a session from every show the cluster lists (deletion on demand; see
    /// [`Client::erase_session_from_show`]): archived shows are skipped, since their archives
    /// were made before. Returns what each show changed.
    ///
    /// # Errors
    ///
    /// The first error of a show, as [`Client::erase_session_from_show`].
    pub async fn erase_session(&self, session_id: &str) -> Result<Vec<SessionErasedReply>> {
        let mut erased = Vec::new();
        for show in self.list_shows().await? {
            match self.erase_session_from_show(show.show_id, session_id).await {
                Ok(reply) => erased.push(reply),
                Err(crate::Error::Rejected { code: crate::ErrorCode::ShowArchived, .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(erased)
    }

    /// Sets a show's prices, one per seat class in minor units, under `version`: the show's
    /// price version plus one (operator call). From then on a hold quoting an older version is
    /// refused `price_version_mismatch`. The version and prices in force asked for again (a
    /// retry after an unknown outcome) change nothing and say `duplicate`.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// let show = client.get_show(42).await?;
    /// let prices = client.set_prices(42, show.price_version + 1, &[4_500, 3_000]).await?;
    /// println!("holds quote price version {} now", prices.price_version);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] with `price_version_mismatch` for another version,
    /// `invalid_argument` for prices that are not one per seat class of the show; otherwise as
    /// [`Client::open_sales`].
    pub async fn set_prices(
        &self,
        show_id: u64,
        version: u32,
        prices_minor: &[u64],
    ) -> Result<PricesReply> {
        let message = SetPricesRequest { show_id, version, prices_minor: prices_minor.to_vec() };
        let (reply, address) = self
            .operator_control(show_id, message, |mut c, r| async move { c.set_prices(r).await })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Turns a show's admission lane on or off and sets its window, 1..=10000 grants
    /// outstanding at once (operator call). While it is on, a hold needs a grant
    /// ([`Client::hold_with_grant`]); turning it off ends every ticket in line.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] with `invalid_argument` for a window out of range or below
    /// the grants outstanding; otherwise as [`Client::open_sales`].
    pub async fn configure_admission(
        &self,
        show_id: u64,
        enabled: bool,
        window: u32,
    ) -> Result<AdmissionReply> {
        let message = ConfigureAdmissionRequest { show_id, enabled, window };
        let (reply, address) =
            self.operator_control(show_id, message, |mut c, r| async move {
                c.configure_admission(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Turns a show's waitlist on or off, keeping its ordering policy version (operator call).
    /// Turning it off ends every waiting entry.
    ///
    /// # Errors
    ///
    /// As [`Client::open_sales`].
    pub async fn configure_waitlist(&self, show_id: u64, enabled: bool) -> Result<WaitlistReply> {
        let message = ConfigureWaitlistRequest { show_id, enabled };
        let (reply, address) =
            self.operator_control(show_id, message, |mut c, r| async move {
                c.configure_waitlist(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Sets a show's waitlist rules (operator call): `ordering` "fifo", "bands" or "lottery"
    /// (with `draw_at_ms`), and the offers open at once (0 for no limit). A change of rules
    /// bumps the policy version; the rules in force set again answer `duplicate`.
    ///
    /// # Errors
    ///
    /// As [`Client::open_sales`]; [`Error::Rejected`] `waitlist_in_use` when the ordering would
    /// change while buyers wait.
    pub async fn set_waitlist_policy(
        &self,
        show_id: u64,
        rules: WaitlistRules,
    ) -> Result<WaitlistPolicyReply> {
        let message = SetWaitlistPolicyRequest { show_id, rules: Some(rules) };
        let (reply, address) =
            self.operator_control(show_id, message, |mut c, r| async move {
                c.set_waitlist_policy(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Reads a show's waitlist rules and its lottery's draw, linearizably (operator call).
    ///
    /// # Errors
    ///
    /// As [`Client::open_sales`].
    pub async fn get_waitlist_policy(&self, show_id: u64) -> Result<WaitlistPolicyReply> {
        let message = ShowRef { show_id };
        let (reply, address) =
            self.operator_control(show_id, message, |mut c, r| async move {
                c.get_waitlist_policy(r).await
            })
            .await?;
        self.learn_control(reply.show_id, reply.group_id, &address);
        Ok(reply)
    }

    /// Draws a show's lottery now (operator call), with `seed` or one the node picks.
    ///
    /// # Errors
    ///
    /// As [`Client::open_sales`]; [`Error::Rejected`] `not_a_lottery`, `lottery_not_due`,
    /// `lottery_already_drawn`.
    pub async fn draw_lottery(&self, show_id: u64, seed: Option<u64>) -> Result<LotteryReply> {
        let message = DrawLotteryRequest { show_id, seed };
        let (reply, _) = self
            .operator_control(show_id, message, |mut c, r| async move { c.draw_lottery(r).await })
            .await?;
        Ok(reply)
    }

    /// Issues a priority-band claim (operator call) for the buyer whose session token is
    /// `session_token`, on one show: band 0..=6, valid for `valid_for_s` (default a day). The
    /// buyer attaches it with [`Client::join_waitlist_with_claim`].
    ///
    /// # Errors
    ///
    /// As [`Client::open_sales`]; [`Error::InvalidArgument`] for a band or validity out of
    /// bounds, or a token this cluster did not issue.
    pub async fn issue_band_claim(
        &self,
        show_id: u64,
        session_token: &str,
        band: u32,
        valid_for_s: Option<u64>,
    ) -> Result<BandClaimReply> {
        let message = IssueBandClaimRequest {
            show_id,
            session_token: session_token.to_owned(),
            band,
            valid_for_s,
        };
        let (reply, _) =
            self.operator_control(show_id, message, |mut c, r| async move {
                c.issue_band_claim(r).await
            })
            .await?;
        Ok(reply)
    }

    /// Runs one of the operator's controls of a show on its group's leader, with the operator
    /// token and one fresh idempotency key kept across every retry (the controls set a state,
    /// so a retry after an unknown outcome answers as the first call would have); returns the
    /// reply and the address that answered.
    async fn operator_control<M, T, F, Fut>(
        &self,
        show_id: u64,
        message: M,
        rpc: F,
    ) -> Result<(T, String)>
    where
        M: Clone,
        F: Fn(BookingServiceClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let metadata = self.operator_metadata(true, None)?;
        self.booking_call(Route::Show(show_id), Kind::Mutation, &metadata, message, rpc).await
    }

    /// Records where a controlled show lives and that `address` leads its group.
    fn learn_control(&self, show_id: u64, group_id: u64, address: &str) {
        let mut routes = self.routes();
        routes.learn_show_group(show_id, group_id);
        routes.learn_group_leader(group_id, address);
    }

    /// Releases free seats to a show's waitlist, once per `event_id` (a second delivery of the
    /// same event changes nothing and says `duplicate`). Operator call.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] (`invalid_argument` for a seat that is not free, ...),
    /// [`crate::Error::Unavailable`].
    pub async fn capacity_released(
        &self,
        show_id: u64,
        event_id: &str,
        seats: &[u32],
    ) -> Result<CapacityReleasedReply> {
        let metadata = self.operator_metadata(true, None)?;
        let message = CapacityReleasedRequest {
            show_id,
            event_id: event_id.to_owned(),
            seats: seats.to_vec(),
        };
        let (reply, _) = self
            .booking_call(
                Route::Show(show_id),
                Kind::Mutation,
                &metadata,
                message,
                |mut c, r| async move { c.capacity_released(r).await },
            )
            .await?;
        Ok(reply)
    }

    /// The audit trail of one entity of a show, oldest first (operator call, linearizable).
    /// `kind` is `hold`, `booking`, `payment`, `ticket`, `waitlist_entry` or `offer`; for a
    /// waitlist entry the reply also lists the offers made to others while it waited.
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// let audit = client.get_audit(42, "hold", 3).await?;
    /// for record in &audit.records {
    ///     println!("{} -> {} ({}, by {})", record.from, record.to, record.reason, record.actor);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] (`not_found` when the entity has no records,
    /// `invalid_argument` for an unknown kind), [`crate::Error::Unavailable`].
    pub async fn get_audit(&self, show_id: u64, kind: &str, id: u64) -> Result<AuditReply> {
        let metadata = self.operator_metadata(false, None)?;
        let message = GetAuditRequest { show_id, kind: kind.to_owned(), id };
        let (reply, _) = self
            .booking_call(
                Route::Show(show_id),
                Kind::Read,
                &metadata,
                message,
                |mut c, r| async move { c.get_audit(r).await },
            )
            .await?;
        Ok(reply)
    }
}

/// A packed seat map with `seats` and `classes` filled from its bytes (a map that came
/// unpacked, from a node that predates packing, is left as it is).
fn unpacked(mut map: SeatMapReply) -> SeatMapReply {
    if map.seats.is_empty() && !map.seat_states.is_empty() {
        map.seats = map.seat_states.iter().map(|state| i32::from(*state)).collect();
        map.classes = map.seat_classes.iter().map(|class| u32::from(*class)).collect();
        map.seat_states = Default::default();
        map.seat_classes = Default::default();
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_map_unpacks_to_the_repeated_fields() {
        let packed = SeatMapReply {
            seat_states: vec![1, 2, 3].into(),
            seat_classes: vec![0, 1, 0].into(),
            ..SeatMapReply::default()
        };
        let map = unpacked(packed);
        assert_eq!((map.seats, map.classes), (vec![1, 2, 3], vec![0, 1, 0]));
        assert!(map.seat_states.is_empty() && map.seat_classes.is_empty());
        let plain = SeatMapReply { seats: vec![1], classes: vec![0], ..SeatMapReply::default() };
        assert_eq!(unpacked(plain.clone()), plain);
    }

    #[test]
    fn a_uniform_show_sends_no_setup() {
        let request = NewShow::uniform(7, 100, 500, "EUR").to_request();
        assert_eq!(request.layout, [SeatRange { count: 100, class: 0 }]);
        assert_eq!((request.policy, request.admission, request.waitlist), (None, None, None));
        assert!(!request.open_sales);
    }

    #[test]
    fn setup_and_policy_are_sent_when_asked() {
        let show = NewShow {
            hold_ttl_ms: 60_000,
            policy: ShowPolicy { offer_ttl_ms: 30_000, ..ShowPolicy::default() },
            admission_window: Some(1),
            waitlist: true,
            open_sales: true,
            ..NewShow::uniform(7, 100, 500, "EUR")
        };
        let request = show.to_request();
        assert_eq!(request.hold_ttl_ms, 60_000);
        assert_eq!(request.policy.unwrap().offer_ttl_ms, 30_000);
        assert_eq!(request.admission, Some(AdmissionConfig { enabled: true, window: 1 }));
        assert!(request.waitlist.unwrap().enabled);
        assert!(request.open_sales);
    }
}
