//! The gRPC `BookingService`: a thin skin over `crate::operations`.
//!
//! Owns the gRPC request path of every booking call: who calls (session or operator
//! credential, from metadata), under which idempotency key, the message's fields checked into
//! domain values (`crate::input`, so bad input changes nothing), then one operation and the
//! conversion of its answer (`convert.rs`); the streaming watches convert the views of
//! `crate::watch`. Routing is the service's, what an operation means is `operations.rs`'s, rule
//! decisions are the state machine's, passed through the one error table in `crate::error`.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use proto::booking::booking_service_server::{BookingService, BookingServiceServer};
use proto::booking::hold_item_result::Result as ItemResult;
use proto::booking::metadata as keys;
use proto::booking::{
    AdmissionReply, AuditReply, BandClaimReply, BookingRef, BookingReply, CapacityReleasedReply,
    CapacityReleasedRequest, CatalogChangeReply, CatalogChangeRequest, CheckoutReply,
    ConfigureAdmissionRequest, ConfigureWaitlistRequest, CreateSessionRequest, CreateShowRequest,
    DrawLotteryRequest, EntryRef, EraseSessionRequest, GetAuditRequest, GetHoldRequest, HoldItem,
    HoldItemResult, HoldManyReply, HoldManyRequest, HoldRef, HoldReply, HoldRequest,
    IssueBandClaimRequest, ItemStatus, JoinWaitlistRequest, ListShowsReply, ListShowsRequest,
    LotteryReply, MoveShowRequest, OfferRef, OfferReply, PaymentRef, PaymentReply, PricesReply,
    SalesReply, SearchReply, SearchRequest, SeatMapReply, SeatMapRequest, SessionErasedReply,
    SessionReply, SetPricesRequest, SetWaitlistPolicyRequest, ShowArchivedReply,
    ShowCancelledReply, ShowMovedReply, ShowPlacement, ShowRef, ShowReply, TicketRef, TicketReply,
    WaitlistEntryReply, WaitlistPolicyReply, WaitlistReply,
};
use statemachine::{
    BookingId, ClientCommand, EntryId, Group, HoldId, IdempotencyKey, OfferId, OperatorCommand,
    PaymentId, SessionId, ShowId, TicketId,
};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::api::convert;
use crate::error::ApiError;
use crate::operations::{self, Freshness};
use crate::seat_maps::{SeatMaps, Source};
use crate::service::Service;
use crate::{input, names, sessions, watch};

/// A server stream of watch replies.
pub type WatchStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The booking API of one node.
pub struct BookingApi {
    service: Service,
    /// Packed seat maps, encoded once per rebuild (shared with every read until the next).
    seat_maps: SeatMaps<SeatMapReply>,
}

impl BookingApi {
    /// The API over this node's booking operations.
    pub fn new(service: Service) -> BookingApi {
        let metrics = service.shared().metrics.clone();
        BookingApi { service, seat_maps: SeatMaps::new(packed_map, "grpc", metrics) }
    }

    /// The tonic service.
    pub fn into_server(self) -> BookingServiceServer<BookingApi> {
        BookingServiceServer::new(self)
    }

    /// The caller's session, from its bearer token.
    fn session(&self, metadata: &MetadataMap) -> Result<SessionId, ApiError> {
        self.service.shared().sessions.session(metadata_str(metadata, keys::AUTHORIZATION))
    }

