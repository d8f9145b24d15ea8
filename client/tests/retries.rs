//! The SDK's leader discovery and retries against scripted in-process nodes (not `bookingd`):
//! each fake node serves `BookingService` and `AdminService` on a loopback port and answers
//! each call as its script says (not the leader with a hint, no leader, a rejection, a hang,
//! or success), recording the metadata of every call it receives. The same fake nodes also
//! serve over an in-process [`client::Connector`] (`tokio::io::duplex` pipes instead of TCP),
//! as a simulator's network would carry the SDK's connections.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{Client, Config, Error, NewShow};
use futures_util::{Stream, StreamExt};
use proto::booking::admin_service_server::{AdminService, AdminServiceServer};
use proto::booking::booking_service_server::{BookingService, BookingServiceServer};
use proto::booking::hold_item_result::Result::{Failed, Held};
use proto::booking::{
    AddLearnerRequest, AdmissionReply, AuditReply, BackupChunk, BandClaimReply, BookingRef,
    BookingReply, CapacityReleasedReply, CapacityReleasedRequest, CheckoutReply,
    ConfigureAdmissionRequest, ConfigureWaitlistRequest, CreateSessionRequest, CreateShowRequest,
    DrawLotteryRequest, EntryRef, GetAuditRequest, GetHoldRequest, GroupStatus, HoldItemResult,
    HoldManyReply, HoldManyRequest, HoldRef, HoldReply, HoldRequest, IssueBandClaimRequest,
    ItemStatus, JoinWaitlistRequest, ListShowsReply, ListShowsRequest, LotteryReply,
    MembershipReply, MoveReplicaRequest, NodesRequest, OfferRef, OfferReply, PaymentRef,
    PaymentReply, PricesReply, SalesReply, SeatMapReply, SeatMapRequest, SessionReply,
    SetPricesRequest, SetWaitlistPolicyRequest, ShowArchivedReply, ShowCancelledReply,
    ShowPlacement, ShowRef, ShowReply, StatusReply, StatusRequest, TicketRef, TicketReply,
    TransferLeaderRequest, WaitlistEntryReply, WaitlistPolicyReply, WaitlistReply,
};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::sync::mpsc;
use tonic::metadata::{KeyAndValueRef, MetadataMap};
use tonic::transport::Server;
use tonic::transport::server::{Connected, TcpIncoming};
use tonic::{Code, Request, Response, Status};

/// A show whose seat map the fake nodes serve as a node older than
/// `SeatMapRequest.linearizable` would: from the replica, whatever the request asked.
const SHOW_OF_AN_OLD_NODE: u64 = 13;

/// How a fake node answers one call.
#[derive(Clone, Debug)]
enum Answer {
    /// Serves the call.
    Serve,
    /// `UNAVAILABLE`, `not_leader`, pointing at this leader (id, address).
    NotLeader(u64, String),
    /// `UNAVAILABLE`, `no_leader`, without a hint.
    NoLeader,
    /// A final status with this booking code.
    Reject(Code, &'static str),
    /// Sleeps this long, then serves.
    Hang(Duration),
}

/// One call a fake node received.
#[derive(Clone, Debug)]
struct Call {
    method: &'static str,
    key: Option<String>,
    authorization: Option<String>,
}

/// A scripted node.
struct Fake {
    /// Node id, reported by Status.
    id: u64,
    /// Its address.
    address: String,
    /// Answers to use first, in order.
    script: Mutex<VecDeque<Answer>>,
    /// The answer once the script is used up.
    default: Mutex<Answer>,
    /// The groups Status reports.
    groups: Mutex<Vec<GroupStatus>>,
    /// Every call received.
    calls: Mutex<Vec<Call>>,
    /// Whether `HoldMany` is served (else UNIMPLEMENTED, as from a node that predates it).
    hold_many: AtomicBool,
    /// The highest feature level Status says the node's build knows.
    feature_level_max: std::sync::atomic::AtomicU32,
}

impl Fake {
    /// Starts a node on a loopback port that answers `default` to every call.
    async fn start(id: u64, default: Answer) -> Arc<Fake> {
        let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = incoming.local_addr().unwrap().to_string();
        let fake = Fake::new(id, address, default);
        fake.serve(incoming);
        fake
    }

    /// A node known as `address` that answers `default` to every call, not yet serving.
    fn new(id: u64, address: String, default: Answer) -> Arc<Fake> {
        Arc::new(Fake {
            id,
            address,
            script: Mutex::new(VecDeque::new()),
            default: Mutex::new(default),
            groups: Mutex::new(Vec::new()),
            calls: Mutex::new(Vec::new()),
            hold_many: AtomicBool::new(false),
            feature_level_max: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// Serves the node's services on every connection `incoming` yields.
    fn serve<I, S>(self: &Arc<Fake>, incoming: I)
    where
        I: Stream<Item = io::Result<S>> + Send + 'static,
        S: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    {
        let service = Service(self.clone());
        tokio::spawn(
            Server::builder()
                .add_service(BookingServiceServer::new(service.clone()))
                .add_service(AdminServiceServer::new(service))
                .serve_with_incoming(incoming),
        );
    }

    fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.script.lock().unwrap().extend(answers);
    }

    fn set_default(&self, answer: Answer) {
        *self.default.lock().unwrap() = answer;
    }

    fn calls(&self, method: &str) -> Vec<Call> {
        self.calls.lock().unwrap().iter().filter(|call| call.method == method).cloned().collect()
    }

    /// Records a call and answers it as scripted.
    async fn answer(&self, method: &'static str, metadata: &MetadataMap) -> Result<(), Status> {
        let text = |name: &str| metadata.get(name).map(|v| v.to_str().unwrap().to_owned());
        self.calls.lock().unwrap().push(Call {
            method,
            key: text(client::IDEMPOTENCY_KEY),
            authorization: text(client::AUTHORIZATION),
        });
        let answer = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.default.lock().unwrap().clone());
        let coded = |code: Code, booking_code: &str| {
            let mut status = Status::new(code, format!("{booking_code} from node {}", self.id));
            status.metadata_mut().insert(client::BOOKING_CODE, booking_code.parse().unwrap());
            status
        };
        match answer {
            Answer::Serve => Ok(()),
            Answer::NotLeader(id, address) => {
                let mut status = coded(Code::Unavailable, client::ErrorCode::NotLeader.name());
                status.metadata_mut().insert(client::LEADER_ID, id.to_string().parse().unwrap());
                status.metadata_mut().insert(client::LEADER_ADDR, address.parse().unwrap());
                Err(status)
            }
            Answer::NoLeader => Err(coded(Code::Unavailable, client::ErrorCode::NoLeader.name())),
            Answer::Reject(code, booking_code) => Err(coded(code, booking_code)),
            Answer::Hang(duration) => {
                tokio::time::sleep(duration).await;
                Ok(())
            }
        }
    }
}

/// The tonic services of a fake node.
#[derive(Clone)]
struct Service(Arc<Fake>);

/// A server stream of a fake node.
type FakeStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A membership reply naming this node as leader.
fn membership(fake: &Fake, group_id: u64) -> Response<MembershipReply> {
    Response::new(MembershipReply { group_id, leader_id: fake.id, ..MembershipReply::default() })
}

#[tonic::async_trait]
impl BookingService for Service {
    async fn create_show(
        &self,
        request: Request<CreateShowRequest>,
    ) -> Result<Response<ShowPlacement>, Status> {
        self.0.answer("create_show", request.metadata()).await?;
        let show_id = request.get_ref().show_id;
        Ok(Response::new(ShowPlacement { show_id, group_id: 1 }))
    }

    async fn open_sales(&self, request: Request<ShowRef>) -> Result<Response<SalesReply>, Status> {
        self.0.answer("open_sales", request.metadata()).await?;
        let show_id = request.get_ref().show_id;
        Ok(Response::new(SalesReply {
            show_id,
            group_id: 1,
            status: "on_sale".into(),
            duplicate: false,
        }))
    }

