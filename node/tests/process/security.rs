//! The doors an attacker would try first, against real `bookingd` processes: every
//! `AdminService` call without the operator credential (or with another) is refused and changes
//! no membership; a node given no secrets does not start, `--dev` does not listen beyond
//! loopback, and the secrets are not accepted on the command line; and after a cluster has
//! served sessions, holds, a checkout, a signed webhook and admin calls with its logs at debug
//! level, no secret appears in any node's log; and Raft between nodes takes only the cluster's
//! nodes, each speaking for itself: the client port serves no Raft, the peer port refuses a
//! caller without a certificate, with one of another CA, or with a node's certificate speaking
//! for another node.
//!
//! Reference: issue 17 ("What to build": `AdminService` and every operator route require the
//! operator credential; no public defaults; secrets never appear in `Debug` output or logs;
//! "Tests": every admin call without a credential gets UNAUTHENTICATED and changes nothing, a
//! node without secrets does not start, `--dev` refuses `0.0.0.0`; a peer without a certificate,
//! or with another node's, is refused).

use std::io;
use std::path::Path;
use std::process::Stdio;

use axum::http::Method;
use proto::booking::admin_service_client::AdminServiceClient;
use proto::booking::{
    AddLearnerRequest, MoveReplicaRequest, NodesRequest, StatusRequest, TransferLeaderRequest,
};
use proto::raft::GroupRequest;
use proto::raft::raft_service_client::RaftServiceClient;
use serde_json::json;
use testkit::webhook::{SIGNATURE_HEADER, sign, wall_clock_s};
use testkit::{ClusterOptions, SESSION_SECRET_DEFAULT, SINK_SECRET_DEFAULT};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::{Code, Request, Status};

use crate::options;
use crate::rest::{Api, OPERATOR_TOKEN, Report, WEBHOOK_SECRET, ensure};

