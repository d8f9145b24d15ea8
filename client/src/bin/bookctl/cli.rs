//! The command line of `bookctl`: every command, flag and help text.
//!
//! Owns parsing only. Never calls a node (`main.rs` runs the commands).

use clap::{Args, Parser, Subcommand};

use crate::catalog::{CatalogCommand, SearchArgs};

/// The nodes asked when neither `--nodes` nor `BOOKCTL_NODES` says otherwise: the local
/// cluster of `scripts/cluster.sh`.
pub const NODES_DEFAULT: &str = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103";

/// Operate and use a booking cluster: status, membership and leadership; shows and seat
/// maps; sessions, holds, checkout, bookings, the admission queue, the waitlist and offers; audit
/// trails.
///
/// Calls go to the leader of the group concerned: a node that is not the leader points to it
/// and bookctl follows; with no leader it retries on the next node with backoff until
/// --timeout-ms. Mutations keep one idempotency key across these retries (--key to choose it,
/// so that a command can be repeated after an unknown outcome).
///
/// A buyer's commands need a session token (--token or BOOKCTL_TOKEN) from `bookctl session
/// new`; `bookctl hold` makes a session when none is given and prints its token. Operator
/// commands (show create/open/close/cancel/prices/admission/waitlist, capacity release, audit,
/// and `payment get` without --token), and the admin commands (status, membership), send the
/// operator credential: from --operator-token-file, or BOOKCTL_OPERATOR_TOKEN.
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

    /// Print the result as JSON (one document on stdout; one per line for watches) instead of
    /// text.
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

    /// A file holding the operator credential, sent on operator commands (show create/open/
    /// close/cancel/prices/admission/waitlist, catalog, capacity release, audit, payment get
    /// without --token) and admin commands (status, learner, promote, remove, move, transfer).
    /// Or the credential itself in BOOKCTL_OPERATOR_TOKEN; never on the command line, where
    /// every local user could read it.
    #[arg(long, global = true, env = "BOOKCTL_OPERATOR_TOKEN_FILE", value_name = "FILE")]
    pub operator_token_file: Option<std::path::PathBuf>,

    /// The cluster's CA certificate (PEM, `bookctl certs init`'s ca.crt): speak https to nodes
    /// that serve their client port over TLS (`bookingd --client-tls`), trusting what it signed.
    #[arg(long, global = true, env = "BOOKCTL_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<std::path::PathBuf>,

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
    /// Get a guest session token (the --token of a buyer's commands).
    #[command(subcommand)]
    Session(SessionCommand),
    /// List shows, read one, draw its seat map; create shows, and the operator's controls:
    /// open or close sales, cancel, set prices, configure the admission lane and the waitlist.
    #[command(subcommand)]
    Show(ShowCommand),
    /// Hold seats (`bookctl hold --show 7 --seats 1,2,3`), or read, cancel or watch a hold
    /// (`bookctl hold get|cancel|watch`).
    Hold(HoldCommand),
    /// Start paying for a held hold: it becomes processing and a payment attempt is made.
    Checkout(HoldRefArgs),
    /// Read or cancel a booking.
    #[command(subcommand)]
    Booking(BookingCommand),
    /// Read a payment attempt: your own (--token), or any as the operator.
    #[command(subcommand)]
    Payment(PaymentCommand),
    /// The admission queue: join, read your ticket (a granted ticket is the --grant of a
    /// hold), watch it, leave.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// The waitlist of a sold-out show: join, read your entry and its offer, leave.
    #[command(subcommand)]
    Waitlist(WaitlistCommand),
    /// Waitlist offers: read, accept (the seats become your hold), decline.
    #[command(subcommand)]
    Offer(OfferCommand),
    /// Release free seats to a show's waitlist (operator).
    #[command(subcommand)]
    Capacity(CapacityCommand),
    /// The audit trail of one entity (operator): every transition, its reason and actor.
    ///
    /// Example: `bookctl audit hold 3 --show 7`.
    Audit(AuditArgs),
    /// The catalog (operator): venues, halls with their seats, events; retire or delist.
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Search the shows listed in the catalog: keywords (typos tolerated), city, postal code,
    /// a point and radius, a time range, genre.
    ///
    /// Example: `bookctl search --q hamlte --city lisboa`.
    Search(SearchArgs),
    /// Back up the whole cluster into one file (operator): every group's state at a committed
    /// index, taken from its leader while writes go on (the data groups first, the metadata
    /// group last), in a tar archive with a manifest and SHA-256 checksums.
    ///
    /// Example: `bookctl backup --out cluster-2026-12-05.backup`.
    Backup(BackupArgs),
    /// Build a cluster from a backup (operator): the nodes given with --nodes must be fresh
    /// (started with the backup's number of groups and without --bootstrap); each group's
    /// state goes to its first voter, the others catch up from it. Waits for every group's
    /// leader.
    ///
    /// Example: `bookctl --nodes 127.0.0.1:7301,127.0.0.1:7302 restore --from cluster.backup`.
    Restore(RestoreArgs),
    /// Raise every group's feature level once every node runs a build that knows it (after a
    /// rolling upgrade): from then on the groups write what the level adds. Checks first that
    /// every node answers and knows the level; data groups first, group 0 last.
    ///
    /// Example: `bookctl feature-level --raise 1` (or `--raise max`).
    FeatureLevel(FeatureLevelArgs),
    /// Make the cluster's certificates: a CA (`init`), then one certificate per node (`node`),
    /// for the nodes' --tls-ca-file, --tls-cert-file and --tls-key-file. Talks to no node.
    #[command(subcommand)]
    Certs(CertsCommand),
}