    async fn hold(&self, request: Request<HoldRequest>) -> Result<Response<HoldReply>, Status> {
        self.0.answer("hold", request.metadata()).await?;
        let request = request.into_inner();
        Ok(Response::new(HoldReply {
            show_id: request.show_id,
            hold_id: 1,
            seats: request.seats,
            state: "held".into(),
            grant_ticket_id: request.grant_ticket_id,
            ..HoldReply::default()
        }))
    }

    async fn hold_many(
        &self,
        request: Request<HoldManyRequest>,
    ) -> Result<Response<HoldManyReply>, Status> {
        if !self.0.hold_many.load(Ordering::SeqCst) {
            return Err(Status::unimplemented("HoldMany"));
        }
        let items = request.into_inner().items;
        self.0.calls.lock().unwrap().push(Call {
            method: "hold_many",
            key: Some(items.len().to_string()),
            authorization: None,
        });
        let mut results = Vec::new();
        for item in items {
            // Each item is answered as a `Hold` call with its key and token would be.
            let mut metadata = MetadataMap::new();
            metadata.insert(client::IDEMPOTENCY_KEY, item.idempotency_key.parse().unwrap());
            let bearer = format!("Bearer {}", item.session_token);
            metadata.insert(client::AUTHORIZATION, bearer.parse().unwrap());
            let hold = item.hold.unwrap();
            let result = match self.0.answer("hold_many_item", &metadata).await {
                Ok(()) => Held(HoldReply {
                    show_id: hold.show_id,
                    hold_id: 1,
                    seats: hold.seats,
                    ..HoldReply::default()
                }),
                Err(status) => Failed(ItemStatus {
                    code: status.code() as i32,
                    message: status.message().to_owned(),
                    metadata: status
                        .metadata()
                        .iter()
                        .filter_map(|entry| match entry {
                            KeyAndValueRef::Ascii(key, value) => {
                                Some((key.as_str().to_owned(), value.to_str().unwrap().to_owned()))
                            }
                            KeyAndValueRef::Binary(..) => None,
                        })
                        .collect(),
                }),
            };
            results.push(HoldItemResult { result: Some(result) });
        }
        Ok(Response::new(HoldManyReply { results }))
    }

    async fn get_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<HoldReply>, Status> {
        self.0.answer("get_hold", request.metadata()).await?;
        let request = request.into_inner();
        Ok(Response::new(HoldReply {
            show_id: request.show_id,
            hold_id: request.hold_id,
            state: "held".into(),
            ..HoldReply::default()
        }))
    }

    async fn create_session(
        &self,
        request: Request<CreateSessionRequest>,
    ) -> Result<Response<SessionReply>, Status> {
        self.0.answer("create_session", request.metadata()).await?;
        Ok(Response::new(SessionReply { token: format!("token-from-{}", self.0.id) }))
    }

    async fn list_shows(
        &self,
        request: Request<ListShowsRequest>,
    ) -> Result<Response<ListShowsReply>, Status> {
        self.0.answer("list_shows", request.metadata()).await?;
        let show = ShowReply { show_id: 7, group_id: 1, ..ShowReply::default() };
        Ok(Response::new(ListShowsReply { shows: vec![show] }))
    }

    async fn get_show(&self, request: Request<ShowRef>) -> Result<Response<ShowReply>, Status> {
        self.0.answer("get_show", request.metadata()).await?;
        Ok(Response::new(ShowReply {
            show_id: request.get_ref().show_id,
            group_id: 1,
            ..ShowReply::default()
        }))
    }

    async fn get_seat_map(
        &self,
        request: Request<SeatMapRequest>,
    ) -> Result<Response<SeatMapReply>, Status> {
        self.0.answer("get_seat_map", request.metadata()).await?;
        let SeatMapRequest { show_id, linearizable, .. } = *request.get_ref();
        Ok(Response::new(SeatMapReply {
            show_id,
            seats: vec![1, 2, 3],
            linearizable: linearizable && show_id != SHOW_OF_AN_OLD_NODE,
            ..SeatMapReply::default()
        }))
    }

    async fn close_sales(&self, request: Request<ShowRef>) -> Result<Response<SalesReply>, Status> {
        self.0.answer("close_sales", request.metadata()).await?;
        let show_id = request.get_ref().show_id;
        Ok(Response::new(SalesReply {
            show_id,
            group_id: 1,
            status: "closed".into(),
            duplicate: false,
        }))
    }

    async fn cancel_hold(&self, request: Request<HoldRef>) -> Result<Response<HoldReply>, Status> {
        self.0.answer("cancel_hold", request.metadata()).await?;
        let HoldRef { show_id, hold_id } = request.into_inner();
        Ok(Response::new(HoldReply {
            show_id,
            hold_id,
            state: "cancelled".into(),
            ..HoldReply::default()
        }))
    }

    async fn checkout(&self, request: Request<HoldRef>) -> Result<Response<CheckoutReply>, Status> {
        self.0.answer("checkout", request.metadata()).await?;
        let HoldRef { show_id, hold_id } = request.into_inner();
        Ok(Response::new(CheckoutReply {
            show_id,
            hold_id,
            payment_id: 3,
            ..CheckoutReply::default()
        }))
    }

    async fn get_booking(
        &self,
        request: Request<BookingRef>,
    ) -> Result<Response<BookingReply>, Status> {
        self.0.answer("get_booking", request.metadata()).await?;
        let BookingRef { show_id, booking_id } = request.into_inner();
        Ok(Response::new(BookingReply { show_id, booking_id, ..BookingReply::default() }))
    }

    async fn cancel_booking(
        &self,
        request: Request<BookingRef>,
    ) -> Result<Response<BookingReply>, Status> {
        self.0.answer("cancel_booking", request.metadata()).await?;
        let BookingRef { show_id, booking_id } = request.into_inner();
        Ok(Response::new(BookingReply { show_id, booking_id, ..BookingReply::default() }))
    }

    async fn join_queue(&self, request: Request<ShowRef>) -> Result<Response<TicketReply>, Status> {
        self.0.answer("join_queue", request.metadata()).await?;
        let show_id = request.get_ref().show_id;
        Ok(Response::new(TicketReply {
            show_id,
            ticket_id: 1,
            state: "granted".into(),
            ..TicketReply::default()
        }))
    }

