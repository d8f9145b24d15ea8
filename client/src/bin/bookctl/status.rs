//! `bookctl status`: the table (or JSON) of every node's view of every group, and the check
//! behind `--require-leaders`.
//!
//! Owns rendering status replies and judging them. Never calls a node.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use client::{Error, GroupStatus, NodeStatus};
use serde_json::{Value, json};

/// The role a node reports for a group it leads.
const ROLE_LEADER: &str = "leader";

/// How many hex digits of a digest the table shows (JSON has them all).
const DIGEST_SHOWN_LEN: usize = 16;

/// The table: one row per (node, group), then one line per node that did not answer.
pub fn table(nodes: &[NodeStatus], with_digest: bool) -> String {
    let mut header = vec![
        "NODE",
        "ADDRESS",
        "GROUP",
        "ROLE",
        "TERM",
        "LEADER",
        "LAST_LOG",
        "COMMITTED",
        "APPLIED",
        "SNAPSHOT",
        "VOTERS",
        "LEARNERS",
    ];
    if with_digest {
        header.push("DIGEST@INDEX");
    }
    let mut rows: Vec<Vec<String>> = vec![header.into_iter().map(String::from).collect()];
    let mut failures = String::new();
    for node in nodes {
        match &node.result {
            Ok(reply) => {
                for group in &reply.groups {
                    let mut row = vec![
                        reply.node_id.to_string(),
                        node.address.clone(),
                        group.group_id.to_string(),
                        role(group),
                        group.term.to_string(),
                        dash_if_zero(group.leader_id),
                        group.last_log_index.to_string(),
                        group.committed_index.to_string(),
                        group.applied_index.to_string(),
                        dash_if_zero(group.snapshot_index),
                        list(&group.voters),
                        list(&group.learners),
                    ];
                    if with_digest {
                        row.push(digest(group));
                    }
                    rows.push(row);
                }
                if reply.groups.is_empty() {
                    let _ = writeln!(
                        failures,
                        "{}: node {} hosts no group",
                        node.address, reply.node_id
                    );
                }
            }
            Err(error) => {
                let _ = writeln!(failures, "{}: did not answer: {}", node.address, reason(error));
            }
        }
    }
    let mut widths = vec![0; rows[0].len()];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    if rows.len() == 1 {
        // Nobody answered: the header alone says nothing.
        return failures;
    }
    for row in &rows {
        let line: Vec<String> =
            row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out.push_str(&failures);
    out
}

/// The JSON document: `{"nodes": [{"address", "ok", "node_id", "groups": [...]} | {"address",
/// "ok": false, "error", "code"}]}`.
pub fn json(nodes: &[NodeStatus], problems: Option<&[String]>) -> Value {
    let nodes: Vec<Value> = nodes
        .iter()
        .map(|node| match &node.result {
            Ok(reply) => json!({
                "address": node.address,
                "ok": true,
                "node_id": reply.node_id,
                "reported_address": reply.address,
                "feature_level_max": reply.feature_level_max,
                "groups": reply.groups.iter().map(group_json).collect::<Vec<_>>(),
            }),
            Err(error) => json!({
                "address": node.address,
                "ok": false,
                "error": error.to_string(),
                "grpc_code": error.grpc_code().map(|code| format!("{code:?}")),
                "booking_code": error.booking_code(),
            }),
        })
        .collect();
    let mut document = json!({ "nodes": nodes });
    if let Some(problems) = problems {
        document["leader_problems"] = json!(problems);
    }
    document
}

/// One group of one node, as JSON.
fn group_json(group: &GroupStatus) -> Value {
    json!({
        "group_id": group.group_id,
        "role": group.role,
        "term": group.term,
        "leader_id": group.leader_id,
        "last_log_index": group.last_log_index,
        "committed_index": group.committed_index,
        "applied_index": group.applied_index,
        "snapshot_index": group.snapshot_index,
        "voters": group.voters,
        "learners": group.learners,
        "member": group.member,
        "digest": group.digest,
        "digest_index": group.digest_index,
        "shows": group.shows,
        "fatal": group.fatal,
        "feature_level": group.feature_level,
    })
}

/// What keeps the cluster from having a known leader for every group: a node that did not
/// answer, an expected group nobody reports, a group with no leader, a member that does not
/// know the leader. Empty when every group is led and every member knows by whom.
pub fn leader_problems(nodes: &[NodeStatus], data_groups: Option<u64>) -> Vec<String> {
    let mut problems = Vec::new();
    // Group → (node id, its view), over the nodes that answered.
    let mut views: BTreeMap<u64, Vec<(u64, &GroupStatus)>> = BTreeMap::new();
    for node in nodes {
        match &node.result {
            Ok(reply) => {
                for group in &reply.groups {
                    views.entry(group.group_id).or_default().push((reply.node_id, group));
                }
            }
            Err(error) => {
                problems.push(format!("{}: did not answer: {}", node.address, reason(error)))
            }
        }
    }
    if let Some(data_groups) = data_groups {
        for group in 0..=data_groups {
            if !views.contains_key(&group) {
                problems.push(format!("group {group}: reported by no node"));
            }
        }
    }
    for (group_id, replicas) in &views {
        let leaders: BTreeSet<u64> = replicas
            .iter()
            .filter(|(_, group)| group.role == ROLE_LEADER && !group.fatal)
            .map(|(node_id, _)| *node_id)
            .collect();
        if leaders.is_empty() {
            problems.push(format!("group {group_id}: no leader"));
            continue;
        }
        for (node_id, group) in replicas {
            if group.member && group.leader_id == 0 {
                problems.push(format!("group {group_id}: node {node_id} knows no leader"));
            }
            if group.fatal {
                problems.push(format!("group {group_id}: node {node_id} stopped on a fatal error"));
            }
        }
    }
    problems
}

/// Why a node did not answer, without repeating its address.
fn reason(error: &Error) -> String {
    match error {
        Error::Transport { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// A group's role, marked when the replica is not a member or has stopped.
fn role(group: &GroupStatus) -> String {
    let mut role = group.role.clone();
    if group.fatal {
        role.push_str("!fatal");
    }
    if !group.member {
        role.push_str("(non-member)");
    }
    role
}

/// A number, or `-` for 0 (unknown / none).
fn dash_if_zero(value: u64) -> String {
    if value == 0 { "-".into() } else { value.to_string() }
}

/// Node ids, comma-separated, or `-`.
fn list(ids: &[u64]) -> String {
    if ids.is_empty() {
        return "-".into();
    }
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// The start of a digest and the index it was computed at, or `-`.
fn digest(group: &GroupStatus) -> String {
    if group.digest.is_empty() {
        return "-".into();
    }
    let shown = group.digest.get(..DIGEST_SHOWN_LEN).unwrap_or(&group.digest);
    format!("{shown}@{}", group.digest_index)
}

#[cfg(test)]
mod tests {
    use client::StatusReply;

    use super::*;

    fn group(group_id: u64, role: &str, leader_id: u64) -> GroupStatus {
        GroupStatus {
            group_id,
            role: role.into(),
            term: 3,
            leader_id,
            last_log_index: 12,
            committed_index: 12,
            applied_index: 11,
            voters: vec![1, 2, 3],
            member: true,
            digest: "ab".repeat(32),
            digest_index: 11,
            ..GroupStatus::default()
        }
    }

    fn node(node_id: u64, groups: Vec<GroupStatus>) -> NodeStatus {
        let address = format!("127.0.0.1:710{node_id}");
        NodeStatus {
            address: address.clone(),
            result: Ok(StatusReply { node_id, address, groups, feature_level_max: 1 }),
        }
    }

    fn down(address: &str) -> NodeStatus {
        NodeStatus {
            address: address.into(),
            result: Err(Error::Transport {
                address: address.into(),
                status: tonic::Code::Unavailable,
                message: "tcp connect error".into(),
            }),
        }
    }

    fn healthy() -> Vec<NodeStatus> {
        vec![
            node(1, vec![group(0, "leader", 1), group(1, "follower", 2)]),
            node(2, vec![group(0, "follower", 1), group(1, "leader", 2)]),
        ]
    }

    #[test]
    fn table_has_a_row_per_node_and_group_and_lists_failures() {
        let mut nodes = healthy();
        nodes.push(down("127.0.0.1:7103"));
        let text = table(&nodes, true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 4 + 1, "{text}");
        assert!(lines[0].starts_with("NODE  ADDRESS") && lines[0].ends_with("DIGEST@INDEX"));
        assert!(lines[1].contains("leader") && lines[1].contains("1,2,3"));
        assert!(lines[1].contains(&format!("{}@11", "ab".repeat(8))));
        assert!(lines[5].starts_with("127.0.0.1:7103: did not answer"), "{text}");
        assert!(!table(&nodes, false).contains("DIGEST"));
    }

    #[test]
    fn json_keeps_full_digests_and_errors() {
        let mut nodes = healthy();
        nodes.push(down("127.0.0.1:7103"));
        let document = json(&nodes, None);
        assert_eq!(document["nodes"][0]["groups"][0]["digest"], "ab".repeat(32));
        assert_eq!(document["nodes"][2]["ok"], false);
        assert_eq!(document["nodes"][2]["grpc_code"], "Unavailable");
    }

    #[test]
    fn a_led_cluster_has_no_problems() {
        assert!(leader_problems(&healthy(), Some(1)).is_empty());
    }

    #[test]
    fn missing_leaders_groups_and_nodes_are_problems() {
        let nodes = vec![
            node(1, vec![group(0, "leader", 1), group(1, "candidate", 0)]),
            node(2, vec![group(0, "follower", 0), group(1, "follower", 0)]),
            down("127.0.0.1:7103"),
        ];
        let problems = leader_problems(&nodes, Some(2));
        assert_eq!(
            problems,
            [
                "127.0.0.1:7103: did not answer: tcp connect error",
                "group 2: reported by no node",
                "group 0: node 2 knows no leader",
                "group 1: no leader",
            ]
        );
    }
}
