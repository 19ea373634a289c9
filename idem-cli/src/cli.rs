//! The command line: options and subcommands (contract X1).

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use idem_runtime::store::StateFilter;
use idem_runtime::ScopePart;

/// The most records one `ls` page prints (the stores' page limit).
pub const LIMIT_MAX: usize = idem_runtime::store::LIST_LIMIT_MAX;

/// Derive the idempotency key of an AI-agent tool call; show, list, purge and count the
/// records idem keeps for tool calls; decide the calls whose outcome is unknown; and approve
/// or deny the calls that wait for a person's approval.
///
/// A call whose owner crashed, timed out or was cancelled has an unknown outcome: by
/// default idem holds it (no call runs it again) until a person decides. The queue: `idem ls --state
/// outcome-unknown` (oldest first); one record and what happened to it: `idem show KEY
/// --history`; the decision: `idem resolve KEY --applied --output '{"refund_id":"re_1"}'`
/// (the effect happened: that output is replayed), `--not-applied` (it did not: the next
/// call runs the tool) or `--error '"card declined"'` (the call failed: that error is
/// replayed).
///
/// A call of a tool that requires approval waits for a person: the queue: `idem ls --state
/// awaiting-approval` (oldest first, with the key arguments); `idem approve KEY` lets the
/// next call with the same arguments run the tool once, `idem deny KEY --note "…"` refuses
/// it for good.
///
/// Exit status: 0 found or done (decided, or already decided so); 1 not found or nothing
/// done (nothing to show, purge or decide; a decision refused because the record is not
/// waiting for one or changed since it was read); 2 bad usage or input; 3 the store is
/// unavailable or refused the operation.
#[derive(Debug, Parser)]
#[command(name = "idem", version, max_term_width = 100)]
pub struct Cli {
    /// The store: `sqlite:PATH` (an existing file: idem never creates one), `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?idem_schema=S]`,
    /// `redis://[:PASSWORD@]HOST[:PORT][/DB][?idem_prefix=P]`, or `memory` (accepted, but
    /// empty in a fresh process: only useful to try the commands). Needed by every command
    /// but `key` and `mcp-proxy` (which creates and migrates its store, and keeps outcomes in
    /// memory without one). Passwords are never printed.
    #[arg(
        long,
        global = true,
        env = "IDEM_STORE",
        hide_env_values = true,
        value_name = "LOCATOR"
    )]
    pub store: Option<String>,

    /// The namespace keys were derived in (the engine's `namespace`, 1 to 128 printable ASCII
    /// characters). Enters the key of `key` and `show --tool`; narrows `ls` and `purge` to
    /// records of that namespace (without it they see every namespace).
    #[arg(long, global = true, env = "IDEM_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,

    /// How long to wait for the store before giving up with exit 3: a humantime span
    /// (`30s`, `2m`). Not used by `mcp-proxy`, whose calls wait as its config's `wait` and
    /// `lease` say.
    #[arg(long, global = true, default_value = "30s", value_name = "DURATION")]
    pub timeout: humantime::Duration,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the idempotency key (64 hex digits) a call of a tool derives. Touches no store:
    /// works with the store down.
    Key(KeyArgs),
    /// Show one record: by KEY, or by the call (--tool, --scope, --args); with --history,
    /// its transitions. Exit 1 when there is no live record.
    Show(ShowArgs),
    /// List live records, newest first (records waiting for a decision or an approval:
    /// oldest first), one page at a time.
    Ls(LsArgs),
    /// Delete one record by KEY, or every record the filters match. Records that are not
    /// completed (in progress, outcome unknown, not applied, awaiting approval, approved) are
    /// kept unless --force. Exit 0 when something was deleted, 1 when nothing was.
    Purge(PurgeArgs),
    /// Count live records by state, in total and per tool (every namespace).
    Stats(StatsArgs),
    /// Record a person's decision about a call whose outcome is unknown: by KEY, or for
    /// every such record of a tool (--tool, --older-than). Exit 0 when decided (or already
    /// decided so), 1 when nothing was decided.
    ///
    /// Decide what you checked where the effect lands (the bank, the ticket system):
    /// --applied saves --output and every later call gets it back; --not-applied lets the
    /// next call run the tool; --error saves that error for every later call. A decision
    /// is a compare-and-set on the record as read: one that a call or another operator
    /// changed meanwhile is refused (exit 1) and nothing is written; the same decision
    /// again answers "already decided" (exit 0). It is kept in the record's history with
    /// its actor and note (`idem show KEY --history`).
    ///
    /// Example: `idem resolve KEY --applied --output '{"refund_id":"re_1"}' --expect-fence 1
    /// --note "the bank shows re_1"`.
    ///
    /// Example: `idem resolve --tool send_refund --older-than 1h --not-applied --dry-run`
    /// lists the refunds whose outcome has been unknown for over an hour, oldest first, and
    /// writes nothing; without --dry-run it decides each of them.
    Resolve(ResolveArgs),
    /// Approve a call that waits for a person's approval: the next call with the same
    /// arguments runs the tool once, if it comes within --valid-for (and the tool's own
    /// validity). Exit 0 when approved (or already approved), 1 when nothing was decided.
    ///
    /// Look first: `idem ls --state awaiting-approval` lists the calls waiting, oldest first,
    /// with their key arguments; `idem show KEY` prints one and its fence. An approval is a
    /// compare-and-set on the record as read: one that a call or another operator changed
    /// meanwhile is refused (exit 1) and nothing is written; approving an approved call
    /// again answers "already approved" (exit 0) and extends nothing. It is kept in the
    /// record's history with its actor and note (`idem show KEY --history`).
    ///
    /// Example: `idem approve KEY --expect-fence 1 --note "refund checked with the
    /// customer" --valid-for 30m`.
    Approve(ApproveArgs),
    /// Deny a call that waits for a person's approval (or is approved and has not run): the
    /// denial is saved as the call's outcome, and every call with the key gets it without
    /// running the tool, until --ttl. Exit 0 when denied (or already denied), 1 when nothing
    /// was decided.
    ///
    /// A denial is a compare-and-set on the record as read, as `approve`; denying a denied
    /// call again answers "already denied" (exit 0). The agent is told who denied it and
    /// the note, and not to retry the action in another form.
    ///
    /// Example: `idem deny KEY --expect-fence 1 --note "over the refund limit"`.
    Deny(DenyArgs),
    /// Make any MCP server's tools idempotent: run the server COMMAND as a child on stdio
    /// and speak MCP to the client on this process's stdin and stdout, forwarding every
    /// message unchanged except `tools/call` of keyed tools, which go through idem: a retry
    /// replays the saved result (`_meta["idem/status"]: "replayed"`) instead of running the
    /// tool again.
    ///
    /// Keyed: every tool the server does not annotate `readOnlyHint: true`, unless --config
    /// says otherwise. Scope: the client's `_meta.idempotencyKey`, else the conversation in
    /// `_meta.conversationId` (a call with neither gets a tool error saying what to send).
    /// The store is created and migrated if needed (unlike the other commands); without
    /// --store or IDEM_STORE outcomes live in memory for the proxy's lifetime. Logs go to
    /// stderr (IDEM_LOG sets the filter, default `info`). Exit 0 when the client closes its
    /// input or on SIGTERM/SIGINT (keyed calls in progress get up to `cancel_wait` to end),
    /// 1 when the server cannot be kept running, 2 for a configuration the server
    /// contradicts (a tool it does not list, a key member its schema lacks).
    ///
    /// Example: `idem mcp-proxy --store sqlite:proxy.db --config idem.toml -- python
    /// payments_server.py`.
    ///
    /// Over streamable HTTP: `idem mcp-proxy --store sqlite:proxy.db --listen 127.0.0.1:8080
    /// --upstream http://127.0.0.1:3001/mcp` (until interrupted).
    McpProxy(McpProxyArgs),
}