    /// Checks the operator credential.
    fn operator(&self, metadata: &MetadataMap) -> Result<(), ApiError> {
        self.service.shared().sessions.operator(metadata_str(metadata, keys::AUTHORIZATION))
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

    /// `reply` with its seats' labels, for a show in the catalog.
    fn labelled(&self, mut reply: HoldReply) -> Result<HoldReply, ApiError> {
        let labels = self.service.labels_of(ShowId(reply.show_id), reply.seats.iter().copied())?;
        reply.seat_labels = labels.unwrap_or_default();
        Ok(reply)
    }

    /// An operator's mutation: the credential, and an idempotency key (required on every
    /// mutation, though operator commands are idempotent by their own ids).
    fn operator_mutation(&self, metadata: &MetadataMap) -> Result<(), ApiError> {
        self.operator(metadata)?;
        idempotency_key(metadata)?;
        Ok(())
    }

    /// The command of one `HoldMany` item, checked as a `Hold` call's metadata and message;
    /// each item pays its session's token bucket (the call's own metadata carries no session,
    /// so the layer in front charges only the caller's address).
    fn hold_item(&self, item: HoldItem) -> Result<ClientCommand, ApiError> {
        let shared = self.service.shared();
        let session = shared.sessions.session_of_token(&item.session_token)?;
        shared.limits.check_hold_item(&item.session_token)?;
        let key = sessions::idempotency_key(Some(&item.idempotency_key))?;
        let hold = item.hold.ok_or_else(|| ApiError::InvalidArgument("hold: required".into()))?;
        let (show, request) = convert::hold_request(&hold)?;
        Ok(ClientCommand { show, session, key, request })
    }
}

/// The most items of one `HoldMany` call.
pub const HOLD_MANY_ITEMS_MAX: usize = 1_024;

/// A failure as a `HoldMany` item carries it: the code, message and metadata of the status a
/// `Hold` call would have failed with, written directly (no `Status` is built and copied).
fn item_status(error: ApiError) -> ItemStatus {
    let metadata =
        error.grpc_metadata().into_iter().map(|(key, value)| (key.to_owned(), value)).collect();
    ItemStatus { code: error.grpc_code() as i32, message: error.to_string(), metadata }
}

fn metadata_str<'a>(metadata: &'a MetadataMap, key: &str) -> Option<&'a str> {
    metadata.get(key).and_then(|value| value.to_str().ok())
}

