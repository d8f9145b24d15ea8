//! The gRPC `BookingService` over [`crate::service::Service`].
//!
//! Owns the request path of every booking call: who calls (session or operator credential),
//! under which idempotency key, checking the message (through `convert.rs`, so bad input
//! changes nothing), then one service call and the conversion of its answer; the streaming
//! watches convert the views of `watch.rs`, served from this replica. Routing
//! (placement, the group's leader) is the service's; rule decisions are the state machine's,
//! passed through the one error table in `error.rs`.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use proto::booking::booking_service_server::{BookingService, BookingServiceServer};
use proto::booking::hold_item_result::Result as ItemResult;
use proto::booking::{
    AuditReply, BookingRef, BookingReply, CapacityReleasedReply, CapacityReleasedRequest,
    CheckoutReply, CreateSessionRequest, CreateShowRequest, EntryRef, GetAuditRequest,
    GetHoldRequest, HoldItem, HoldItemResult, HoldManyReply, HoldManyRequest, HoldRef, HoldReply,
    HoldRequest, ItemStatus, JoinWaitlistRequest, ListShowsReply, ListShowsRequest, OfferRef,
    OfferReply, SeatMapReply, SeatMapRequest, SessionReply, ShowPlacement, ShowRef, ShowReply,
    TicketRef, TicketReply, WaitlistEntryReply,
};
use statemachine::{
    BookingId, ClientCommand, ClientRequest, EntityKind, EntryId, Group, HoldId, IdempotencyKey,
    OfferId, OperatorCommand, Rejection, Reply, SessionId, ShowId, TicketId,
};
use tonic::metadata::{KeyAndValueRef, MetadataMap};
use tonic::{Request, Response, Status};

use crate::api::convert;
use crate::api::seat_maps::SeatMaps;
use crate::api::session;
use crate::error::ApiError;
use crate::rest::limits::Limits;
use crate::rest::metrics::{HoldOutcome, Metrics};
use crate::service::Service;
use crate::watch;

/// A server stream of watch replies.
pub type WatchStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The booking API of one node.
pub struct BookingApi {
    service: Service,
    metrics: Metrics,
    seat_maps: SeatMaps,
    /// The token buckets each `HoldMany` item pays for its session (the call's own metadata
    /// carries no session, so the layer in front charges only the caller's address).
    limits: Limits,
}

impl BookingApi {
    /// The API over this node's booking operations, recording hold outcomes in `metrics` (the
    /// same registry `/metrics` serves) and charging each `HoldMany` item's session in
    /// `limits` (the same buckets every call pays).
    pub fn new(service: Service, metrics: Metrics, limits: Limits) -> BookingApi {
        BookingApi { service, metrics, seat_maps: SeatMaps::new(), limits }
    }

    /// The tonic service.
    pub fn into_server(self) -> BookingServiceServer<BookingApi> {
        BookingServiceServer::new(self)
    }

    /// The caller's session, from its bearer token.
    fn session(&self, metadata: &MetadataMap) -> Result<SessionId, ApiError> {
        self.service.shared().sessions.session(metadata_str(metadata, "authorization"))
    }

    /// Checks the operator credential (open when the cluster has none).
    fn operator(&self, metadata: &MetadataMap) -> Result<(), ApiError> {
        self.service.shared().sessions.operator(metadata_str(metadata, "authorization"))
    }

    /// A buyer's mutation: the session and the idempotency key from the metadata.
    fn buyer_mutation(
        &self,
        metadata: &MetadataMap,
    ) -> Result<(SessionId, IdempotencyKey), ApiError> {
        let session = self.session(metadata)?;
        let key = idempotency_key(metadata)?;
        Ok((session, key))
    }

    /// An operator's mutation: the credential, and an idempotency key (required on every
    /// mutation, though operator commands are idempotent by their own ids).
    fn operator_mutation(&self, metadata: &MetadataMap) -> Result<(), ApiError> {
        self.operator(metadata)?;
        idempotency_key(metadata)?;
        Ok(())
    }

