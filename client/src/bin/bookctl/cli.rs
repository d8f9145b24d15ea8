//! The command line of `bookctl`: every command, flag and help text.
//!
//! Owns parsing only. Never calls a node (`main.rs` runs the commands).

use clap::{Args, Parser, Subcommand};

/// The nodes asked when neither `--nodes` nor `BOOKCTL_NODES` says otherwise: the local
/// cluster of `scripts/cluster.sh`.
pub const NODES_DEFAULT: &str = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103";

/// Operate a booking cluster: node and group status, membership, leadership, shows and holds.
///
/// Calls go to the leader of the group concerned: a node that is not the leader points to it
/// and bookctl follows; with no leader it retries on the next node with backoff until
/// --timeout-ms. Mutations keep one idempotency key across these retries.
///
/// Exit status: 0 success, 1 rejected or failed (including a node that did not answer
/// `status`), 2 usage error.
#[derive(Debug, Parser)]
#[command(name = "bookctl", version)]
pub struct Cli {
    /// Node addresses (host:port), comma-separated; any subset of the cluster will do.
    #[arg(
        long,
        global = true,
        env = "BOOKCTL_NODES",
        value_delimiter = ',',
        default_value = NODES_DEFAULT,
        value_name = "ADDRS"
    )]
    pub nodes: Vec<String>,

    /// Print the result as JSON (one document on stdout) instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Total time a command may spend retrying, in milliseconds (membership changes that wait
    /// for a catch-up may need more).
    #[arg(
        long,
        global = true,
        env = "BOOKCTL_TIMEOUT_MS",
        default_value_t = 10_000,
        value_name = "MS"
    )]
    pub timeout_ms: u64,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show every node's view of every group: one row per (node, group).
    ///
    /// Exit status 0 when every node answered, 1 otherwise.
    Status(StatusArgs),
    /// Change a group's membership (learners, voters, moves).
    #[command(subcommand)]
    Member(MemberCommand),
    /// Move a group's leadership.
    #[command(subcommand)]
    Leader(LeaderCommand),
    /// Create shows and open their sales.
    #[command(subcommand)]
    Show(ShowCommand),
    /// Hold seats (`bookctl hold --show 7 --seats 1,2,3`), or read a hold (`bookctl hold get`).
    Hold(HoldCommand),
}

/// `bookctl status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Also show each group's state digest (SHA-256 of its applied state) and the index it
    /// was computed at; replicas at the same index must have the same digest.
    #[arg(long)]
    pub digest: bool,

    /// Also fail (exit 1) unless every reported group has a leader that every member knows.
    #[arg(long)]
    pub require_leaders: bool,

    /// With --require-leaders: groups 0..=N must all be reported (N data groups and the
    /// metadata group 0).
    #[arg(long, value_name = "N", requires = "require_leaders")]
    pub data_groups: Option<u64>,
}

/// Which groups a membership change applies to.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct GroupSelect {
    /// The group (0 is the metadata group).
    #[arg(long, value_name = "G")]
    pub group: Option<u64>,

    /// Every group the cluster reports (0 and the data groups, from `status`), one by one.
    #[arg(long)]
    pub all_groups: bool,
}

/// `bookctl member ...`.
#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// Add a node to a group as a learner: it receives the log (or a snapshot) but does not
    /// vote until promoted.
    AddLearner {
        /// The groups.
        #[command(flatten)]
        groups: GroupSelect,
        /// The node to add.
        #[arg(long, value_name = "N")]
        node_id: u64,
        /// The address the node serves on (host:port).
        #[arg(long, value_name = "ADDR")]
        address: String,
        /// Return only once the learner has caught up with the leader's log.
        #[arg(long)]
        wait: bool,
    },
    /// Make a learner of a group a voter.
    Promote {
        /// The groups.
        #[command(flatten)]
        groups: GroupSelect,
        /// The learner to promote.
        #[arg(long, value_name = "N")]
        node_id: u64,
    },
    /// Remove a node (voter or learner) from a group.
    Remove {
        /// The groups.
        #[command(flatten)]
        groups: GroupSelect,
        /// The node to remove.
        #[arg(long, value_name = "N")]
        node_id: u64,
    },
    /// Readmit a node that lost its data (restarted without --bootstrap on an empty data
    /// directory): in each group, remove it, add it back as a learner, wait until it caught up,
    /// then promote it. Stops at the first step that fails.
    Readmit {
        /// Only this group; every group the cluster reports when omitted.
        #[arg(long, value_name = "G")]
        group: Option<u64>,
        /// The node to readmit.
        #[arg(long, value_name = "N")]
        node_id: u64,
        /// The address the node serves on (host:port).
        #[arg(long, value_name = "ADDR")]
        address: String,
    },
    /// Move a group's replica from one node to another: add it as a learner, wait for it to
    /// catch up, then swap the voters in one joint change.
    Move {
        /// The group.
        #[arg(long, value_name = "G")]
        group: u64,
        /// The node giving up its replica.
        #[arg(long, value_name = "N")]
        from: u64,
        /// The node receiving the replica.
        #[arg(long, value_name = "M")]
        to: u64,
        /// The address the receiving node serves on (host:port).
        #[arg(long, value_name = "ADDR")]
        address: String,
    },
}

/// `bookctl leader ...`.
#[derive(Debug, Subcommand)]
pub enum LeaderCommand {
    /// Hand a group's leadership to one of its voters.
    Transfer {
        /// The group.
        #[arg(long, value_name = "G")]
        group: u64,
        /// The voter to lead it.
        #[arg(long, value_name = "N")]
        to: u64,
    },
}