    async fn get_ticket(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<TicketReply>, Status> {
        self.0.answer("get_ticket", request.metadata()).await?;
        let TicketRef { show_id, ticket_id } = request.into_inner();
        Ok(Response::new(TicketReply { show_id, ticket_id, ..TicketReply::default() }))
    }

    async fn leave_queue(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<TicketReply>, Status> {
        self.0.answer("leave_queue", request.metadata()).await?;
        let TicketRef { show_id, ticket_id } = request.into_inner();
        Ok(Response::new(TicketReply { show_id, ticket_id, ..TicketReply::default() }))
    }

    async fn join_waitlist(
        &self,
        request: Request<JoinWaitlistRequest>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        self.0.answer("join_waitlist", request.metadata()).await?;
        let JoinWaitlistRequest { show_id, quantity, .. } = request.into_inner();
        Ok(Response::new(WaitlistEntryReply {
            show_id,
            entry_id: 1,
            quantity,
            ..WaitlistEntryReply::default()
        }))
    }

    async fn get_waitlist_entry(
        &self,
        request: Request<EntryRef>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        self.0.answer("get_waitlist_entry", request.metadata()).await?;
        let EntryRef { show_id, entry_id } = request.into_inner();
        Ok(Response::new(WaitlistEntryReply { show_id, entry_id, ..WaitlistEntryReply::default() }))
    }

    async fn leave_waitlist(
        &self,
        request: Request<EntryRef>,
    ) -> Result<Response<WaitlistEntryReply>, Status> {
        self.0.answer("leave_waitlist", request.metadata()).await?;
        let EntryRef { show_id, entry_id } = request.into_inner();
        Ok(Response::new(WaitlistEntryReply { show_id, entry_id, ..WaitlistEntryReply::default() }))
    }

    async fn get_offer(&self, request: Request<OfferRef>) -> Result<Response<OfferReply>, Status> {
        self.0.answer("get_offer", request.metadata()).await?;
        let OfferRef { show_id, offer_id } = request.into_inner();
        Ok(Response::new(OfferReply { show_id, offer_id, ..OfferReply::default() }))
    }

    async fn accept_offer(
        &self,
        request: Request<OfferRef>,
    ) -> Result<Response<HoldReply>, Status> {
        self.0.answer("accept_offer", request.metadata()).await?;
        let OfferRef { show_id, offer_id } = request.into_inner();
        Ok(Response::new(HoldReply { show_id, hold_id: 5, offer_id, ..HoldReply::default() }))
    }

    async fn decline_offer(
        &self,
        request: Request<OfferRef>,
    ) -> Result<Response<OfferReply>, Status> {
        self.0.answer("decline_offer", request.metadata()).await?;
        let OfferRef { show_id, offer_id } = request.into_inner();
        Ok(Response::new(OfferReply {
            show_id,
            offer_id,
            state: "declined".into(),
            ..OfferReply::default()
        }))
    }

    async fn capacity_released(
        &self,
        request: Request<CapacityReleasedRequest>,
    ) -> Result<Response<CapacityReleasedReply>, Status> {
        self.0.answer("capacity_released", request.metadata()).await?;
        let request = request.into_inner();
        Ok(Response::new(CapacityReleasedReply {
            show_id: request.show_id,
            seats_released: request.seats.len() as u32,
            duplicate: false,
        }))
    }

    async fn get_audit(
        &self,
        request: Request<GetAuditRequest>,
    ) -> Result<Response<AuditReply>, Status> {
        self.0.answer("get_audit", request.metadata()).await?;
        let GetAuditRequest { show_id, kind, id } = request.into_inner();
        Ok(Response::new(AuditReply { show_id, kind, id, ..AuditReply::default() }))
    }

    type WatchHoldStream = FakeStream<HoldReply>;

    /// Streams the hold as held, then confirmed, then ends.
    async fn watch_hold(
        &self,
        request: Request<GetHoldRequest>,
    ) -> Result<Response<Self::WatchHoldStream>, Status> {
        self.0.answer("watch_hold", request.metadata()).await?;
        let GetHoldRequest { show_id, hold_id } = request.into_inner();
        let states = ["held", "processing", "confirmed"].map(|state| {
            Ok(HoldReply { show_id, hold_id, state: state.into(), ..HoldReply::default() })
        });
        Ok(Response::new(Box::pin(futures_util::stream::iter(states))))
    }

    type WatchTicketStream = FakeStream<TicketReply>;

    /// Streams the ticket as waiting, then breaks with a coded error.
    async fn watch_ticket(
        &self,
        request: Request<TicketRef>,
    ) -> Result<Response<Self::WatchTicketStream>, Status> {
        self.0.answer("watch_ticket", request.metadata()).await?;
        let TicketRef { show_id, ticket_id } = request.into_inner();
        let mut broken = Status::not_found("gone");
        broken.metadata_mut().insert(client::BOOKING_CODE, "ticket_not_found".parse().unwrap());
        let items = vec![
            Ok(TicketReply {
                show_id,
                ticket_id,
                state: "waiting".into(),
                ..TicketReply::default()
            }),
            Err(broken),
        ];
        Ok(Response::new(Box::pin(futures_util::stream::iter(items))))
    }

    async fn archive_show(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowArchivedReply>, Status> {
        self.0.answer("archive_show", request.metadata()).await?;
        let show_id = request.get_ref().show_id;
        Ok(Response::new(ShowArchivedReply { show_id, group_id: 1, ..Default::default() }))
    }

    async fn move_show(
        &self,
        request: Request<client::MoveShowRequest>,
    ) -> Result<Response<client::ShowMovedReply>, Status> {
        self.0.answer("move_show", request.metadata()).await?;
        let client::MoveShowRequest { show_id, to_group } = *request.get_ref();
        let reply =
            client::ShowMovedReply { show_id, from_group: 1, to_group, ..Default::default() };
        Ok(Response::new(reply))
    }

    async fn erase_session(
        &self,
        request: Request<proto::booking::EraseSessionRequest>,
    ) -> Result<Response<client::SessionErasedReply>, Status> {
        self.0.answer("erase_session", request.metadata()).await?;
        let show_id = request.get_ref().show_id;
        Ok(Response::new(client::SessionErasedReply { show_id, group_id: 1, ..Default::default() }))
    }

    async fn cancel_show(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<ShowCancelledReply>, Status> {
        self.0.answer("cancel_show", request.metadata()).await?;
        let show_id = request.get_ref().show_id;
        Ok(Response::new(ShowCancelledReply {
            show_id,
            group_id: 1,
            ..ShowCancelledReply::default()
        }))
    }

    async fn set_prices(
        &self,
        request: Request<SetPricesRequest>,
    ) -> Result<Response<PricesReply>, Status> {
        self.0.answer("set_prices", request.metadata()).await?;
        let SetPricesRequest { show_id, version, prices_minor } = request.into_inner();
        Ok(Response::new(PricesReply {
            show_id,
            group_id: 1,
            price_version: version,
            prices_minor,
            duplicate: false,
        }))
    }

    async fn configure_admission(
        &self,
        request: Request<ConfigureAdmissionRequest>,
    ) -> Result<Response<AdmissionReply>, Status> {
        self.0.answer("configure_admission", request.metadata()).await?;
        let ConfigureAdmissionRequest { show_id, enabled, window } = request.into_inner();
        Ok(Response::new(AdmissionReply { show_id, group_id: 1, enabled, window }))
    }

    async fn configure_waitlist(
        &self,
        request: Request<ConfigureWaitlistRequest>,
    ) -> Result<Response<WaitlistReply>, Status> {
        self.0.answer("configure_waitlist", request.metadata()).await?;
        let ConfigureWaitlistRequest { show_id, enabled } = request.into_inner();
        Ok(Response::new(WaitlistReply { show_id, group_id: 1, enabled, policy_version: 1 }))
    }

    async fn set_waitlist_policy(
        &self,
        request: Request<SetWaitlistPolicyRequest>,
    ) -> Result<Response<WaitlistPolicyReply>, Status> {
        self.0.answer("set_waitlist_policy", request.metadata()).await?;
        let SetWaitlistPolicyRequest { show_id, rules } = request.into_inner();
        Ok(Response::new(WaitlistPolicyReply {
            show_id,
            group_id: 1,
            policy_version: 2,
            rules,
            ..WaitlistPolicyReply::default()
        }))
    }

    async fn get_waitlist_policy(
        &self,
        request: Request<ShowRef>,
    ) -> Result<Response<WaitlistPolicyReply>, Status> {
        self.0.answer("get_waitlist_policy", request.metadata()).await?;
        let ShowRef { show_id } = request.into_inner();
        Ok(Response::new(WaitlistPolicyReply { show_id, group_id: 1, ..Default::default() }))
    }

    async fn draw_lottery(
        &self,
        request: Request<DrawLotteryRequest>,
    ) -> Result<Response<LotteryReply>, Status> {
        self.0.answer("draw_lottery", request.metadata()).await?;
        let DrawLotteryRequest { show_id, seed } = request.into_inner();
        let seed = seed.unwrap_or(7);
        Ok(Response::new(LotteryReply { show_id, seed, entries: 0, duplicate: false }))
    }

    async fn issue_band_claim(
        &self,
        request: Request<IssueBandClaimRequest>,
    ) -> Result<Response<BandClaimReply>, Status> {
        self.0.answer("issue_band_claim", request.metadata()).await?;
        let IssueBandClaimRequest { band, .. } = request.into_inner();
        Ok(Response::new(BandClaimReply { claim: "c1_test".into(), band, expires_at_s: 1 }))
    }

    async fn get_payment(
        &self,
        request: Request<PaymentRef>,
    ) -> Result<Response<PaymentReply>, Status> {
        self.0.answer("get_payment", request.metadata()).await?;
        let PaymentRef { show_id, payment_id } = request.into_inner();
        Ok(Response::new(PaymentReply {
            show_id,
            payment_id,
            state: "succeeded".into(),
            ..PaymentReply::default()
        }))
    }

    async fn change_catalog(
        &self,
        request: Request<proto::booking::CatalogChangeRequest>,
    ) -> Result<Response<proto::booking::CatalogChangeReply>, Status> {
        self.0.answer("change_catalog", request.metadata()).await?;
        Ok(Response::new(proto::booking::CatalogChangeReply {
            kind: "venue".into(),
            id: 1,
            revision: 1,
            changed: true,
        }))
    }

    async fn search(
        &self,
        request: Request<proto::booking::SearchRequest>,
    ) -> Result<Response<proto::booking::SearchReply>, Status> {
        self.0.answer("search", request.metadata()).await?;
        Ok(Response::new(proto::booking::SearchReply::default()))
    }
}

#[tonic::async_trait]
impl AdminService for Service {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusReply>, Status> {
        self.0.answer("status", request.metadata()).await?;
        Ok(Response::new(StatusReply {
            node_id: self.0.id,
            address: self.0.address.clone(),
            groups: self.0.groups.lock().unwrap().clone(),
            feature_level_max: self.0.feature_level_max.load(std::sync::atomic::Ordering::SeqCst),
        }))
    }

    async fn set_feature_level(
        &self,
        request: Request<proto::booking::SetFeatureLevelRequest>,
    ) -> Result<Response<client::FeatureLevelReply>, Status> {
        self.0.answer("set_feature_level", request.metadata()).await?;
        let proto::booking::SetFeatureLevelRequest { group_id, level } = *request.get_ref();
        Ok(Response::new(client::FeatureLevelReply { group_id, level, duplicate: false }))
    }

    async fn add_learner(
        &self,
        request: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.0.answer("add_learner", request.metadata()).await?;
        Ok(membership(&self.0, request.get_ref().group_id))
    }

    async fn promote(
        &self,
        request: Request<NodesRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.0.answer("promote", request.metadata()).await?;
        Ok(membership(&self.0, request.get_ref().group_id))
    }

    async fn remove(
        &self,
        request: Request<NodesRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.0.answer("remove", request.metadata()).await?;
        Ok(membership(&self.0, request.get_ref().group_id))
    }

    async fn move_replica(
        &self,
        request: Request<MoveReplicaRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.0.answer("move_replica", request.metadata()).await?;
        Ok(membership(&self.0, request.get_ref().group_id))
    }

    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.0.answer("transfer_leader", request.metadata()).await?;
        Ok(membership(&self.0, request.get_ref().group_id))
    }

    type BackupStream = Pin<Box<dyn Stream<Item = Result<BackupChunk, Status>> + Send>>;

    /// An empty state of the group, whose header names the node that answered as its voter.
    async fn backup(
        &self,
        request: Request<proto::booking::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        self.0.answer("backup", request.metadata()).await?;
        let header = proto::booking::BackupHeader {
            group_id: request.get_ref().group_id,
            log_index: 7,
            // SHA-256 of no bytes: the state is empty.
            state_sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
            voters: vec![self.0.id],
            ..Default::default()
        };
        let first = BackupChunk { header: Some(header), data: Vec::new() };
        Ok(Response::new(Box::pin(futures_util::stream::iter([Ok(first)]))))
    }

    async fn restore(
        &self,
        request: Request<tonic::Streaming<proto::booking::RestoreChunk>>,
    ) -> Result<Response<proto::booking::RestoreReply>, Status> {
        self.0.answer("restore", request.metadata()).await?;
        Err(Status::unimplemented("the fake nodes do not restore"))
    }
}

/// An in-process network for [`Client::with_connector`]: a connection to a node started on it
/// is a `tokio::io::duplex` pipe, and any other address is refused. Records every address the
/// client asks it for.
#[derive(Default)]
struct Network {
    /// Where each node's server takes its new connections, by address.
    nodes: Mutex<BTreeMap<String, mpsc::UnboundedSender<io::Result<DuplexStream>>>>,
    /// Every address asked for, in order.
    dialed: Mutex<Vec<String>>,
}

impl Network {
    /// Starts a node reachable only through this network, as `address`.
    fn start(&self, id: u64, address: &str, default: Answer) -> Arc<Fake> {
        let fake = Fake::new(id, address.to_owned(), default);
        let (sender, receiver) = mpsc::unbounded_channel();
        let incoming = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|connection| (connection, receiver))
        });
        fake.serve(incoming);
        self.nodes.lock().unwrap().insert(address.to_owned(), sender);
        fake
    }

