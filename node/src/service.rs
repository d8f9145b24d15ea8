//! The booking operations every API (gRPC, REST) is a thin skin over: routing a show to its
//! group, proposing commands on the group's leader, and reading its state.
//!
//! Owns the routing rules: placement is read from this node's replica of the metadata group 0
//! (a show unknown here is looked up linearizably on group 0's leader, or answered with a hint
//! to it); a write or an authoritative read is served by the leader of the show's data group
//! (`NotLeader` with a hint elsewhere, which the HTTP layer forwards and the SDK follows);
//! seat maps and event streams may be served from this replica's applied state, labelled with
//! `as_of`. A group a show moved away from answers `show_moved` with where it went, and the
//! call follows it there (`on_show_group`), so a replica of group 0 that has not seen the move
//! yet still routes right. Never judges a booking rule (the state machine does) and never touches the wire
//! formats (the API modules do).

use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::time::Instant;

use statemachine::{
    Answer, CatalogCommand, CatalogKind, Change, ClientCommand, ClientRequest, Command,
    DeliveryCommand, Group, HallSpec, ListingSpec, METADATA_GROUP, OperatorCommand, PaymentOutcome,
    Rejection, Reply, ShowId, ShowSpec, Written,
};

use crate::error::ApiError;
use crate::group::HostedGroup;
use crate::input;
use crate::node::Shared;
use crate::search::{SearchError, SearchPage, SearchQuery};

/// How long a node that does not lead group 0 waits for its replica of it to catch up with
/// the leader's (a show placed or listed a moment ago there) before sending the caller to it.
pub const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How many moves of a show (`show_moved`) one request follows before it answers: a show
/// moved twice while the request was on its way is still found.
pub const MOVE_HOPS_MAX: usize = 3;

/// A buyer's command as its group decided it: the reply, and the view of what it wrote as the
/// entry that decided it left it (`statemachine::Answer`), so that a write answers without
/// reading again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// The reply, as every replica decided it.
    pub reply: Reply,
    /// The entity the reply names, read in the same apply: `None` if it names none,
    /// `Some(Err(..))` if a retry's entity has since been removed.
    pub written: Option<Result<Written, Rejection>>,
}

/// Where a show lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The show.
    pub show: ShowId,
    /// Its data group.
    pub group: u64,
}

/// The waitlist policy version a new show's waitlist starts at (a show is created with version
/// 1, and a version never goes back).
pub const WAITLIST_POLICY_VERSION_INITIAL: u32 = 1;

/// How a new show is set up once created: the same rules for every API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShowSetup {
    /// The admission lane: whether it is on, and its window (outstanding grants).
    pub admission: Option<(bool, u32)>,
    /// The waitlist: whether it is on, and its policy version (0: the initial one).
    pub waitlist: Option<(bool, u32)>,
    /// Whether sales open at once.
    pub open_sales: bool,
}

impl ShowSetup {
    /// The operator commands that set `show` up, in order (admission, waitlist, opening).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an admission window out of `1..=ADMISSION_WINDOW_MAX`.
    pub fn commands(&self, show: ShowId) -> Result<Vec<OperatorCommand>, ApiError> {
        let mut setup = Vec::new();
        if let Some((enabled, window)) = self.admission {
            let window = input::admission_window("admission.window", window)?;
            setup.push(OperatorCommand::ConfigureAdmission { show, enabled, window });
        }
        if let Some((enabled, policy_version)) = self.waitlist {
            let policy_version = policy_version.max(WAITLIST_POLICY_VERSION_INITIAL);
            setup.push(OperatorCommand::ConfigureWaitlist { show, enabled, policy_version });
        }
        if self.open_sales {
            setup.push(OperatorCommand::OpenSales { show });
        }
        Ok(setup)
    }
}

