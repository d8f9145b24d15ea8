//! The transport's failure modes: a group the peer does not host answers `NOT_FOUND`, and calls
//! to a peer that does not listen fail as `Unreachable` while calls to other peers on the same
//! transport still succeed.

use std::io;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::RPCError;
use openraft::network::RPCOption;
use openraft::raft::VoteRequest;
use openraft_multi::GroupRouter;
use proto::raft::GroupRequest;
use proto::raft::raft_service_client::RaftServiceClient;
use raft::{GrpcTransport, NetworkConfig, PeerTransport, TypeConfig, Vote};

use crate::harness::{Cluster, WAIT};

const GROUP: u64 = 3;

fn vote_request(term: u64, candidate: u64) -> VoteRequest<TypeConfig> {
    VoteRequest::new(Vote::new(term, candidate), None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_the_peer_does_not_host_is_not_found() -> io::Result<()> {
    let mut cluster = Cluster::start(&[1], &[GROUP]).await?;
    let address = cluster.node(1)?.address;
    let mut client =
        RaftServiceClient::connect(format!("http://{address}")).await.map_err(io::Error::other)?;
    let request = GroupRequest { group_id: GROUP + 1, payload: Vec::new() };
    let status = client.vote(request).await.expect_err("no such group");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    // A hosted group with bytes that do not decode is a client error, not a crash.
    let request = GroupRequest { group_id: GROUP, payload: vec![1, 2, 3] };
    let status = client.vote(request).await.expect_err("garbage");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_peer_is_unreachable_and_does_not_block_a_live_one() -> io::Result<()> {
    let mut cluster = Cluster::start(&[1], &[GROUP]).await?;
    let live = cluster.members();
    // A port that was free a moment ago: nothing listens there.
    let dead_address = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let transport = GrpcTransport::new(9, NetworkConfig::default());
    transport.on_peer_address(1, &live[&1]);
    transport.on_peer_address(2, &openraft::BasicNode::new(dead_address.to_string()));
    let option = RPCOption::new(WAIT);

    let (dead, alive) = tokio::join!(
        transport.vote(2, GROUP, vote_request(1, 9), option.clone()),
        transport.vote(1, GROUP, vote_request(1, 9), option.clone()),
    );
    assert!(matches!(dead, Err(RPCError::Unreachable(_))), "{dead:?}");
    // The live peer answers, whatever it decides about the vote.
    alive.map_err(io::Error::other)?;
    assert_eq!(transport.channel_count(), 2);

    // An address nobody knows fails at once, without a connection attempt.
    let unknown = transport.vote(5, GROUP, vote_request(1, 9), option).await;
    assert!(matches!(unknown, Err(RPCError::Unreachable(_))), "{unknown:?}");
    cluster.shutdown().await
}

/// A snapshot stream that opens with `header` and then stays open, sending nothing more.
async fn open_snapshot_stream(
    client: &mut RaftServiceClient<tonic::transport::Channel>,
    header: proto::raft::SnapshotHeader,
) -> (
    tokio::sync::mpsc::Sender<proto::raft::SnapshotChunk>,
    tokio::task::JoinHandle<Result<tonic::Response<proto::raft::GroupReply>, tonic::Status>>,
) {
    use proto::raft::{SnapshotChunk, snapshot_chunk};
    let (sender, receiver) = tokio::sync::mpsc::channel::<SnapshotChunk>(4);
    let first = SnapshotChunk { chunk: Some(snapshot_chunk::Chunk::Header(header)) };
    sender.send(first).await.expect("the stream is open");
    let chunks = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|chunk| (chunk, receiver))
    });
    let mut client = client.clone();
    let call = tokio::spawn(async move { client.install_snapshot(chunks).await });
    (sender, call)
}

/// A snapshot stream's header: `vote`, empty metadata, `total_bytes` announced.
fn snapshot_header(vote: Vote, total_bytes: u64) -> io::Result<proto::raft::SnapshotHeader> {
    let meta = raft::SnapshotMeta {
        last_log_id: None,
        last_membership: openraft::StoredMembership::default(),
    };
    let payload = raft::encode_peer_message(&(vote, meta)).map_err(io::Error::other)?;
    Ok(proto::raft::SnapshotHeader { group_id: GROUP, payload, total_bytes })
}