/// The first show id of this file.
const SHOWS: u64 = 17_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doors_are_shut() -> io::Result<()> {
    let mut report = Report::default();
    report.check(
        "a_node_without_secrets_does_not_start",
        a_node_without_secrets_does_not_start().await,
    );
    // Debug logs of the node's own crates: what a secret would most likely leak into.
    let options = ClusterOptions {
        log_filter: "debug,openraft=info,h2=info,hyper=info,hyper_util=info,tower=info,\
                     tonic=info,tantivy=info"
            .to_owned(),
        ..options(3)
    };
    let api = Api::start(options).await?;
    report.check(
        "admin_calls_need_the_operator_credential",
        admin_calls_need_the_operator_credential(&api).await,
    );
    report.check("peers_need_their_own_certificate", peers_need_their_own_certificate(&api).await);
    report.check("no_secret_reaches_a_log", no_secret_reaches_a_log(&api).await);
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// One `AdminService` client of node 1.
async fn admin(api: &Api) -> io::Result<AdminServiceClient<Channel>> {
    Ok(AdminServiceClient::new(crate::grpc_channel(&api.cluster, 1).await?))
}

/// `message` with `authorization` set to `credential`, if any.
fn with_credential<T>(message: T, credential: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(credential) = credential {
        let value = credential.parse().unwrap_or_else(|error| panic!("{error}"));
        request.metadata_mut().insert("authorization", value);
    }
    request
}

/// Every admin call, as `credential`: its name and the status it got (OK as `Code::Ok`).
async fn every_admin_call(
    client: &mut AdminServiceClient<Channel>,
    credential: Option<&str>,
) -> Vec<(&'static str, Code)> {
    fn code<T>(result: Result<T, Status>) -> Code {
        result.map_or_else(|status| status.code(), |_| Code::Ok)
    }
    let nodes = |ids: Vec<u64>| NodesRequest { group_id: 1, node_ids: ids };
    let learner =
        AddLearnerRequest { group_id: 1, node_id: 9, address: "127.0.0.1:9".into(), wait: false };
    let moved = MoveReplicaRequest {
        group_id: 1,
        from_node_id: 3,
        to_node_id: 9,
        to_address: "127.0.0.1:9".into(),
    };
    let status = StatusRequest { with_digest: true };
    vec![
        ("status", code(client.status(with_credential(status, credential)).await)),
        ("add_learner", code(client.add_learner(with_credential(learner, credential)).await)),
        ("promote", code(client.promote(with_credential(nodes(vec![9]), credential)).await)),
        ("remove", code(client.remove(with_credential(nodes(vec![3]), credential)).await)),
        ("move_replica", code(client.move_replica(with_credential(moved, credential)).await)),
        (
            "transfer_leader",
            code(
                client
                    .transfer_leader(with_credential(
                        TransferLeaderRequest { group_id: 1, to_node_id: 2 },
                        credential,
                    ))
                    .await,
            ),
        ),
    ]
}

/// Without a credential every admin call is UNAUTHENTICATED, with a wrong one PERMISSION_DENIED;
/// no group's membership changed, and the operator's own status call is answered.
async fn admin_calls_need_the_operator_credential(api: &Api) -> io::Result<()> {
    let before = memberships(api).await?;
    let mut client = admin(api).await?;
    for (method, code) in every_admin_call(&mut client, None).await {
        ensure!(code == Code::Unauthenticated, "{method} without a credential: {code:?}");
    }
    let wrong = "Bearer not-the-operator-token-0123456789abcdef";
    for (method, code) in every_admin_call(&mut client, Some(wrong)).await {
        ensure!(code == Code::PermissionDenied, "{method} with another credential: {code:?}");
    }
    // Whitespace does not make another credential the operator's.
    let padded = format!("Bearer  {OPERATOR_TOKEN}x");
    let status = client.status(with_credential(StatusRequest::default(), Some(&padded))).await;
    ensure!(status.is_err(), "a padded, altered credential was accepted");
    let operator = format!("Bearer {OPERATOR_TOKEN}");
    let status = client.status(with_credential(StatusRequest::default(), Some(&operator))).await;
    let status = status.map_err(io::Error::other)?.into_inner();
    ensure!(status.node_id == 1 && !status.groups.is_empty(), "{status:?}");
    let after = memberships(api).await?;
    ensure!(before == after, "memberships changed: {before:?} -> {after:?}");
    Ok(())
}

/// A vote request of `candidate` at `term` for group 1, as a peer sends it.
fn vote_request(candidate: u64, term: u64) -> GroupRequest {
    let vote = raft::Vote::new(term, candidate);
    let request = openraft::raft::VoteRequest::<raft::TypeConfig>::new(vote, None);
    let payload = raft::encode_peer_message(&request).unwrap_or_else(|error| panic!("{error}"));
    GroupRequest { group_id: 1, payload }
}

/// A Raft client of `address`: plain HTTP/2 without `tls`, else TLS trusting `ca` and
/// presenting `identity` (certificate and key PEM) if any, expecting node 1's name.
fn raft_client(
    address: &str,
    tls: Option<(&str, Option<(&str, &str)>)>,
) -> io::Result<RaftServiceClient<Channel>> {
    let endpoint = match tls {
        None => Channel::from_shared(format!("http://{address}")).map_err(io::Error::other)?,
        Some((ca, identity)) => {
            let mut config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("node-1.peers.booking");
            if let Some((certificate, key)) = identity {
                config = config.identity(Identity::from_pem(certificate, key));
            }
            Channel::from_shared(format!("https://{address}"))
                .map_err(io::Error::other)?
                .tls_config(config)
                .map_err(io::Error::other)?
        }
    };
    Ok(RaftServiceClient::new(endpoint.connect_lazy()))
}

/// Group 1's term as node 1 sees it.
async fn term_of_group_1(api: &Api) -> io::Result<u64> {
    let mut client = admin(api).await?;
    let operator = format!("Bearer {OPERATOR_TOKEN}");
    let status = client.status(with_credential(StatusRequest::default(), Some(&operator))).await;
    let status = status.map_err(io::Error::other)?.into_inner();
    let group = status.groups.iter().find(|group| group.group_id == 1);
    group.map(|group| group.term).ok_or_else(|| io::Error::other("no group 1"))
}

/// The client port serves no Raft; the peer port refuses plain HTTP/2, a caller without a
/// certificate and one with a certificate of another CA; node 2's certificate cannot send node
/// 3's vote request (PERMISSION_DENIED), but may send its own (a harmless one, at term 0, which
/// is answered). The forged requests ask for a term far ahead: no group's term reached it.
async fn peers_need_their_own_certificate(api: &Api) -> io::Result<()> {
    let cluster = &api.cluster;
    let client_port = cluster.address(1)?;
    let peer_port = cluster.peer_address(1)?.to_string();
    let ca = cluster.ca_certificate().to_owned();
    let node_2 = cluster.issue_certificate(2)?;
    let stranger_ca = client::certs::new_authority("stranger", 1).map_err(io::Error::other)?;
    let stranger = client::certs::issue_node(&stranger_ca, 3, &[], 1).map_err(io::Error::other)?;
    let before = term_of_group_1(api).await?;
    let forged_term = before + 1_000;
    let forged = || vote_request(3, forged_term);

    // The client port serves no Raft, over TLS (as the cluster serves it) or not.
    let client_tls = cluster.options().client_tls.then_some((ca.as_str(), None));
    let answer = raft_client(&client_port, client_tls)?.vote(forged()).await;
    let code = answer.map_or_else(|status| status.code(), |_| Code::Ok);
    ensure!(code == Code::Unimplemented, "the client port answered a vote request: {code:?}");

    let refused = [
        ("plain HTTP/2", raft_client(&peer_port, None)?),
        ("TLS without a certificate", raft_client(&peer_port, Some((&ca, None)))?),
        (
            "another CA's certificate",
            raft_client(
                &peer_port,
                Some((&ca, Some((&stranger.certificate_pem, &stranger.key_pem)))),
            )?,
        ),
    ];
    for (what, mut client) in refused {
        match client.vote(forged()).await {
            Ok(reply) => ensure!(false, "{what}: the peer port answered {reply:?}"),
            // A status from the service would mean the call got through TLS.
            Err(status) => ensure!(
                !matches!(status.code(), Code::PermissionDenied | Code::Ok),
                "{what}: {status:?}"
            ),
        }
    }

    let identity = Some((node_2.certificate_pem.as_str(), node_2.key_pem.as_str()));
    let mut as_node_2 = raft_client(&peer_port, Some((&ca, identity)))?;
    let answer = as_node_2.vote(forged()).await;
    let code = answer.map_or_else(|status| status.code(), |_| Code::Ok);
    ensure!(code == Code::PermissionDenied, "node 2's certificate voted for node 3: {code:?}");
    let own = as_node_2.vote(vote_request(2, 0)).await;
    ensure!(own.is_ok(), "node 2's own (stale) vote request was not answered: {own:?}");

    let after = term_of_group_1(api).await?;
    ensure!(after < forged_term, "group 1 reached the forged term: {before} -> {after}");
    Ok(())
}

/// Each group's voters and learners, from node 1, as the operator.
async fn memberships(api: &Api) -> io::Result<Vec<(u64, Vec<u64>, Vec<u64>)>> {
    let mut client = admin(api).await?;
    let operator = format!("Bearer {OPERATOR_TOKEN}");
    let status = client.status(with_credential(StatusRequest::default(), Some(&operator))).await;
    let status = status.map_err(io::Error::other)?.into_inner();
    Ok(status
        .groups
        .into_iter()
        .map(|group| (group.group_id, group.voters, group.learners))
        .collect())
}

/// Runs `bookingd` with `args` and no secret in its environment; returns its exit code and what
/// it printed on stderr. It must exit by itself (within the test's time).
async fn bookingd(args: &[&str]) -> io::Result<(Option<i32>, String)> {
    let binary = Path::new(env!("CARGO_BIN_EXE_bookingd"));
    let mut command = tokio::process::Command::new(binary);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    for variable in [
        "BOOKING_SESSION_SECRET",
        "BOOKING_OPERATOR_TOKEN",
        "BOOKING_WEBHOOK_SECRET",
        "BOOKING_SINK_SECRET",
    ] {
        command.env_remove(variable);
    }
    command.kill_on_drop(true);
    let output = tokio::time::timeout(crate::WAIT, command.output())
        .await
        .map_err(|_| io::Error::other(format!("bookingd {args:?} did not exit")))??;
    Ok((output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned()))
}

/// No secrets: exit 2 naming each missing one. `--dev` on 0.0.0.0: exit 2. A secret on the
/// command line (the old flags): a usage error. A short secret file: exit 2, without echoing it.
async fn a_node_without_secrets_does_not_start() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let data = data.to_str().unwrap_or_default();
    let base = ["--id", "1", "--data", data, "--listen", "127.0.0.1:0"];
    let (code, said) = bookingd(&base).await?;
    ensure!(code == Some(2), "started without secrets: {code:?} {said}");
    for flag in ["--session-secret-file", "--operator-token-file", "--webhook-secret-file"] {
        ensure!(said.contains(flag), "does not name {flag}: {said}");
    }
    ensure!(!Path::new(data).exists(), "a refused node made its database");

    let public = ["--id", "1", "--data", data, "--listen", "0.0.0.0:0", "--dev"];
    let (code, said) = bookingd(&public).await?;
    ensure!(code == Some(2) && said.contains("loopback"), "--dev on 0.0.0.0: {code:?} {said}");

    let argv = [&base[..], &["--session-secret", SESSION_SECRET_DEFAULT]].concat();
    let (code, said) = bookingd(&argv).await?;
    ensure!(code == Some(2) && said.contains("--session-secret"), "argv secret: {code:?} {said}");
    ensure!(!said.contains(SESSION_SECRET_DEFAULT), "the refusal echoed the secret: {said}");

    let short = dir.path().join("short");
    std::fs::write(&short, "abc123-too-short\n")?;
    let short = short.to_str().unwrap_or_default();
    let argv = [&base[..], &["--dev", "--operator-token-file", short]].concat();
    let (code, said) = bookingd(&argv).await?;
    ensure!(code == Some(2) && said.contains("at least 32"), "a short secret: {code:?} {said}");
    ensure!(!said.contains("abc123"), "the refusal echoed the secret: {said}");
    Ok(())
}

