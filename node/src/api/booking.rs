//! The gRPC `BookingService`: proto ↔ domain conversion over [`crate::service::Service`].
//!
//! Owns checking requests before anything is proposed (bad input changes nothing) and deriving
//! the session and idempotency key from metadata. Routing (placement, the group's leader) is the
//! service's; rule decisions are the state machine's, passed through the one error table in
//! `error.rs`.

use proto::booking::booking_service_server::{BookingService, BookingServiceServer};
use proto::booking::{
    CreateSessionRequest, CreateShowRequest, GetHoldRequest, HoldReply, HoldRequest, SessionReply,
    ShowPlacement, ShowRef,
};
use statemachine::limits::SEATS_PER_HOLD_MAX;
use statemachine::{
    ClientRequest, Currency, HoldId, HoldState, HoldView, OperatorCommand, Reply, SeatRange,
    SeatSet, SessionId, ShowId, ShowPolicy, ShowSpec,
};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::api::session;
use crate::error::ApiError;
use crate::service::Service;

/// The booking API of one node.
pub struct BookingApi {
    service: Service,
}

impl BookingApi {
    /// The API over this node's booking operations.
    pub fn new(service: Service) -> BookingApi {
        BookingApi { service }
    }

    /// The tonic service.
    pub fn into_server(self) -> BookingServiceServer<BookingApi> {
        BookingServiceServer::new(self)
    }

    fn session(&self, metadata: &MetadataMap) -> Result<SessionId, ApiError> {
        self.service.shared().sessions.session(metadata_str(metadata, "authorization"))
    }

    fn operator(&self, metadata: &MetadataMap) -> Result<(), ApiError> {
        self.service.shared().sessions.operator(metadata_str(metadata, "authorization"))
    }
}

fn metadata_str<'a>(metadata: &'a MetadataMap, key: &str) -> Option<&'a str> {
    metadata.get(key).and_then(|value| value.to_str().ok())
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

    async fn create_show(
        &self,
        request: Request<CreateShowRequest>,
    ) -> Result<Response<ShowPlacement>, Status> {
        self.operator(request.metadata())?;
        let request = request.into_inner();
        let spec = show_spec(&request)?;
        let placed = self.service.create_show(spec, request.group_id, Vec::new()).await?;
        Ok(Response::new(ShowPlacement { show_id: placed.show.0, group_id: placed.group }))
    }

    async fn open_sales(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowPlacement>, Status> {
        self.operator(request.metadata())?;
        let show = show_id(request.into_inner().show_id)?;
        match self.service.operator(OperatorCommand::OpenSales { show }).await? {
            Reply::ShowStatusChanged { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        let group = self.service.group_of(show).await?.id;
        Ok(Response::new(ShowPlacement { show_id: show.0, group_id: group }))
    }

    async fn hold(&self, request: Request<HoldRequest>) -> Result<Response<HoldReply>, Status> {
        let session = self.session(request.metadata())?;
        let key = session::idempotency_key(metadata_str(request.metadata(), "idempotency-key"))?;
        let request = request.into_inner();
        let show = show_id(request.show_id)?;
        let seats = seat_set(&request.seats)?;
        let hold = ClientRequest::Hold { seats, price_version: request.price_version, grant: None };
        let receipt = match self.service.client(show, session, key, hold).await? {
            Reply::Held(receipt) => receipt,
            other => return Err(unexpected(other).into()),
        };
        let view = self
            .service
            .read_local(show, |state| state.hold(show, receipt.hold, Some(session)))
            .await?;
        Ok(Response::new(hold_reply(show, &view)))
    }

    async fn get_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<HoldReply>, Status> {
        let session = self.session(request.metadata())?;
        let request = request.into_inner();
        let show = show_id(request.show_id)?;
        let hold = HoldId(request.hold_id);
        let view = self
            .service
            .read_linearizable(show, |state| state.hold(show, hold, Some(session)))
            .await?;
        Ok(Response::new(hold_reply(show, &view)))
    }
}

fn unexpected(reply: Reply) -> ApiError {
    ApiError::Internal(format!("unexpected reply {reply:?}"))
}

fn show_id(id: u64) -> Result<ShowId, ApiError> {
    if id == 0 {
        return Err(ApiError::InvalidArgument("show_id: must be non-zero".into()));
    }
    Ok(ShowId(id))
}

fn seat_set(seats: &[u32]) -> Result<SeatSet, ApiError> {
    if seats.is_empty() || seats.len() > SEATS_PER_HOLD_MAX {
        return Err(ApiError::InvalidArgument(format!(
            "seats: 1..={SEATS_PER_HOLD_MAX} seats per hold, got {}",
            seats.len()
        )));
    }
    SeatSet::try_from(seats)
        .map_err(|_capacity| ApiError::InvalidArgument("seats: too many".into()))
}

fn show_spec(request: &CreateShowRequest) -> Result<ShowSpec, ApiError> {
    let show = show_id(request.show_id)?;
    let currency: [u8; 3] = request
        .currency
        .as_bytes()
        .try_into()
        .map_err(|_| ApiError::InvalidArgument("currency: three upper-case letters".into()))?;
    let layout = request
        .layout
        .iter()
        .map(|range| {
            let class = u8::try_from(range.class)
                .map_err(|_| ApiError::InvalidArgument("layout: class out of range".into()))?;
            Ok(SeatRange { count: range.count, class })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let mut policy = ShowPolicy::default();
    if request.hold_ttl_ms != 0 {
        policy.hold_ttl_ms = request.hold_ttl_ms;
    }
    // The state machine checks the rest (currency letters, prices, layout bounds) and rejects
    // with `invalid_argument`, changing nothing.
    Ok(ShowSpec {
        show,
        currency: Currency(currency),
        prices_minor: request.prices_minor.clone(),
        layout,
        policy,
    })
}

fn hold_reply(show: ShowId, view: &HoldView) -> HoldReply {
    let hold = &view.hold;
    HoldReply {
        show_id: show.0,
        hold_id: hold.id.0,
        seats: hold.seats.iter().copied().collect(),
        price_minor: hold.price.amount_minor,
        currency: hold.price.currency.to_string(),
        deadline_ms: hold.deadline_ms(),
        state: hold_state_name(view.state).to_owned(),
        as_of_log_index: view.as_of.log_index,
        as_of_log_time_ms: view.as_of.log_time_ms,
    }
}

fn hold_state_name(state: HoldState) -> &'static str {
    match state {
        HoldState::Held => "held",
        HoldState::Processing => "processing",
        HoldState::Confirmed => "confirmed",
        HoldState::Cancelled => "cancelled",
        HoldState::Expired => "expired",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_holds_are_refused_before_anything_is_proposed() {
        assert!(seat_set(&[]).is_err());
        assert!(seat_set(&[1; 11]).is_err());
        assert_eq!(seat_set(&[3, 1]).unwrap().as_slice(), &[3, 1]);
        assert!(show_id(0).is_err());
        let mut request =
            CreateShowRequest { show_id: 1, currency: "EURO".into(), ..Default::default() };
        assert!(show_spec(&request).is_err());
        request.currency = "EUR".into();
        request.layout = vec![proto::booking::SeatRange { count: 5, class: 300 }];
        assert!(show_spec(&request).is_err());
    }
}
