//! `idem resolve`: a person's decision about a call whose outcome is unknown (U6): by key,
//! or for every such record a filter selects, oldest first.

use std::time::Duration;

use idem_runtime::resolve::{Decision, Resolution, ResolveError, Resolved, NOTE_MAX_CHARS};
use idem_runtime::store::{
    KeyedRecord, ListQuery, OutcomeSource, Record, RecordState, StateFilter,
};
use idem_runtime::{Engine, IdempotencyKey, Timestamp};
use serde::Serialize;
use serde_json::{json, Value};

use super::{parse_key, scope_path, Report};
use crate::cli::ResolveArgs;
use crate::exit::{CliError, Exit};
use crate::output::{json_line, records, scope_text, state_words, table, tool_of, when};

/// Where the actor's name came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ActorOrigin {
    /// `--actor`.
    Option,
    /// The environment variable `IDEM_ACTOR`.
    IdemActor,
    /// The environment variable `USER`.
    User,
}

impl ActorOrigin {
    fn name(self) -> &'static str {
        match self {
            ActorOrigin::Option => "--actor",
            ActorOrigin::IdemActor => "IDEM_ACTOR",
            ActorOrigin::User => "USER (pass --actor to name someone else)",
        }
    }
}

/// The actor: `--actor`, else `IDEM_ACTOR`, else `USER` (empty variables count as unset).
/// Without any, bad usage telling to pass `--actor`.
pub(super) fn actor(
    given: Option<&str>,
    idem_actor: Option<String>,
    user: Option<String>,
) -> Result<(String, ActorOrigin), CliError> {
    if let Some(actor) = given {
        return Ok((actor.to_owned(), ActorOrigin::Option));
    }
    let set = |value: Option<String>| value.filter(|v| !v.is_empty());
    if let Some(actor) = set(idem_actor) {
        return Ok((actor, ActorOrigin::IdemActor));
    }
    if let Some(actor) = set(user) {
        return Ok((actor, ActorOrigin::User));
    }
    Err(CliError::usage(
        "--actor",
        "needed: who decides (a decision names its actor); pass --actor NAME or set \
         IDEM_ACTOR (neither IDEM_ACTOR nor USER is set)",
    ))
}

/// `resolve KEY --json`.
#[derive(Serialize)]
struct ResolvedJson<'a> {
    key: &'a str,
    decision: &'static str,
    actor: &'a str,
    note: Option<&'a str>,
    state: &'static str,
    fence: u64,
    already_decided: bool,
}

/// One line of `resolve --tool … --json`.
#[derive(Serialize)]
struct BulkJson<'a> {
    key: &'a str,
    tool: Option<&'a str>,
    scope: String,
    created_at: String,
    fence: u64,
    /// `would_decide`, `decided`, `already_decided` or `not_decided`.
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(super) async fn run(engine: &Engine, args: &ResolveArgs) -> Result<Report, CliError> {
    let (resolution, origin) = resolution(args)?;
    match &args.key {
        Some(text) => by_key(engine, &parse_key(text)?, &resolution, args, origin).await,
        None => bulk(engine, &resolution, args).await,
    }
}

/// The decision, its actor, note and how long a saved outcome is kept, checked before
/// anything is read.
fn resolution(args: &ResolveArgs) -> Result<(Resolution, ActorOrigin), CliError> {
    if args.output.is_some() && !args.applied {
        return Err(CliError::usage(
            "--output",
            "goes with --applied (the saved result of a call whose effect happened); \
             --error takes the error itself, --not-applied saves nothing",
        ));
    }
    let decision = if args.applied {
        match &args.output {
            Some(text) => Decision::applied_json(text),
            // No output given: the call's result is JSON null (U6).
            None => Decision::applied(&Value::Null).map_err(|e| ResolveError::BadOutput {
                what: "--output",
                message: e.to_string(),
            }),
        }
    } else if let Some(text) = &args.error {
        Decision::failed_json(text)
    } else {
        Ok(Decision::not_applied())
    }
    .map_err(|e| resolve_error(e, ActorOrigin::Option))?;
    let (actor, origin) = actor(
        args.actor.as_deref(),
        std::env::var("IDEM_ACTOR").ok(),
        std::env::var("USER").ok(),
    )?;
    let mut resolution = Resolution::new(decision, actor).map_err(|e| resolve_error(e, origin))?;
    if let Some(note) = &args.note {
        let chars = note.chars().count();
        if chars > NOTE_MAX_CHARS {
            return Err(resolve_error(ResolveError::BadNote { chars }, origin));
        }
        resolution = resolution.note(note.clone());
    }
    let ttl = Duration::from(args.ttl);
    if ttl.is_zero() {
        return Err(CliError::usage(
            "--ttl",
            "must be longer than zero: a saved result kept for no time lets the next call \
             run the tool again",
        ));
    }
    resolution = resolution.keep_for(ttl);
    if let Some(fence) = args.expect_fence {
        resolution = resolution.expect_fence(fence);
    }
    Ok((resolution, origin))
}