    fn dialed(&self) -> Vec<String> {
        self.dialed.lock().unwrap().clone()
    }
}

impl client::Connector for Network {
    fn connect(&self, address: &str) -> client::ConnectFuture {
        self.dialed.lock().unwrap().push(address.to_owned());
        let node = self.nodes.lock().unwrap().get(address).cloned();
        let address = address.to_owned();
        Box::pin(async move {
            let refused =
                || io::Error::new(io::ErrorKind::ConnectionRefused, format!("{address} refused"));
            let node = node.ok_or_else(refused)?;
            let (near, far) = tokio::io::duplex(64 * 1024);
            node.send(Ok(far)).map_err(|_| refused())?;
            Ok(Box::new(near) as Box<dyn client::Stream>)
        })
    }
}

/// A client of `network` that knows `addresses`.
fn client_on(network: &Arc<Network>, addresses: &[&str], budget_ms: u64) -> Client {
    let addresses = addresses.iter().map(|address| (*address).to_owned()).collect();
    let connector: Arc<dyn client::Connector> = network.clone();
    Client::with_connector(addresses, config(budget_ms), connector).unwrap()
}

/// A short retry policy so that exhausted budgets fail fast.
fn config(budget_ms: u64) -> Config {
    Config {
        retry_budget: Duration::from_millis(budget_ms),
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        attempt_timeout: Duration::from_millis(300),
        ..Config::default()
    }
}

fn client(nodes: &[&Arc<Fake>], budget_ms: u64) -> Client {
    let addresses = nodes.iter().map(|fake| fake.address.clone()).collect();
    Client::with_config(addresses, config(budget_ms)).unwrap()
}

/// An address nothing listens on.
fn closed_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

fn group(group_id: u64, role: &str, leader_id: u64) -> GroupStatus {
    GroupStatus { group_id, role: role.into(), leader_id, member: true, ..GroupStatus::default() }
}

#[tokio::test]
async fn hold_follows_the_leader_hint_with_the_same_key_and_caches_the_leader() {
    let leader = Fake::start(2, Answer::Serve).await;
    let follower = Fake::start(1, Answer::NotLeader(2, leader.address.clone())).await;
    let client = client(&[&follower], 5_000);

    let hold = client.hold("tok", 7, &[54, 55, 56], 1, None).await.unwrap();
    assert_eq!((hold.show_id, hold.seats.as_slice()), (7, &[54, 55, 56][..]));
    let (redirected, served) = (follower.calls("hold"), leader.calls("hold"));
    assert_eq!((redirected.len(), served.len()), (1, 1));
    let key = redirected[0].key.clone().unwrap();
    assert_eq!(key.len(), 32);
    assert_eq!(served[0].key.as_deref(), Some(key.as_str()));
    assert_eq!(served[0].authorization.as_deref(), Some("Bearer tok"));
    assert!(client.addresses().contains(&leader.address));

    // The show's leader is cached: the next call goes straight there, under a new key.
    client.get_hold("tok", 7, 1).await.unwrap();
    client.hold("tok", 7, &[60], 1, Some("second")).await.unwrap();
    assert_eq!(follower.calls("hold").len(), 1);
    assert_eq!(follower.calls("get_hold").len(), 0);
    assert_eq!(leader.calls("get_hold")[0].key, None);
    assert_eq!(leader.calls("hold")[1].key.as_deref(), Some("second"));
}

#[tokio::test]
async fn no_leader_is_retried_with_backoff_until_one_is_elected() {
    let node = Fake::start(1, Answer::Serve).await;
    node.script([Answer::NoLeader, Answer::NoLeader, Answer::NoLeader]);
    let client = client(&[&node], 5_000);

    client.hold("tok", 7, &[1], 1, Some("k-1")).await.unwrap();
    let calls = node.calls("hold");
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|call| call.key.as_deref() == Some("k-1")));
}

