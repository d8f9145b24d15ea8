//! The transport's failure modes: a group the peer does not host answers `NOT_FOUND`, and calls
//! to a peer that does not listen fail as `Unreachable` while calls to other peers on the same
//! transport still succeed.

use std::io;

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