/// What `decision` says, for people: `applied`, `failed (error saved)`, `not applied`.
fn decision_words(decision: &Decision) -> &'static str {
    match decision {
        Decision::Applied(_) => "applied",
        Decision::Failed(_) => "failed (error saved)",
        Decision::NotApplied => "not applied",
    }
}

/// The record's state after a decision: `completed (source resolved)`, `not applied`.
fn state_after(record: &Record, now: Timestamp) -> String {
    let state = state_words(StateFilter::at(&record.state, now));
    match &record.state {
        RecordState::Completed { source, .. } => format!("{state} (source {})", source.as_str()),
        _ => state.to_owned(),
    }
}

/// What the next call with `key` does after `decision`.
fn next_call(key: &IdempotencyKey, decision: &Decision, record: &Record) -> String {
    match (decision, &record.state) {
        (Decision::NotApplied, _) => format!(
            "the next call with the same arguments runs the tool (fence {})",
            record.fence + 1
        ),
        (
            _,
            RecordState::Completed {
                source: OutcomeSource::Resolved,
                ..
            },
        ) => format!(
            "every later call gets the saved {} back until {}",
            if matches!(decision, Decision::Failed(_)) {
                "error"
            } else {
                "output"
            },
            record.expires_at.to_rfc3339()
        ),
        _ => format!("look at it with `idem show {key} --history`"),
    }
}

async fn by_key(
    engine: &Engine,
    key: &IdempotencyKey,
    resolution: &Resolution,
    args: &ResolveArgs,
    origin: ActorOrigin,
) -> Result<Report, CliError> {
    let resolved = engine
        .resolve(key, resolution)
        .await
        .map_err(|e| resolve_error(e, origin))?;
    let now = engine.clock().now();
    let (record, already) = match &resolved {
        Resolved::Decided(record) => (record, false),
        Resolved::AlreadyDecided(record) => (record, true),
    };
    let decision = resolution.decision();
    if args.json {
        return Ok(Report::out(json_line(&ResolvedJson {
            key: key.as_str(),
            decision: decision.kind().as_str(),
            actor: resolution.actor(),
            note: args.note.as_deref(),
            state: StateFilter::at(&record.state, now).as_str(),
            fence: record.fence,
            already_decided: already,
        })));
    }
    let words = decision_words(decision);
    let state = state_after(record, now);
    let stdout = if already {
        format!(
            "{key} was already decided {words}: nothing written; it is {state}, fence {}\n",
            record.fence
        )
    } else {
        format!(
            "decided {key}: {words}, by {}; it is now {state}, fence {}: {}\n",
            resolution.actor(),
            record.fence,
            next_call(key, decision, record)
        )
    };
    Ok(Report::out(stdout))
}