/// The snapshot streams a peer cannot be made to read: from a stale vote (answered at once with
/// the group's vote, as Raft answers a deposed leader), announced past the limit, and a second
/// one for a group whose snapshot is arriving; each is answered while the sender still holds its
/// stream open (so before any data is read), and none changes the group's vote or state. The
/// transfer that is read goes to a spool file, which is gone once the stream is cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_past_its_cap_from_a_stale_term_or_twice_at_once_is_cut_off_early()
-> io::Result<()> {
    let mut cluster = Cluster::start(&[1], &[GROUP]).await?;
    cluster.initialize(GROUP, 1).await?;
    cluster.leader(GROUP).await?;
    let raft = cluster.raft(1, GROUP)?;
    let vote_before = raft.metrics().borrow_watched().vote;
    let applied_before = raft.metrics().borrow_watched().last_applied;
    let address = cluster.node(1)?.address;
    let mut client =
        RaftServiceClient::connect(format!("http://{address}")).await.map_err(io::Error::other)?;
    let within = |call| tokio::time::timeout(WAIT, call);

    // A stale leader (term 0) gets the group's vote back, its bytes unread.
    let stale = Vote::new_committed(0, 2);
    let (held, call) = open_snapshot_stream(&mut client, snapshot_header(stale, 100)?).await;
    let answer = within(call).await.map_err(io::Error::other)?.map_err(io::Error::other)?;
    let expected = openraft::raft::SnapshotResponse::<TypeConfig>::new(vote_before);
    let expected = raft::encode_peer_message(&expected).map_err(io::Error::other)?;
    assert_eq!(answer.map_err(io::Error::other)?.into_inner().payload, expected);
    drop(held);

    // Past the limit (4 GiB by default): refused on the header.
    let fresh = Vote::new_committed(raft.metrics().borrow_watched().current_term + 5, 1);
    let (held, call) = open_snapshot_stream(&mut client, snapshot_header(fresh, 5 << 30)?).await;
    let status = within(call).await.map_err(io::Error::other)?.map_err(io::Error::other)?;
    let status = status.expect_err("over the limit");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    drop(held);

    // One transfer per group: of two streams of the group, whichever header arrives second is
    // refused at once, while the other waits for its data; that one ends when its sender does.
    let (one, mut one_call) =
        open_snapshot_stream(&mut client, snapshot_header(fresh, 1_000)?).await;
    let (two, mut two_call) =
        open_snapshot_stream(&mut client, snapshot_header(fresh, 1_000)?).await;
    let (refused, waiting_call) = tokio::time::timeout(WAIT, async {
        tokio::select! {
            answer = &mut one_call => (answer, two_call),
            answer = &mut two_call => (answer, one_call),
        }
    })
    .await
    .map_err(io::Error::other)?;
    let refused = refused.map_err(io::Error::other)?.expect_err("a second transfer of the group");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("already arriving"), "{refused:?}");
    // The waiting transfer writes its bytes to the node's spool while they arrive.
    let spool = cluster.node(1)?.spool_dir();
    let part = spool.join(format!("group-{GROUP}.part"));
    let data = proto::raft::SnapshotChunk {
        chunk: Some(proto::raft::snapshot_chunk::Chunk::Data(vec![7; 100])),
    };
    for sender in [&one, &two] {
        // The refused stream's receiver is gone: its send fails, which is fine.
        let _ = sender.send(data.clone()).await;
    }
    tokio::time::timeout(WAIT, async {
        while !part.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .map_err(|_| io::Error::other(format!("no spool file {}", part.display())))?;
    drop((one, two));
    let ended = within(waiting_call).await.map_err(io::Error::other)?.map_err(io::Error::other)?;
    let ended = ended.expect_err("a stream that ended early");
    assert_eq!(ended.code(), tonic::Code::InvalidArgument, "{ended:?}");

    assert_eq!(raft.metrics().borrow_watched().vote, vote_before, "no stream changed the vote");
    assert_eq!(raft.metrics().borrow_watched().last_applied, applied_before, "nor the state");
    // Cut off, the transfer left nothing in the spool.
    let left: Vec<_> = std::fs::read_dir(&spool)?.collect::<Result<_, _>>()?;
    assert!(left.is_empty(), "files left in {}: {left:?}", spool.display());
    cluster.shutdown().await
}
