//! Packing the holds of concurrent callers into `HoldMany` calls.
//!
//! One gRPC call costs a node tens of microseconds of CPU whatever it carries, so one call per
//! hold caps an on-sale far below what a group can commit. As TigerBeetle's clients do, a
//! [`Client`] queues every [`Client::hold`] and a task sends what queued up as one call per
//! leader, keeping at most [`crate::Config::hold_batches_in_flight_max`] calls in flight: while
//! every slot is busy, holds queue, and the next call carries them all. Nothing waits for a
//! batch to fill, so a lone hold costs one call, as before.
//!
//! Owns the queue, the batching task, and turning each item's answer into the caller's result.
//! Never retries an item itself: an item the leader did not decide for good (it moved, or the
//! outcome is unknown) goes through the ordinary call loop of `client.rs` under the same
//! idempotency key, with hints, backoff and budget, and an outcome that was already unknown
//! stays unknown.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use proto::booking::booking_service_client::BookingServiceClient;
use proto::booking::hold_item_result::Result as ItemResult;
use proto::booking::{HoldItem, HoldManyRequest, HoldReply, HoldRequest, ItemStatus};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tonic::Status;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};

use crate::client::{Client, Inner, Kind};
use crate::error::{self, Delivery, Error, Result, Verdict};
use crate::key::CallMetadata;
use crate::route::Route;

/// The most holds in one `HoldMany` call (a node takes up to 1,024).
pub const HOLD_BATCH_ITEMS_MAX: usize = 512;

/// One queued hold and where its result goes.
pub(crate) struct HoldJob {
    /// The show, for routing.
    pub(crate) show_id: u64,
    /// The caller's session token.
    pub(crate) token: String,
    /// The key and the authorization, as a `Hold` call would carry them (also for the
    /// fallback).
    pub(crate) metadata: CallMetadata,
    /// The hold.
    pub(crate) message: HoldRequest,
    /// Where the caller waits.
    pub(crate) reply: oneshot::Sender<Result<HoldReply>>,
}

/// The queue of a client's batching task.
pub(crate) type HoldQueue = mpsc::UnboundedSender<HoldJob>;

/// Starts the batching task of the client behind `inner` and returns its queue. The task holds
/// the client weakly: it ends when the queue closes, that is when the last clone of the client
/// is dropped.
pub(crate) fn start(inner: Weak<Inner>, slots: usize) -> HoldQueue {
    let (queue, jobs) = mpsc::unbounded_channel();
    tokio::spawn(run(inner, jobs, slots.max(1)));
    queue
}

/// Takes whatever queued up while a slot was busy, up to [`HOLD_BATCH_ITEMS_MAX`], and sends it.
async fn run(inner: Weak<Inner>, mut jobs: mpsc::UnboundedReceiver<HoldJob>, slots: usize) {
    let slots = Arc::new(Semaphore::new(slots));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
        let Some(first) = jobs.recv().await else { return };
        let mut batch = vec![first];
        while batch.len() < HOLD_BATCH_ITEMS_MAX {
            let Ok(job) = jobs.try_recv() else { break };
            batch.push(job);
        }
        let Some(inner) = inner.upgrade() else { return };
        let client = Client::from_inner(inner);
        tokio::spawn(async move {
            client.send_holds(batch).await;
            drop(slot);
        });
    }
}

impl Client {
    /// Sends a batch: one `HoldMany` call per cached leader of the holds' shows. A hold whose
    /// show has no cached leader goes through the call loop, which finds one (and caches it
    /// for the holds after it).
    async fn send_holds(&self, jobs: Vec<HoldJob>) {
        let mut by_target: BTreeMap<String, Vec<HoldJob>> = BTreeMap::new();
        let mut unrouted = Vec::new();
        {
            let routes = self.routes();
            for job in jobs {
                match routes.leader(Route::Show(job.show_id)) {
                    Some(leader) => by_target.entry(leader.to_owned()).or_default().push(job),
                    None => unrouted.push(job),
                }
            }
        }
        for job in unrouted {
            self.fall_back(job, false);
        }
        let calls = by_target.into_iter().map(|(target, jobs)| self.send_holds_to(target, jobs));
        futures_util::future::join_all(calls).await;
    }