/// Sessions, a show, a hold, a checkout and its signed webhook, admin calls with and without the
/// credential: then no node's log (stdout and stderr, at debug level) holds any secret.
async fn no_secret_reaches_a_log(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS, 10, 1, json!({})).await?;
    let (_buyer, _hold, checkout) = api.checked_out(&show, &[1, 2]).await?;
    let payment_id = checkout["payment_id"].as_str().unwrap_or_default().to_owned();
    let event = json!({
        "event_id": api.key("evt"),
        "payment_id": payment_id,
        "result": "succeeded",
        "amount_minor": 2_000,
        "currency": "EUR",
    });
    let body = event.to_string().into_bytes();
    let signature = sign(WEBHOOK_SECRET, wall_clock_s(), &body);
    let paid = api
        .on(2, Method::POST, "/v1/payments/webhook")
        .header(SIGNATURE_HEADER, &signature)
        .raw(body)
        .send()
        .await?;
    paid.expect(200)?;
    let mut client = admin(api).await?;
    every_admin_call(&mut client, Some(&format!("Bearer {OPERATOR_TOKEN}"))).await;
    every_admin_call(&mut client, None).await;
    // An operator REST call with a wrong credential, and one with the right one.
    api.on(3, Method::GET, "/v1/ops/overview")
        .token("wrong-0123456789abcdef0123456789")
        .send()
        .await?;
    api.on(3, Method::GET, "/v1/ops/overview").token(OPERATOR_TOKEN).send().await?.expect(200)?;

    let secrets = [OPERATOR_TOKEN, WEBHOOK_SECRET, SESSION_SECRET_DEFAULT, SINK_SECRET_DEFAULT];
    let mut bytes = 0;
    for id in 1..=3 {
        let dir = api.cluster.node_dir(id)?;
        for log in ["stdout.log", "stderr.log"] {
            let text = std::fs::read_to_string(dir.join(log))?;
            bytes += text.len();
            for secret in secrets {
                ensure!(!text.contains(secret), "node {id}'s {log} holds a secret");
            }
        }
    }
    // The logs did record the run (the start-up line shows the node's settings).
    ensure!(bytes > 10_000, "the logs are nearly empty ({bytes} bytes)");
    Ok(())
}