fn idempotency_key(metadata: &MetadataMap) -> Result<IdempotencyKey, ApiError> {
    sessions::idempotency_key(metadata_str(metadata, keys::IDEMPOTENCY_KEY))
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
        let shows = operations::list_shows(&self.service)?;
        Ok(Response::new(ListShowsReply { shows: shows.iter().map(convert::show_reply).collect() }))
    }

    async fn get_show(&self, request: Request<ShowRef>) -> Result<Response<ShowReply>, Status> {
        let show = input::show_id("show_id", request.into_inner().show_id)?;
        let summary = operations::get_show(&self.service, show).await?;
        Ok(Response::new(convert::show_reply(&summary)))
    }

    async fn get_seat_map(
        &self,
        request: Request<SeatMapRequest>,
    ) -> Result<Response<SeatMapReply>, Status> {
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        if request.packed {
            let map = if request.linearizable {
                // Of the position the read index confirmed, never an older one.
                let read = |state: &Group| self.seat_maps.of_position(state, show);
                self.service.read_linearizable(show, read).await?
            } else if request.cached {
                // Rebuilt once per show at a time, at most every 50 ms, labelled fresh when
                // this replica confirmed it has every acknowledged write; only what changed
                // since the caller's map when this node can tell.
                let since = (request.since_log_index != 0)
                    .then_some((request.since_group_id, request.since_log_index));
                let (built, encoded) = self
                    .seat_maps
                    .shared_as(&self.service, show, false, since, request.compact)
                    .await?;
                let mut map = SeatMapReply::clone(&encoded);
                map.fresh = built.fresh;
                return Ok(Response::new(map));
            } else {
                // Of this replica's current position.
                let read = |state: &Group| self.seat_maps.of_position(state, show);
                self.service.read_local(show, read).await?
            };
            let mut map = SeatMapReply::clone(&map);
            map.linearizable = request.linearizable;
            return Ok(Response::new(map));
        }
        let freshness =
            if request.linearizable { Freshness::Linearizable } else { Freshness::Replica };
        let map = operations::seat_map(&self.service, show, freshness).await?;
        Ok(Response::new(convert::seat_map_reply(&map, request.linearizable)))
    }

    async fn create_show(
        &self,
        request: Request<CreateShowRequest>,
    ) -> Result<Response<ShowPlacement>, Status> {
        self.operator_mutation(request.metadata())?;
        let new_show = convert::new_show(request.get_ref())?;
        let (spec, group, setup) = (new_show.spec, new_show.group, new_show.setup);
        let placed = match new_show.listing {
            Some(listing) => self.service.create_listed_show(spec, listing, group, setup).await?,
            None => self.service.create_show(spec, group, setup).await?,
        };
        Ok(Response::new(ShowPlacement { show_id: placed.show.0, group_id: placed.group }))
    }

    async fn open_sales(&self, request: Request<ShowRef>) -> Result<Response<SalesReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let show = input::show_id("show_id", request.into_inner().show_id)?;
        let changed =
            operations::change_status(&self.service, OperatorCommand::OpenSales { show }).await?;
        Ok(Response::new(convert::sales_reply(&changed)))
    }

    async fn close_sales(&self, request: Request<ShowRef>) -> Result<Response<SalesReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let show = input::show_id("show_id", request.into_inner().show_id)?;
        let changed =
            operations::change_status(&self.service, OperatorCommand::CloseSales { show }).await?;
        Ok(Response::new(convert::sales_reply(&changed)))
    }

    async fn hold(&self, request: Request<HoldRequest>) -> Result<Response<HoldReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let mut request = request.into_inner();
        if !request.seat_labels.is_empty() {
            if !request.seats.is_empty() {
                let message = "seats: name seats by number or by label, not both";
                return Err(ApiError::InvalidArgument(message.into()).into());
            }
            let show = input::show_id("show_id", request.show_id)?;
            request.seats = self.service.seats_of_labels(show, &request.seat_labels)?;
        }
        let (show, request) = convert::hold_request(&request)?;
        let command = ClientCommand { show, session, key, request };
        let view = operations::hold(&self.service, command).await?;
        Ok(Response::new(self.labelled(convert::hold_reply(show, &view))?))
    }

    async fn hold_many(
        &self,
        request: Request<HoldManyRequest>,
    ) -> Result<Response<HoldManyReply>, Status> {
        let (_, extensions, message) = request.into_parts();
        let items = message.items;
        if items.is_empty() || items.len() > HOLD_MANY_ITEMS_MAX {
            let message = format!("items: 1..={HOLD_MANY_ITEMS_MAX} holds per call");
            return Err(ApiError::InvalidArgument(message).into());
        }
        // The call paid its address's bucket once, as every call does; its other items pay
        // here, so that batching buys no more than the address's rate.
        let more = u32::try_from(items.len() - 1).unwrap_or(u32::MAX);
        self.service.shared().limits.check_address_n(&extensions, more)?;
        let parsed: Vec<Result<ClientCommand, ApiError>> =
            items.into_iter().map(|item| self.hold_item(item)).collect();
        let commands = parsed.iter().filter_map(|command| command.as_ref().ok().cloned()).collect();
        let mut decided = operations::hold_many(&self.service, commands).await.into_iter();
        let results = parsed
            .into_iter()
            .map(|command| {
                let reply = command.and_then(|command| {
                    let view = decided.next().unwrap_or_else(|| {
                        Err(ApiError::Internal("a hold got no decision".into()))
                    })?;
                    Ok(convert::hold_reply(command.show, &view))
                });
                let result = match reply {
                    Ok(reply) => ItemResult::Held(reply),
                    Err(error) => ItemResult::Failed(item_status(error)),
                };
                HoldItemResult { result: Some(result) }
            })
            .collect();
        Ok(Response::new(HoldManyReply { results }))
    }

    async fn get_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<HoldReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let hold = HoldId(input::nonzero("hold_id", request.hold_id)?);
        let view = operations::get_hold(&self.service, show, hold, session).await?;
        Ok(Response::new(self.labelled(convert::hold_reply(show, &view))?))
    }

    async fn cancel_hold(&self, request: Request<HoldRef>) -> Result<Response<HoldReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let hold = HoldId(input::nonzero("hold_id", request.hold_id)?);
        let view = operations::cancel_hold(&self.service, show, session, key, hold).await?;
        Ok(Response::new(convert::hold_reply(show, &view)))
    }

    async fn checkout(&self, request: Request<HoldRef>) -> Result<Response<CheckoutReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let hold = HoldId(input::nonzero("hold_id", request.hold_id)?);
        let started = operations::checkout(&self.service, show, session, key, hold).await?;
        Ok(Response::new(CheckoutReply {
            show_id: show.0,
            hold_id: started.hold.0,
            payment_id: started.payment.0,
            amount_minor: started.price.amount_minor,
            currency: started.price.currency.to_string(),
            deadline_ms: started.deadline_ms,
        }))
    }

    async fn get_booking(
        &self,
        request: Request<BookingRef>,
    ) -> Result<Response<BookingReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let booking = BookingId(input::nonzero("booking_id", request.booking_id)?);
        let view = operations::get_booking(&self.service, show, booking, session).await?;
        let mut reply = convert::booking_reply(show, &view);
        let labels = self.service.labels_of(ShowId(reply.show_id), reply.seats.iter().copied())?;
        reply.seat_labels = labels.unwrap_or_default();
        Ok(Response::new(reply))
    }

    async fn cancel_booking(
        &self,
        request: Request<BookingRef>,
    ) -> Result<Response<BookingReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let booking = BookingId(input::nonzero("booking_id", request.booking_id)?);
        let view = operations::cancel_booking(&self.service, show, session, key, booking).await?;
        Ok(Response::new(convert::booking_reply(show, &view)))
    }

    async fn join_queue(&self, request: Request<ShowRef>) -> Result<Response<TicketReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let show = input::show_id("show_id", request.into_inner().show_id)?;
        let view = operations::join_queue(&self.service, show, session, key).await?;
        Ok(Response::new(convert::ticket_reply(show, &view)))
    }

    async fn get_ticket(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<TicketReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let ticket = TicketId(input::nonzero("ticket_id", request.ticket_id)?);
        let view = operations::get_ticket(&self.service, show, ticket, session).await?;
        Ok(Response::new(convert::ticket_reply(show, &view)))
    }

    async fn leave_queue(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<TicketReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let ticket = TicketId(input::nonzero("ticket_id", request.ticket_id)?);
        let view = operations::leave_queue(&self.service, show, session, key, ticket).await?;
        Ok(Response::new(convert::ticket_reply(show, &view)))
    }

    async fn join_waitlist(
        &self,
        request: Request<JoinWaitlistRequest>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let quantity = input::quantity("quantity", request.quantity)?;
        let band =
            operations::waitlist_band(&self.service, show, session, request.claim.as_deref())?;
        let entry =
            operations::join_waitlist(&self.service, show, session, key, quantity, band).await?;
        Ok(Response::new(convert::entry_reply(show, &entry)))
    }

    async fn get_waitlist_entry(
        &self,
        request: Request<EntryRef>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let entry = EntryId(input::nonzero("entry_id", request.entry_id)?);
        let found = operations::get_entry(&self.service, show, entry, session).await?;
        Ok(Response::new(convert::entry_reply(show, &found)))
    }

    async fn leave_waitlist(
        &self,
        request: Request<EntryRef>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let entry = EntryId(input::nonzero("entry_id", request.entry_id)?);
        let left = operations::leave_waitlist(&self.service, show, session, key, entry).await?;
        Ok(Response::new(convert::entry_reply(show, &left)))
    }

    async fn get_offer(&self, request: Request<OfferRef>) -> Result<Response<OfferReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let offer = OfferId(input::nonzero("offer_id", request.offer_id)?);
        let view = operations::get_offer(&self.service, show, offer, session).await?;
        Ok(Response::new(convert::offer_reply(show, &view)))
    }

    async fn accept_offer(
        &self,
        request: Request<OfferRef>,
    ) -> Result<Response<HoldReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let offer = OfferId(input::nonzero("offer_id", request.offer_id)?);
        let view = operations::accept_offer(&self.service, show, session, key, offer).await?;
        Ok(Response::new(convert::hold_reply(show, &view)))
    }

    async fn decline_offer(
        &self,
        request: Request<OfferRef>,
    ) -> Result<Response<OfferReply>, Status> {
        let (session, key) = self.buyer_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let offer = OfferId(input::nonzero("offer_id", request.offer_id)?);
        let view = operations::decline_offer(&self.service, show, session, key, offer).await?;
        Ok(Response::new(convert::offer_reply(show, &view)))
    }

    async fn capacity_released(
        &self,
        request: Request<CapacityReleasedRequest>,
    ) -> Result<Response<CapacityReleasedReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let event = input::capacity_event_id("event_id", &request.event_id)?;
        let seats = input::released_seats("seats", &request.seats)?;
        let released = operations::capacity_released(&self.service, show, event, seats).await?;
        Ok(Response::new(CapacityReleasedReply {
            show_id: show.0,
            seats_released: released.seats_released,
            duplicate: released.duplicate,
        }))
    }

    async fn get_audit(
        &self,
        request: Request<GetAuditRequest>,
    ) -> Result<Response<AuditReply>, Status> {
        self.operator(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let kind = names::entity_kind("kind", &request.kind)?;
        let id = input::nonzero("id", request.id)?;
        let trail = operations::audit_trail(&self.service, show, kind, id).await?;
        Ok(Response::new(convert::audit_reply(&trail)))
    }

    type WatchHoldStream = WatchStream<HoldReply>;

    async fn watch_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<Self::WatchHoldStream>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let hold = HoldId(input::nonzero("hold_id", request.hold_id)?);
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
        let show = input::show_id("show_id", request.show_id)?;
        let ticket = TicketId(input::nonzero("ticket_id", request.ticket_id)?);
        let views = watch::watch_ticket(&self.service, show, ticket, Some(session)).await?;
        let replies = views.map(move |view| {
            view.map(|view| convert::ticket_reply(show, &view)).map_err(Status::from)
        });
        Ok(Response::new(Box::pin(replies)))
    }

    async fn cancel_show(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowCancelledReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let show = input::show_id("show_id", request.into_inner().show_id)?;
        let cancelled = operations::cancel_show(&self.service, show).await?;
        Ok(Response::new(ShowCancelledReply {
            show_id: cancelled.show.0,
            group_id: cancelled.group,
            holds_released: cancelled.holds_released,
            bookings_refunded: cancelled.bookings_refunded,
            waiters_told: cancelled.waiters_told,
            duplicate: cancelled.duplicate,
        }))
    }

    async fn archive_show(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowArchivedReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let show = input::show_id("show_id", request.into_inner().show_id)?;
        let archived = operations::archive_show(&self.service, show).await?;
        Ok(Response::new(ShowArchivedReply {
            show_id: archived.show.0,
            group_id: archived.group,
            digest: crate::names::hex(&archived.digest),
            bytes: archived.bytes,
            duplicate: archived.duplicate,
        }))
    }

    async fn move_show(
        &self,
        request: Request<MoveShowRequest>,
    ) -> Result<Response<ShowMovedReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let moved = operations::move_show(&self.service, show, request.to_group).await?;
        Ok(Response::new(ShowMovedReply {
            show_id: moved.show.0,
            from_group: moved.from,
            to_group: moved.to,
            state_bytes: moved.bytes,
            digest: crate::names::hex(&moved.digest),
            unserved_ms: moved.unserved_ms,
            duplicate: moved.duplicate,
        }))
    }

    async fn erase_session(
        &self,
        request: Request<EraseSessionRequest>,
    ) -> Result<Response<SessionErasedReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let session = input::session_id("session_id", &request.session_id)?;
        let erased = operations::erase_session(&self.service, show, session).await?;
        Ok(Response::new(SessionErasedReply {
            show_id: erased.show.0,
            group_id: erased.group,
            records: erased.records,
            idempotency_records: erased.idempotency_records,
        }))
    }

    async fn set_prices(
        &self,
        request: Request<SetPricesRequest>,
    ) -> Result<Response<PricesReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let version = input::price_version("version", request.version)?;
        let prices_minor = input::prices("prices_minor", &request.prices_minor)?;
        let set = operations::set_prices(&self.service, show, version, prices_minor).await?;
        Ok(Response::new(PricesReply {
            show_id: set.show.0,
            group_id: set.group,
            price_version: set.version,
            prices_minor: set.prices_minor,
            duplicate: set.duplicate,
        }))
    }

    async fn configure_admission(
        &self,
        request: Request<ConfigureAdmissionRequest>,
    ) -> Result<Response<AdmissionReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let window = input::admission_window("window", request.window)?;
        let configured =
            operations::configure_admission(&self.service, show, request.enabled, window).await?;
        Ok(Response::new(AdmissionReply {
            show_id: configured.show.0,
            group_id: configured.group,
            enabled: configured.enabled,
            window: configured.window,
        }))
    }

    async fn configure_waitlist(
        &self,
        request: Request<ConfigureWaitlistRequest>,
    ) -> Result<Response<WaitlistReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let configured =
            operations::configure_waitlist(&self.service, show, request.enabled).await?;
        Ok(Response::new(WaitlistReply {
            show_id: configured.show.0,
            group_id: configured.group,
            enabled: configured.enabled,
            policy_version: configured.policy_version,
        }))
    }

    async fn set_waitlist_policy(
        &self,
        request: Request<SetWaitlistPolicyRequest>,
    ) -> Result<Response<WaitlistPolicyReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let rules = convert::rules_of(request.rules)?;
        let view = operations::set_waitlist_policy(&self.service, show, rules).await?;
        Ok(Response::new(convert::waitlist_policy_reply(&view)))
    }

    async fn get_waitlist_policy(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<WaitlistPolicyReply>, Status> {
        self.operator(request.metadata())?;
        let show = input::show_id("show_id", request.into_inner().show_id)?;
        let view = operations::waitlist_policy(&self.service, show).await?;
        Ok(Response::new(convert::waitlist_policy_reply(&view)))
    }

    async fn draw_lottery(
        &self,
        request: Request<DrawLotteryRequest>,
    ) -> Result<Response<LotteryReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let drawn = operations::draw_lottery(&self.service, show, request.seed).await?;
        Ok(Response::new(LotteryReply {
            show_id: show.0,
            seed: drawn.seed,
            entries: drawn.entries,
            duplicate: drawn.duplicate,
        }))
    }

    async fn issue_band_claim(
        &self,
        request: Request<IssueBandClaimRequest>,
    ) -> Result<Response<BandClaimReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let claim = operations::issue_band_claim(
            &self.service,
            show,
            &request.session_token,
            request.band,
            request.valid_for_s,
        )
        .await?;
        Ok(Response::new(BandClaimReply {
            claim: claim.claim,
            band: u32::from(claim.band),
            expires_at_s: claim.expires_at_s,
        }))
    }

    async fn get_payment(
        &self,
        request: Request<PaymentRef>,
    ) -> Result<Response<PaymentReply>, Status> {
        let authorization = metadata_str(request.metadata(), keys::AUTHORIZATION);
        let viewer = self.service.shared().sessions.viewer(authorization)?;
        let request = request.into_inner();
        let show = input::show_id("show_id", request.show_id)?;
        let payment = PaymentId(input::nonzero("payment_id", request.payment_id)?);
        let view = operations::get_payment(&self.service, show, payment, viewer).await?;
        Ok(Response::new(convert::payment_reply(show, &view)))
    }

    async fn change_catalog(
        &self,
        request: Request<CatalogChangeRequest>,
    ) -> Result<Response<CatalogChangeReply>, Status> {
        self.operator_mutation(request.metadata())?;
        let command = convert::catalog_command(request.get_ref())?;
        let written = operations::change_catalog(&self.service, command).await?;
        Ok(Response::new(convert::catalog_reply(&written)))
    }

    async fn search(
        &self,
        request: Request<SearchRequest>,
    ) -> Result<Response<SearchReply>, Status> {
        let query = convert::search_query(request.get_ref())?;
        let results = operations::search(&self.service, &query)?;
        Ok(Response::new(convert::search_reply(results)))
    }
}