/// `bookctl certs ...`.
#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Make a new CA in DIR: `ca.crt` (give it to every node) and `ca.key` (keep it offline;
    /// it signs node certificates). Refuses to overwrite an existing CA.
    Init {
        /// Where to write the files.
        #[arg(long, value_name = "DIR")]
        dir: std::path::PathBuf,
        /// The CA's name.
        #[arg(long, default_value = "booking cluster CA")]
        name: String,
        /// Days of validity.
        #[arg(long, default_value_t = client::certs::CA_DAYS_DEFAULT)]
        days: u32,
    },
    /// Make node N's certificate and key, signed by the CA in DIR: `node-N.crt`, `node-N.key`.
    /// The certificate names `node-N.peers.booking` (what its peers check) and each --host.
    Node {
        /// Where the CA is and the files go.
        #[arg(long, value_name = "DIR")]
        dir: std::path::PathBuf,
        /// The node's id.
        #[arg(long = "id", value_name = "N")]
        node_id: u64,
        /// A host name or IP address clients reach the node at (repeat for more).
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        /// Days of validity.
        #[arg(long, default_value_t = client::certs::NODE_DAYS_DEFAULT)]
        days: u32,
    },
}

/// `bookctl session ...`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Ask the cluster for a new guest session token and print it (export it as
    /// BOOKCTL_TOKEN to use it with every buyer command).
    New,
    /// Erase a session (operator, deletion on demand): in every show (or one), the records
    /// that name it name a random pseudonym instead and its idempotency records are removed.
    ///
    /// Example: `bookctl session erase --session 9e3779b97f4a7c15f39cc0605cedc834`.
    Erase {
        /// The session's id: 32 hex digits, as audit records name it (`session:<id>`).
        #[arg(long, value_name = "ID")]
        session: String,
        /// Only this show.
        #[arg(long, value_name = "ID")]
        show: Option<u64>,
    },
}

/// The session and idempotency key of a buyer's command.
#[derive(Debug, Args)]
pub struct BuyerArgs {
    /// The show.
    #[arg(long, value_name = "ID")]
    pub show: u64,
    /// The session token (from `bookctl session new`).
    #[arg(long, env = "BOOKCTL_TOKEN", value_name = "T", hide_env_values = true)]
    pub token: String,
}

/// The idempotency key of a mutation.
#[derive(Debug, Args)]
pub struct KeyArg {
    /// Idempotency key: repeat the command with the same key to get its stored outcome; one is
    /// made when omitted.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
}

/// A hold of the caller's session.
#[derive(Debug, Args)]
pub struct HoldRefArgs {
    /// The show and session.
    #[command(flatten)]
    pub buyer: BuyerArgs,
    /// The hold.
    #[arg(long, value_name = "H")]
    pub hold: u64,
    /// The idempotency key.
    #[command(flatten)]
    pub key: KeyArg,
}

/// `bookctl booking ...`.
#[derive(Debug, Subcommand)]
pub enum BookingCommand {
    /// Read one of your bookings, linearizably.
    Get(BookingArgs),
    /// Cancel one of your bookings (when the show allows it); refund work is queued.
    Cancel(BookingArgs),
}

/// A booking of the caller's session.
#[derive(Debug, Args)]
pub struct BookingArgs {
    /// The show and session.
    #[command(flatten)]
    pub buyer: BuyerArgs,
    /// The booking.
    #[arg(long, value_name = "B")]
    pub booking: u64,
    /// The idempotency key (cancel only).
    #[command(flatten)]
    pub key: KeyArg,
}

/// `bookctl payment ...`.
#[derive(Debug, Subcommand)]
pub enum PaymentCommand {
    /// Read a payment attempt linearizably: its state (pending, unknown, succeeded, declined,
    /// refunded) and whether its money is owed back.
    ///
    /// Example: `bookctl payment get --payment 41-8 --token T`.
    Get {
        /// The payment attempt as `<show>-<payment>` (checkout prints both numbers).
        #[arg(long, value_name = "SHOW-N", value_parser = parse_entity_id)]
        payment: (u64, u64),
        /// The session token of the attempt's owner; without one, the operator reads it
        /// (--operator-token-file).
        #[arg(long, env = "BOOKCTL_TOKEN", value_name = "T", hide_env_values = true)]
        token: Option<String>,
    },
}