    /// Proposes an operator command that answers with the show's status, and returns where
    /// the show lives.
    async fn change_status(&self, command: OperatorCommand) -> Result<ShowPlacement, ApiError> {
        let show = command.show();
        match self.service.operator(command).await? {
            Reply::ShowStatusChanged { .. } => {}
            other => return Err(unexpected(other)),
        }
        let group = self.service.group_of(show).await?.id;
        Ok(ShowPlacement { show_id: show.0, group_id: group })
    }

    /// Reads a hold from this replica (right after this node decided a command that made or
    /// changed it, so the replica has applied it).
    async fn hold_after(
        &self,
        show: ShowId,
        hold: HoldId,
        session: SessionId,
    ) -> Result<HoldReply, ApiError> {
        let view =
            self.service.read_local(show, |state| state.hold(show, hold, Some(session))).await?;
        Ok(convert::hold_reply(show, &view))
    }

    /// Reads a ticket from this replica, after a command about it was decided here.
    async fn ticket_after(
        &self,
        show: ShowId,
        ticket: TicketId,
        session: SessionId,
    ) -> Result<TicketReply, ApiError> {
        let view = self
            .service
            .read_local(show, |state| state.ticket(show, ticket, Some(session)))
            .await?;
        Ok(convert::ticket_reply(show, &view))
    }

    /// Reads a waitlist entry (and its offer) from this replica, after a command about it was
    /// decided here.
    async fn entry_after(
        &self,
        show: ShowId,
        entry: EntryId,
        session: SessionId,
    ) -> Result<WaitlistEntryReply, ApiError> {
        self.service.read_local(show, |state| entry_read(state, show, entry, session)).await
    }
}

/// The most items of one `HoldMany` call.
pub const HOLD_MANY_ITEMS_MAX: usize = 1_024;

impl BookingApi {
    /// The command of one `HoldMany` item, checked as a `Hold` call's metadata and message.
    fn hold_item(&self, item: HoldItem) -> Result<ClientCommand, ApiError> {
        let session = self.service.shared().sessions.session_of_token(&item.session_token)?;
        self.limits.check_session(&item.session_token)?;
        let key = session::idempotency_key(Some(&item.idempotency_key))?;
        let hold = item.hold.ok_or_else(|| ApiError::InvalidArgument("hold: required".into()))?;
        let show = convert::show_id(hold.show_id)?;
        let seats = convert::seat_set(&hold.seats)?;
        let grant = (hold.grant_ticket_id != 0).then_some(TicketId(hold.grant_ticket_id));
        let request = ClientRequest::Hold { seats, price_version: hold.price_version, grant };
        Ok(ClientCommand { show, session, key, request })
    }

    /// What one decided hold answers: the hold as made, or the failure.
    async fn held(
        &self,
        command: &ClientCommand,
        decided: Result<Reply, ApiError>,
    ) -> Result<HoldReply, ApiError> {
        // A hold sent on to the leader is counted where it is decided, not here.
        if !matches!(decided, Err(ApiError::NotLeader { .. })) {
            self.metrics.record_hold(HoldOutcome::of(&decided));
        }
        match decided? {
            Reply::Held(receipt) => {
                self.hold_after(command.show, receipt.hold, command.session).await
            }
            other => Err(unexpected(other)),
        }
    }
}

/// A failure as a `HoldMany` item carries it: the status a `Hold` call would have failed with.
fn item_status(error: ApiError) -> ItemStatus {
    let status = Status::from(error);
    let metadata = status
        .metadata()
        .iter()
        .filter_map(|entry| match entry {
            KeyAndValueRef::Ascii(key, value) => {
                Some((key.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            }
            KeyAndValueRef::Binary(..) => None,
        })
        .collect();
    ItemStatus { code: status.code() as i32, message: status.message().to_owned(), metadata }
}

fn metadata_str<'a>(metadata: &'a MetadataMap, key: &str) -> Option<&'a str> {
    metadata.get(key).and_then(|value| value.to_str().ok())
}