#[tokio::test]
async fn without_a_hint_the_next_node_is_tried() {
    let first = Fake::start(1, Answer::NoLeader).await;
    let second = Fake::start(2, Answer::Serve).await;
    let client = client(&[&first, &second], 5_000);

    let placement = client.open_sales(9).await.unwrap();
    assert_eq!(placement.group_id, 1);
    assert_eq!((first.calls("open_sales").len(), second.calls("open_sales").len()), (1, 1));
    assert_eq!(first.calls("open_sales")[0].key, second.calls("open_sales")[0].key);
    // Show 10 is in the same group (placement says group 1): its leader is known too.
    client
        .create_show(&NewShow::uniform(10, 100, 500, "EUR"), None)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    client.open_sales(10).await.unwrap();
    assert_eq!(first.calls("open_sales").len(), 1);
}

#[tokio::test]
async fn a_hint_to_an_unreachable_node_is_not_followed_again() {
    // Node 1 still believes the dead node 3 leads; node 2 took over.
    let dead = closed_address().to_string();
    let stale = Fake::start(1, Answer::NotLeader(3, dead.clone())).await;
    let leader = Fake::start(2, Answer::Serve).await;
    let client = client(&[&stale, &leader], 5_000);

    client.hold("tok", 7, &[1], 1, Some("k")).await.unwrap();
    // stale → dead (refused) → stale (its hint to dead ignored) → leader.
    assert_eq!((stale.calls("hold").len(), leader.calls("hold").len()), (2, 1));
}

#[tokio::test]
async fn rejections_are_final_and_keep_their_codes() {
    let node = Fake::start(1, Answer::Reject(Code::Aborted, "seat_unavailable")).await;
    let client = client(&[&node], 5_000);

    let error = client.hold("tok", 7, &[1], 1, None).await.unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Rejected { status: Code::Aborted, code: client::ErrorCode::SeatUnavailable, .. }
        ),
        "{error:?}"
    );
    assert_eq!(node.calls("hold").len(), 1);
}

#[tokio::test]
async fn an_exhausted_budget_is_unavailable_with_the_key_to_retry() {
    let node = Fake::start(1, Answer::NoLeader).await;
    let client = client(&[&node], 300);

    let error = client.hold("tok", 7, &[1], 1, None).await.unwrap_err();
    match &error {
        Error::Unavailable { attempts, booking_code, outcome_unknown, idempotency_key, .. } => {
            assert!(*attempts > 2, "{error}");
            assert_eq!(booking_code.as_deref(), Some(client::ErrorCode::NoLeader.name()));
            assert!(!outcome_unknown, "no_leader means not proposed");
            let sent = node.calls("hold")[0].key.clone();
            assert_eq!(idempotency_key, &sent);
        }
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("no_leader"), "{error}");
}

#[tokio::test]
async fn a_hang_makes_the_outcome_unknown() {
    let node = Fake::start(1, Answer::Hang(Duration::from_secs(5))).await;
    let client = client(&[&node], 700);

    let error = client.hold("tok", 7, &[1], 1, Some("k")).await.unwrap_err();
    assert!(error.is_outcome_unknown(), "{error:?}");
    assert_eq!(error.grpc_code(), Some(Code::DeadlineExceeded));
    // A read that hangs is not "outcome unknown": it changed nothing.
    let error = client.get_hold("tok", 7, 1).await.unwrap_err();
    assert!(matches!(error, Error::Unavailable { outcome_unknown: false, .. }), "{error:?}");
}