/// An entity id as the REST API writes it, `<show>-<n>`, as `(show, n)`.
///
/// # Errors
///
/// A message naming the expected form.
pub fn parse_entity_id(text: &str) -> Result<(u64, u64), String> {
    let wrong = || format!("expected <show>-<n> with two positive numbers, got {text:?}");
    let (show, number) = text.split_once('-').ok_or_else(wrong)?;
    let show: u64 = show.parse().map_err(|_| wrong())?;
    let number: u64 = number.parse().map_err(|_| wrong())?;
    if show == 0 || number == 0 {
        return Err(wrong());
    }
    Ok((show, number))
}

/// `bookctl queue ...`.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Join the show's admission lane; prints your ticket (granted at once when there is room).
    Join {
        /// The show and session.
        #[command(flatten)]
        buyer: BuyerArgs,
        /// The idempotency key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// Read your ticket and its place in line, linearizably.
    Get(TicketArgs),
    /// Print your ticket now and at every change until it is final (Ctrl-C to stop).
    Watch(TicketArgs),
    /// Leave the lane (an unused grant goes to the next in line).
    Leave(TicketArgs),
}

/// A ticket of the caller's session.
#[derive(Debug, Args)]
pub struct TicketArgs {
    /// The show and session.
    #[command(flatten)]
    pub buyer: BuyerArgs,
    /// The ticket.
    #[arg(long, value_name = "T")]
    pub ticket: u64,
    /// The idempotency key (leave only).
    #[command(flatten)]
    pub key: KeyArg,
}

/// `bookctl waitlist ...`.
#[derive(Debug, Subcommand)]
pub enum WaitlistCommand {
    /// Join the waitlist of a sold-out show for a party of --quantity seats.
    Join {
        /// The show and session.
        #[command(flatten)]
        buyer: BuyerArgs,
        /// Seats wanted together, 1..=10.
        #[arg(long, value_name = "N", default_value_t = 1)]
        quantity: u32,
        /// A priority-band claim the operator issued for this session (`show claim`).
        #[arg(long, value_name = "CLAIM")]
        claim: Option<String>,
        /// The idempotency key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// Read your entry, its place in line and its offer, linearizably.
    Get(EntryArgs),
    /// Leave the waitlist (an open offer is declined).
    Leave(EntryArgs),
}

/// A waitlist entry of the caller's session.
#[derive(Debug, Args)]
pub struct EntryArgs {
    /// The show and session.
    #[command(flatten)]
    pub buyer: BuyerArgs,
    /// The entry.
    #[arg(long, value_name = "E")]
    pub entry: u64,
    /// The idempotency key (leave only).
    #[command(flatten)]
    pub key: KeyArg,
}

/// `bookctl offer ...`.
#[derive(Debug, Subcommand)]
pub enum OfferCommand {
    /// Read one of your offers, linearizably.
    Get(OfferArgs),
    /// Accept an offer: its seats become your hold (check it out before its deadline).
    Accept(OfferArgs),
    /// Decline an offer: its seats go to the next waiter.
    Decline(OfferArgs),
}

/// An offer to the caller's session.
#[derive(Debug, Args)]
pub struct OfferArgs {
    /// The show and session.
    #[command(flatten)]
    pub buyer: BuyerArgs,
    /// The offer.
    #[arg(long, value_name = "O")]
    pub offer: u64,
    /// The idempotency key (accept and decline).
    #[command(flatten)]
    pub key: KeyArg,
}

/// `bookctl capacity ...`.
#[derive(Debug, Subcommand)]
pub enum CapacityCommand {
    /// Release free seats to the show's waitlist, once per --event.
    Release {
        /// The show.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The event id (a second release with the same id changes nothing).
        #[arg(long, value_name = "E")]
        event: String,
        /// The seats, comma-separated (1..=1024 distinct free seats).
        #[arg(long, value_name = "SEATS", value_delimiter = ',', required = true)]
        seats: Vec<u32>,
    },
}

/// `bookctl audit KIND ID`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// What kind of entity.
    #[arg(value_enum)]
    pub kind: AuditKind,
    /// Its id within the show.
    pub id: u64,
    /// The show.
    #[arg(long, value_name = "ID")]
    pub show: u64,
}

/// The audited entity kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditKind {
    /// A hold.
    Hold,
    /// A booking.
    Booking,
    /// A payment attempt.
    Payment,
    /// An admission ticket.
    Ticket,
    /// A waitlist entry (also lists the offers made to others while it waited).
    #[value(name = "waitlist-entry", alias = "entry", alias = "waitlist_entry")]
    WaitlistEntry,
    /// A waitlist offer.
    Offer,
}

