//! `bookctl`: the command line for a booking cluster, built on the `client` SDK: the
//! operator's status, membership and shows, and a buyer's sessions, holds, checkout, bookings,
//! queue, waitlist and offers.
//!
//! Owns running one command and printing its result (text or `--json`) with the exit status:
//! 0 success, 1 rejected or failed, 2 usage (clap's). Never retries beyond what the SDK does
//! and never reads or writes local state (a session token is printed, never stored).
//!
//! One file per concern: `cli.rs` (the command line), `status.rs` (the status table),
//! `render.rs` (text and JSON of booking replies), `seats.rs` (the seat map grid), `catalog.rs`
//! (the catalog's changes and search).

mod catalog;
mod cli;
mod render;
mod seats;
mod status;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use client::{
    Client, Config, Error, MembershipReply, NewShow, ShowListing, ShowPlacement, WaitlistRules,
    Watch,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::cli::{
    BackupArgs, BookingCommand, CapacityCommand, CertsCommand, Cli, Command, GroupSelect,
    HoldAction, HoldArgs, HoldCommand, LeaderCommand, MemberCommand, OfferCommand, PaymentCommand,
    QueueCommand, RestoreArgs, SessionCommand, ShowCommand, StatusArgs, WaitlistCommand,
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

/// The operator credential: the contents of --operator-token-file (without the final newline),
/// else BOOKCTL_OPERATOR_TOKEN, else none.
fn operator_token(cli: &Cli) -> Result<Option<String>, String> {
    if let Some(path) = &cli.operator_token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("--operator-token-file {}: {error}", path.display()))?;
        return Ok(Some(text.trim_end_matches(['\n', '\r']).to_owned()));
    }
    Ok(std::env::var("BOOKCTL_OPERATOR_TOKEN").ok().filter(|token| !token.is_empty()))
}

/// The address memberships carry for a node at `address`, with its peer port `peer` when
/// given apart (the nodes' `raft::tls::membership_address`).
fn membership_address(address: &str, peer: Option<&str>) -> String {
    match peer {
        Some(peer) => format!("{address} peer={peer}"),
        None => address.to_owned(),
    }
}

/// `bookctl certs init|node`: writes the files, keys readable by their owner only.
fn certs(command: &CertsCommand) -> Result<Vec<std::path::PathBuf>, String> {
    use client::certs;
    let write = |path: std::path::PathBuf, text: &str, private: bool| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true).mode(if private { 0o600 } else { 0o644 });
        let mut file =
            options.open(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        file.write_all(text.as_bytes()).map_err(|error| format!("{}: {error}", path.display()))?;
        Ok::<_, String>(path)
    };
    match command {
        CertsCommand::Init { dir, name, days } => {
            std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
            let ca = certs::new_authority(name, *days).map_err(|error| error.to_string())?;
            let key = write(dir.join("ca.key"), &ca.key_pem, true)?;
            let certificate = write(dir.join("ca.crt"), &ca.certificate_pem, false)?;
            Ok(vec![certificate, key])
        }
        CertsCommand::Node { dir, node_id, hosts, days } => {
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read_to_string(&path)
                    .map_err(|error| format!("{}: {error}", path.display()))
            };
            let ca = certs::Issued { certificate_pem: read("ca.crt")?, key_pem: read("ca.key")? };
            let node = certs::issue_node(&ca, *node_id, hosts, *days)
                .map_err(|error| error.to_string())?;
            let key = write(dir.join(format!("node-{node_id}.key")), &node.key_pem, true)?;
            let certificate =
                write(dir.join(format!("node-{node_id}.crt")), &node.certificate_pem, false)?;
            Ok(vec![certificate, key])
        }
    }
}

