//! `idem resolve`: a person's decision about a call whose outcome is unknown (U6): by key,
//! or for every such record a filter selects, oldest first.

use std::time::Duration;

use idem_runtime::resolve::{Decision, Resolution, ResolveError, Resolved};
use idem_runtime::store::{
    KeyedRecord, ListQuery, OutcomeSource, Record, RecordState, StateFilter,
};
use idem_runtime::{Engine, IdempotencyKey, Timestamp};
use serde::Serialize;
use serde_json::{json, Value};

use super::decide::{decider, positive, resolve_error, ActorOrigin, OneDecision};
use super::{parse_key, scope_path, Report};
use crate::cli::ResolveArgs;
use crate::exit::{CliError, Exit};
use crate::output::{json_line, records, scope_text, state_words, table, tool_of, when};

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
    let (actor, origin) = decider(&args.decider)?;
    let mut resolution = Resolution::new(decision, actor).map_err(|e| resolve_error(e, origin))?;
    if let Some(note) = &args.decider.note {
        resolution = resolution.note(note.clone());
    }
    resolution = resolution.keep_for(positive(
        "--ttl",
        args.ttl,
        "a saved result kept for no time lets the next call run the tool again",
    )?);
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
    let decision = resolution.decision();
    let words = decision_words(decision);
    let one = OneDecision {
        key,
        decision: decision.kind().as_str(),
        words,
        already_words: &format!("decided {words}"),
        actor: resolution.actor(),
        note: args.decider.note.as_deref(),
        resolved: &resolved,
    };
    Ok(one.report(args.json, now, |record| next_call(key, decision, record)))
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
