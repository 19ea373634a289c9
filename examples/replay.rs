//! The main job: replay recorded provider conversations through `#[idempotent]` tools and
//! show that retries repeat no side effect.
//!
//! ```text
//! cargo run --release --example replay -- [--lose-first-response] [--scope conversation|call] [--store LOCATOR] FILE...
//! ```
//!
//! Each FILE is one recorded conversation in any shape idem reads (contract D1): an OpenAI
//! Chat Completions or Responses body, an Anthropic Messages body, a Gemini response or
//! `contents` history, an MCP `tools/call` request or bare `CallToolRequestParams`, a bare
//! assistant message, or an array of such turns (`examples/transcripts/` holds recorded
//! ones, `examples/quirks/` small ones of our own for the shapes of D7–D10: OpenAI's
//! parallel wrapper, whose entries are dispatched as calls of their own, Gemini's `57.0`
//! integers, bare MCP params, call ids reused in every turn). Turns are dispatched in order, the calls of one turn concurrently, to a
//! demo side-effecting tool registered under every tool name met. The tool is annotated
//! `#[idempotent]` and records each real execution in an effect log.
//!
//! With `--lose-first-response`, every call's first response is lost after its effect
//! lands (a transport timeout) and the dispatcher retries: executions stay the same,
//! attempts grow. `--scope call` keys the demo tool on the provider's tool-call id
//! instead of the conversation (file), so identical calls are distinct intents.
//! `--store LOCATOR` keeps the records in that store (`memory`, `sqlite:FILE`,
//! `redis://…`, `postgres://…`, with the matching cargo feature of idem-agent); without it the
//! store is the one `IDEM_STORE` names, else memory. The conversation id of a file is its
//! path as given, so running twice on the same file with the same persistent store replays
//! every call the second time (`"executions":0`).
//!
//! Output: one line per call (file, turn, call id, tool, key prefix, attempts,
//! executed | replayed | error: reason), then as the last line one JSON object. A call's
//! status is its own (D11): `executed` when one of its attempts ran the effect, also when
//! that attempt's response was lost and the retry replayed it; `replayed` when its outcome
//! was an earlier call's, whatever its call id. The summary:
//! `{"files":F,"turns":T,"calls":C,"executions":E,"replays":R,"attempts":A,"errors":X,"round_trips":N}`,
//! where E counts the real executions in the effect log and N the requests the store made
//! to its backend during the run (`null` for a store that does not count them). A file that cannot be read or
//! parsed gets a message naming it and what was expected, and the exit code is 1.
//!
//! With `RUST_LOG` set (`RUST_LOG=idem=debug`; syntax of tracing-subscriber's `EnvFilter`),
//! idem's traces go to stderr: each call's `idem.call` span with its fields (tool, key,
//! status, attempt, fence) on every event inside it, and one line when the span closes.
//! `idem=info` shows the closed spans and warnings only, `idem=trace` adds renewals and
//! store latencies. Stdout is the same with or without it (up to the random labels of
//! Gemini calls that come without an id or a `responseId`, which differ on every run).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use idem_agent::dispatch::{
    parse_turns_str, CallReport, Conversation, Dispatcher, RetryPolicy, Tool, Turn,
};
use idem_agent::store::StoreConfigError;
use idem_agent::testkit::{EffectLog, FailOn, LosingTransport};
use idem_agent::EngineConfigError;
use idem_agent::{default_engine, idempotent, CallContext, CallStatus, Engine, ToolError};

/// Every real execution of the demo tool, with the key it carried (T3).
static EFFECTS: LazyLock<EffectLog> = LazyLock::new(EffectLog::new);

/// What the demo tool tells the agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Done {
    tool: String,
    execution: usize,
}

/// Which call an effect belongs to: the conversation (file), the turn and the tool-call id.
fn effect_detail() -> String {
    let ctx = CallContext::current().unwrap_or_default();
    format!(
        "{} {} {}",
        ctx.conversation_id().unwrap_or("-"),
        ctx.turn_id().unwrap_or("-"),
        ctx.tool_call_id().unwrap_or("-")
    )
}