fn idempotency_key(metadata: &MetadataMap) -> Result<IdempotencyKey, ApiError> {
    session::idempotency_key(metadata_str(metadata, "idempotency-key"))
}

/// A waitlist entry and its offer, read in one step.
fn entry_read(
    state: &Group,
    show: ShowId,
    entry: EntryId,
    session: SessionId,
) -> Result<WaitlistEntryReply, Rejection> {
    let view = state.waitlist_entry(show, entry, Some(session))?;
    let offer = match view.entry.offer {
        Some(offer) => Some(state.offer(show, offer, Some(session))?),
        None => None,
    };
    Ok(convert::entry_reply(show, &view, offer.as_ref()))
}

fn unexpected(reply: Reply) -> ApiError {
    ApiError::Internal(format!("unexpected reply {reply:?}"))
}

#[tonic::async_trait]
impl BookingService for BookingApi {
    async fn create_session(
        &self,
        _request: Request<CreateSessionRequest>,
    ) -> Result<Response<SessionReply>, Status> {
        let token = self.service.shared().sessions.issue()?;
        Ok(Response::new(SessionReply { token }))
    }

    async fn list_shows(
        &self,
        _request: Request<ListShowsRequest>,
    ) -> Result<Response<ListShowsReply>, Status> {
        let mut shows = Vec::new();
        for placed in self.service.placements()? {
            let hosted = self.service.shared().group(placed.group)?;
            let summary = hosted.read_local(|state| {
                let show = state.show(placed.show)?;
                let map = state.seat_map(placed.show).ok()?;
                Some(convert::show_reply(placed.group, show, &map))
            })?;
            // A placement whose show is not created yet (a create-show under way) is skipped.
            shows.extend(summary);
        }
        shows.sort_by_key(|show| show.show_id);
        Ok(Response::new(ListShowsReply { shows }))
    }

    async fn get_show(&self, request: Request<ShowRef>) -> Result<Response<ShowReply>, Status> {
        let show = convert::show_id(request.into_inner().show_id)?;
        let hosted = self.service.group_of(show).await?;
        let group = hosted.id;
        let reply = hosted
            .read_local(|state| {
                let found = state.show(show).ok_or(Rejection::ShowNotFound)?;
                let map = state.seat_map(show)?;
                Ok::<_, Rejection>(convert::show_reply(group, found, &map))
            })?
            .map_err(ApiError::from)?;
        Ok(Response::new(reply))
    }

    async fn get_seat_map(
        &self,
        request: Request<SeatMapRequest>,
    ) -> Result<Response<SeatMapReply>, Status> {
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        if request.packed {
            let mut map = if request.linearizable {
                // Of the position the read index confirmed, never an older one.
                let read =
                    |state: &Group| self.seat_maps.packed_within(state, show, Duration::ZERO);
                self.service.read_linearizable(show, read).await?
            } else if request.cached {
                let read = |state: &Group| self.seat_maps.packed(state, show);
                self.service.read_local(show, read).await?
            } else {
                // Of this replica's current position.
                let read =
                    |state: &Group| self.seat_maps.packed_within(state, show, Duration::ZERO);
                self.service.read_local(show, read).await?
            };
            map.linearizable = request.linearizable;
            return Ok(Response::new(map));
        }
        let read = |state: &Group| state.seat_map(show);
        let map = if request.linearizable {
            self.service.read_linearizable(show, read).await?
        } else {
            self.service.read_local(show, read).await?
        };
        Ok(Response::new(convert::seat_map_reply(&map, request.linearizable)))
    }