/// A new show's spec as every API takes it: idempotency records must outlive a hold and its
/// payment, so hold and payment deadlines longer than the retention stretch it with them; then
/// the spec is checked completely, so that nothing is proposed for a show that would be refused.
///
/// # Errors
///
/// `InvalidArgument` naming the first problem.
pub fn checked_spec(mut spec: ShowSpec) -> Result<ShowSpec, ApiError> {
    let policy = &mut spec.policy;
    policy.idempotency_retention_ms = policy
        .idempotency_retention_ms
        .max(policy.hold_ttl_ms.saturating_add(policy.payment_grace_ms));
    match spec.validate() {
        Ok(_) => Ok(spec),
        Err(Rejection::InvalidArgument { message }) => {
            Err(ApiError::InvalidArgument(message.into_owned()))
        }
        Err(other) => Err(ApiError::Rejected(other)),
    }
}

/// The booking operations of one node. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    shared: Arc<Shared>,
}

impl Service {
    /// The operations over this node's groups.
    pub fn new(shared: Arc<Shared>) -> Service {
        Service { shared }
    }

    /// What the node shares with its APIs.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn metadata_group(&self) -> Result<&Arc<HostedGroup>, ApiError> {
        self.shared.group(METADATA_GROUP)
    }

    /// The data group holding `show`: from this replica of group 0 if it knows; else, on group
    /// 0's leader, by a linearizable read; else a hint to group 0's leader.
    ///
    /// # Errors
    ///
    /// `show_not_found` when no show is placed under the id; `NotLeader` for group 0's leader.
    pub async fn group_of(&self, show: ShowId) -> Result<&Arc<HostedGroup>, ApiError> {
        let metadata = self.metadata_group()?;
        let local = metadata.read_local(|state| state.placement().group_of(show))?;
        let group = match local {
            Some(group) => group,
            None if metadata.is_leader() => metadata
                .read_linearizable(|state| state.placement().group_of(show))
                .await?
                .ok_or(ApiError::Rejected(Rejection::ShowNotFound))?,
            None => return Err(metadata.not_leader()),
        };
        self.shared.group(group)
    }

    /// Every placed show and its group, as this replica of group 0 knows them.
    ///
    /// # Errors
    ///
    /// `Internal` if the metadata group's state failed.
    pub fn placements(&self) -> Result<Vec<Placed>, ApiError> {
        self.metadata_group()?.read_local(|state| {
            state.placement().iter().map(|(show, group)| Placed { show, group }).collect()
        })
    }

    /// The data group a new show goes to: the one asked for (0: the one with the fewest shows).
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

    /// Creates a show: places it (group 0), creates it in its data group, then applies `setup`
    /// (admission, waitlist, opening sales) in order.
    ///
    /// Idempotent for an identical spec: a retry after an unknown outcome (or after a failure
    /// half-way) finds the placement and the show as this request would make them and applies
    /// the setup again (each setup command sets a value, so applying it twice is applying it
    /// once). A different show under the same id is `show_exists`.
    ///
    /// # Errors
    ///
    /// `show_exists` if the id is taken (in another group, or by another spec), a rejection of
    /// the spec or a setup command, or a routing error.
    pub async fn create_show(
        &self,
        spec: ShowSpec,
        group: u64,
        setup: Vec<OperatorCommand>,
    ) -> Result<Placed, ApiError> {
        let show = spec.show;
        if setup.iter().any(|command| command.show() != show) {
            return Err(ApiError::InvalidArgument("setup: commands of another show".into()));
        }
        let placed = self.place(show, group).await?;
        if group != 0 && group != placed {
            return Err(ApiError::Rejected(Rejection::ShowExists));
        }
        let hosted = self.shared.group(placed)?;
        match decide(hosted, Command::Operator(OperatorCommand::CreateShow(spec.clone()))).await {
            Ok(_) => {}
            Err(ApiError::Rejected(Rejection::ShowExists))
                if hosted.read_linearizable(|state| made_by(state, &spec)).await? => {}
            Err(error) => return Err(error),
        }
        for command in setup {
            decide(hosted, Command::Operator(command)).await?;
        }
        Ok(Placed { show, group: placed })
    }

    /// The data group of `show`: where this replica of group 0 has it placed, else placed now
    /// (on group 0's leader) in `group` (0: the one with the fewest shows).
    async fn place(&self, show: ShowId, group: u64) -> Result<u64, ApiError> {
        let metadata = self.metadata_group()?;
        let placed = |state: &Group| state.placement().group_of(show);
        if let Some(placed) = metadata.read_local(placed)? {
            return Ok(placed);
        }
        if !metadata.is_leader() {
            // Placed a moment ago by group 0's leader, which forwarded the request here?
            if metadata.confirm_fresh(CATCH_UP_WAIT).await.is_ok()
                && let Some(placed) = metadata.read_local(placed)?
            {
                return Ok(placed);
            }
            return Err(metadata.not_leader());
        }
        let group = self.choose_group(group)?;
        match decide(metadata, Command::Place { show, group }).await? {
            Reply::Placed { group, .. } => Ok(group),
            other => Err(ApiError::unexpected(other)),
        }
    }

    /// Creates the show `spec` names as a showing of `listing`'s event in its hall: the show's
    /// seats and classes are the hall's (`spec.layout` is replaced by the hall's layout).
    ///
    /// Group 0's part comes first, on its leader: the event, hall and venue are checked live
    /// (read linearizably), the show placed and listed. Then the data group's part, on that
    /// group's leader: the show created and set up as by [`Service::create_show`]. In this order
    /// a request that group 0's leader cannot finish (another node leads the data group) is
    /// forwarded there and finished by that node, which finds group 0's part done in its
    /// replica; were the listing last, neither node could finish alone. Until the data group's
    /// part is done (moments, or an operator's retry), the show is listed but answers
    /// `show_not_found`. Idempotent: a retry finds every step done and does the rest.
    ///
    /// # Errors
    ///
    /// `catalog_not_found` or `catalog_retired` for the event, hall or venue; `catalog_exists`
    /// when the show is listed otherwise; `invalid_argument` when the prices do not cover the
    /// hall's classes; `NotLeader` for group 0's leader while its part is not done; whatever
    /// `create_show` answers.
    pub async fn create_listed_show(
        &self,
        mut spec: ShowSpec,
        listing: ListingSpec,
        group: u64,
        setup: Vec<OperatorCommand>,
    ) -> Result<Placed, ApiError> {
        let metadata = self.metadata_group()?;
        let show = spec.show;
        // A hall's geometry never changes: any replica that knows the listing knows its seats.
        let listed_hall = |state: &Group| {
            let catalog = state.catalog();
            let listed = catalog.listing(show).is_some_and(|listed| listed.spec == listing);
            let hall = catalog.hall(listing.hall).map(|hall| hall.spec.clone());
            hall.filter(|_| listed && state.placement().group_of(show).is_some())
        };
        let mut known = metadata.read_local(listed_hall)?;
        if known.is_none() && !metadata.is_leader() {
            // Group 0's leader may have done its part a moment ago (and forwarded the request
            // here): this replica catches up before concluding that it has not.
            if metadata.confirm_fresh(CATCH_UP_WAIT).await.is_ok() {
                known = metadata.read_local(listed_hall)?;
            }
        }
        let hall = match known {
            Some(hall) => hall,
            None => {
                if !metadata.is_leader() {
                    return Err(metadata.not_leader());
                }
                let hall =
                    metadata.read_linearizable(|state| live_hall(state, show, &listing)).await??;
                let spec = listed_spec(spec.clone(), &hall)?;
                let placed = self.place(spec.show, group).await?;
                if group != 0 && group != placed {
                    return Err(ApiError::Rejected(Rejection::ShowExists));
                }
                let list = CatalogCommand::Listing { show, change: Change::Create(listing) };
                decide(metadata, Command::Catalog(list)).await?;
                hall
            }
        };
        spec = listed_spec(spec, &hall)?;
        self.create_show(spec, group, setup).await
    }

    /// Proposes a catalog change to group 0 (on its leader; `NotLeader` elsewhere).
    ///
    /// # Errors
    ///
    /// The change's rejection, or a routing error.
    pub async fn catalog(&self, command: CatalogCommand) -> Result<Reply, ApiError> {
        decide(self.metadata_group()?, Command::Catalog(command)).await
    }

    /// Reads the catalog (and placement) from this node's replica of group 0, however stale
    /// (`Group::as_of` says how fresh).
    ///
    /// # Errors
    ///
    /// `Internal` if the metadata group's state failed.
    pub fn read_catalog<T>(&self, read: impl FnOnce(&Group) -> T) -> Result<T, ApiError> {
        self.metadata_group()?.read_local(read)
    }

    /// Brings this node's search index up to its replica of the catalog: what changed is
    /// copied under the replica's read lock and indexed outside it.
    ///
    /// # Errors
    ///
    /// `Internal` if the replica's state or the index failed.
    pub fn sync_search(&self) -> Result<(), ApiError> {
        let search = &self.shared.search;
        let changes = self.read_catalog(|state| search.changes(state.catalog()))?;
        if let Some(changes) = changes {
            search.apply(changes).map_err(search_error)?;
        }
        Ok(())
    }

    /// Searches the catalog as this node's replica knows it now (the index is brought up to it
    /// first, so an operator's change that this replica applied is found).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad query or cursor (the message names the field); `Internal`
    /// if the index failed.
    pub fn search(&self, query: &SearchQuery) -> Result<SearchPage, ApiError> {
        self.sync_search()?;
        self.shared.search.search(query).map_err(search_error)
    }

    /// The seat numbers of `labels` (e.g. `B12`) in `show`'s hall, as this node's replica of
    /// the catalog knows it (a hall's seats and a listing's hall never change, so any replica
    /// that knows the listing knows the right numbers).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a label the hall does not have, or a show that is not listed.
    pub fn seats_of_labels(&self, show: ShowId, labels: &[String]) -> Result<Vec<u32>, ApiError> {
        self.read_catalog(|group| {
            let catalog = group.catalog();
            let hall = catalog
                .listing(show)
                .and_then(|listing| catalog.hall(listing.spec.hall))
                .ok_or_else(|| {
                    ApiError::InvalidArgument(format!(
                        "seat_labels: show {show} is not in the catalog; name seats by number"
                    ))
                })?;
            labels
                .iter()
                .map(|label| {
                    hall.spec.seat_of(label).ok_or_else(|| {
                        ApiError::InvalidArgument(format!(
                            "seat_labels: the hall has no seat {label:?}"
                        ))
                    })
                })
                .collect()
        })?
    }

    /// The labels of `seats` in `show`'s hall, if the show is listed (and this replica knows
    /// it): what both APIs answer beside the seat numbers.
    ///
    /// # Errors
    ///
    /// `Internal` if the metadata group's state failed.
    pub fn labels_of(
        &self,
        show: ShowId,
        seats: impl IntoIterator<Item = u32>,
    ) -> Result<Option<Vec<String>>, ApiError> {
        self.read_catalog(|group| {
            let catalog = group.catalog();
            let hall = catalog.listing(show).and_then(|listing| catalog.hall(listing.spec.hall))?;
            seats.into_iter().map(|seat| hall.spec.label_of(seat)).collect()
        })
    }

    /// Runs `call` on the group `show` is placed in, and again on the group a refusal
    /// `show_moved` names (this replica of group 0 may not have seen the move yet; the group
    /// the show left has), up to [`MOVE_HOPS_MAX`] times. A show frozen for a move answers
    /// `show_moving` (retryable) as it is.
    ///
    /// # Errors
    ///
    /// `call`'s error, or a routing error.
    pub async fn on_show_group<T, F, Fut>(&self, show: ShowId, call: F) -> Result<T, ApiError>
    where
        F: Fn(Arc<HostedGroup>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        let mut hosted = self.group_of(show).await?;
        for _ in 0..MOVE_HOPS_MAX {
            match call(Arc::clone(hosted)).await {
                Err(ApiError::Rejected(Rejection::ShowMoved { group })) => {
                    hosted = self.shared.group(group)?;
                }
                other => return other,
            }
        }
        call(Arc::clone(hosted)).await
    }

    /// Proposes an operator command about its show.
    ///
    /// # Errors
    ///
    /// The command's rejection, or a routing error.
    pub async fn operator(&self, command: OperatorCommand) -> Result<Reply, ApiError> {
        let command = &command;
        self.on_show_group(command.show(), |hosted| async move {
            decide(&hosted, Command::Operator(command.clone())).await
        })
        .await
    }

    /// Proposes a buyer's command. On the leader of the show's group (`NotLeader` elsewhere,
    /// checked once), a hold whose seats the group's state already refuses is answered
    /// `seat_unavailable` after a linearizable read, without a log entry
    /// ([`HostedGroup::reject_without_log`]).
    ///
    /// # Errors
    ///
    /// The request's rejection, or a routing error.
    pub async fn client(&self, command: ClientCommand) -> Result<Decided, ApiError> {
        let command = &command;
        self.on_show_group(command.show, |hosted| async move {
            self.client_on(&hosted, command.clone()).await
        })
        .await
    }

    /// [`Service::client`] on one group.
    async fn client_on(
        &self,
        hosted: &Arc<HostedGroup>,
        command: ClientCommand,
    ) -> Result<Decided, ApiError> {
        if !hosted.is_leader() {
            return Err(hosted.not_leader());
        }
        let started = Instant::now();
        let request = command.request.clone();
        let decided = match hosted.reject_without_log(&command).await {
            Ok(Some(rejection)) => Err(ApiError::Rejected(rejection)),
            Ok(None) => propose(hosted, Command::Client(command)).await,
            Err(error) => Err(error),
        };
        self.record_decision(hosted.id, &request, &decided, started);
        decided
    }

    /// Records a request this node decided as `group`'s leader in the metrics (one that turned
    /// out not to be this node's to decide, `NotLeader`, is counted where it is decided).
    fn record_decision(
        &self,
        group: u64,
        request: &ClientRequest,
        decided: &Result<Decided, ApiError>,
        started: Instant,
    ) {
        if !matches!(decided, Err(ApiError::NotLeader { .. })) {
            let seconds = started.elapsed().as_secs_f64();
            self.shared.metrics.record_decision(group, request, decided, seconds);
        }
    }

    /// Decides many buyers' requests, each exactly as [`Service::client`] would, one result
    /// per command in order: grouped by the show's data group, the holds a group's state
    /// already refuses answered after one linearizable read for the group (on the leader's
    /// lease), the rest proposed at once (the group's proposer coalesces them into few
    /// entries).
    pub async fn clients(&self, commands: Vec<ClientCommand>) -> Vec<Result<Decided, ApiError>> {
        let mut results: Vec<Option<Result<Decided, ApiError>>> = vec![None; commands.len()];
        let mut by_group: BTreeMap<u64, (&Arc<HostedGroup>, Vec<usize>)> = BTreeMap::new();
        for (at, command) in commands.iter().enumerate() {
            match self.group_of(command.show).await {
                Ok(hosted) => by_group.entry(hosted.id).or_insert((hosted, Vec::new())).1.push(at),
                Err(error) => results[at] = Some(Err(error)),
            }
        }
        let commands = &commands;
        let groups = by_group.into_values().map(|(hosted, ats)| async move {
            if !hosted.is_leader() {
                return ats.into_iter().map(|at| (at, Err(hosted.not_leader()))).collect();
            }
            let started = Instant::now();
            let own: Vec<ClientCommand> = ats.iter().map(|&at| commands[at].clone()).collect();
            let rejections = match hosted.reject_many_without_log(&own).await {
                Ok(rejections) => rejections,
                Err(error) => return ats.into_iter().map(|at| (at, Err(error.clone()))).collect(),
            };
            let decisions = own.into_iter().zip(rejections).zip(ats).map(
                |((command, rejection), at)| async move {
                    let request = command.request.clone();
                    let result = match rejection {
                        Some(rejection) => Err(ApiError::Rejected(rejection)),
                        None => propose(hosted, Command::Client(command)).await,
                    };
                    self.record_decision(hosted.id, &request, &result, started);
                    (at, result)
                },
            );
            futures_util::future::join_all(decisions).await
        });
        for decided in futures_util::future::join_all(groups).await {
            for (at, result) in decided {
                results[at] = Some(result);
            }
        }
        // A show that moved since this replica of group 0 placed it: decided where it went.
        for (at, result) in results.iter_mut().enumerate() {
            if let Some(Err(ApiError::Rejected(Rejection::ShowMoved { .. }))) = result {
                *result = Some(self.client(commands[at].clone()).await);
            }
        }
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| Err(ApiError::Internal("a command got no result".into())))
            })
            .collect()
    }

    /// Proposes a payment provider's verified outcome.
    ///
    /// # Errors
    ///
    /// The outcome's rejection, or a routing error.
    pub async fn payment(&self, outcome: PaymentOutcome) -> Result<Reply, ApiError> {
        let outcome = &outcome;
        self.on_show_group(outcome.show, |hosted| async move {
            decide(&hosted, Command::Payment(outcome.clone())).await
        })
        .await
    }

    /// Proposes a delivery command (an operator's replay or removal of a sink) on the leader of
    /// data group `group`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for the metadata group (it has no outbox), `NotFound` for a group the
    /// cluster does not have, the command's rejection, or a routing error.
    pub async fn delivery(&self, group: u64, command: DeliveryCommand) -> Result<Reply, ApiError> {
        if group == METADATA_GROUP {
            return Err(ApiError::InvalidArgument(
                "group_id: the metadata group 0 has no outbox".into(),
            ));
        }
        decide(self.shared.group(group)?, Command::Delivery(command)).await
    }

    /// Reads `show`'s group linearizably on its leader.
    ///
    /// With the planted bug `stale-read` on (`statemachine::inject`, test builds only), reads
    /// this node's replica instead, whether it leads or not (see [`Service::read_local`]).
    ///
    /// # Errors
    ///
    /// The read's rejection, or a routing error (`NotLeader` on another node).
    pub async fn read_linearizable<T>(
        &self,
        show: ShowId,
        read: impl Fn(&Group) -> Result<T, Rejection>,
    ) -> Result<T, ApiError> {
        if statemachine::inject::on(statemachine::inject::Bug::StaleRead) {
            // The planted bug the Jepsen suite must catch: no ReadIndex and no leadership
            // check, so a deposed leader that has not heard of its successor answers from the
            // state it had, missing writes acknowledged since.
            return self.read_local(show, read).await;
        }
        let read = &read;
        self.on_show_group(show, |hosted| async move {
            if !hosted.is_leader() {
                return Err(hosted.not_leader());
            }
            Ok(hosted.read_linearizable(read).await??)
        })
        .await
    }

    /// Reads `show`'s group from this node's replica, however stale (the result says `as_of`).
    ///
    /// # Errors
    ///
    /// The read's rejection, or a routing error.
    pub async fn read_local<T>(
        &self,
        show: ShowId,
        read: impl Fn(&Group) -> Result<T, Rejection>,
    ) -> Result<T, ApiError> {
        let read = &read;
        self.on_show_group(show, |hosted| async move { Ok(hosted.read_local(read)??) }).await
    }
}

