//! `bookctl`: the operator's command line for a booking cluster, built on the `client` SDK.
//!
//! Owns running one command and printing its result (text or `--json`) with the exit status:
//! 0 success, 1 rejected or failed, 2 usage (clap's). Never retries beyond what the SDK does
//! and never reads or writes local state.

mod cli;
mod status;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use client::{Client, Config, Error, HoldReply, MembershipReply, NewShow, ShowPlacement};
use serde_json::{Value, json};

use crate::cli::{
    Cli, Command, GroupSelect, HoldCommand, HoldGetCommand, LeaderCommand, MemberCommand,
    ShowCommand, StatusArgs,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bookctl: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli))
}

/// Runs the command and prints its outcome.
async fn run(cli: Cli) -> ExitCode {
    let config =
        Config { retry_budget: Duration::from_millis(cli.timeout_ms), ..Config::default() };
    let client = match Client::with_config(cli.nodes.clone(), config) {
        Ok(client) => client,
        Err(error) => return fail(cli.json, &error, None),
    };
    let json = cli.json;
    match cli.command {
        Command::Status(args) => status(&client, json, &args).await,
        Command::Member(command) => member(&client, json, command).await,
        Command::Leader(LeaderCommand::Transfer { group, to }) => {
            let result = client.transfer_leader(group, to).await;
            report_membership(json, "transfer leader", vec![(group, result)])
        }
        Command::Show(command) => show(&client, json, command).await,
        Command::Hold(command) => hold(&client, json, command).await,
    }
}