#[tokio::test]
async fn a_refusal_after_an_attempt_that_hung_leaves_the_outcome_unknown() {
    // Node 1 hangs (it may have applied the hold); node 2 refuses before its rules see it.
    let hung = Fake::start(1, Answer::Hang(Duration::from_secs(5))).await;
    let full = Fake::start(2, Answer::Reject(Code::ResourceExhausted, "disk_full")).await;
    let client = client(&[&hung, &full], 5_000);

    let error = client.hold("tok", 7, &[1], 1, Some("k")).await.unwrap_err();
    assert!(error.is_outcome_unknown(), "{error:?}");
    assert_eq!(error.booking_code(), Some("disk_full"), "{error:?}");
    assert_eq!((hung.calls("hold").len(), full.calls("hold").len()), (1, 1));
    // Alone, the same refusal is final and certain: nothing was applied.
    let error = self::client(&[&full], 5_000).hold("tok", 7, &[1], 1, None).await.unwrap_err();
    assert!(
        matches!(&error, Error::Rejected { code: client::ErrorCode::DiskFull, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn unreachable_nodes_exhaust_the_budget_without_unknown_outcome() {
    let client = Client::with_config(vec![closed_address().to_string()], config(300)).unwrap();
    let error = client.hold("tok", 7, &[1], 1, None).await.unwrap_err();
    assert!(matches!(error, Error::Unavailable { outcome_unknown: false, .. }), "{error:?}");

    let address = closed_address().to_string();
    let error = client.status(&address, false).await.unwrap_err();
    assert!(
        matches!(&error, Error::Transport { status: Code::Unavailable, address: a, .. } if *a == address),
        "{error:?}"
    );
}

#[tokio::test]
async fn membership_goes_to_the_leader_found_by_status() {
    let one = Fake::start(1, Answer::Serve).await;
    let two = Fake::start(2, Answer::Serve).await;
    *one.groups.lock().unwrap() = vec![group(0, "leader", 1), group(1, "follower", 2)];
    *two.groups.lock().unwrap() = vec![group(0, "follower", 1), group(1, "leader", 2)];
    let client = client(&[&one, &two], 5_000);

    let reply = client.promote(1, &[3]).await.unwrap();
    assert_eq!(reply.leader_id, 2);
    assert_eq!((one.calls("promote").len(), two.calls("promote").len()), (0, 1));
    assert!(two.calls("promote")[0].key.is_some());
    client.add_learner(0, 4, "127.0.0.1:7104", true).await.unwrap();
    assert_eq!((one.calls("add_learner").len(), two.calls("add_learner").len()), (1, 0));

    let nodes = client.cluster_status(false).await;
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1].result.as_ref().unwrap().node_id, 2);
}

#[tokio::test]
async fn a_stale_cached_leader_is_corrected_by_its_hint() {
    let one = Fake::start(1, Answer::Serve).await;
    let two = Fake::start(2, Answer::Serve).await;
    *one.groups.lock().unwrap() = vec![group(1, "leader", 1)];
    let client = client(&[&one, &two], 5_000);

    client.transfer_leader(1, 1).await.unwrap();
    assert_eq!(one.calls("transfer_leader").len(), 1);
    // Leadership moved to node 2: node 1 now points there.
    one.set_default(Answer::NotLeader(2, two.address.clone()));
    client.remove(1, &[3]).await.unwrap();
    assert_eq!((one.calls("remove").len(), two.calls("remove").len()), (1, 1));
    client.remove(1, &[4]).await.unwrap();
    assert_eq!((one.calls("remove").len(), two.calls("remove").len()), (1, 2));
}

#[tokio::test]
async fn a_backup_takes_each_group_from_its_leader_and_group_0_last() {
    let one = Fake::start(1, Answer::Serve).await;
    let two = Fake::start(2, Answer::Serve).await;
    *one.groups.lock().unwrap() = vec![group(0, "leader", 1), group(1, "follower", 2)];
    *two.groups.lock().unwrap() = vec![group(0, "follower", 1), group(1, "leader", 2)];
    let client = client(&[&one, &two], 5_000);

    let backup = client.backup().await.unwrap();
    let order: Vec<u64> = backup.groups.iter().map(|group| group.header.group_id).collect();
    assert_eq!(order, [1, 0]);
    assert_eq!((one.calls("backup").len(), two.calls("backup").len()), (1, 1));
    // Each group's header names the node that answered: its leader.
    assert_eq!(backup.group(1).unwrap().header.voters, [2]);
    assert_eq!(backup.group(0).unwrap().header.voters, [1]);
    // A leader that moved points to the new one, which is asked next.
    one.set_default(Answer::NotLeader(2, two.address.clone()));
    let moved = client.backup_group(0).await.unwrap();
    assert_eq!(moved.header.voters, [2]);
}

#[tokio::test]
async fn a_move_follows_each_steps_leader_with_one_key_until_it_is_done() {
    let one = Fake::start(1, Answer::Serve).await;
    let two = Fake::start(2, Answer::Serve).await;
    let three = Fake::start(3, Answer::Serve).await;
    // The source's leader (1) freezes and points at the target's (2), which imports and points
    // at group 0's (3), which relocates and points back at the target's, which activates and
    // points at the source's, which drops: five attempts, one logical call.
    one.script([Answer::NotLeader(2, two.address.clone())]);
    two.script([
        Answer::NotLeader(3, three.address.clone()),
        Answer::NotLeader(1, one.address.clone()),
    ]);
    three.script([Answer::NotLeader(2, two.address.clone())]);
    let client = client(&[&one, &two, &three], 5_000);

    let moved = client.move_show(7, 2).await.unwrap();
    assert_eq!((moved.show_id, moved.to_group), (7, 2));
    let calls: Vec<Call> =
        [&one, &two, &three].iter().flat_map(|fake| fake.calls("move_show")).collect();
    assert_eq!(calls.len(), 5);
    assert_eq!((one.calls("move_show").len(), two.calls("move_show").len()), (2, 2));
    let key = calls[0].key.clone();
    assert!(key.is_some() && calls.iter().all(|call| call.key == key), "{calls:?}");
    // A show moving answers `show_moving`, which is retried until it serves.
    one.script([Answer::Reject(Code::Unavailable, "show_moving")]);
    two.script([Answer::Reject(Code::Unavailable, "show_moving")]);
    three.script([Answer::Reject(Code::Unavailable, "show_moving")]);
    client.open_sales(7).await.unwrap();
}

#[tokio::test]
async fn a_feature_level_is_raised_only_when_every_member_knows_it_group_0_last() {
    let one = Fake::start(1, Answer::Serve).await;
    let two = Fake::start(2, Answer::Serve).await;
    let member = |group_id, role: &str, leader_id| GroupStatus {
        voters: vec![1, 2],
        ..group(group_id, role, leader_id)
    };
    *one.groups.lock().unwrap() = vec![member(0, "leader", 1), member(1, "follower", 2)];
    *two.groups.lock().unwrap() = vec![member(0, "follower", 1), member(1, "leader", 2)];
    let client = client(&[&one, &two], 5_000);

    // Node 2 runs an older build: nothing is raised.
    one.feature_level_max.store(1, std::sync::atomic::Ordering::SeqCst);
    let refused = client.raise_feature_level(1).await.unwrap_err();
    assert!(matches!(&refused, Error::InvalidArgument(message) if message.contains("node 2")));
    assert!(one.calls("set_feature_level").is_empty() && two.calls("set_feature_level").is_empty());
    // A member the client was not given: nothing is raised either.
    two.feature_level_max.store(1, std::sync::atomic::Ordering::SeqCst);
    *two.groups.lock().unwrap() = vec![
        member(0, "follower", 1),
        GroupStatus { voters: vec![1, 2, 3], ..member(1, "leader", 2) },
    ];
    let refused = client.raise_feature_level(1).await.unwrap_err();
    assert!(matches!(&refused, Error::InvalidArgument(message) if message.contains("node 3")));
    // Every member knows it: each group at its leader, group 0 last.
    *two.groups.lock().unwrap() = vec![member(0, "follower", 1), member(1, "leader", 2)];
    let raised = client.raise_feature_level(1).await.unwrap();
    let order: Vec<u64> = raised.iter().map(|reply| reply.group_id).collect();
    assert_eq!(order, [1, 0]);
    assert_eq!(
        (one.calls("set_feature_level").len(), two.calls("set_feature_level").len()),
        (1, 1)
    );
}

#[tokio::test]
async fn malformed_input_is_refused_before_sending() {
    assert!(matches!(Client::connect(vec![]), Err(Error::InvalidArgument(_))));
    assert!(matches!(Client::connect(vec!["ftp://a:1".into()]), Err(Error::InvalidArgument(_))));
    let node = Fake::start(1, Answer::Serve).await;
    let client = client(&[&node], 1_000);
    let long_key = "k".repeat(client::IDEMPOTENCY_KEY_LEN_MAX + 1);
    let error = client.hold("tok", 7, &[1], 1, Some(&long_key)).await.unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    let error = client.hold("a token", 7, &[1], 1, None).await.unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    assert!(node.calls("hold").is_empty());
}

#[tokio::test]
async fn sessions_and_show_lists_come_from_any_node() {
    let one = Fake::start(1, Answer::NoLeader).await;
    let two = Fake::start(2, Answer::Serve).await;
    let client = client(&[&one, &two], 5_000);

    assert_eq!(client.create_session().await.unwrap(), "token-from-2");
    assert_eq!(client.list_shows().await.unwrap()[0].show_id, 7);
    assert!(two.calls("create_session")[0].key.is_none());
    assert!(two.calls("list_shows")[0].authorization.is_none());
}

#[tokio::test]
async fn buyer_calls_carry_the_token_and_keep_one_key_across_hints() {
    let leader = Fake::start(2, Answer::Serve).await;
    let follower = Fake::start(1, Answer::NotLeader(2, leader.address.clone())).await;
    let client = client(&[&follower], 5_000);

    let held = client.hold_with_grant("tok", 7, &[1], 1, 9, Some("h")).await.unwrap();
    assert_eq!(held.grant_ticket_id, 9);
    // The hold's redirect cached the show's leader: every call below goes straight there, with
    // the caller's token, and a key on mutations only.
    client.cancel_hold("tok", 7, 1, Some("c")).await.unwrap();
    assert_eq!(client.checkout("tok", 7, 1, None).await.unwrap().payment_id, 3);
    client.get_booking("tok", 7, 2).await.unwrap();
    client.cancel_booking("tok", 7, 2, None).await.unwrap();
    assert_eq!(client.join_queue("tok", 7, None).await.unwrap().state, "granted");
    client.get_ticket("tok", 7, 1).await.unwrap();
    client.leave_queue("tok", 7, 1, None).await.unwrap();
    assert_eq!(client.join_waitlist("tok", 7, 2, None).await.unwrap().quantity, 2);
    client.get_waitlist_entry("tok", 7, 1).await.unwrap();
    client.leave_waitlist("tok", 7, 1, None).await.unwrap();
    client.get_offer("tok", 7, 4).await.unwrap();
    assert_eq!(client.accept_offer("tok", 7, 4, None).await.unwrap().offer_id, 4);
    assert_eq!(client.decline_offer("tok", 7, 4, None).await.unwrap().state, "declined");

    let mutations = [
        "cancel_hold",
        "checkout",
        "cancel_booking",
        "join_queue",
        "leave_queue",
        "join_waitlist",
        "leave_waitlist",
        "accept_offer",
        "decline_offer",
    ];
    for method in mutations {
        let calls = leader.calls(method);
        assert_eq!(calls.len(), 1, "{method}");
        assert_eq!(calls[0].authorization.as_deref(), Some("Bearer tok"), "{method}");
        assert!(calls[0].key.is_some(), "{method}");
    }
    assert_eq!(leader.calls("cancel_hold")[0].key.as_deref(), Some("c"));
    for method in ["get_booking", "get_ticket", "get_waitlist_entry", "get_offer"] {
        let calls = leader.calls(method);
        assert_eq!(calls.len(), 1, "{method}");
        assert_eq!(calls[0].authorization.as_deref(), Some("Bearer tok"), "{method}");
        assert!(calls[0].key.is_none(), "{method}");
    }
    // Only the first call was redirected; the hint's key was the one the leader got.
    assert_eq!(follower.calls("hold").len(), 1);
    assert_eq!(follower.calls("hold")[0].key.as_deref(), Some("h"));
    assert_eq!(leader.calls("hold")[0].key.as_deref(), Some("h"));

    // A mutation redirected by a hint keeps its key.
    let other = Client::with_config(vec![follower.address.clone()], config(5_000)).unwrap();
    other.checkout("tok", 8, 1, None).await.unwrap();
    let first = follower.calls("checkout")[0].key.clone().unwrap();
    assert_eq!(leader.calls("checkout")[1].key.as_deref(), Some(first.as_str()));
}

#[tokio::test]
async fn the_operator_token_goes_on_operator_calls_only() {
    let node = Fake::start(1, Answer::Serve).await;
    let client = client(&[&node], 5_000).with_operator_token("op-secret").unwrap();

    let show = NewShow { open_sales: true, waitlist: true, ..NewShow::uniform(7, 10, 100, "EUR") };
    client.create_show(&show, None).await.unwrap();
    client.close_sales(7).await.unwrap();
    let released = client.capacity_released(7, "event-1", &[1, 2]).await.unwrap();
    assert_eq!(released.seats_released, 2);
    let audit = client.get_audit(7, "hold", 3).await.unwrap();
    assert_eq!((audit.kind.as_str(), audit.id), ("hold", 3));
    client.get_show(7).await.unwrap();
    client.hold("buyer", 7, &[1], 1, None).await.unwrap();
    assert_eq!(client.open_sales(7).await.unwrap().status, "on_sale");
    client.cancel_show(7).await.unwrap();
    let prices = client.set_prices(7, 2, &[4_500, 3_000]).await.unwrap();
    assert_eq!((prices.price_version, prices.prices_minor.as_slice()), (2, &[4_500, 3_000][..]));
    let admission = client.configure_admission(7, true, 5).await.unwrap();
    assert_eq!((admission.enabled, admission.window), (true, 5));
    assert!(!client.configure_waitlist(7, false).await.unwrap().enabled);
    // A payment is read as the operator without a session token, as its owner with one.
    assert_eq!(client.get_payment(None, 7, 8).await.unwrap().payment_id, 8);
    client.get_payment(Some("buyer"), 7, 8).await.unwrap();
    let venue = client::CatalogRecord::ListingShowId(7);
    let changed = client.change_catalog(client::CatalogAction::Retire, venue, None).await;
    assert!(changed.unwrap().changed);
    client
        .search(&client::SearchRequest { q: "hamlet".into(), ..Default::default() })
        .await
        .unwrap();
    // Admin calls are operator calls too, a status round included.
    client.status(&node.address, false).await.unwrap();
    client.transfer_leader(1, 1).await.unwrap();

    for method in [
        "status",
        "transfer_leader",
        "change_catalog",
        "create_show",
        "close_sales",
        "capacity_released",
        "get_audit",
        "open_sales",
        "cancel_show",
        "set_prices",
        "configure_admission",
        "configure_waitlist",
        "get_payment",
    ] {
        let call = &node.calls(method)[0];
        assert_eq!(call.authorization.as_deref(), Some("Bearer op-secret"), "{method}");
        let read = matches!(method, "get_audit" | "get_payment" | "status");
        assert_eq!(call.key.is_some(), !read, "{method}");
    }
    assert_eq!(node.calls("get_payment")[1].authorization.as_deref(), Some("Bearer buyer"));
    assert!(node.calls("get_show")[0].authorization.is_none());
    // Search is a buyer's read: no token, no key.
    let search = &node.calls("search")[0];
    assert!(search.authorization.is_none() && search.key.is_none());
    assert_eq!(node.calls("hold")[0].authorization.as_deref(), Some("Bearer buyer"));
    assert!(matches!(
        Client::connect(vec![node.address.clone()]).unwrap().with_operator_token("a b"),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn local_reads_do_not_make_the_answering_node_the_cached_leader() {
    let replica = Fake::start(1, Answer::Serve).await;
    let leader = Fake::start(2, Answer::Serve).await;
    let client = client(&[&replica, &leader], 5_000);

    // The first node answers the seat map (any replica may)...
    assert_eq!(client.get_seat_map(7).await.unwrap().seats, [1, 2, 3]);
    assert_eq!(replica.calls("get_seat_map").len(), 1);
    // ...but a write then starts at the next node rather than at it.
    replica.set_default(Answer::NotLeader(2, leader.address.clone()));
    client.hold("tok", 7, &[1], 1, None).await.unwrap();
    assert_eq!((replica.calls("hold").len(), leader.calls("hold").len()), (0, 1));
    // A linearizable read caches: the hold's answer made node 2 the show's leader.
    client.get_seat_map(7).await.unwrap();
    assert_eq!(leader.calls("get_seat_map").len(), 1);
}

#[tokio::test]
async fn a_linearizable_seat_map_is_read_on_the_leader_the_hint_names() {
    let leader = Fake::start(2, Answer::Serve).await;
    let follower = Fake::start(1, Answer::NotLeader(2, leader.address.clone())).await;
    let client = client(&[&follower], 5_000);

    let map = client.get_seat_map_linearizable(7).await.unwrap();
    assert!(map.linearizable && map.show_id == 7, "{map:?}");
    let counts = || (follower.calls("get_seat_map").len(), leader.calls("get_seat_map").len());
    assert_eq!(counts(), (1, 1));
    // The leader that answered is cached, as for any read only the leader serves.
    client.get_seat_map_linearizable(7).await.unwrap();
    assert_eq!(counts(), (1, 2));
    // A replica's map handed out as linearizable would be a silent stale read: refused.
    let error = client.get_seat_map_linearizable(SHOW_OF_AN_OLD_NODE).await.unwrap_err();
    assert_eq!(error.booking_code(), Some("unimplemented"), "{error:?}");
}

#[tokio::test]
async fn watches_stream_until_the_end_or_a_coded_error() {
    let leader = Fake::start(2, Answer::Serve).await;
    let follower = Fake::start(1, Answer::NotLeader(2, leader.address.clone())).await;
    let client = client(&[&follower], 5_000);

    let watch = client.watch_hold("tok", 7, 3).await.unwrap();
    let states: Vec<String> = watch.map(|hold| hold.unwrap().state).collect().await;
    assert_eq!(states, ["held", "processing", "confirmed"]);
    assert_eq!(leader.calls("watch_hold")[0].authorization.as_deref(), Some("Bearer tok"));

    let mut watch = client.watch_ticket("tok", 7, 4).await.unwrap();
    assert_eq!(watch.next().await.unwrap().unwrap().state, "waiting");
    let error = watch.next().await.unwrap().unwrap_err();
    assert_eq!(error.booking_code(), Some("ticket_not_found"));
    assert!(watch.next().await.is_none());
}

#[tokio::test]
async fn a_connector_carries_calls_and_hints_under_normalized_addresses() {
    // Names no resolver knows: only the connector can reach these nodes.
    let network = Arc::new(Network::default());
    let leader = network.start(2, "node-2:7000", Answer::Serve);
    let follower = network.start(1, "node-1:7000", Answer::NotLeader(2, "node-2:7000".into()));
    let client = client_on(&network, &[" http://node-1:7000/ "], 5_000);

    let hold = client.hold("tok", 7, &[54, 55], 1, Some("k-1")).await.unwrap();
    assert_eq!(hold.seats, [54, 55]);
    assert_eq!((follower.calls("hold").len(), leader.calls("hold").len()), (1, 1));
    assert_eq!(leader.calls("hold")[0].key.as_deref(), Some("k-1"));
    // The cached leader's channel is reused: no new connection for the next call.
    client.get_hold("tok", 7, 1).await.unwrap();
    assert_eq!(leader.calls("get_hold").len(), 1);
    assert_eq!(network.dialed(), ["node-1:7000", "node-2:7000"]);

    let status = client.status("node-2:7000", false).await.unwrap();
    assert_eq!(status.node_id, 2);
    assert_eq!(network.dialed().len(), 2);
}

#[tokio::test]
async fn a_node_the_connector_refuses_is_unreachable() {
    let network = Arc::new(Network::default());
    let client = client_on(&network, &["node-9:7000"], 300);

    let error = client.status("http://node-9:7000", false).await.unwrap_err();
    assert!(
        matches!(&error, Error::Transport { status: Code::Unavailable, address, message }
            if address == "node-9:7000" && message.contains("node-9:7000 refused")),
        "{error:?}"
    );
    assert_eq!(network.dialed(), ["node-9:7000"]);
    // A refused connection never carried the mutation: its outcome is known.
    let error = client.hold("tok", 7, &[1], 1, None).await.unwrap_err();
    assert!(matches!(error, Error::Unavailable { outcome_unknown: false, .. }), "{error:?}");
}

#[tokio::test]
async fn through_a_connector_a_hint_to_a_refused_node_is_not_followed_again() {
    // Node 1 still believes the dead node 3 leads; node 2 took over.
    let network = Arc::new(Network::default());
    let stale = network.start(1, "node-1:7000", Answer::NotLeader(3, "node-3:7000".into()));
    let leader = network.start(2, "node-2:7000", Answer::Serve);
    let client = client_on(&network, &["node-1:7000", "node-2:7000"], 5_000);

    client.hold("tok", 7, &[1], 1, Some("k")).await.unwrap();
    // stale → node 3 (refused) → stale (its hint to node 3 ignored) → leader.
    assert_eq!((stale.calls("hold").len(), leader.calls("hold").len()), (2, 1));
    assert!(network.dialed().iter().any(|address| address == "node-3:7000"));
}

#[tokio::test]
async fn concurrent_holds_share_hold_many_calls_each_with_its_key_and_token() {
    let node = Fake::start(1, Answer::Serve).await;
    node.hold_many.store(true, Ordering::SeqCst);
    let config = Config { hold_batches_in_flight_max: 1, ..config(5_000) };
    let client = Client::with_config(vec![node.address.clone()], config).unwrap();
    // The first hold of a show finds its leader with a `Hold` call; the rest are batched.
    client.hold("tok", 7, &[100], 1, None).await.unwrap();
    assert_eq!(node.calls("hold").len(), 1);

    let holds = (0..64u32).map(|at| {
        let client = client.clone();
        async move {
            let (token, key) = (format!("tok-{at}"), format!("key-{at}"));
            client.hold(&token, 7, &[at], 1, Some(&key)).await
        }
    });
    let held = futures_util::future::join_all(holds).await;
    for (at, hold) in held.into_iter().enumerate() {
        assert_eq!(hold.unwrap().seats, [at as u32]);
    }
    let items = node.calls("hold_many_item");
    assert_eq!(items.len(), 64);
    for at in 0..64 {
        let key = format!("key-{at}");
        let call = items.iter().find(|call| call.key.as_deref() == Some(key.as_str())).unwrap();
        assert_eq!(call.authorization, Some(format!("Bearer tok-{at}")));
    }
    // One call in flight at a time: holds queued behind the first call went out together.
    let calls = node.calls("hold_many");
    assert!(calls.len() < 64, "{} calls for 64 holds", calls.len());
    assert_eq!(node.calls("hold").len(), 1);
}

#[tokio::test]
async fn a_batched_hold_on_a_follower_follows_the_hint_as_a_hold_with_the_same_key() {
    let leader = Fake::start(2, Answer::Serve).await;
    let follower = Fake::start(1, Answer::NotLeader(2, leader.address.clone())).await;
    follower.hold_many.store(true, Ordering::SeqCst);
    leader.hold_many.store(true, Ordering::SeqCst);
    let client = client(&[&follower], 5_000);
    // The client believes the follower leads show 7 (it led it once).
    follower.script([Answer::Serve]);
    client.hold("tok", 7, &[1], 1, Some("k-0")).await.unwrap();

    client.hold("tok", 7, &[1], 1, Some("k-1")).await.unwrap();
    assert_eq!(follower.calls("hold_many_item")[0].key.as_deref(), Some("k-1"));
    let served = leader.calls("hold");
    assert_eq!(served.len(), 1);
    assert_eq!(served[0].key.as_deref(), Some("k-1"));
    // The leader the hint named is cached: the next hold is batched there.
    client.hold("tok", 7, &[2], 1, Some("k-2")).await.unwrap();
    assert_eq!(leader.calls("hold_many_item")[0].key.as_deref(), Some("k-2"));
    // A rejected item is final, with its code, and not sent again.
    let rejecting = Fake::start(3, Answer::Reject(Code::Aborted, "seat_unavailable")).await;
    rejecting.hold_many.store(true, Ordering::SeqCst);
    let client = client_with(&rejecting);
    rejecting.script([Answer::Serve]);
    client.hold("tok", 7, &[1], 1, None).await.unwrap();
    let error = client.hold("tok", 7, &[1], 1, None).await.unwrap_err();
    assert_eq!(error.booking_code(), Some("seat_unavailable"));
    assert_eq!(rejecting.calls("hold_many_item").len(), 1);
    assert_eq!(rejecting.calls("hold").len(), 1);
}

#[tokio::test]
async fn a_batched_hold_whose_call_hung_stays_outcome_unknown() {
    // The batch call hangs past the attempt timeout, then every retry finds no leader: the
    // first attempt may have been applied, so the outcome is unknown.
    let node = Fake::start(1, Answer::NoLeader).await;
    node.hold_many.store(true, Ordering::SeqCst);
    node.script([Answer::Serve, Answer::Hang(Duration::from_secs(5))]);
    let client = client(&[&node], 700);
    client.hold("tok", 7, &[1], 1, Some("k-0")).await.unwrap();

    let error = client.hold("tok", 7, &[1], 1, Some("k")).await.unwrap_err();
    assert!(error.is_outcome_unknown(), "{error:?}");
    assert_eq!(node.calls("hold_many_item")[0].key.as_deref(), Some("k"));
    assert!(node.calls("hold").iter().skip(1).all(|call| call.key.as_deref() == Some("k")));
}

fn client_with(node: &Arc<Fake>) -> Client {
    client(&[node], 5_000)
}