/// A tool call named by what a person knows about it.
#[derive(Debug, Clone, Args)]
pub struct CallArgs {
    /// The tool's name (the fn name unless the tool sets `name = "…"`).
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,

    /// One scope part, KIND=VALUE; repeat for a composite scope, outermost first (`--scope
    /// tenant=acme --scope conversation=c-1`; `--scope conversation=c-9 --scope call=ID` for
    /// a call scope, with `--scope turn=RESPONSE_ID` between them when the call came from a
    /// response with an id or a history position, `turn=#3`). None for a global tool. `%XX`
    /// in VALUE decodes: write `%` as `%25`.
    #[arg(long, value_name = "KIND=VALUE", value_parser = parse_scope_part)]
    pub scope: Vec<ScopePart>,

    /// The key arguments as a JSON object of parameter names to values
    /// (`{"order_id":"ord_4417","amount_cents":500}`, typed as the tool got them: `4417` and
    /// `"4417"` are different keys): every argument the tool does not skip, or
    /// only those it names with `key(…)`. `{}` for a tool without any.
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
}

/// `idem key`.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The call.
    #[command(flatten)]
    pub call: CallArgs,

    /// Print `{"key": …, "tool": …, "namespace": …, "scope": …}` instead of the bare key.
    #[arg(long)]
    pub json: bool,
}

