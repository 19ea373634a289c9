//! The command line: options and subcommands (contract X1).

use clap::{Args, Parser, Subcommand, ValueEnum};
use idem_runtime::store::StateFilter;
use idem_runtime::ScopePart;

/// The most records one `ls` page prints (the stores' page limit).
pub const LIMIT_MAX: usize = idem_runtime::store::LIST_LIMIT_MAX;

/// Derive the idempotency key of an AI-agent tool call, and show, list, purge and count the
/// records idem keeps for tool calls.
///
/// Exit status: 0 found or done; 1 not found (nothing to show or purge); 2 bad usage or
/// input; 3 the store is unavailable or refused the operation.
#[derive(Debug, Parser)]
#[command(name = "idem", version, max_term_width = 100)]
pub struct Cli {
    /// The store: `sqlite:PATH` (an existing file: idem never creates one), `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?idem_schema=S]`,
    /// `redis://[:PASSWORD@]HOST[:PORT][/DB][?idem_prefix=P]`, or `memory` (accepted, but
    /// empty in a fresh process: only useful to try the commands). Needed by every command
    /// but `key`. Passwords are never printed.
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
    /// (`30s`, `2m`).
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
    /// Show one record: by KEY, or by the call (--tool, --scope, --args). Exit 1 when there
    /// is no live record.
    Show(ShowArgs),
    /// List live records, newest first, one page at a time.
    Ls(LsArgs),
    /// Delete one record by KEY, or every record the filters match. Records in progress (or
    /// with an unknown outcome) are kept unless --force. Exit 0 when something was deleted,
    /// 1 when nothing was.
    Purge(PurgeArgs),
    /// Count live records by state, in total and per tool (every namespace).
    Stats(StatsArgs),
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

    /// Only records in this state.
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

    /// The page after this cursor (the `next page` one a previous `ls` printed on stderr).
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,

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

    /// Also delete records in progress or with an unknown outcome (their calls may still be
    /// running: a retry would then run the tool's body again).
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
    /// `{"records", "completed", "in_progress", "outcome_unknown"}`.
    #[arg(long)]
    pub json: bool,
}

/// A record's state on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum State {
    /// The outcome is saved.
    Completed,
    /// A call holds the claim and is running.
    #[value(alias = "in_progress")]
    InProgress,
    /// The call gave up without an outcome.
    #[value(alias = "outcome_unknown")]
    OutcomeUnknown,
}

impl From<State> for StateFilter {
    fn from(state: State) -> Self {
        match state {
            State::Completed => StateFilter::Completed,
            State::InProgress => StateFilter::InProgress,
            State::OutcomeUnknown => StateFilter::OutcomeUnknown,
        }
    }
}

fn parse_scope_part(text: &str) -> Result<ScopePart, String> {
    text.parse::<ScopePart>().map_err(|e| e.to_string())
}