/// `bookctl show ...`.
#[derive(Debug, Subcommand)]
pub enum ShowCommand {
    /// Create a show of N seats of one price class (idempotent by show id).
    Create {
        /// The show's id (non-zero).
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The number of seats, numbered from 0.
        #[arg(long, value_name = "N")]
        seats: u32,
        /// The price of every seat, in minor units (cents).
        #[arg(long, value_name = "P", default_value_t = 5_000)]
        price_minor: u64,
        /// ISO 4217 currency code.
        #[arg(long, default_value = "EUR")]
        currency: String,
        /// The data group to place it in; 0 lets the cluster choose.
        #[arg(long, value_name = "G", default_value_t = 0)]
        group: u64,
        /// How long a hold keeps its seats, in milliseconds; 0 for the cluster's default.
        #[arg(long, value_name = "MS", default_value_t = 0)]
        hold_ttl_ms: u64,
        /// Idempotency key; one is made when omitted.
        #[arg(long)]
        key: Option<String>,
    },
    /// Open a show's sales.
    Open {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
    },
}

/// `bookctl hold` (place a hold) or `bookctl hold get`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct HoldCommand {
    /// Read a hold instead of placing one.
    #[command(subcommand)]
    pub get: Option<HoldGetCommand>,

    /// The hold to place.
    #[command(flatten)]
    pub place: Option<HoldArgs>,
}

/// Placing a hold.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// The show.
    #[arg(long, value_name = "ID")]
    pub show: u64,
    /// The seats, comma-separated (1..=10 distinct seat numbers); all or nothing.
    #[arg(long, value_name = "SEATS", value_delimiter = ',', required = true)]
    pub seats: Vec<u32>,
    /// The session token; a fresh random one is made (and printed) when omitted.
    #[arg(long, env = "BOOKCTL_TOKEN", value_name = "T")]
    pub token: Option<String>,
    /// Idempotency key: repeat a hold with the same key to get its stored outcome; one is made
    /// (and printed) when omitted.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
    /// The price version the buyer was quoted (a new show starts at 1).
    #[arg(long, value_name = "V", default_value_t = 1)]
    pub price_version: u32,
}

/// `bookctl hold get`.
#[derive(Debug, Subcommand)]
pub enum HoldGetCommand {
    /// Read one of the session's holds, linearizably.
    Get {
        /// The show.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The hold.
        #[arg(long, value_name = "H")]
        hold: u64,
        /// The session token the hold was made with.
        #[arg(long, env = "BOOKCTL_TOKEN", value_name = "T")]
        token: String,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    use super::*;

    fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("bookctl").chain(line.split_whitespace()))
    }

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn nodes_default_to_the_local_cluster_and_split_on_commas() {
        // SAFETY-free: the variable is only read; tests do not set it.
        if std::env::var_os("BOOKCTL_NODES").is_none() {
            let cli = parse("status").unwrap();
            assert_eq!(cli.nodes, ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]);
        }
        let cli = parse("--nodes a:1,b:2 status --digest --json").unwrap();
        assert_eq!(cli.nodes, ["a:1", "b:2"]);
        assert!(cli.json);
        assert!(matches!(cli.command, Command::Status(StatusArgs { digest: true, .. })));
    }

    #[test]
    fn membership_needs_exactly_one_group_selection() {
        let cli = parse("member add-learner --all-groups --node-id 4 --address h:7104 --wait");
        match cli.unwrap().command {
            Command::Member(MemberCommand::AddLearner { groups, node_id, address, wait }) => {
                assert!(groups.all_groups && groups.group.is_none());
                assert_eq!((node_id, address.as_str(), wait), (4, "h:7104", true));
            }
            other => panic!("{other:?}"),
        }
        let both = parse("member promote --group 1 --all-groups --node-id 4").unwrap_err();
        assert_eq!(both.kind(), ErrorKind::ArgumentConflict);
        let neither = parse("member remove --node-id 4").unwrap_err();
        assert_eq!(neither.kind(), ErrorKind::MissingRequiredArgument);
        assert!(parse("member move --group 1 --from 3 --to 4 --address h:7104").is_ok());
        match parse("member readmit --node-id 3 --address h:7103").unwrap().command {
            Command::Member(MemberCommand::Readmit { group: None, node_id: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(parse("leader transfer --group 0 --to 2").is_ok());
    }

    #[test]
    fn hold_places_or_gets() {
        match parse("hold --show 7 --seats 54,55,56 --key k1").unwrap().command {
            Command::Hold(HoldCommand { get: None, place: Some(place) }) => {
                assert_eq!((place.show, place.seats.as_slice()), (7, &[54, 55, 56][..]));
                assert_eq!(place.key.as_deref(), Some("k1"));
                assert_eq!(place.price_version, 1);
            }
            other => panic!("{other:?}"),
        }
        match parse("hold get --show 7 --hold 3 --token t").unwrap().command {
            Command::Hold(HoldCommand { get: Some(HoldGetCommand::Get { hold, .. }), .. }) => {
                assert_eq!(hold, 3);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("hold --show 7").is_err());
        assert!(parse("hold --show 7 --seats 1,x").is_err());
        assert!(parse("hold --show 7 --seats 1 get --show 7 --hold 1 --token t").is_err());
    }

    #[test]
    fn show_create_has_defaults() {
        match parse("show create --show 9 --seats 500").unwrap().command {
            Command::Show(ShowCommand::Create { price_minor, currency, group, .. }) => {
                assert_eq!((price_minor, currency.as_str(), group), (5_000, "EUR", 0));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn usage_errors_are_exit_code_2() {
        let error = parse("member promote --node-id x --group 1").unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert_eq!(parse("status --data-groups 4").unwrap_err().exit_code(), 2);
    }
}