/// `idem show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The record's key: 64 hex digits (as `key`, `ls --json` or `ls --wide` print them).
    #[arg(value_name = "KEY", conflicts_with_all = ["tool", "scope", "args"])]
    pub key: Option<String>,

    /// The call, when no KEY is given.
    #[command(flatten)]
    pub call: CallArgs,

    /// Also print the record's history: its transitions (claimed, taken over, outcome
    /// unknown, completed, resolved, released, approval requested, approved, denied,
    /// approval expired), oldest first, each with its time, fence and
    /// owner or actor and note; with --json, a `history` array and `history_dropped`.
    #[arg(long)]
    pub history: bool,

    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Filters shared by `ls` and `purge`.
#[derive(Debug, Clone, Default, Args)]
pub struct Filters {
    /// Only records of this tool.
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,

    /// Only records whose scope begins with these parts (KIND=VALUE, repeatable, outermost
    /// first; `--scope tenant=acme` matches every conversation of the tenant).
    #[arg(long, value_name = "KIND=VALUE", value_parser = parse_scope_part)]
    pub scope: Vec<ScopePart>,

    /// Only records in this state, as a call would find it: `outcome-unknown` also matches
    /// records in progress whose lease lapsed (their owner is presumed dead);
    /// `awaiting-approval` lists the calls waiting for a person's approval.
    #[arg(long, value_enum, value_name = "STATE")]
    pub state: Option<State>,

    /// Only records created at or after this instant: RFC 3339 (`2026-12-01T20:00:00Z`) or
    /// a span ago (`2h`, `30m`, `7days`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,

    /// Only records created before this instant: RFC 3339 or a span ago, as --since.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
}

impl Filters {
    /// Whether any filter is given.
    pub fn any(&self) -> bool {
        self.tool.is_some()
            || !self.scope.is_empty()
            || self.state.is_some()
            || self.since.is_some()
            || self.until.is_some()
    }
}

/// `idem ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Which records.
    #[command(flatten)]
    pub filters: Filters,

    /// At most this many records (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=LIMIT_MAX as i64))]
    pub limit: u16,

    /// The page after this cursor (the `next page` one a previous `ls` printed on stderr;
    /// give the same filters and order).
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,

    /// Oldest first (by creation time, then key): the order of a queue. The default with
    /// `--state outcome-unknown` and `--state awaiting-approval`, whose records wait for a
    /// decision.
    #[arg(long, conflicts_with = "newest_first")]
    pub oldest_first: bool,

    /// Newest first (by creation time, then key): the default, except with `--state
    /// outcome-unknown` and `--state awaiting-approval`.
    #[arg(long)]
    pub newest_first: bool,

    /// Print full 64-digit keys in the table (it shows the first 16).
    #[arg(long, short = 'w', conflicts_with = "json")]
    pub wide: bool,

    /// Print one JSON object per record, one per line (the `show --json` object); the next
    /// page's cursor goes to stderr as `{"next_cursor": "…"}`.
    #[arg(long)]
    pub json: bool,
}