/// Whether the show `spec` names exists in `state` as `spec` would have created it (same
/// currency, prices, seat classes and policy).
fn made_by(state: &Group, spec: &ShowSpec) -> bool {
    let Some(show) = state.show(spec.show) else { return false };
    let classes = spec.layout.iter().flat_map(|range| {
        std::iter::repeat_n(range.class, usize::try_from(range.count).unwrap_or(usize::MAX))
    });
    show.currency == spec.currency
        && show.prices_minor == spec.prices_minor
        && show.policy == spec.policy
        && show.seat_classes.iter().copied().eq(classes)
}

/// Proposes `command` on `group`'s leader and returns its reply, or the rejection as an error.
/// A node that does not lead is refused before anything is encoded.
async fn decide(group: &HostedGroup, command: Command) -> Result<Reply, ApiError> {
    if !group.is_leader() {
        return Err(group.not_leader());
    }
    Ok(propose(group, command).await?.reply)
}

/// Proposes `command` (the caller checked leadership; a proposal on a node that lost it since
/// is refused by Raft as `NotLeader`) and returns how it was decided, or the rejection as an
/// error.
async fn propose(group: &HostedGroup, command: Command) -> Result<Decided, ApiError> {
    let Answer { outcome, written } = group.propose(command).await?;
    Ok(Decided { reply: outcome?, written: written.map(|written| *written) })
}