fn perform(tool: String) -> Result<Done, ToolError> {
    EFFECTS.record(tool.clone(), effect_detail());
    Ok(Done {
        tool,
        execution: EFFECTS.len(),
    })
}

/// The demo effect, keyed per conversation: equal calls in one file share one effect.
#[idempotent(scope = "conversation", name = "demo_effect", dispatch = false)]
async fn effect_per_conversation(tool: String, arguments: Value) -> Result<Done, ToolError> {
    let _ = arguments;
    perform(tool)
}

/// The demo effect, keyed per tool call: every call is its own intent.
#[idempotent(scope = "call", name = "demo_effect", dispatch = false)]
async fn effect_per_call(tool: String, arguments: Value) -> Result<Done, ToolError> {
    let _ = arguments;
    perform(tool)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScopeChoice {
    Conversation,
    Call,
}

struct Options {
    lose_first_response: bool,
    scope: ScopeChoice,
    store: Option<String>,
    files: Vec<PathBuf>,
}

const USAGE: &str =
    "usage: replay [--lose-first-response] [--scope conversation|call] [--store LOCATOR] FILE...";

fn parse_options(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        lose_first_response: false,
        scope: ScopeChoice::Conversation,
        store: None,
        files: Vec::new(),
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--lose-first-response" => options.lose_first_response = true,
            "--scope" => {
                options.scope = match args.next().as_deref() {
                    Some("conversation") => ScopeChoice::Conversation,
                    Some("call") => ScopeChoice::Call,
                    Some(other) => {
                        return Err(format!(
                            "--scope takes `conversation` or `call`, not `{other}`"
                        ))
                    }
                    None => {
                        return Err("--scope needs a value: `conversation` or `call`".to_owned())
                    }
                }
            }
            "--store" => match args.next() {
                Some(locator) if !locator.starts_with("--") => options.store = Some(locator),
                _ => return Err(
                    "--store needs a value: `memory`, `sqlite:FILE`, `redis://…` or `postgres://…`"
                        .to_owned(),
                ),
            },
            "-h" | "--help" => return Err(String::new()),
            flag if flag.starts_with("--") => return Err(format!("unknown option `{flag}`")),
            file => options.files.push(PathBuf::from(file)),
        }
    }
    if options.files.is_empty() {
        return Err("no FILE given".to_owned());
    }
    Ok(options)
}

/// The demo tool, registered under `name`.
fn demo_tool(name: &str, scope: ScopeChoice) -> Tool {
    let tool_name = name.to_owned();
    Tool::from_async(name, move |arguments: Value, _ctx: CallContext| {
        let tool = tool_name.clone();
        async move {
            match scope {
                ScopeChoice::Conversation => effect_per_conversation(tool, arguments).await,
                ScopeChoice::Call => effect_per_call(tool, arguments).await,
            }
        }
    })
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    files: usize,
    turns: usize,
    calls: usize,
    executions: usize,
    replays: usize,
    attempts: usize,
    errors: usize,
    round_trips: Option<u64>,
}

fn read_turns(path: &PathBuf) -> Result<Vec<Turn>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let turns = parse_turns_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if turns.is_empty() {
        return Err(format!(
            "{}: expected at least one assistant turn with tool calls, found none",
            path.display()
        ));
    }
    Ok(turns)
}

/// What the call did, from its own report (contract D11): `executed` when one of its own
/// attempts ran the demo effect (also when that attempt's response was lost and the retry
/// replayed it), `replayed` when its outcome was an earlier call's.
fn status_of(call: &CallReport) -> String {
    if let Err(failure) = &call.reply.result {
        return format!("error: {}", failure.message);
    }
    match call.own_status() {
        Some(CallStatus::Replayed) => "replayed".to_owned(),
        Some(CallStatus::Executed) => "executed".to_owned(),
        Some(CallStatus::Reconciled) => "reconciled".to_owned(),
        Some(other) => format!("{other:?}").to_lowercase(),
        None => "error: no outcome recorded".to_owned(),
    }
}