    /// Sends `jobs` to `target` in one call and hands each caller its result; what the call
    /// did not decide for good goes through the call loop.
    async fn send_holds_to(&self, target: String, jobs: Vec<HoldJob>) {
        let items = jobs
            .iter()
            .map(|job| HoldItem {
                session_token: job.token.clone(),
                idempotency_key: job.metadata.key().unwrap_or_default().to_owned(),
                hold: Some(job.message.clone()),
            })
            .collect();
        let timeout = self.config().attempt_timeout;
        let call = async {
            let channel =
                self.channel(&target).map_err(|error| Status::internal(error.to_string()))?;
            BookingServiceClient::new(channel).hold_many(HoldManyRequest { items }).await
        };
        let reply = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(reply)) => reply.into_inner(),
            Ok(Err(status)) => return self.fall_back_all(jobs, &status),
            Err(_elapsed) => {
                let status = Status::deadline_exceeded(format!("no answer within {timeout:?}"));
                return self.fall_back_all(jobs, &status);
            }
        };
        if reply.results.len() != jobs.len() {
            let status = Status::internal("HoldMany answered another number of results");
            return self.fall_back_all(jobs, &status);
        }
        for (job, result) in jobs.into_iter().zip(reply.results) {
            match result.result {
                Some(ItemResult::Held(held)) => {
                    self.routes().on_success(Route::Show(job.show_id), &target);
                    let _ = job.reply.send(Ok(held));
                }
                Some(ItemResult::Failed(failed)) => {
                    let status = item_status(failed);
                    match error::classify(&status) {
                        Verdict::Final => {
                            self.routes().on_success(Route::Show(job.show_id), &target);
                            let _ = job.reply.send(Err(Error::rejected(&status)));
                        }
                        Verdict::Retry { delivery, .. } => {
                            self.fall_back(job, delivery == Delivery::Unknown);
                        }
                    }
                }
                None => self.fall_back(job, true),
            }
        }
    }

    /// Sends every hold of a failed `HoldMany` call through the call loop. A server without
    /// `HoldMany` (UNIMPLEMENTED) gets them as `Hold` calls.
    fn fall_back_all(&self, jobs: Vec<HoldJob>, status: &Status) {
        let unknown = match error::classify(status) {
            Verdict::Retry { delivery, .. } => delivery == Delivery::Unknown,
            // A status no node's error table made (UNIMPLEMENTED from an older node, ...): the
            // holds were not decided.
            Verdict::Final => false,
        };
        for job in jobs {
            self.fall_back(job, unknown);
        }
    }

    /// Sends one hold through the call loop, as a `Hold` call under its key, in a task of its
    /// own; `unknown` says whether the batch may already have applied it.
    fn fall_back(&self, job: HoldJob, unknown: bool) {
        let client = self.clone();
        tokio::spawn(async move {
            let HoldJob { show_id, metadata, message, reply, .. } = job;
            let metadata = if unknown { metadata.maybe_applied() } else { metadata };
            let result = client
                .booking_call(
                    Route::Show(show_id),
                    Kind::Mutation,
                    &metadata,
                    message,
                    |mut c, r| async move { c.hold(r).await },
                )
                .await
                .map(|(held, _)| held);
            let _ = reply.send(result);
        });
    }
}

/// The status an item failed with, rebuilt with its metadata so that the client's one error
/// table reads it.
fn item_status(item: ItemStatus) -> Status {
    let mut metadata = MetadataMap::new();
    for (key, value) in &item.metadata {
        let (Ok(key), Ok(value)) =
            (MetadataKey::from_bytes(key.as_bytes()), MetadataValue::try_from(value.as_str()))
        else {
            continue;
        };
        metadata.insert(key, value);
    }
    Status::with_metadata(tonic::Code::from_i32(item.code), item.message, metadata)
}