/// A search's refusal as the API reports it.
fn search_error(error: SearchError) -> ApiError {
    match error {
        SearchError::InvalidArgument(message) | SearchError::BadCursor(message) => {
            ApiError::InvalidArgument(message)
        }
        SearchError::Index(error) => ApiError::Internal(format!("search index: {error}")),
    }
}

/// The hall of `listing` if its event, hall and venue are live and `show` is not listed
/// otherwise.
fn live_hall(state: &Group, show: ShowId, listing: &ListingSpec) -> Result<HallSpec, Rejection> {
    let catalog = state.catalog();
    let live = |retired: Option<bool>, kind| match retired {
        None => Err(Rejection::CatalogNotFound { kind }),
        Some(true) => Err(Rejection::CatalogRetired { kind }),
        Some(false) => Ok(()),
    };
    live(catalog.event(listing.event).map(|event| event.retired), CatalogKind::Event)?;
    let hall = catalog.hall(listing.hall);
    live(hall.map(|hall| hall.retired), CatalogKind::Hall)?;
    let hall = hall
        .map(|hall| hall.spec.clone())
        .ok_or(Rejection::CatalogNotFound { kind: CatalogKind::Hall })?;
    live(catalog.venue(hall.venue).map(|venue| venue.retired), CatalogKind::Venue)?;
    if catalog.listing(show).is_some_and(|listed| listed.spec != *listing) {
        return Err(Rejection::CatalogExists { kind: CatalogKind::Listing });
    }
    Ok(hall)
}