    async fn create_show(
        &self,
        request: Request<CreateShowRequest>,
    ) -> Result<Response<ShowPlacement>, Status> {
        self.operator_mutation(request.metadata())?;
        let new_show = convert::new_show(request.get_ref())?;
        let placed =
            self.service.create_show(new_show.spec, new_show.group, new_show.setup).await?;
        Ok(Response::new(ShowPlacement { show_id: placed.show.0, group_id: placed.group }))
    }

    async fn open_sales(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowPlacement>, Status> {
        self.operator_mutation(request.metadata())?;
        let show = convert::show_id(request.into_inner().show_id)?;
        Ok(Response::new(self.change_status(OperatorCommand::OpenSales { show }).await?))
    }

    async fn close_sales(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowPlacement>, Status> {
        self.operator_mutation(request.metadata())?;
        let show = convert::show_id(request.into_inner().show_id)?;
        Ok(Response::new(self.change_status(OperatorCommand::CloseSales { show }).await?))
    }

    async fn hold(&self, request: Request<HoldRequest>) -> Result<Response<HoldReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let seats = convert::seat_set(&request.seats)?;
        let grant = (request.grant_ticket_id != 0).then_some(TicketId(request.grant_ticket_id));
        let hold = ClientRequest::Hold { seats, price_version: request.price_version, grant };
        let command = ClientCommand { show, session, key, request: hold };
        let decided = self.service.client(show, session, key, command.request.clone()).await;
        Ok(Response::new(self.held(&command, decided).await?))
    }

    async fn hold_many(
        &self,
        request: Request<HoldManyRequest>,
    ) -> Result<Response<HoldManyReply>, Status> {
        let items = request.into_inner().items;
        if items.is_empty() || items.len() > HOLD_MANY_ITEMS_MAX {
            let message = format!("items: 1..={HOLD_MANY_ITEMS_MAX} holds per call");
            return Err(ApiError::InvalidArgument(message).into());
        }
        let parsed: Vec<Result<ClientCommand, ApiError>> =
            items.into_iter().map(|item| self.hold_item(item)).collect();
        let commands = parsed.iter().filter_map(|command| command.as_ref().ok().cloned()).collect();
        let mut decided = self.service.clients(commands).await.into_iter();
        let mut results = Vec::with_capacity(parsed.len());
        for command in parsed {
            let reply = match command {
                Ok(command) => {
                    let decision = decided.next().unwrap_or_else(|| {
                        Err(ApiError::Internal("a hold got no decision".into()))
                    });
                    self.held(&command, decision).await
                }
                Err(error) => Err(error),
            };
            let result = match reply {
                Ok(reply) => ItemResult::Held(reply),
                Err(error) => ItemResult::Failed(item_status(error)),
            };
            results.push(HoldItemResult { result: Some(result) });
        }
        Ok(Response::new(HoldManyReply { results }))
    }

    async fn get_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<HoldReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let hold = HoldId(convert::nonzero("hold_id", request.hold_id)?);
        let view = self
            .service
            .read_linearizable(show, |state| state.hold(show, hold, Some(session)))
            .await?;
        Ok(Response::new(convert::hold_reply(show, &view)))
    }

    async fn cancel_hold(&self, request: Request<HoldRef>) -> Result<Response<HoldReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let hold = HoldId(convert::nonzero("hold_id", request.hold_id)?);
        match self.service.client(show, session, key, ClientRequest::CancelHold { hold }).await? {
            Reply::HoldCancelled { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        Ok(Response::new(self.hold_after(show, hold, session).await?))
    }

    async fn checkout(&self, request: Request<HoldRef>) -> Result<Response<CheckoutReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let hold = HoldId(convert::nonzero("hold_id", request.hold_id)?);
        match self.service.client(show, session, key, ClientRequest::Checkout { hold }).await? {
            Reply::CheckoutStarted { hold, payment, price, deadline_ms } => {
                Ok(Response::new(CheckoutReply {
                    show_id: show.0,
                    hold_id: hold.0,
                    payment_id: payment.0,
                    amount_minor: price.amount_minor,
                    currency: price.currency.to_string(),
                    deadline_ms,
                }))
            }
            other => Err(unexpected(other).into()),
        }
    }