impl AuditKind {
    /// The wire name.
    pub fn wire_name(self) -> &'static str {
        match self {
            AuditKind::Hold => "hold",
            AuditKind::Booking => "booking",
            AuditKind::Payment => "payment",
            AuditKind::Ticket => "ticket",
            AuditKind::WaitlistEntry => "waitlist_entry",
            AuditKind::Offer => "offer",
        }
    }
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

/// `bookctl backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The backup file to write (written to `<FILE>.part`, synced, then renamed).
    #[arg(long, value_name = "FILE")]
    pub out: std::path::PathBuf,
}

/// `bookctl feature-level`.
#[derive(Debug, Args)]
pub struct FeatureLevelArgs {
    /// The level to raise every group to: a number, or `max` for the highest level every node
    /// knows.
    #[arg(long, value_name = "LEVEL")]
    pub raise: String,
}

/// `bookctl restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup file (`bookctl backup --out`); its checksums are checked before anything is
    /// sent.
    #[arg(long, value_name = "FILE")]
    pub from: std::path::PathBuf,

    /// Voters per data group (default: as many as the backed-up group had, at most the number
    /// of nodes). Group 0 always gets every node.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub replicas: Option<u64>,
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
        /// The node's client address (host:port), or the whole address memberships carry
        /// (`HOST:PORT peer=HOST:PORT`, as `bookctl status --json` reports it: `reported_address`).
        #[arg(long, value_name = "ADDR")]
        address: String,
        /// The node's peer port (host:port), when --address gives only the client address.
        #[arg(long, value_name = "ADDR")]
        peer_address: Option<String>,
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
        /// The node's client address (host:port), or the whole address memberships carry
        /// (`HOST:PORT peer=HOST:PORT`, as `bookctl status --json` reports it: `reported_address`).
        #[arg(long, value_name = "ADDR")]
        address: String,
        /// The node's peer port (host:port), when --address gives only the client address.
        #[arg(long, value_name = "ADDR")]
        peer_address: Option<String>,
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
        /// The receiving node's client address (host:port), or the whole address memberships
        /// carry (`HOST:PORT peer=HOST:PORT`).
        #[arg(long, value_name = "ADDR")]
        address: String,
        /// The receiving node's peer port (host:port), when --address gives only the client
        /// address.
        #[arg(long, value_name = "ADDR")]
        peer_address: Option<String>,
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
    /// List every show with its status and seat counts.
    List,
    /// Read a show: status, prices, seat counts, rules.
    Get {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
    },
    /// Draw a show's seat map as a grid: `.` free, `h` held, `#` booked, `r` reserved for the
    /// waitlist. Served by any replica (the `as of` line says which log position it shows),
    /// unless --linearizable.
    Seats {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// Seats per row.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=200))]
        width: u32,
        /// Read the map on the group's leader after it confirmed its leadership (ReadIndex),
        /// so it shows every write acknowledged before; costs a quorum round trip.
        #[arg(long)]
        linearizable: bool,
    },
    /// Create a show of N seats of one price class (idempotent by show id).
    Create {
        /// The show's id (non-zero).
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The number of seats, numbered from 0 (not with --event: the hall's seats).
        #[arg(long, value_name = "N", required_unless_present = "event", conflicts_with = "event")]
        seats: Option<u32>,
        /// The price of every seat, in minor units (cents).
        #[arg(long, value_name = "P", default_value_t = 5_000)]
        price_minor: u64,
        /// ISO 4217 currency code.
        #[arg(long, default_value = "EUR")]
        currency: String,
        /// The data group to place it in; 0 lets the cluster choose.
        #[arg(long, value_name = "G", default_value_t = 0)]
        group: u64,
        /// How long a hold keeps its seats, in milliseconds; 0 for the cluster's default
        /// (5 minutes).
        #[arg(long, value_name = "MS", default_value_t = 0)]
        hold_ttl_ms: u64,
        /// Turn the admission lane on with this window (grants outstanding at once; 1 is
        /// strict FIFO): holds then need a granted ticket from `bookctl queue join`.
        #[arg(long, value_name = "N")]
        admission_window: Option<u32>,
        /// Turn the waitlist on: once sold out, buyers may join it and are offered released
        /// seats in order.
        #[arg(long)]
        waitlist: bool,
        /// Open sales at once (otherwise `bookctl show open`).
        #[arg(long)]
        open: bool,
        /// One price per seat class, in minor units, comma-separated (instead of
        /// --price-minor), e.g. for a hall's classes.
        #[arg(long, value_name = "P,P,..", value_delimiter = ',')]
        prices: Vec<u64>,
        /// List the show in the catalog as a showing of this event (with --hall and
        /// --starts-at-ms): its seats are then the hall's, and --seats is ignored.
        #[arg(long, value_name = "ID", requires_all = ["hall", "starts_at_ms"])]
        event: Option<u64>,
        /// The hall it plays in (with --event).
        #[arg(long, value_name = "ID", requires = "event")]
        hall: Option<u64>,
        /// When it starts, Unix ms (with --event).
        #[arg(long, value_name = "MS", requires = "event")]
        starts_at_ms: Option<u64>,
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
    /// Close a show's sales: no new holds; existing holds may still be paid.
    Close {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
    },
    /// Cancel a show: every hold released, every booking cancelled and refunded, every waiter
    /// told. Terminal; again, it says the show was cancelled before.
    Cancel {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
    },
    /// Archive a show whose sales are closed or cancelled and whose money is settled: it leaves
    /// its group's state for an archive file on every replica (its audit stays readable).
    Archive {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
    },
    /// Move a show to another data group, fenced: its group freezes it, the target imports
    /// its state (checked by SHA-256), group 0 places it there, the target serves it, the
    /// source drops it. Calls about it answer `show_moving` meanwhile (the SDK retries them).
    /// Again, it finishes a move cut off half-way or says the move was made before.
    ///
    /// Example: `bookctl show move --show 7 --to 3`.
    Move {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The data group to move it to.
        #[arg(long, value_name = "GROUP")]
        to: u64,
    },
    /// Spread shows over the data groups by load (the seats still in play), one move at a
    /// time: from the most loaded group to the least loaded one, the show nearest half the
    /// gap, until no move narrows it.
    Rebalance {
        /// Print the plan and move nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Set a show's prices under its next price version; holds quoting an older version are
    /// refused from then on.
    ///
    /// Example: `bookctl show prices --show 7 --version 2 --prices 4500,3000`.
    Prices {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The new price version: the show's current one plus one (`show get` says it).
        #[arg(long, value_name = "V")]
        version: u32,
        /// One price per seat class, in minor units (cents), comma-separated.
        #[arg(long, value_name = "PRICES", value_delimiter = ',', required = true)]
        prices: Vec<u64>,
    },
    /// Turn a show's admission lane on or off and set its window: while it is on, holds need a
    /// granted ticket from `bookctl queue join`.
    ///
    /// Example: `bookctl show admission --show 7 --enabled true --window 5`.
    Admission {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// Whether holds need a grant: true or false (also on/off, yes/no).
        #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
        enabled: bool,
        /// Grants outstanding at once, 1..=10000 (1 is strict FIFO).
        #[arg(long, value_name = "N", default_value_t = 1)]
        window: u32,
    },
    /// Turn a show's waitlist on or off (its ordering policy stays as it is).
    ///
    /// Example: `bookctl show waitlist --show 7 --enabled false`.
    Waitlist {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// Whether buyers may join once the show is sold out: true or false (also on/off).
        #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
        enabled: bool,
    },
    /// Read a show's waitlist rules, or set them with `--ordering` (a change of rules bumps the
    /// policy version; the ordering cannot change while anyone waits).
    ///
    /// Example: `bookctl show waitlist-policy --show 7 --ordering lottery --draw-at-ms
    /// 1767225600000 --wave 20`.
    WaitlistPolicy {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// fifo, bands or lottery; without it the rules in force are printed.
        #[arg(long, value_name = "ORDERING", value_parser = ["fifo", "bands", "lottery"])]
        ordering: Option<String>,
        /// A lottery's earliest draw time (Unix ms, log time); a lottery needs it.
        #[arg(long, value_name = "MS", requires = "ordering")]
        draw_at_ms: Option<u64>,
        /// Offers open at once; 0 for no limit.
        #[arg(long, value_name = "N", default_value_t = 0, requires = "ordering")]
        wave: u32,
    },
    /// Draw a show's lottery now, with `--seed` or one the node picks (recorded in the log).
    ///
    /// Example: `bookctl show draw --show 7 --seed 42`.
    Draw {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The seed.
        #[arg(long, value_name = "N")]
        seed: Option<u64>,
    },
    /// Issue a priority-band claim for one buyer's session on a show; the buyer passes it to
    /// `waitlist join --claim`.
    ///
    /// Example: `bookctl show claim --show 7 --session-token g1_... --band 1`.
    Claim {
        /// The show's id.
        #[arg(long, value_name = "ID")]
        show: u64,
        /// The buyer's session token.
        #[arg(long, value_name = "TOKEN")]
        session_token: String,
        /// 0..=6; 0 is served first (guests are band 7).
        #[arg(long, value_name = "BAND")]
        band: u32,
        /// How long it may be used, in seconds (default a day, at most a week).
        #[arg(long, value_name = "S")]
        valid_for_s: Option<u64>,
    },
}

/// `bookctl hold` (place a hold) or `bookctl hold get|cancel|watch`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct HoldCommand {
    /// Read, cancel or watch a hold instead of placing one.
    #[command(subcommand)]
    pub action: Option<HoldAction>,

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
    /// The session token; a new session is made (and its token printed) when omitted.
    #[arg(long, env = "BOOKCTL_TOKEN", value_name = "T", hide_env_values = true)]
    pub token: Option<String>,
    /// Idempotency key: repeat a hold with the same key (and token) to get its stored outcome;
    /// one is made (and printed) when omitted.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
    /// The price version the buyer was quoted (a new show starts at 1; `show get` says).
    #[arg(long, value_name = "V", default_value_t = 1)]
    pub price_version: u32,
    /// The admission grant: your granted ticket id, required while the show's admission lane
    /// is on.
    #[arg(long, value_name = "TICKET")]
    pub grant: Option<u64>,
}

/// `bookctl hold get|cancel|watch`.
#[derive(Debug, Subcommand)]
pub enum HoldAction {
    /// Read one of your holds, linearizably.
    Get(HoldRefArgs),
    /// Cancel one of your held holds; its seats are released.
    Cancel(HoldRefArgs),
    /// Print one of your holds now and at every change until it is final (Ctrl-C to stop).
    Watch(HoldRefArgs),
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
    fn catalog_commands_become_the_sdks_changes() {
        use client::{CatalogAction, CatalogRecord};
        let change = |line: &str| match parse(line).map(|cli| cli.command) {
            Ok(Command::Catalog(command)) => command.into_change(),
            other => panic!("{line}: {other:?}"),
        };
        let (action, record, _) = change(
            "catalog venue --id 1 --name Odeon --address A --city Porto --postal-code 4000 \
             --lat 41.1 --lon -8.6",
        )
        .unwrap();
        assert_eq!(action, CatalogAction::Create);
        assert!(matches!(record, CatalogRecord::Venue(venue) if venue.longitude == -8.6));
        let sections = r#"[{"name":"S","class":1,"rows":[{"label":"B","first_number":5,"count":3,"x":0,"y":-2}]}]"#;
        let line = format!("catalog hall --id 2 --venue 1 --name H --update --sections {sections}");
        let (action, record, _) = change(&line).unwrap();
        assert_eq!(action, CatalogAction::Update);
        let CatalogRecord::Hall(hall) = record else { panic!("{line}") };
        let row = &hall.sections[0].rows[0];
        assert_eq!(
            (hall.sections[0].class, row.first_number, row.count, row.y),
            (1, Some(5), 3, -2)
        );
        assert_eq!(row.dx, None, "dx defaults on the node");
        let bad = "catalog hall --id 2 --venue 1 --name H --sections [{}]";
        assert!(change(bad).unwrap_err().contains("--sections"));
        let (action, record, _) = change("catalog retire listing --id 7").unwrap();
        assert_eq!((action, record), (CatalogAction::Retire, CatalogRecord::ListingShowId(7)));
        assert!(parse("catalog retire show --id 7").is_err());
    }

    #[test]
    fn a_listed_show_needs_its_event_hall_and_time_and_no_seat_count() {
        let listed = "show create --show 7 --event 1 --hall 2 --starts-at-ms 5 --prices 10,20";
        let Ok(Cli { command: Command::Show(ShowCommand::Create { seats, prices, .. }), .. }) =
            parse(listed)
        else {
            panic!("{listed}")
        };
        assert_eq!((seats, prices), (None, vec![10, 20]));
        assert!(parse("show create --show 7 --event 1").is_err());
        assert!(
            parse("show create --show 7 --event 1 --hall 2 --starts-at-ms 5 --seats 9").is_err()
        );
        assert!(parse("show create --show 7").is_err(), "seats or a listing");
        assert!(parse("show create --show 7 --seats 9").is_ok());
        let search = "search --q hamlte --lat 41.1 --lon -8.6 --radius-km 5 --sort distance";
        let Ok(Cli { command: Command::Search(args), .. }) = parse(search) else { panic!() };
        let request = args.request();
        assert_eq!(
            (request.q.as_str(), request.lon, request.sort.as_str()),
            ("hamlte", Some(-8.6), "distance")
        );
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
        let cli = parse(
            "member add-learner --all-groups --node-id 4 --address h:7104 --peer-address h:7204 \
             --wait",
        );
        match cli.unwrap().command {
            Command::Member(MemberCommand::AddLearner {
                groups,
                node_id,
                address,
                peer_address,
                wait,
            }) => {
                assert!(groups.all_groups && groups.group.is_none());
                assert_eq!((node_id, address.as_str(), wait), (4, "h:7104", true));
                assert_eq!(peer_address.as_deref(), Some("h:7204"));
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
    fn certs_make_a_ca_then_node_certificates() {
        match parse("certs init --dir /tmp/ca").unwrap().command {
            Command::Certs(CertsCommand::Init { dir, days, .. }) => {
                assert_eq!((dir.to_str(), days), (Some("/tmp/ca"), client::certs::CA_DAYS_DEFAULT));
            }
            other => panic!("{other:?}"),
        }
        let node = parse("certs node --dir d --id 3 --host 10.0.0.3 --host n3.example").unwrap();
        match node.command {
            Command::Certs(CertsCommand::Node { node_id, hosts, .. }) => {
                assert_eq!((node_id, hosts), (3, vec!["10.0.0.3".into(), "n3.example".into()]));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hold_places_gets_cancels_or_watches() {
        match parse("hold --show 7 --seats 54,55,56 --key k1 --grant 4").unwrap().command {
            Command::Hold(HoldCommand { action: None, place: Some(place) }) => {
                assert_eq!((place.show, place.seats.as_slice()), (7, &[54, 55, 56][..]));
                assert_eq!(place.key.as_deref(), Some("k1"));
                assert_eq!((place.price_version, place.grant), (1, Some(4)));
            }
            other => panic!("{other:?}"),
        }
        match parse("hold get --show 7 --hold 3 --token t").unwrap().command {
            Command::Hold(HoldCommand { action: Some(HoldAction::Get(args)), .. }) => {
                assert_eq!((args.buyer.show, args.hold, args.buyer.token.as_str()), (7, 3, "t"));
            }
            other => panic!("{other:?}"),
        }
        match parse("hold cancel --show 7 --hold 3 --token t --key k").unwrap().command {
            Command::Hold(HoldCommand { action: Some(HoldAction::Cancel(args)), .. }) => {
                assert_eq!(args.key.key.as_deref(), Some("k"));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("hold watch --show 7 --hold 3 --token t").is_ok());
        assert!(parse("hold --show 7").is_err());
        assert!(parse("hold --show 7 --seats 1,x").is_err());
        assert!(parse("hold --show 7 --seats 1 get --show 7 --hold 1 --token t").is_err());
    }

    #[test]
    fn show_create_has_defaults_and_setup_flags() {
        match parse("show create --show 9 --seats 500").unwrap().command {
            Command::Show(ShowCommand::Create {
                price_minor,
                currency,
                group,
                admission_window,
                waitlist,
                open,
                ..
            }) => {
                assert_eq!((price_minor, currency.as_str(), group), (5_000, "EUR", 0));
                assert_eq!((admission_window, waitlist, open), (None, false, false));
            }
            other => panic!("{other:?}"),
        }
        let line = "show create --show 9 --seats 5 --admission-window 1 --waitlist --hold-ttl-ms 2000 --open";
        match parse(line).unwrap().command {
            Command::Show(ShowCommand::Create {
                admission_window,
                waitlist,
                hold_ttl_ms,
                open,
                ..
            }) => {
                assert_eq!(
                    (admission_window, waitlist, hold_ttl_ms, open),
                    (Some(1), true, 2_000, true)
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse("show seats --show 9").unwrap().command,
            Command::Show(ShowCommand::Seats { show: 9, width: 20, linearizable: false })
        ));
        assert!(matches!(
            parse("show seats --show 9 --linearizable").unwrap().command,
            Command::Show(ShowCommand::Seats { show: 9, width: 20, linearizable: true })
        ));
        assert!(parse("show seats --show 9 --width 0").is_err());
        assert!(matches!(parse("show list").unwrap().command, Command::Show(ShowCommand::List)));
    }

    /// `--token` comes from the command line here: these tests never set `BOOKCTL_TOKEN`.
    #[test]
    fn buyer_commands_take_show_token_and_id() {
        match parse("checkout --show 1 --hold 2 --token t --key k").unwrap().command {
            Command::Checkout(args) => {
                assert_eq!((args.hold, args.key.key.as_deref()), (2, Some("k")))
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("booking get --show 1 --booking 2 --token t").is_ok());
        assert!(parse("booking cancel --show 1 --booking 2 --token t").is_ok());
        assert!(parse("queue join --show 1 --token t").is_ok());
        assert!(parse("queue get --show 1 --ticket 2 --token t").is_ok());
        assert!(parse("queue watch --show 1 --ticket 2 --token t").is_ok());
        assert!(parse("queue leave --show 1 --ticket 2 --token t").is_ok());
        match parse("waitlist join --show 1 --token t --quantity 3").unwrap().command {
            Command::Waitlist(WaitlistCommand::Join { quantity: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(parse("waitlist get --show 1 --entry 2 --token t").is_ok());
        assert!(parse("waitlist leave --show 1 --entry 2 --token t").is_ok());
        for verb in ["get", "accept", "decline"] {
            assert!(parse(&format!("offer {verb} --show 1 --offer 2 --token t")).is_ok(), "{verb}");
        }
        assert!(parse("session new").is_ok());
        if std::env::var_os("BOOKCTL_TOKEN").is_none() {
            let missing = parse("booking get --show 1 --booking 2").unwrap_err();
            assert_eq!(missing.kind(), ErrorKind::MissingRequiredArgument);
            assert_eq!(missing.exit_code(), 2);
        }
    }

    #[test]
    fn operator_commands_parse() {
        assert!(parse("--operator-token op audit hold 3 --show 7").is_err(), "no token in argv");
        match parse("--operator-token-file /run/op audit hold 3 --show 7").unwrap() {
            Cli { operator_token_file, command: Command::Audit(args), .. } => {
                assert_eq!(operator_token_file, Some("/run/op".into()));
                assert_eq!((args.kind, args.id, args.show), (AuditKind::Hold, 3, 7));
            }
            other => panic!("{other:?}"),
        }
        match parse("audit entry 3 --show 7").unwrap().command {
            Command::Audit(args) => assert_eq!(args.kind.wire_name(), "waitlist_entry"),
            other => panic!("{other:?}"),
        }
        assert!(parse("audit seat 3 --show 7").is_err());
        match parse("capacity release --show 7 --event e1 --seats 1,2").unwrap().command {
            Command::Capacity(CapacityCommand::Release { seats, event, .. }) => {
                assert_eq!((seats.as_slice(), event.as_str()), (&[1, 2][..], "e1"));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("show close --show 7").is_ok());
    }

    #[test]
    fn show_controls_parse_their_values() {
        assert!(matches!(
            parse("show cancel --show 7").unwrap().command,
            Command::Show(ShowCommand::Cancel { show: 7 })
        ));
        assert!(matches!(
            parse("show archive --show 7").unwrap().command,
            Command::Show(ShowCommand::Archive { show: 7 })
        ));
        assert!(matches!(
            parse("show move --show 7 --to 3").unwrap().command,
            Command::Show(ShowCommand::Move { show: 7, to: 3 })
        ));
        assert!(parse("show move --show 7").is_err());
        assert!(matches!(
            parse("show rebalance --dry-run").unwrap().command,
            Command::Show(ShowCommand::Rebalance { dry_run: true })
        ));
        match parse("show prices --show 7 --version 2 --prices 4500,3000").unwrap().command {
            Command::Show(ShowCommand::Prices { show, version, prices }) => {
                assert_eq!((show, version, prices.as_slice()), (7, 2, &[4_500, 3_000][..]));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse("show prices --show 7 --version 2").is_err());
        assert!(parse("show prices --show 7 --version 2 --prices 45.00").is_err());
        match parse("show admission --show 7 --enabled true --window 5").unwrap().command {
            Command::Show(ShowCommand::Admission { show, enabled, window }) => {
                assert_eq!((show, enabled, window), (7, true, 5));
            }
            other => panic!("{other:?}"),
        }
        // The window defaults to 1 (strict FIFO), as at show creation.
        assert!(matches!(
            parse("show admission --show 7 --enabled off").unwrap().command,
            Command::Show(ShowCommand::Admission { enabled: false, window: 1, .. })
        ));
        let missing = parse("show admission --show 7 --window 5").unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::MissingRequiredArgument);
        assert!(parse("show admission --show 7 --enabled maybe").is_err());
        assert!(matches!(
            parse("show waitlist --show 7 --enabled false").unwrap().command,
            Command::Show(ShowCommand::Waitlist { show: 7, enabled: false })
        ));
        assert!(parse("show waitlist --show 7 --enabled").is_err());
        assert!(matches!(
            parse("show waitlist-policy --show 7").unwrap().command,
            Command::Show(ShowCommand::WaitlistPolicy { show: 7, ordering: None, .. })
        ));
        let lottery = "show waitlist-policy --show 7 --ordering lottery --draw-at-ms 9 --wave 2";
        assert!(matches!(
            parse(lottery).unwrap().command,
            Command::Show(ShowCommand::WaitlistPolicy { draw_at_ms: Some(9), wave: 2, .. })
        ));
        assert!(parse("show waitlist-policy --show 7 --ordering random").is_err());
        assert!(parse("show waitlist-policy --show 7 --wave 2").is_err());
        assert!(parse("show draw --show 7 --seed 42").is_ok());
        assert!(parse("show claim --show 7 --session-token t --band 1").is_ok());
        assert!(parse("show claim --show 7 --band 1").is_err());
    }

    /// `--token` comes from the command line here: these tests never set `BOOKCTL_TOKEN`.
    #[test]
    fn payment_get_takes_a_show_and_payment_and_maybe_a_token() {
        match parse("payment get --payment 41-8 --token t").unwrap().command {
            Command::Payment(PaymentCommand::Get { payment, token }) => {
                assert_eq!((payment, token.as_deref()), ((41, 8), Some("t")));
            }
            other => panic!("{other:?}"),
        }
        if std::env::var_os("BOOKCTL_TOKEN").is_none() {
            assert!(matches!(
                parse("payment get --payment 41-8").unwrap().command,
                Command::Payment(PaymentCommand::Get { payment: (41, 8), token: None })
            ));
        }
        for bad in ["41", "41-", "-8", "41-x", "0-8", "41-0", "41-8-2"] {
            assert!(parse(&format!("payment get --payment {bad}")).is_err(), "{bad}");
        }
    }

    #[test]
    fn usage_errors_are_exit_code_2() {
        let error = parse("member promote --node-id x --group 1").unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert_eq!(parse("status --data-groups 4").unwrap_err().exit_code(), 2);
    }
}