/// `spec` with the hall's seats, checked: one price per class of the hall.
fn listed_spec(mut spec: ShowSpec, hall: &HallSpec) -> Result<ShowSpec, ApiError> {
    let classes = hall.class_count();
    if spec.prices_minor.len() != classes {
        return Err(ApiError::InvalidArgument(format!(
            "prices_minor: the hall has {classes} seat classes, so one price for each"
        )));
    }
    spec.layout = hall.layout();
    checked_spec(spec)
}

#[cfg(test)]
mod tests {
    use statemachine::{Currency, SeatRange, ShowPolicy};

    use super::*;
    use crate::error::ErrorCode;

    fn spec(policy: ShowPolicy) -> ShowSpec {
        ShowSpec {
            show: ShowId(1),
            currency: Currency(*b"EUR"),
            prices_minor: vec![1_000],
            layout: vec![SeatRange { count: 10, class: 0 }],
            policy,
        }
    }

    #[test]
    fn long_hold_and_payment_deadlines_stretch_the_idempotency_retention() {
        let mut policy = ShowPolicy::default();
        policy.hold_ttl_ms = policy.idempotency_retention_ms;
        let checked = checked_spec(spec(policy)).unwrap();
        assert_eq!(
            checked.policy.idempotency_retention_ms,
            policy.hold_ttl_ms + policy.payment_grace_ms
        );
        let mut bad = spec(ShowPolicy::default());
        bad.layout.clear();
        assert_eq!(checked_spec(bad).unwrap_err().code(), ErrorCode::InvalidArgument);
    }

    #[test]
    fn setup_runs_admission_then_waitlist_then_opening() {
        let show = ShowId(1);
        let setup =
            ShowSetup { admission: Some((true, 5)), waitlist: Some((true, 0)), open_sales: true };
        assert_eq!(
            setup.commands(show).unwrap(),
            vec![
                OperatorCommand::ConfigureAdmission { show, enabled: true, window: 5 },
                OperatorCommand::ConfigureWaitlist {
                    show,
                    enabled: true,
                    policy_version: WAITLIST_POLICY_VERSION_INITIAL
                },
                OperatorCommand::OpenSales { show },
            ]
        );
        let closed = ShowSetup { admission: Some((true, 0)), ..ShowSetup::default() };
        assert_eq!(closed.commands(show).unwrap_err().code(), ErrorCode::InvalidArgument);
        assert!(ShowSetup::default().commands(show).unwrap().is_empty());
    }
}
