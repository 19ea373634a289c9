//! The subcommands, and what they share: opening the store, reading a call, keys, filters.

mod approval;
mod decide;
mod key;
mod ls;
mod purge;
mod resolve;
mod show;
mod stats;

use std::time::{Duration, UNIX_EPOCH};

use idem_runtime::inspect::CallQuery;
use idem_runtime::store::{ListQuery, StoreLocator};
use idem_runtime::{Engine, IdempotencyKey, ScopePart, ScopePath, Timestamp};

use crate::cli::{CallArgs, Cli, Command, Filters};
use crate::exit::{engine_error, locator_error, CliError, Exit};

/// What a command printed and how it ends.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error, as printed: notes prefixed `idem: `, and the next page's
    /// cursor of `ls --json` as a bare JSON object.
    pub stderr: String,
    /// Its exit status when it did not fail.
    pub exit: Option<Exit>,
}

impl Report {
    /// Standard output `stdout`, exit 0.
    pub fn out(stdout: String) -> Self {
        Report {
            stdout,
            ..Report::default()
        }
    }
}

/// Where the store locator came from, for messages.
#[derive(Debug, Clone, Copy)]
pub struct Origins {
    /// `--store` or `IDEM_STORE`.
    pub store: &'static str,
}

/// Runs the command line `cli`. Must be called inside a tokio runtime (the Redis and
/// PostgreSQL stores connect on it).
pub async fn run(cli: Cli, origins: Origins) -> Result<Report, CliError> {
    if let Command::Key(args) = &cli.command {
        // No store at all: the key is derived from the call and the namespace alone.
        let engine = engine_builder(cli.namespace.as_deref())
            .build()
            .map_err(|e| engine_error(e, origins.store))?;
        return key::run(&engine, args);
    }
    let (engine, shown) = open(
        cli.store.as_deref(),
        origins.store,
        cli.namespace.as_deref(),
    )?;
    let limit = cli.timeout;
    tokio::time::timeout(limit.into(), execute(&engine, &cli.command))
        .await
        .unwrap_or_else(|_| {
            Err(CliError::Store(format!(
                "the store is unavailable: no answer within {limit} (--timeout)"
            )))
        })
        .map_err(|e| e.naming_store(&shown))
}

/// Runs `command` on `engine`'s store.
async fn execute(engine: &Engine, command: &Command) -> Result<Report, CliError> {
    match command {
        Command::Key(args) => key::run(engine, args),
        Command::Show(args) => show::run(engine, args).await,
        Command::Ls(args) => ls::run(engine, args).await,
        Command::Purge(args) => purge::run(engine, args).await,
        Command::Stats(args) => stats::run(engine, args).await,
        Command::Resolve(args) => resolve::run(engine, args).await,
        Command::Approve(args) => approval::approve(engine, args).await,
        Command::Deny(args) => approval::deny(engine, args).await,
        Command::McpProxy(_) => Err(CliError::Usage(
            "mcp-proxy runs on its own runtime, not as an inspection command".to_owned(),
        )),
    }
}

fn engine_builder(namespace: Option<&str>) -> idem_runtime::EngineBuilder {
    let builder = Engine::builder();
    match namespace {
        Some(ns) => builder.namespace(ns),
        None => builder,
    }
}

/// The engine over the store named by `locator` (from `origin`), in `namespace`, and the
/// locator as it may be shown (passwords as `***`).
///
/// The store is opened for inspection ([`StoreLocator::open_existing`]): an SQLite file that
/// does not exist, or holds no idem tables, and a PostgreSQL schema that does not exist, are
/// refused (exit 3) and not created: inspecting a mistyped path or schema would otherwise
/// leave an empty store behind and report nothing found.
fn open(
    locator: Option<&str>,
    origin: &str,
    namespace: Option<&str>,
) -> Result<(Engine, String), CliError> {
    let Some(text) = locator else {
        return Err(CliError::Usage(
            "no store: pass --store LOCATOR or set IDEM_STORE (`sqlite:PATH`, `postgres://…`, \
             `redis://…`)"
                .to_owned(),
        ));
    };
    let locator = StoreLocator::parse(text).map_err(|e| locator_error(e, origin))?;
    if let StoreLocator::Sqlite { path: Some(path) } = &locator {
        if !path.exists() {
            return Err(CliError::Store(format!(
                "the store is unavailable: no SQLite store at {} (from {origin}): the file does \
                 not exist, and idem does not create one",
                path.display()
            )));
        }
    }
    // For inspection: nothing is created or upgraded (a mistyped PostgreSQL schema is
    // reported, not created empty; a read-only role can show, list and count).
    let store = locator
        .open_existing()
        .map_err(|e| locator_error(e, origin))?;
    let engine = engine_builder(namespace)
        .shared_store(store)
        .build()
        .map_err(|e| engine_error(e, origin))?;
    Ok((engine, locator.to_string()))
}