/// `bookctl status`.
async fn status(client: &Client, json: bool, args: &StatusArgs) -> ExitCode {
    let nodes = client.cluster_status(args.digest).await;
    let problems = args.require_leaders.then(|| status::leader_problems(&nodes, args.data_groups));
    if json {
        println!("{:#}", status::json(&nodes, problems.as_deref()));
    } else {
        print!("{}", status::table(&nodes, args.digest));
        for problem in problems.iter().flatten() {
            eprintln!("bookctl: {problem}");
        }
    }
    let all_answered = nodes.iter().all(|node| node.result.is_ok());
    let led = problems.is_none_or(|problems| problems.is_empty());
    if all_answered && led { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// `bookctl member ...`.
async fn member(client: &Client, json: bool, command: MemberCommand) -> ExitCode {
    let (what, groups) = match &command {
        MemberCommand::AddLearner { groups, .. } => ("add learner", groups),
        MemberCommand::Promote { groups, .. } => ("promote", groups),
        MemberCommand::Remove { groups, .. } => ("remove", groups),
        MemberCommand::Move { group, from, to, address } => {
            let result = client.move_replica(*group, *from, *to, address).await;
            return report_membership(json, "move replica", vec![(*group, result)]);
        }
        MemberCommand::Readmit { group, node_id, address } => {
            let select = GroupSelect { group: *group, all_groups: group.is_none() };
            return readmit(client, json, &select, *node_id, address).await;
        }
    };
    let groups = match selected_groups(client, groups).await {
        Ok(groups) => groups,
        Err(error) => return fail(json, &error, None),
    };
    let mut results = Vec::with_capacity(groups.len());
    for group in groups {
        let result = match &command {
            MemberCommand::AddLearner { node_id, address, wait, .. } => {
                client.add_learner(group, *node_id, address, *wait).await
            }
            MemberCommand::Promote { node_id, .. } => client.promote(group, &[*node_id]).await,
            MemberCommand::Remove { node_id, .. } => client.remove(group, &[*node_id]).await,
            MemberCommand::Move { .. } | MemberCommand::Readmit { .. } => {
                unreachable!("handled above")
            }
        };
        results.push((group, result));
    }
    report_membership(json, what, results)
}

/// `bookctl member readmit`: per group, remove, add back as a learner (waiting for the
/// catch-up), promote; stops at the first failed step so that an operator can look.
async fn readmit(
    client: &Client,
    json: bool,
    select: &GroupSelect,
    node_id: u64,
    address: &str,
) -> ExitCode {
    let groups = match selected_groups(client, select).await {
        Ok(groups) => groups,
        Err(error) => return fail(json, &error, None),
    };
    let mut results = Vec::with_capacity(groups.len());
    for group in groups {
        let step = async {
            client.remove(group, &[node_id]).await.map_err(|error| ("remove", error))?;
            client
                .add_learner(group, node_id, address, true)
                .await
                .map_err(|error| ("add learner", error))?;
            client.promote(group, &[node_id]).await.map_err(|error| ("promote", error))
        };
        match step.await {
            Ok(reply) => results.push((group, Ok(reply))),
            Err((step, error)) => {
                if !json {
                    eprintln!("bookctl: readmit: group {group}: {step} failed; stopping");
                }
                results.push((group, Err(error)));
                break;
            }
        }
    }
    report_membership(json, "readmit", results)
}

/// The groups a membership command names: one, or every group some node reports.
async fn selected_groups(client: &Client, select: &GroupSelect) -> Result<Vec<u64>, Error> {
    if let Some(group) = select.group {
        return Ok(vec![group]);
    }
    let nodes = client.cluster_status(false).await;
    let mut groups = std::collections::BTreeSet::new();
    let mut last_error = None;
    for node in nodes {
        match node.result {
            Ok(reply) => groups.extend(reply.groups.iter().map(|group| group.group_id)),
            Err(error) => last_error = Some(error),
        }
    }
    match (groups.is_empty(), last_error) {
        (false, _) => Ok(groups.into_iter().collect()),
        (true, Some(error)) => Err(error),
        (true, None) => Err(Error::InvalidArgument("no node reports any group".into())),
    }
}

/// Prints the outcome of a membership change per group; fails if any group failed.
fn report_membership(
    json: bool,
    what: &str,
    results: Vec<(u64, Result<MembershipReply, Error>)>,
) -> ExitCode {
    let mut failed = false;
    let mut documents = Vec::with_capacity(results.len());
    for (group, result) in results {
        match result {
            Ok(reply) => {
                if !json {
                    println!(
                        "{what}: group {group}: leader {}, voters {:?}, learners {:?}, log index {}",
                        reply.leader_id, reply.voters, reply.learners, reply.log_index
                    );
                }
                documents.push(json!({
                    "group_id": group,
                    "ok": true,
                    "leader_id": reply.leader_id,
                    "voters": reply.voters,
                    "learners": reply.learners,
                    "log_index": reply.log_index,
                }));
            }
            Err(error) => {
                failed = true;
                if !json {
                    eprintln!("bookctl: {what}: group {group}: {error}");
                }
                let mut document = error_json(&error);
                document["group_id"] = json!(group);
                documents.push(document);
            }
        }
    }
    if json {
        println!("{:#}", json!({ "operation": what, "groups": documents }));
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// `bookctl show ...`.
async fn show(client: &Client, json: bool, command: ShowCommand) -> ExitCode {
    let result = match command {
        ShowCommand::Create { show, seats, price_minor, currency, group, hold_ttl_ms, key } => {
            let new_show = NewShow {
                group_id: group,
                hold_ttl_ms,
                ..NewShow::uniform(show, seats, price_minor, &currency)
            };
            client.create_show(&new_show, key.as_deref()).await.map(|p| ("created", p))
        }
        ShowCommand::Open { show } => client.open_sales(show).await.map(|p| ("opened", p)),
    };
    match result {
        Ok((what, ShowPlacement { show_id, group_id })) => {
            if json {
                println!("{:#}", json!({ "ok": true, "show_id": show_id, "group_id": group_id }));
            } else {
                println!("show {show_id} {what}, in group {group_id}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(json, &error, None),
    }
}

/// `bookctl hold ...`.
async fn hold(client: &Client, json: bool, command: HoldCommand) -> ExitCode {
    match command {
        HoldCommand { get: Some(HoldGetCommand::Get { show, hold, token }), .. } => {
            match client.get_hold(&token, show, hold).await {
                Ok(reply) => print_hold(json, &reply, None, None),
                Err(error) => fail(json, &error, None),
            }
        }
        HoldCommand { get: None, place: Some(place) } => {
            let token = place.token.clone().unwrap_or_else(client::generate_key);
            let key = place.key.clone().unwrap_or_else(client::generate_key);
            let result = client
                .hold(&token, place.show, &place.seats, place.price_version, Some(&key))
                .await;
            match result {
                Ok(reply) => print_hold(json, &reply, Some(&token), Some(&key)),
                Err(error) => {
                    let retry = json!({ "token": token, "key": key });
                    if !json {
                        eprintln!("bookctl: session token {token}, idempotency key {key}");
                    }
                    fail(json, &error, Some(retry))
                }
            }
        }
        HoldCommand { get: None, place: None } => {
            eprintln!("bookctl: hold needs --show and --seats (or `hold get`); see --help");
            ExitCode::from(2)
        }
    }
}

/// Prints a hold, with the token and key it was made with when bookctl chose them.
fn print_hold(json: bool, hold: &HoldReply, token: Option<&str>, key: Option<&str>) -> ExitCode {
    if json {
        let document = json!({
            "ok": true,
            "show_id": hold.show_id,
            "hold_id": hold.hold_id,
            "seats": hold.seats,
            "price_minor": hold.price_minor,
            "currency": hold.currency,
            "deadline_ms": hold.deadline_ms,
            "state": hold.state,
            "as_of_log_index": hold.as_of_log_index,
            "as_of_log_time_ms": hold.as_of_log_time_ms,
            "token": token,
            "key": key,
        });
        println!("{document:#}");
    } else {
        println!(
            "hold {} on show {}: {} seats {:?}, {} {} minor, deadline {} ms (as of index {}, time {} ms)",
            hold.hold_id,
            hold.show_id,
            hold.state,
            hold.seats,
            hold.price_minor,
            hold.currency,
            hold.deadline_ms,
            hold.as_of_log_index,
            hold.as_of_log_time_ms
        );
        if let Some(token) = token {
            println!("session token {token}");
        }
        if let Some(key) = key {
            println!("idempotency key {key}");
        }
    }
    ExitCode::SUCCESS
}

/// An error as JSON: its text, gRPC code, booking code and whether the outcome is unknown.
fn error_json(error: &Error) -> Value {
    json!({
        "ok": false,
        "error": error.to_string(),
        "grpc_code": error.grpc_code().map(|code| format!("{code:?}")),
        "booking_code": error.booking_code(),
        "outcome_unknown": error.is_outcome_unknown(),
    })
}

/// Prints an error (with `extra` fields in JSON) and returns exit status 1.
fn fail(json: bool, error: &Error, extra: Option<Value>) -> ExitCode {
    if json {
        let mut document = error_json(error);
        if let Some(Value::Object(extra)) = extra {
            for (name, value) in extra {
                document[name] = value;
            }
        }
        println!("{document:#}");
    } else {
        eprintln!("bookctl: {error}");
    }
    ExitCode::FAILURE
}