/// Runs the command and prints its outcome.
async fn run(cli: Cli) -> ExitCode {
    if let Command::Certs(command) = &cli.command {
        return match certs(command) {
            Ok(paths) => {
                for path in paths {
                    println!("{}", path.display());
                }
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("bookctl certs: {message}");
                ExitCode::FAILURE
            }
        };
    }
    let config =
        Config { retry_budget: Duration::from_millis(cli.timeout_ms), ..Config::default() };
    let token = match operator_token(&cli) {
        Ok(token) => token,
        Err(message) => {
            eprintln!("bookctl: {message}");
            return ExitCode::from(2);
        }
    };
    let ca = match &cli.ca_file {
        None => None,
        Some(path) => match std::fs::read_to_string(path) {
            Ok(pem) => Some(pem),
            Err(error) => {
                eprintln!("bookctl: --ca-file {}: {error}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let client = Client::with_config(cli.nodes.clone(), config)
        .and_then(|client| match token {
            Some(token) => client.with_operator_token(&token),
            None => Ok(client),
        })
        .and_then(|client| match &ca {
            Some(pem) => client.with_ca_certificate(pem),
            None => Ok(client),
        });
    let client = match client {
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
        Command::Session(SessionCommand::New) => match client.create_session().await {
            Ok(token) => {
                if json {
                    println!("{:#}", json!({ "ok": true, "token": token }));
                } else {
                    println!("{token}");
                }
                ExitCode::SUCCESS
            }
            Err(error) => fail(json, &error, None),
        },
        Command::Session(SessionCommand::Erase { session, show }) => {
            let erased = match show {
                Some(show) => client.erase_session_from_show(show, &session).await.map(|r| vec![r]),
                None => client.erase_session(&session).await,
            };
            report(
                json,
                erased,
                |replies| {
                    let shows: Vec<Value> = replies
                        .iter()
                        .map(|reply| {
                            json!({
                                "show_id": reply.show_id,
                                "group_id": reply.group_id,
                                "records": reply.records,
                                "idempotency_records": reply.idempotency_records,
                            })
                        })
                        .collect();
                    json!({ "shows": shows })
                },
                |replies| {
                    let lines: Vec<String> = replies
                    .iter()
                    .map(|reply| {
                        format!(
                            "show {}: {} records now name a pseudonym, {} idempotency records removed",
                            reply.show_id, reply.records, reply.idempotency_records
                        )
                    })
                    .collect();
                    lines.join("\n")
                },
            )
        }
        Command::Show(command) => show(&client, json, command).await,
        Command::Hold(command) => hold(&client, json, command).await,
        Command::Checkout(args) => {
            let (buyer, key) = (&args.buyer, args.key.key.as_deref());
            let result = client.checkout(&buyer.token, buyer.show, args.hold, key).await;
            report(json, result, render::checkout_json, render::checkout_text)
        }
        Command::Booking(command) => booking(&client, json, command).await,
        Command::Payment(PaymentCommand::Get { payment: (show, payment), token }) => {
            let result = client.get_payment(token.as_deref(), show, payment).await;
            report(json, result, render::payment_json, render::payment_text)
        }
        Command::Queue(command) => queue(&client, json, command).await,
        Command::Waitlist(command) => waitlist(&client, json, command).await,
        Command::Offer(command) => offer(&client, json, command).await,
        Command::Capacity(CapacityCommand::Release { show, event, seats }) => {
            let result = client.capacity_released(show, &event, &seats).await;
            report(
                json,
                result,
                |reply| render::capacity_json(&event, reply),
                |reply| render::capacity_text(&event, reply),
            )
        }
        Command::Catalog(command) => match command.into_change() {
            Ok((action, record, key)) => {
                let result = client.change_catalog(action, record, key.as_deref()).await;
                report(json, result, catalog::changed_json, catalog::changed_text)
            }
            Err(message) => {
                eprintln!("bookctl: {message}");
                ExitCode::from(2)
            }
        },
        Command::Search(args) => {
            let result = client.search(&args.request()).await;
            report(json, result, catalog::search_json, catalog::search_text)
        }
        Command::Backup(args) => backup(&client, json, &args).await,
        Command::Restore(args) => restore(&client, json, &args).await,
        Command::FeatureLevel(args) => {
            let level = match args.raise.as_str() {
                "max" => client
                    .cluster_status(false)
                    .await
                    .into_iter()
                    .map(|node| node.result.map_or(0, |status| status.feature_level_max))
                    .min()
                    .unwrap_or(0),
                number => match number.parse() {
                    Ok(level) => level,
                    Err(_) => {
                        eprintln!("bookctl: --raise: a level number or `max`, not `{number}`");
                        return ExitCode::from(2);
                    }
                },
            };
            if level == 0 {
                // Level 0 is where every group starts: nothing to raise (a node of a build
                // before feature levels reports 0 and cannot be asked to raise anything).
                if json {
                    println!("{:#}", json!({ "ok": true, "groups": [] }));
                } else {
                    println!("every node's build knows only feature level 0: nothing to raise");
                }
                return ExitCode::SUCCESS;
            }
            let result = client.raise_feature_level(level).await;
            report(
                json,
                result,
                |raised| render::feature_levels_json(raised),
                |raised| render::feature_levels_text(raised),
            )
        }
        Command::Certs(_) => unreachable!("answered before connecting"),
        Command::Audit(args) => {
            let result = client.get_audit(args.show, args.kind.wire_name(), args.id).await;
            report(json, result, render::audit_json, |audit| {
                render::audit_text(audit).trim_end().to_owned()
            })
        }
    }
}

/// Prints a result (its JSON with `"ok": true`, or its text) or the error; the exit status.
fn report<T>(
    json: bool,
    result: Result<T, Error>,
    to_json: impl Fn(&T) -> Value,
    to_text: impl Fn(&T) -> String,
) -> ExitCode {
    match result {
        Ok(value) => {
            if json {
                let mut document = to_json(&value);
                document["ok"] = json!(true);
                println!("{document:#}");
            } else {
                println!("{}", to_text(&value));
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(json, &error, None),
    }
}

/// Prints every item of a watch as it comes (one compact JSON document per line with
/// `--json`) until the stream ends (exit 0) or fails (exit 1).
async fn follow<T>(
    json: bool,
    opened: Result<Watch<T>, Error>,
    to_json: impl Fn(&T) -> Value,
    to_text: impl Fn(&T) -> String,
) -> ExitCode {
    let mut watch = match opened {
        Ok(watch) => watch,
        Err(error) => return fail(json, &error, None),
    };
    while let Some(item) = watch.next().await {
        match item {
            Ok(value) => {
                if json {
                    println!("{}", to_json(&value));
                } else {
                    println!("{}", to_text(&value));
                }
            }
            Err(error) => return fail(json, &error, None),
        }
    }
    ExitCode::SUCCESS
}

/// `bookctl backup`: takes every group's state and writes the file.
async fn backup(client: &Client, json: bool, args: &BackupArgs) -> ExitCode {
    let started = Instant::now();
    let backup = match client.backup().await {
        Ok(backup) => backup,
        Err(error) => return fail(json, &error, None),
    };
    if let Err(error) = backup.write(&args.out) {
        eprintln!("bookctl: {error}");
        return ExitCode::FAILURE;
    }
    let manifest = backup.manifest();
    let elapsed_ms = started.elapsed().as_millis();
    if json {
        println!(
            "{:#}",
            json!({ "ok": true, "file": args.out, "elapsed_ms": elapsed_ms, "manifest": manifest })
        );
    } else {
        for group in &manifest.groups {
            println!(
                "group {}: log index {} (term {}), {} bytes, sha256 {}",
                group.group_id,
                group.log_index,
                group.log_term,
                group.state_bytes,
                group.state_sha256
            );
        }
        println!("wrote {} in {elapsed_ms} ms", args.out.display());
    }
    ExitCode::SUCCESS
}

/// `bookctl restore`: reads and checks the file, then founds every group on the fresh nodes.
async fn restore(client: &Client, json: bool, args: &RestoreArgs) -> ExitCode {
    let started = Instant::now();
    let backup = match client::Backup::read(&args.from) {
        Ok(backup) => backup,
        Err(error) => {
            eprintln!("bookctl: {error}");
            return ExitCode::FAILURE;
        }
    };
    let replicas = args.replicas.map(|replicas| usize::try_from(replicas).unwrap_or(usize::MAX));
    let restored = match client.restore(&backup, replicas).await {
        Ok(restored) => restored,
        Err(error) => return fail(json, &error, None),
    };
    let elapsed_ms = started.elapsed().as_millis();
    let groups: Vec<_> = restored
        .iter()
        .map(|reply| json!({ "group_id": reply.group_id, "log_index": reply.log_index }))
        .collect();
    if json {
        println!("{:#}", json!({ "ok": true, "elapsed_ms": elapsed_ms, "groups": groups }));
    } else {
        for reply in &restored {
            println!("group {}: restored at log index {}", reply.group_id, reply.log_index);
        }
        println!(
            "restored {} groups from {} in {elapsed_ms} ms",
            restored.len(),
            args.from.display()
        );
    }
    ExitCode::SUCCESS
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
        MemberCommand::Move { group, from, to, address, peer_address } => {
            let address = membership_address(address, peer_address.as_deref());
            let result = client.move_replica(*group, *from, *to, &address).await;
            return report_membership(json, "move replica", vec![(*group, result)]);
        }
        MemberCommand::Readmit { group, node_id, address, peer_address } => {
            let select = GroupSelect { group: *group, all_groups: group.is_none() };
            let address = membership_address(address, peer_address.as_deref());
            return readmit(client, json, &select, *node_id, &address).await;
        }
    };
    let groups = match selected_groups(client, groups).await {
        Ok(groups) => groups,
        Err(error) => return fail(json, &error, None),
    };
    let mut results = Vec::with_capacity(groups.len());
    for group in groups {
        let result = match &command {
            MemberCommand::AddLearner { node_id, address, peer_address, wait, .. } => {
                let address = membership_address(address, peer_address.as_deref());
                client.add_learner(group, *node_id, &address, *wait).await
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
        ShowCommand::List => {
            return report(
                json,
                client.list_shows().await,
                |shows| json!({ "shows": shows.iter().map(render::show_json).collect::<Vec<_>>() }),
                |shows| render::shows_table(shows).trim_end().to_owned(),
            );
        }
        ShowCommand::Get { show } => {
            return report(json, client.get_show(show).await, render::show_json, |show| {
                render::show_text(show).trim_end().to_owned()
            });
        }
        ShowCommand::Seats { show, width, linearizable } => {
            let width = width as usize;
            let map = if linearizable {
                client.get_seat_map_linearizable(show).await
            } else {
                client.get_seat_map(show).await
            };
            return report(
                json,
                map,
                |map| {
                    json!({
                        "show_id": map.show_id,
                        "status": map.status,
                        "price_version": map.price_version,
                        "currency": map.currency,
                        "prices_minor": map.prices_minor,
                        "classes": map.classes,
                        // One character per seat, seat 0 first: `.` free, `h` held, `#` booked,
                        // `r` reserved.
                        "seats": seats::glyphs(map),
                        "as_of_log_index": map.as_of_log_index,
                        "as_of_log_time_ms": map.as_of_log_time_ms,
                        "linearizable": map.linearizable,
                    })
                },
                |map| seats::draw(map, width).trim_end().to_owned(),
            );
        }
        ShowCommand::Create {
            show,
            seats,
            price_minor,
            currency,
            group,
            hold_ttl_ms,
            admission_window,
            waitlist,
            open,
            prices,
            event,
            hall,
            starts_at_ms,
            key,
        } => {
            let listing = event.map(|event_id| ShowListing {
                event_id,
                hall_id: hall.unwrap_or(0),
                starts_at_ms: starts_at_ms.unwrap_or(0),
            });
            let mut new_show = NewShow {
                group_id: group,
                hold_ttl_ms,
                admission_window,
                waitlist,
                open_sales: open,
                listing,
                ..NewShow::uniform(show, seats.unwrap_or(0), price_minor, &currency)
            };
            if !prices.is_empty() {
                new_show.prices_minor = prices;
            }
            if new_show.listing.is_some() {
                // The hall's seats and classes.
                new_show.layout.clear();
            }
            let what = if open { "created and opened" } else { "created" };
            client.create_show(&new_show, key.as_deref()).await.map(|p| (what, p))
        }
        ShowCommand::Open { show } => {
            let result = client.open_sales(show).await;
            return report(json, result, render::sales_json, render::sales_text);
        }
        ShowCommand::Close { show } => {
            let result = client.close_sales(show).await;
            return report(json, result, render::sales_json, render::sales_text);
        }
        ShowCommand::Cancel { show } => {
            let result = client.cancel_show(show).await;
            return report(json, result, render::cancelled_json, render::cancelled_text);
        }
        ShowCommand::Archive { show } => {
            let result = client.archive_show(show).await;
            return report(json, result, render::archived_json, render::archived_text);
        }
        ShowCommand::Move { show, to } => {
            let result = client.move_show(show, to).await;
            return report(json, result, render::moved_json, render::moved_text);
        }
        ShowCommand::Rebalance { dry_run: true } => {
            let result = client.rebalance_plan().await;
            return report(
                json,
                result,
                |plan| render::plan_json(plan),
                |plan| render::plan_text(plan),
            );
        }
        ShowCommand::Rebalance { dry_run: false } => {
            let result = client.rebalance().await;
            return report(
                json,
                result,
                |moved| render::rebalanced_json(moved),
                |moved| render::rebalanced_text(moved),
            );
        }
        ShowCommand::Prices { show, version, prices } => {
            let result = client.set_prices(show, version, &prices).await;
            return report(json, result, render::prices_json, render::prices_text);
        }
        ShowCommand::Admission { show, enabled, window } => {
            let result = client.configure_admission(show, enabled, window).await;
            return report(json, result, render::admission_json, render::admission_text);
        }
        ShowCommand::Waitlist { show, enabled } => {
            let result = client.configure_waitlist(show, enabled).await;
            return report(json, result, render::waitlist_json, render::waitlist_text);
        }
        ShowCommand::WaitlistPolicy { show, ordering: None, .. } => {
            let result = client.get_waitlist_policy(show).await;
            return report(json, result, render::policy_json, render::policy_text);
        }
        ShowCommand::WaitlistPolicy { show, ordering: Some(ordering), draw_at_ms, wave } => {
            let rules = WaitlistRules { ordering, draw_at_ms, wave_offers_max: wave };
            let result = client.set_waitlist_policy(show, rules).await;
            return report(json, result, render::policy_json, render::policy_text);
        }
        ShowCommand::Draw { show, seed } => {
            let result = client.draw_lottery(show, seed).await;
            return report(json, result, render::drawn_json, render::drawn_text);
        }
        ShowCommand::Claim { show, session_token, band, valid_for_s } => {
            let result = client.issue_band_claim(show, &session_token, band, valid_for_s).await;
            return report(json, result, render::claim_json, render::claim_text);
        }
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
        HoldCommand { action: Some(HoldAction::Get(args)), .. } => {
            let result = client.get_hold(&args.buyer.token, args.buyer.show, args.hold).await;
            report(json, result, render::hold_json, render::hold_text)
        }
        HoldCommand { action: Some(HoldAction::Cancel(args)), .. } => {
            let (buyer, key) = (&args.buyer, args.key.key.as_deref());
            let result = client.cancel_hold(&buyer.token, buyer.show, args.hold, key).await;
            report(json, result, render::hold_json, render::hold_text)
        }
        HoldCommand { action: Some(HoldAction::Watch(args)), .. } => {
            let opened = client.watch_hold(&args.buyer.token, args.buyer.show, args.hold).await;
            follow(json, opened, render::hold_json, render::hold_text).await
        }
        HoldCommand { action: None, place: Some(place) } => place_hold(client, json, place).await,
        HoldCommand { action: None, place: None } => {
            eprintln!(
                "bookctl: hold needs --show and --seats (or `hold get|cancel|watch`); see --help"
            );
            ExitCode::from(2)
        }
    }
}

/// `bookctl hold --show S --seats ...`: makes a session first when no token is given, and
/// prints the token and key it chose so that the hold can be read or retried.
async fn place_hold(client: &Client, json: bool, place: HoldArgs) -> ExitCode {
    let (token, new_session) = match place.token.clone() {
        Some(token) => (token, false),
        None => match client.create_session().await {
            Ok(token) => (token, true),
            Err(error) => return fail(json, &error, None),
        },
    };
    let chose_key = place.key.is_none();
    let key = place.key.clone().unwrap_or_else(client::generate_key);
    let result = client
        .hold_with_grant(
            &token,
            place.show,
            &place.seats,
            place.price_version,
            place.grant.unwrap_or(0),
            Some(&key),
        )
        .await;
    let shown_token = new_session.then_some(token.as_str());
    let shown_key = chose_key.then_some(key.as_str());
    match result {
        Ok(reply) => {
            if json {
                let mut document = render::hold_json(&reply);
                document["ok"] = json!(true);
                document["token"] = json!(shown_token);
                document["key"] = json!(shown_key);
                println!("{document:#}");
            } else {
                println!("{}", render::hold_text(&reply));
                if let Some(token) = shown_token {
                    println!(
                        "session token {token} (new session; pass it as --token or BOOKCTL_TOKEN)"
                    );
                }
                if let Some(key) = shown_key {
                    println!("idempotency key {key}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            if !json && matches!(error, Error::Unavailable { .. }) {
                // The hold may have been applied: the same token and key get its outcome.
                eprintln!(
                    "bookctl: retry with --token {token} --key {key} (the same key returns the stored outcome)"
                );
            } else if let Some(token) = shown_token.filter(|_| !json) {
                eprintln!("bookctl: session token {token} (new session)");
            }
            let retry = json!({ "token": shown_token, "key": key });
            fail(json, &error, Some(retry))
        }
    }
}

/// `bookctl booking ...`.
async fn booking(client: &Client, json: bool, command: BookingCommand) -> ExitCode {
    let result = match &command {
        BookingCommand::Get(args) => {
            client.get_booking(&args.buyer.token, args.buyer.show, args.booking).await
        }
        BookingCommand::Cancel(args) => {
            let key = args.key.key.as_deref();
            client.cancel_booking(&args.buyer.token, args.buyer.show, args.booking, key).await
        }
    };
    report(json, result, render::booking_json, render::booking_text)
}

/// `bookctl queue ...`.
async fn queue(client: &Client, json: bool, command: QueueCommand) -> ExitCode {
    let result = match &command {
        QueueCommand::Join { buyer, key } => {
            client.join_queue(&buyer.token, buyer.show, key.key.as_deref()).await
        }
        QueueCommand::Get(args) => {
            client.get_ticket(&args.buyer.token, args.buyer.show, args.ticket).await
        }
        QueueCommand::Leave(args) => {
            let key = args.key.key.as_deref();
            client.leave_queue(&args.buyer.token, args.buyer.show, args.ticket, key).await
        }
        QueueCommand::Watch(args) => {
            let opened = client.watch_ticket(&args.buyer.token, args.buyer.show, args.ticket).await;
            return follow(json, opened, render::ticket_json, render::ticket_text).await;
        }
    };
    report(json, result, render::ticket_json, render::ticket_text)
}

/// `bookctl waitlist ...`.
async fn waitlist(client: &Client, json: bool, command: WaitlistCommand) -> ExitCode {
    let result = match &command {
        WaitlistCommand::Join { buyer, quantity, claim, key } => {
            let (token, show, key) = (&buyer.token, buyer.show, key.key.as_deref());
            client.join_waitlist_with_claim(token, show, *quantity, claim.as_deref(), key).await
        }
        WaitlistCommand::Get(args) => {
            client.get_waitlist_entry(&args.buyer.token, args.buyer.show, args.entry).await
        }
        WaitlistCommand::Leave(args) => {
            let key = args.key.key.as_deref();
            client.leave_waitlist(&args.buyer.token, args.buyer.show, args.entry, key).await
        }
    };
    report(json, result, render::entry_json, render::entry_text)
}

/// `bookctl offer ...`.
async fn offer(client: &Client, json: bool, command: OfferCommand) -> ExitCode {
    match &command {
        OfferCommand::Get(args) => {
            let result = client.get_offer(&args.buyer.token, args.buyer.show, args.offer).await;
            report(json, result, render::offer_json, render::offer_text)
        }
        OfferCommand::Accept(args) => {
            let key = args.key.key.as_deref();
            let result =
                client.accept_offer(&args.buyer.token, args.buyer.show, args.offer, key).await;
            report(json, result, render::hold_json, render::hold_text)
        }
        OfferCommand::Decline(args) => {
            let key = args.key.key.as_deref();
            let result =
                client.decline_offer(&args.buyer.token, args.buyer.show, args.offer, key).await;
            report(json, result, render::offer_json, render::offer_text)
        }
    }
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
