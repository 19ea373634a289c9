//! `idem approve` and `idem deny`: a person's decision about a call that waits for their
//! approval (A3), printed and refused as `idem resolve KEY` (U6, X3).

use idem_runtime::approval::Approval;
use idem_runtime::store::Record;
use idem_runtime::{Engine, IdempotencyKey};

use super::decide::{decider, positive, resolve_error, OneDecision};
use super::{parse_key, Report};
use crate::cli::{ApprovalArgs, ApproveArgs, DenyArgs};
use crate::exit::CliError;

/// Which way the person decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Approve,
    Deny,
}

pub(super) async fn approve(engine: &Engine, args: &ApproveArgs) -> Result<Report, CliError> {
    let valid_for = positive(
        "--valid-for",
        args.valid_for,
        "an approval valid for no time lets no call run",
    )?;
    decide(engine, &args.approval, Verdict::Approve, |approval| {
        approval.valid_for(valid_for)
    })
    .await
}

pub(super) async fn deny(engine: &Engine, args: &DenyArgs) -> Result<Report, CliError> {
    let ttl = positive(
        "--ttl",
        args.ttl,
        "a denial kept for no time lets the next call ask for approval again",
    )?;
    decide(engine, &args.approval, Verdict::Deny, |approval| {
        approval.keep_for(ttl)
    })
    .await
}

/// Reads and checks the command line (nothing is read from the store before), decides, and
/// prints as `resolve KEY`.
async fn decide(
    engine: &Engine,
    args: &ApprovalArgs,
    verdict: Verdict,
    span: impl FnOnce(Approval) -> Approval,
) -> Result<Report, CliError> {
    let key = parse_key(&args.key)?;
    let (actor, origin) = decider(&args.decider)?;
    let mut approval = Approval::new(actor).map_err(|e| resolve_error(e, origin))?;
    if let Some(note) = &args.decider.note {
        approval = approval.note(note.clone());
    }
    if let Some(fence) = args.expect_fence {
        approval = approval.expect_fence(fence);
    }
    let approval = span(approval);
    let resolved = match verdict {
        Verdict::Approve => engine.approve(&key, &approval).await,
        Verdict::Deny => engine.deny(&key, &approval).await,
    }
    .map_err(|e| resolve_error(e, origin))?;
    let now = engine.clock().now();
    let (decision, words) = match verdict {
        Verdict::Approve => ("approved", "approved"),
        Verdict::Deny => ("denied", "denied"),
    };
    let one = OneDecision {
        key: &key,
        decision,
        words,
        already_words: words,
        actor: approval.actor(),
        note: args.decider.note.as_deref(),
        resolved: &resolved,
    };
    Ok(one.report(args.json, now, |record| next_call(&key, verdict, record)))
}

/// What the next call with `key` does after the decision left `record` so.
fn next_call(key: &IdempotencyKey, verdict: Verdict, record: &Record) -> String {
    match verdict {
        Verdict::Approve => format!(
            "the next call with the same arguments runs the tool once (fence {}) if it comes \
             before then (or before the tool's own approval validity ends, if sooner); later, \
             it asks for approval again",
            record.fence + 1
        ),
        Verdict::Deny => format!(
            "every call with the key gets the denial without running the tool until {} \
             (`idem show {key}`)",
            record.expires_at.to_rfc3339()
        ),
    }
}
