//! The gRPC `BookingService`: proto ↔ domain conversion and routing of each call to its show's
//! group.
//!
//! Owns checking requests before anything is proposed (bad input changes nothing), deriving
//! the session and idempotency key from metadata, and routing: placement is read from the
//! metadata group 0 (this replica's state; a show unknown here is looked up on group 0's leader,
//! by hint), and the call is served by the leader of the show's data group (a hint elsewhere).
//! Never judges a booking rule: the state machine does, and its rejections are passed through
//! the one error table in `error.rs`.

use std::sync::Arc;

use proto::booking::booking_service_server::{BookingService, BookingServiceServer};
use proto::booking::{
    CreateShowRequest, GetHoldRequest, HoldReply, HoldRequest, ShowPlacement, ShowRef,
};
use statemachine::limits::SEATS_PER_HOLD_MAX;
use statemachine::{
    ClientCommand, ClientRequest, Command, Currency, HoldId, HoldState, HoldView, METADATA_GROUP,
    OperatorCommand, Reply, SeatRange, SeatSet, ShowId, ShowPolicy, ShowSpec,
};
use tonic::{Request, Response, Status};

use crate::api::session;
use crate::error::ApiError;
use crate::group::HostedGroup;
use crate::node::Shared;

/// The booking API of one node.
pub struct BookingApi {
    shared: Arc<Shared>,
}

impl BookingApi {
    /// The API over this node's groups.
    pub fn new(shared: Arc<Shared>) -> BookingApi {
        BookingApi { shared }
    }

    /// The tonic service.
    pub fn into_server(self) -> BookingServiceServer<BookingApi> {
        BookingServiceServer::new(self)
    }

    fn metadata_group(&self) -> Result<&Arc<HostedGroup>, ApiError> {
        self.shared.group(METADATA_GROUP)
    }

    /// The data group holding `show`: from this replica of group 0 if it knows; else, on group
    /// 0's leader, by a linearizable read; else a hint to group 0's leader.
    async fn placement(&self, show: ShowId) -> Result<&Arc<HostedGroup>, ApiError> {
        let metadata = self.metadata_group()?;
        let local = metadata.read_local(|state| state.placement().group_of(show))?;
        let group = match local {
            Some(group) => group,
            None if metadata.is_leader() => metadata
                .read_linearizable(|state| state.placement().group_of(show))
                .await?
                .ok_or(ApiError::Rejected(statemachine::Rejection::ShowNotFound))?,
            None => return Err(metadata.not_leader()),
        };
        self.shared.group(group)
    }

    /// The data group a new show goes to: the one asked for, or the one with the fewest shows.
    fn choose_group(&self, asked: u64) -> Result<u64, ApiError> {
        let data_groups = self.shared.config.data_groups;
        if asked != 0 {
            if asked > data_groups {
                return Err(ApiError::InvalidArgument(format!(
                    "group_id: the cluster has data groups 1..={data_groups}"
                )));
            }
            return Ok(asked);
        }
        let counts =
            self.metadata_group()?.read_local(|state| state.placement().shows_per_group())?;
        let least = (1..=data_groups)
            .min_by_key(|group| (counts.get(group).copied().unwrap_or(0), *group))
            .unwrap_or(1);
        Ok(least)
    }
}

/// Proposes `command` on `group` and returns its reply, or the rejection as an error.
async fn decide(group: &HostedGroup, command: Command) -> Result<Reply, ApiError> {
    if !group.is_leader() {
        return Err(group.not_leader());
    }
    Ok(group.propose(command).await??)
}

#[tonic::async_trait]
impl BookingService for BookingApi {
    async fn create_show(
        &self,
        request: Request<CreateShowRequest>,
    ) -> Result<Response<ShowPlacement>, Status> {
        let request = request.into_inner();
        let spec = show_spec(&request)?;
        let show = spec.show;
        let metadata = self.metadata_group()?;
        // Placement first (idempotent for the same group), then the show in its group: a crash
        // in between leaves a placement that a retry completes.
        let placed = metadata.read_local(|state| state.placement().group_of(show))?;
        let group = match placed {
            Some(group) => group,
            None => {
                let group = self.choose_group(request.group_id)?;
                match decide(metadata, Command::Place { show, group }).await? {
                    Reply::Placed { group, .. } => group,
                    other => return Err(unexpected(other).into()),
                }
            }
        };
        if request.group_id != 0 && request.group_id != group {
            return Err(ApiError::Rejected(statemachine::Rejection::ShowExists).into());
        }
        let hosted = self.shared.group(group)?;
        match decide(hosted, Command::Operator(OperatorCommand::CreateShow(spec))).await? {
            Reply::ShowCreated { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        Ok(Response::new(ShowPlacement { show_id: show.0, group_id: group }))
    }

    async fn open_sales(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowPlacement>, Status> {
        let show = show_id(request.into_inner().show_id)?;
        let hosted = self.placement(show).await?;
        match decide(hosted, Command::Operator(OperatorCommand::OpenSales { show })).await? {
            Reply::ShowStatusChanged { .. } => {}
            other => return Err(unexpected(other).into()),
        }
        Ok(Response::new(ShowPlacement { show_id: show.0, group_id: hosted.id }))
    }

    async fn hold(&self, request: Request<HoldRequest>) -> Result<Response<HoldReply>, Status> {
        let session = session::session(request.metadata())?;
        let key = session::idempotency_key(request.metadata())?;
        let request = request.into_inner();
        let show = show_id(request.show_id)?;
        let seats = seat_set(&request.seats)?;
        let hosted = self.placement(show).await?;
        let hold = ClientRequest::Hold { seats, price_version: request.price_version, grant: None };
        let command = Command::Client(ClientCommand { show, session, key, request: hold });
        let receipt = match decide(hosted, command).await? {
            Reply::Held(receipt) => receipt,
            other => return Err(unexpected(other).into()),
        };
        let view = hosted
            .read_local(|state| state.hold(show, receipt.hold, Some(session)))?
            .map_err(ApiError::from)?;
        Ok(Response::new(hold_reply(show, &view)))
    }

    async fn get_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<HoldReply>, Status> {
        let session = session::session(request.metadata())?;
        let request = request.into_inner();
        let show = show_id(request.show_id)?;
        let hosted = self.placement(show).await?;
        if !hosted.is_leader() {
            return Err(hosted.not_leader().into());
        }
        let hold = HoldId(request.hold_id);
        let view = hosted
            .read_linearizable(|state| state.hold(show, hold, Some(session)))
            .await?
            .map_err(ApiError::from)?;
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