/// `idem purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// The key of the one record to delete: 64 hex digits.
    #[arg(value_name = "KEY", conflicts_with_all = ["tool", "scope", "state", "since", "until", "all"])]
    pub key: Option<String>,

    /// Which records, when no KEY is given: at least one filter, or --all.
    #[command(flatten)]
    pub filters: Filters,

    /// Purge every live record (of the --namespace, if given): no filter needed.
    #[arg(long)]
    pub all: bool,

    /// Also delete records that are not completed: in progress, with an unknown outcome,
    /// decided not applied, awaiting approval or approved (their calls may still be running,
    /// or may have had their effect: a retry would then run the tool's body again; a call
    /// whose request is purged asks for approval anew).
    #[arg(long)]
    pub force: bool,

    /// Print one JSON object: `{"key", "result": "deleted"|"kept"|"absent", "record"}` for a
    /// KEY, `{"deleted": N, "kept": N}` for filters.
    #[arg(long)]
    pub json: bool,
}

/// `idem stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print one JSON object: `{"total": COUNTS, "by_tool": {TOOL: COUNTS}}`, COUNTS being
    /// `{"records", "completed", "in_progress", "outcome_unknown", "not_applied",
    /// "awaiting_approval", "approved"}`.
    #[arg(long)]
    pub json: bool,
}

/// `idem resolve`.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("decision")
        .required(true)
        .args(["applied", "not_applied", "error"])
))]
pub struct ResolveArgs {
    /// The key of the one record to decide: 64 hex digits (as `show`, `ls --wide` or `ls
    /// --json` print them). Without it, --tool or --older-than select the records.
    #[arg(value_name = "KEY", conflicts_with_all = ["tool", "older_than", "scope", "dry_run"])]
    pub key: Option<String>,

    /// The effect happened: save --output (JSON `null` without it) as the call's result;
    /// every later call with the key gets it back without running the tool.
    #[arg(long)]
    pub applied: bool,

    /// With --applied: the tool's result as the call would have returned it, one JSON value
    /// (`'{"refund_id":"re_1"}'`, at most 1 MiB). Checked to be JSON, not against the tool's
    /// type: a result the tool cannot read back fails its later calls.
    #[arg(long, value_name = "JSON")]
    pub output: Option<String>,

    /// The effect did not happen: the next call with the same arguments runs the tool (with
    /// the next fence).
    #[arg(long)]
    pub not_applied: bool,

    /// The call failed: save this error, one JSON value as the tool's error type
    /// serializes (`'"card declined"'`), as the call's result; later calls get it back.
    #[arg(long, value_name = "JSON")]
    pub error: Option<String>,

    /// Who decides, and why.
    #[command(flatten)]
    pub decider: Decider,

    /// Only if the record's fence is still N (the fence `show` printed): refuses, naming
    /// both fences, when a call or another decision changed the record since.
    #[arg(long, value_name = "N", conflicts_with_all = ["tool", "older_than", "scope"])]
    pub expect_fence: Option<u64>,

    /// How long a saved result (--applied, --error) is kept from now: a humantime span.
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    pub ttl: humantime::Duration,

    /// Without KEY: decide every record of this tool whose outcome is unknown.
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,

    /// Without KEY: only records created longer ago than this humantime span (`2h`,
    /// `1day`).
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<humantime::Duration>,

    /// Without KEY: only records whose scope begins with these parts (KIND=VALUE,
    /// repeatable, outermost first).
    #[arg(long, value_name = "KIND=VALUE", value_parser = parse_scope_part)]
    pub scope: Vec<ScopePart>,

    /// Without KEY: list the records that would be decided, and write nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Print JSON: one object for a KEY (`{"key", "decision", "actor", "note", "state",
    /// "fence", "already_decided"}`); one per record without KEY, the counts on stderr.
    #[arg(long)]
    pub json: bool,
}

/// Who decides, and why: `resolve`, `approve` and `deny` (U6, A3).
#[derive(Debug, Clone, Args)]
pub struct Decider {
    /// Who decides (1 to 128 characters, no control characters); default IDEM_ACTOR, else
    /// USER.
    #[arg(long, value_name = "NAME")]
    pub actor: Option<String>,