/// A show's packed map as the gRPC skin sends it (before `linearizable` and `fresh` are set).
fn packed_map(source: &Source<'_>) -> SeatMapReply {
    convert::packed_seat_map_reply(source)
}

#[cfg(test)]
mod tests {
    use statemachine::{Rejection, SeatSet};
    use tonic::metadata::KeyAndValueRef;

    use super::*;
    use crate::error::LeaderHint;

    /// An item's failure says what a `Hold` call's status would: code, message and every
    /// metadata entry, though it is written without building one.
    #[test]
    fn an_item_fails_with_the_status_a_hold_call_would() {
        let leader = |address: Option<&str>| ApiError::NotLeader {
            group: 3,
            leader: Some(LeaderHint { id: 2, address: address.map(str::to_owned) }),
        };
        let errors = [
            ApiError::from(Rejection::SeatUnavailable { seats: SeatSet::one(7) }),
            ApiError::InvalidArgument("hold: required".into()),
            ApiError::NotLeader { group: 1, leader: None },
            leader(Some("127.0.0.1:7102")),
            leader(Some("bad\naddress")),
            leader(None),
        ];
        for error in errors {
            let text = error.to_string();
            let item = item_status(error.clone());
            let status = Status::from(error);
            assert_eq!(item.code, status.code() as i32, "{text}");
            assert_eq!(item.message, status.message(), "{text}");
            let expected: std::collections::HashMap<String, String> = status
                .metadata()
                .iter()
                .filter_map(|entry| match entry {
                    KeyAndValueRef::Ascii(key, value) => {
                        Some((key.as_str().to_owned(), value.to_str().ok()?.to_owned()))
                    }
                    KeyAndValueRef::Binary(..) => None,
                })
                .collect();
            assert_eq!(item.metadata, expected, "{text}");
            assert!(item.metadata.contains_key(keys::CODE), "{text}");
        }
    }
}