/// The summary (`None` when the store could not be opened: nothing ran) and whether every
/// file was read.
async fn run(options: Options) -> (Option<Summary>, bool) {
    let mut summary = Summary::default();
    let mut all_read = true;
    let mut loaded = Vec::new();
    for path in &options.files {
        match read_turns(path) {
            Ok(turns) => loaded.push((path, turns)),
            Err(message) => {
                eprintln!("replay: {message}");
                all_read = false;
            }
        }
    }
    let names: BTreeSet<String> = loaded
        .iter()
        .flat_map(|(_, turns)| {
            turns
                .iter()
                .flat_map(|t| t.calls.iter().map(|c| c.name.clone()))
        })
        .collect();
    let engine = match &options.store {
        Some(locator) => Engine::from_locator(locator).map_err(|e| match e {
            EngineConfigError::Store(StoreConfigError::FeatureDisabled { feature, .. }) => format!(
                "{e}\n(for this example: cargo run --release --features {feature} --example replay -- …)"
            ),
            e => e.to_string(),
        }),
        None => default_engine().map_err(|e| e.to_string()),
    };
    let engine = match engine {
        Ok(engine) => engine,
        Err(message) => {
            eprintln!("replay: {message}");
            return (None, false);
        }
    };
    let round_trips_before = engine.store().round_trips();
    let mut builder = Dispatcher::builder()
        .retry(RetryPolicy::new())
        .engine(engine.clone());
    for name in &names {
        builder = builder.tool(demo_tool(name, options.scope));
    }
    if options.lose_first_response {
        builder = builder.transport(LosingTransport::new(FailOn::FirstAttempt));
    }
    let dispatcher = match builder.build() {
        Ok(dispatcher) => dispatcher,
        Err(e) => {
            eprintln!("replay: {e}");
            return (Some(summary), false);
        }
    };
    for (path, turns) in loaded {
        summary.files += 1;
        let file = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let conversation_id = path.display().to_string();
        let conversation = Conversation::new(conversation_id.as_str());
        for turn in &turns {
            summary.turns += 1;
            let outcome = dispatcher.dispatch_turn(turn, &conversation).await;
            for call in &outcome.calls {
                let status = status_of(call);
                summary.calls += 1;
                summary.attempts += call.attempt_count();
                match status.as_str() {
                    "executed" | "reconciled" => {}
                    "replayed" => summary.replays += 1,
                    _ => summary.errors += 1,
                }
                let key = call.key.as_ref().map_or("-", |k| k.prefix(12));
                print_line(&format!(
                    "{file}\tturn {}\t{}\t{}\tkey {key}\tattempts {}\t{status}",
                    turn.index + 1,
                    call.id,
                    call.tool,
                    call.attempt_count(),
                ));
            }
        }
    }
    summary.executions = EFFECTS.len();
    summary.round_trips = engine
        .store()
        .round_trips()
        .zip(round_trips_before)
        .map(|(after, before)| after - before);
    (Some(summary), all_read)
}

/// Writes one line to stdout. When stdout is closed (`replay … | head -n 2`), stops
/// quietly: exit code 0 for a closed pipe, 1 for any other write error.
fn print_line(line: &str) {
    use std::io::Write;
    if let Err(e) = writeln!(std::io::stdout(), "{line}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("replay: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Installs a subscriber that writes to stderr when `RUST_LOG` is set; without it, none.
fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::format::FmtSpan;
    if std::env::var_os("RUST_LOG").is_none() {
        return;
    }
    let filter = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(filter) => filter,
        Err(e) => {
            eprintln!("replay: RUST_LOG ignored: {e}");
            return;
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(std::io::stderr().is_terminal())
        // A closed stderr (`… 2>&1 | head`) drops the traces instead of aborting.
        .log_internal_errors(false)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    init_tracing();
    let options = match parse_options(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("replay: {message}");
            }
            eprintln!("{USAGE}");
            return if message.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("replay: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (summary, all_read) = runtime.block_on(run(options));
    if let Some(summary) = summary {
        match serde_json::to_string(&summary) {
            Ok(line) => print_line(&line),
            Err(e) => eprintln!("replay: cannot write the summary: {e}"),
        }
    }
    if all_read {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