    /// Why, in the decider's words (at most 1024 characters): kept in the history.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
}

/// What `approve` and `deny` share: the key, who decides, the fence and the output.
#[derive(Debug, Args)]
pub struct ApprovalArgs {
    /// The key of the call waiting for approval: 64 hex digits (as `show`, `ls --wide` or
    /// `ls --json` print them).
    #[arg(value_name = "KEY")]
    pub key: String,

    /// Who decides, and why.
    #[command(flatten)]
    pub decider: Decider,

    /// Only if the record's fence is still N (the fence `show` printed): refuses, naming
    /// both fences, when a call or another decision changed the record since.
    #[arg(long, value_name = "N")]
    pub expect_fence: Option<u64>,

    /// Print one JSON object: `{"key", "decision": "approved"|"denied", "actor", "note",
    /// "state", "fence", "already_decided"}`, and `approved_until` once approved.
    #[arg(long)]
    pub json: bool,
}

/// `idem approve`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The call, and who approves it.
    #[command(flatten)]
    pub approval: ApprovalArgs,

    /// How long the approval lets a call run, from now: a humantime span (`30m`, `2h`). The
    /// tool's own validity (`require_approval = "…"`) caps it: the call applies the shorter.
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub valid_for: humantime::Duration,
}

/// `idem mcp-proxy`.
#[derive(Debug, Args)]
pub struct McpProxyArgs {
    /// The configuration (TOML): which tools are keyed, scope, key members, TTL, lease,
    /// policies, per tool (docs/guide/mcp-proxy.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Write log lines to stderr as JSON objects.
    #[arg(long)]
    pub json: bool,
    /// Serve MCP's streamable HTTP on this address (`127.0.0.1:8080`) in front of
    /// --upstream, instead of running a server on stdio.
    #[arg(
        long,
        value_name = "ADDR",
        requires = "upstream",
        conflicts_with = "command"
    )]
    pub listen: Option<std::net::SocketAddr>,
    /// The upstream MCP endpoint over streamable HTTP (`http://127.0.0.1:3001/mcp`; plain
    /// HTTP): requests to its path are looked into, every other path is forwarded as is.
    #[arg(
        long,
        value_name = "URL",
        requires = "listen",
        conflicts_with = "command"
    )]
    pub upstream: Option<String>,
    /// The MCP server to run on stdio, after `--`: `-- python server.py`.
    #[arg(
        last = true,
        required_unless_present = "upstream",
        value_name = "COMMAND"
    )]
    pub command: Vec<std::ffi::OsString>,
}

/// `idem deny`.
#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The call, and who denies it.
    #[command(flatten)]
    pub approval: ApprovalArgs,

    /// How long the denial is kept from now (every call with the key gets it until then): a
    /// humantime span.
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    pub ttl: humantime::Duration,
}

/// A record's state on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum State {
    /// The outcome is saved.
    Completed,
    /// A call holds the claim and renews its lease.
    #[value(alias = "in_progress")]
    InProgress,
    /// Waiting for a decision: the call gave up without an outcome, or its owner's lease
    /// lapsed.
    #[value(alias = "outcome_unknown")]
    OutcomeUnknown,
    /// Decided not applied: the next call runs the tool.
    #[value(alias = "not_applied")]
    NotApplied,
    /// A call of a tool that requires approval waits for a person's approval (`idem
    /// approve`, `idem deny`).
    #[value(alias = "awaiting_approval")]
    AwaitingApproval,
    /// Approved, and no call has run it yet.
    Approved,
}

impl From<State> for StateFilter {
    fn from(state: State) -> Self {
        match state {
            State::Completed => StateFilter::Completed,
            State::InProgress => StateFilter::InProgress,
            State::OutcomeUnknown => StateFilter::OutcomeUnknown,
            State::NotApplied => StateFilter::NotApplied,
            State::AwaitingApproval => StateFilter::AwaitingApproval,
            State::Approved => StateFilter::Approved,
        }
    }
}

fn parse_scope_part(text: &str) -> Result<ScopePart, String> {
    text.parse::<ScopePart>().map_err(|e| e.to_string())
}