    async fn get_booking(
        &self,
        request: Request<BookingRef>,
    ) -> Result<Response<BookingReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let booking = BookingId(convert::nonzero("booking_id", request.booking_id)?);
        let view = self
            .service
            .read_linearizable(show, |state| state.booking(show, booking, Some(session)))
            .await?;
        Ok(Response::new(convert::booking_reply(show, &view)))
    }

    async fn cancel_booking(
        &self,
        request: Request<BookingRef>,
    ) -> Result<Response<BookingReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let booking = BookingId(convert::nonzero("booking_id", request.booking_id)?);
        let cancel = ClientRequest::CancelBooking { booking };
        match self.service.client(show, session, key, cancel).await? {
            Reply::BookingCancelled { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        let view = self
            .service
            .read_local(show, |state| state.booking(show, booking, Some(session)))
            .await?;
        Ok(Response::new(convert::booking_reply(show, &view)))
    }

    async fn join_queue(&self, request: Request<ShowRef>) -> Result<Response<TicketReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let show = convert::show_id(request.into_inner().show_id)?;
        let ticket = match self.service.client(show, session, key, ClientRequest::JoinQueue).await?
        {
            Reply::Queued { ticket, .. } => ticket,
            other => return Err(unexpected(other).into()),
        };
        Ok(Response::new(self.ticket_after(show, ticket, session).await?))
    }

    async fn get_ticket(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<TicketReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let ticket = TicketId(convert::nonzero("ticket_id", request.ticket_id)?);
        let view = self
            .service
            .read_linearizable(show, |state| state.ticket(show, ticket, Some(session)))
            .await?;
        Ok(Response::new(convert::ticket_reply(show, &view)))
    }

    async fn leave_queue(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<TicketReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let ticket = TicketId(convert::nonzero("ticket_id", request.ticket_id)?);
        let leave = ClientRequest::LeaveQueue { ticket };
        match self.service.client(show, session, key, leave).await? {
            Reply::QueueLeft { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        Ok(Response::new(self.ticket_after(show, ticket, session).await?))
    }

    async fn join_waitlist(
        &self,
        request: Request<JoinWaitlistRequest>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let quantity = convert::quantity(request.quantity)?;
        // Guest sessions wait in band 0; priority bands come with other credentials.
        let join = ClientRequest::JoinWaitlist { quantity, band: 0 };
        let entry = match self.service.client(show, session, key, join).await? {
            Reply::WaitlistJoined { entry, .. } => entry,
            other => return Err(unexpected(other).into()),
        };
        Ok(Response::new(self.entry_after(show, entry, session).await?))
    }

    async fn get_waitlist_entry(
        &self,
        request: Request<EntryRef>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let entry = EntryId(convert::nonzero("entry_id", request.entry_id)?);
        let reply = self
            .service
            .read_linearizable(show, |state| entry_read(state, show, entry, session))
            .await?;
        Ok(Response::new(reply))
    }

    async fn leave_waitlist(
        &self,
        request: Request<EntryRef>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let entry = EntryId(convert::nonzero("entry_id", request.entry_id)?);
        let leave = ClientRequest::LeaveWaitlist { entry };
        match self.service.client(show, session, key, leave).await? {
            Reply::WaitlistLeft { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        Ok(Response::new(self.entry_after(show, entry, session).await?))
    }

    async fn get_offer(&self, request: Request<OfferRef>) -> Result<Response<OfferReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let offer = OfferId(convert::nonzero("offer_id", request.offer_id)?);
        let view = self
            .service
            .read_linearizable(show, |state| state.offer(show, offer, Some(session)))
            .await?;
        Ok(Response::new(convert::offer_reply(show, &view)))
    }

    async fn accept_offer(
        &self,
        request: Request<OfferRef>,
    ) -> Result<Response<HoldReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let offer = OfferId(convert::nonzero("offer_id", request.offer_id)?);
        let accept = ClientRequest::AcceptOffer { offer };
        let receipt = match self.service.client(show, session, key, accept).await? {
            Reply::OfferAccepted { hold, .. } => hold,
            other => return Err(unexpected(other).into()),
        };
        Ok(Response::new(self.hold_after(show, receipt.hold, session).await?))
    }

    async fn decline_offer(
        &self,
        request: Request<OfferRef>,
    ) -> Result<Response<OfferReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let offer = OfferId(convert::nonzero("offer_id", request.offer_id)?);
        let decline = ClientRequest::DeclineOffer { offer };
        match self.service.client(show, session, key, decline).await? {
            Reply::OfferDeclined { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        let view =
            self.service.read_local(show, |state| state.offer(show, offer, Some(session))).await?;
        Ok(Response::new(convert::offer_reply(show, &view)))
    }

    async fn capacity_released(
        &self,
        request: Request<CapacityReleasedRequest>,
    ) -> Result<Response<CapacityReleasedReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let event = convert::capacity_event_id(&request.event_id)?;
        let seats = convert::released_seats(&request.seats)?;
        let command = OperatorCommand::CapacityReleased { show, event, seats };
        match self.service.operator(command).await? {
            Reply::CapacityReleased { seats_released, duplicate, .. } => {
                Ok(Response::new(CapacityReleasedReply {
                    show_id: show.0,
                    seats_released,
                    duplicate,
                }))
            }
            other => Err(unexpected(other).into()),
        }
    }

    async fn get_audit(
        &self,
        request: Request<GetAuditRequest>,
    ) -> Result<Response<AuditReply>, Status> {
        self.operator(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let kind = convert::entity_kind(&request.kind)?;
        let id = convert::nonzero("id", request.id)?;
        let reply = self
            .service
            .read_linearizable(show, |state| {
                state.show(show).ok_or(Rejection::ShowNotFound)?;
                let records = state.audit_trail(show, kind, id);
                let skips = match kind {
                    EntityKind::WaitlistEntry if !records.is_empty() => {
                        state.waitlist_skips(show, EntryId(id), None)?
                    }
                    _ => Vec::new(),
                };
                let as_of = state.as_of();
                Ok(AuditReply {
                    show_id: show.0,
                    kind: convert::entity_kind_name(kind).to_owned(),
                    id,
                    records: records.iter().map(convert::audit_record).collect(),
                    skips: skips.iter().map(convert::waitlist_skip).collect(),
                    as_of_log_index: as_of.log_index,
                    as_of_log_time_ms: as_of.log_time_ms,
                })
            })
            .await?;
        if reply.records.is_empty() {
            return Err(ApiError::NotFound(format!(
                "no audit records for {} {id} of show {show}",
                reply.kind
            ))
            .into());
        }
        Ok(Response::new(reply))
    }

    type WatchHoldStream = WatchStream<HoldReply>;

    async fn watch_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<Self::WatchHoldStream>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let hold = HoldId(convert::nonzero("hold_id", request.hold_id)?);
        let views = watch::watch_hold(&self.service, show, hold, Some(session)).await?;
        let replies = views.map(move |view| {
            view.map(|view| convert::hold_reply(show, &view)).map_err(Status::from)
        });
        Ok(Response::new(Box::pin(replies)))
    }

    type WatchTicketStream = WatchStream<TicketReply>;

    async fn watch_ticket(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<Self::WatchTicketStream>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = convert::show_id(request.show_id)?;
        let ticket = TicketId(convert::nonzero("ticket_id", request.ticket_id)?);
        let views = watch::watch_ticket(&self.service, show, ticket, Some(session)).await?;
        let replies = views.map(move |view| {
            view.map(|view| convert::ticket_reply(show, &view)).map_err(Status::from)
        });
        Ok(Response::new(Box::pin(replies)))
    }
}