/// A key given on the command line: 64 hex digits (either case).
fn parse_key(text: &str) -> Result<IdempotencyKey, CliError> {
    let lower = text.trim().to_ascii_lowercase();
    IdempotencyKey::from_hex(&lower).ok_or_else(|| {
        CliError::Usage(format!(
            "KEY {text:?} is not a key: expected 64 hex digits, got {} characters (`idem ls \
             --wide` and `idem ls --json` print whole keys; the table shows the first 16)",
            text.trim().chars().count()
        ))
    })
}

/// `--scope` parts as a path, checked (K7, P1).
fn scope_path(parts: &[ScopePart]) -> Result<ScopePath, CliError> {
    ScopePath::from_parts(parts.to_vec()).map_err(|e| CliError::usage("--scope", e))
}

/// The call named by `--tool`, `--scope` and `--args`.
fn call_query(call: &CallArgs) -> Result<CallQuery, CliError> {
    let tool = call.tool.clone().ok_or_else(|| {
        CliError::usage(
            "--tool",
            "needed: name the tool (or give a KEY where one is taken)",
        )
    })?;
    let text = call.args.as_deref().ok_or_else(|| {
        CliError::usage(
            "--args",
            "needed: the key arguments as a JSON object (`{}` for a tool without any)",
        )
    })?;
    let args: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| CliError::usage("--args", format!("not valid JSON ({e}): {text}")))?;
    if !args.is_object() {
        return Err(CliError::usage(
            "--args",
            format!("expected a JSON object of parameter names to values, got {text}"),
        ));
    }
    Ok(CallQuery::new(tool, scope_path(&call.scope)?, args))
}

/// The list query of `filters` in the engine's namespace (any namespace without one).
fn list_query(engine: &Engine, filters: &Filters, now: Timestamp) -> Result<ListQuery, CliError> {
    Ok(ListQuery {
        tool: filters.tool.clone(),
        namespace: engine.namespace().map(str::to_owned),
        scope: scope_path(&filters.scope)?,
        state: filters.state.map(Into::into),
        created_from: filters
            .since
            .as_deref()
            .map(|t| parse_when(t, now, "--since"))
            .transpose()?,
        created_before: filters
            .until
            .as_deref()
            .map(|t| parse_when(t, now, "--until"))
            .transpose()?,
        ..ListQuery::default()
    })
}

/// `--since` / `--until`: RFC 3339 (`2026-12-01T20:00:00Z`, a space for `T` and no zone
/// taken as UTC), or a humantime span before `now` (`2h`, `30m`, `7days`, `1h 30m`).
fn parse_when(text: &str, now: Timestamp, option: &str) -> Result<Timestamp, CliError> {
    if let Ok(at) = humantime::parse_rfc3339_weak(text.trim()) {
        let millis = at
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis();
        return Ok(Timestamp::from_millis(
            u64::try_from(millis).unwrap_or(u64::MAX),
        ));
    }
    if let Ok(span) = humantime::parse_duration(text.trim()) {
        let millis = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        return Ok(Timestamp::from_millis(
            now.as_millis().saturating_sub(millis),
        ));
    }
    Err(CliError::usage(
        option,
        format!(
            "{text:?} is neither an RFC 3339 instant (2026-12-01T20:00:00Z) nor a span ago (2h, \
             30m, 7days)"
        ),
    ))
}

#[cfg(test)]
mod tests;