async fn bulk(
    engine: &Engine,
    resolution: &Resolution,
    args: &ResolveArgs,
) -> Result<Report, CliError> {
    if args.tool.is_none() && args.older_than.is_none() {
        return Err(CliError::Usage(
            "resolve: name a KEY, or select the records with --tool and/or --older-than \
             (and --scope): one decision for every unknown outcome of the store is too broad"
                .to_owned(),
        ));
    }
    let now = engine.clock().now();
    let created_before = args.older_than.map(|span| {
        let millis = u64::try_from(Duration::from(span).as_millis()).unwrap_or(u64::MAX);
        Timestamp::from_millis(now.as_millis().saturating_sub(millis))
    });
    let query = ListQuery {
        tool: args.tool.clone(),
        namespace: engine.namespace().map(str::to_owned),
        scope: scope_path(&args.scope)?,
        created_before,
        limit: idem_runtime::store::LIST_LIMIT_MAX,
        ..ListQuery::default()
    };
    let answers = engine
        .resolve_matching(&query, resolution, args.dry_run)
        .await?;
    let now = engine.clock().now();

    let (mut decided, mut already, mut failed) = (0u64, 0u64, 0u64);
    let mut store_error = None;
    let mut report = Report::default();
    let mut rows = Vec::new();
    for (listed, answer) in &answers {
        let (result, state, error) = match answer {
            None => ("would_decide", None, None),
            Some(Ok(Resolved::Decided(record))) => {
                decided += 1;
                ("decided", Some(StateFilter::at(&record.state, now)), None)
            }
            Some(Ok(Resolved::AlreadyDecided(record))) => {
                already += 1;
                (
                    "already_decided",
                    Some(StateFilter::at(&record.state, now)),
                    None,
                )
            }
            Some(Err(e)) => {
                failed += 1;
                if let ResolveError::Store(store) = e {
                    store_error.get_or_insert_with(|| CliError::from(store.clone()));
                }
                ("not_decided", None, Some(why_not(e)))
            }
        };
        if args.json {
            report.stdout.push_str(&json_line(&BulkJson {
                key: listed.key.as_str(),
                tool: tool_of(&listed.record),
                scope: listed_scope(listed),
                created_at: listed.record.created_at.to_rfc3339(),
                fence: listed.record.fence,
                result,
                state: state.map(StateFilter::as_str),
                error,
            }));
        } else {
            let mut text = result.replace('_', " ");
            if let Some(state) = state {
                text = format!("{text}: now {}", state_words(state));
            }
            if let Some(error) = error {
                text = format!("{text}: {error}");
            }
            rows.push(vec![
                listed.key.to_string(),
                tool_of(&listed.record).unwrap_or("-").to_owned(),
                Some(listed_scope(listed))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "-".to_owned()),
                when(listed.record.created_at, now),
                listed.record.fence.to_string(),
                text,
            ]);
        }
    }

    let matched = answers.len() as u64;
    let words = decision_words(resolution.decision());
    if matched == 0 {
        report.stderr = "idem: no record the filters select waits for a decision (outcome \
                         unknown): nothing to decide\n"
            .to_owned();
        report.exit = Some(Exit::NotFound);
        return Ok(report);
    }
    if args.json {
        report.stderr = json!({
            "matched": matched,
            "decided": decided + already,
            "already_decided": already,
            "not_decided": failed,
            "dry_run": args.dry_run,
        })
        .to_string()
            + "\n";
    } else {
        report.stdout = table(
            &["KEY", "TOOL", "SCOPE", "CREATED", "FENCE", "RESULT"],
            &rows,
        );
        let summary = if args.dry_run {
            format!(
                "would decide {} {words} by {} (dry run: nothing written)\n",
                records(matched),
                resolution.actor()
            )
        } else {
            let mut text = format!(
                "decided {} {words} by {}",
                records(decided + already),
                resolution.actor()
            );
            if already > 0 {
                text.push_str(&format!(" ({already} of them already so)"));
            }
            if failed > 0 {
                text.push_str(&format!("; {} not decided (see above)", records(failed)));
            }
            text + "\n"
        };
        report.stdout.push_str(&summary);
    }
    report.exit = Some(if args.dry_run || decided + already > 0 {
        Exit::Done
    } else if let Some(error) = store_error {
        report.stderr.push_str(&format!("idem: {error}\n"));
        Exit::Store
    } else {
        report
            .stderr
            .push_str("idem: nothing decided: every record changed since it was listed\n");
        Exit::NotFound
    });
    Ok(report)
}

fn listed_scope(listed: &KeyedRecord) -> String {
    listed
        .record
        .label
        .as_ref()
        .map(|l| scope_text(&l.scope))
        .unwrap_or_default()
}

/// Why one record of a bulk decision was not decided, short: its line names the key.
fn why_not(error: &ResolveError) -> String {
    match error {
        ResolveError::NotFound { .. } => "gone (purged meanwhile)".to_owned(),
        ResolveError::FenceChanged { found, state, .. } => format!(
            "changed since it was listed: now {} with fence {found}",
            state_words(*state)
        ),
        ResolveError::Changed { state, fence, .. } => format!(
            "changed while deciding: now {} with fence {fence}",
            state_words(*state)
        ),
        ResolveError::NotDecidable { why, .. } => why.clone(),
        ResolveError::Store(e) => format!("the store failed: {e}"),
        other => other.to_string(),
    }
}

/// A refused decision (U6, X3): bad input is exit 2 naming the option (or the variable the
/// actor came from); a record that cannot be decided, or changed, exit 1 saying what it is
/// now and what to do; the store, exit 3.
fn resolve_error(error: ResolveError, origin: ActorOrigin) -> CliError {
    match error {
        ResolveError::BadActor { .. } => CliError::usage(origin.name(), error),
        ResolveError::BadNote { .. } => CliError::usage("--note", error),
        // Its message begins with the option: `--output: not one JSON value: …`.
        ResolveError::BadOutput { .. } => CliError::Usage(error.to_string()),
        ResolveError::Store(e) => e.into(),
        ResolveError::Changed { ref key, .. } => CliError::NotFound(format!(
            "{error} (`idem show {key} --history`); nothing was decided"
        )),
        other => CliError::NotFound(format!("{other}; nothing was decided")),
    }
}
