//! The PostgreSQL store's [`Store`] operations: each one statement (see the module
//! documentation of [`super`]), run as a task bounded in time.

use std::sync::atomic::Ordering;

use super::ops::{fence_to_sql, owner_to_sql, to_sql};
#[cfg(doc)]
use super::OPERATION_TIMEOUT;
use super::{PostgresStore, BACKEND};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::store::in_flight::{self, Undo};
use crate::store::sql_row::SqlLabel;
use crate::store::{
    Claim, ClaimRequest, CompleteRequest, Completion, History, ListPage, ListQuery,
    MarkUnknownRequest, OwnerToken, PurgeCounts, PurgeOutcome, Record, RenewRequest, Seen, Store,
    StoreFuture, StoreStats, TakeoverRequest, Target, TransitionRequest,
};

impl Store for PostgresStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        self.collect_now_and_then(req.now);
        let key = req.key.as_str().to_owned();
        let fingerprint = req.fingerprint.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let times = [
            to_sql(req.now),
            to_sql(req.lease_until),
            to_sql(req.expires_at),
        ];
        let label = SqlLabel::of(req.label);
        // Abandoned by its caller, the claim is given back: released, or returned to not
        // applied when it reopened a key decided so (U4, U6).
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            now: req.now,
            acquired: in_flight::claimed,
        };
        self.run(
            move |inner| async move {
                inner
                    .claim(&key, &fingerprint, &owner, times, &label)
                    .await
            },
            Some(undo),
        )
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let (owner, seen_owner) = (owner_to_sql(req.owner), owner_to_sql(req.seen_owner));
        let times = [
            to_sql(req.lease_until),
            to_sql(req.now),
            to_sql(req.expires_at),
            to_sql(req.seen_lease_until),
        ];
        let fence = fence_to_sql(req.fence);
        let label = SqlLabel::of(req.label);
        let entry = req.entry.to_json();
        self.run(
            move |inner| async move {
                let [lease_until, now, expires_at, seen_lease_until] = times;
                inner
                    .execute(
                        "take over",
                        &inner.sql.take_over,
                        &[
                            &owner,
                            &lease_until,
                            &now,
                            &expires_at,
                            &key,
                            &seen_owner,
                            &seen_lease_until,
                            &fence,
                            &label.tool,
                            &label.namespace,
                            &label.scope,
                            &label.key_args,
                            &entry,
                        ],
                    )
                    .await
                    .map(|updated| updated == 1)
            },
            // No undo: a takeover whose caller went away must not delete the record, whose
            // outcome is unknown (U2); the claim lapses with its lease instead.
            None,
        )
    }

    /// A row in progress never expires (S8): `req.now` decides nothing here.
    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let lease_until = to_sql(req.lease_until);
        self.run(
            move |inner| async move {
                inner
                    .execute("renew", &inner.sql.renew, &[&lease_until, &key, &owner])
                    .await
                    .map(|updated| updated == 1)
            },
            None,
        )
    }

    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let since = to_sql(req.since);
        let entry = req.entry.to_json();
        self.run(
            move |inner| async move {
                inner
                    .execute(
                        "mark the outcome unknown",
                        &inner.sql.mark_unknown,
                        &[&since, &key, &owner, &entry],
                    )
                    .await
                    .map(|updated| updated == 1)
            },
            None,
        )
    }

    fn complete<'a>(&'a self, req: CompleteRequest<'a>) -> StoreFuture<'a, Completion> {
        let key = req.key.as_str().to_owned();
        let outcome = req.outcome.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let now = to_sql(req.now);
        let source = req.source.as_str();
        let entry = req.entry.to_json();
        self.run(
            move |inner| async move {
                inner
                    .execute(
                        "complete",
                        &inner.sql.complete,
                        &[&outcome, &now, &key, &owner, &source, &entry],
                    )
                    .await
                    .map(|updated| {
                        if updated == 1 {
                            Completion::Saved
                        } else {
                            Completion::Fenced
                        }
                    })
            },
            None,
        )
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        let key = key.as_str().to_owned();
        let owner = owner_to_sql(owner);
        self.run(
            move |inner| async move {
                inner
                    .execute("release", &inner.sql.release, &[&key, &owner])
                    .await
                    .map(|deleted| deleted == 1)
            },
            None,
        )
    }

    /// One statement (see `transition` in the module documentation): a compare-and-set on
    /// the fence and the state seen, the history appended by the same `UPDATE`. One round
    /// trip (two on a connection's first transition).
    fn transition<'a>(&'a self, req: TransitionRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let fence = fence_to_sql(req.fence);
        let (seen, seen_owner, seen_lease): (&str, Option<String>, Option<i64>) = match req.seen {
            Seen::InProgress { owner, lease_until } => (
                "in_progress",
                Some(owner_to_sql(owner)),
                lease_until.map(to_sql),
            ),
            Seen::OutcomeUnknown { owner, lease_until } => (
                "outcome_unknown",
                Some(owner_to_sql(owner)),
                Some(to_sql(lease_until)),
            ),
            Seen::NotApplied => ("not_applied", None, None),
            Seen::AwaitingApproval => ("awaiting_approval", None, None),
            Seen::Approved { until } => ("approved", None, Some(to_sql(until))),
        };
        let target = TargetColumns::of(&req.target);
        let (now, expires_at) = (to_sql(req.now), to_sql(req.expires_at));
        let entry = req.entry.to_json();
        self.run(
            move |inner| async move {
                let t = &target;
                inner
                    .execute(
                        "record a transition",
                        &inner.sql.transition,
                        &[
                            &key,
                            &fence,
                            &seen,
                            &seen_owner,
                            &seen_lease,
                            &t.name,
                            &t.since,
                            &t.outcome,
                            &t.source,
                            &now,
                            &expires_at,
                            &entry,
                            &t.owner,
                            &t.lease_until,
                            &t.fence,
                            &t.approval_at,
                            &t.approval_until,
                        ],
                    )
                    .await
                    .map(|updated| updated == 1)
            },
            None,
        )
    }

    /// One statement, served by the primary key. One round trip (two on a connection's
    /// first history).
    fn history<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<History>> {
        let key = key.as_str().to_owned();
        self.run(
            move |inner| async move { inner.history(&key, to_sql(now)).await },
            None,
        )
    }

    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        let key = key.as_str().to_owned();
        self.run(
            move |inner| async move { inner.read(&key, to_sql(now)).await },
            None,
        )
    }

    /// One statement (see [Inspection](crate::store::postgres#inspection-i3i5-i7)), served by an index walked
    /// backwards: `records_created`, or `records_tool_created` with a tool; cost about a
    /// page (plus rows the other filters skip). With a scope prefix, an equality and a range
    /// of `records_scope`, then a sort: cost in the records under the prefix. One round
    /// trip, two on a connection's first listing with this combination of filters.
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let query = query.clone();
        self.run(
            move |inner| async move { inner.list(&query, to_sql(now)).await },
            None,
        )
    }

    /// One statement, `DELETE … WHERE key = $1 … RETURNING` with the kept row in the same
    /// statement, served by the primary key; one round trip (two on a connection's first
    /// purge). An expired row is not deleted (`Absent`): garbage collection removes it,
    /// judged by the server's clock too (G1).
    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        let key = key.as_str().to_owned();
        self.run(
            move |inner| async move { inner.purge(&key, force, to_sql(now)).await },
            None,
        )
    }

    /// One statement, a `DELETE` of the matching live rows that also counts those kept,
    /// served by the indexes a listing with these filters uses: cost in the matching
    /// records, deleted in one transaction. One round trip (two on a connection's first
    /// purge with this combination of filters). Not bounded by [`OPERATION_TIMEOUT`], as
    /// [`PostgresStore::collect_garbage`]: a large purge may take longer.
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        let query = query.clone();
        self.spawn(
            move |inner| async move { inner.purge_matching(&query, force, to_sql(now)).await },
            None,
            None,
        )
    }

    /// One statement, `GROUP BY tool, state` over the live rows, the state taken at `now`
    /// (I7): a scan of the table, cost in the live records. One round trip (two on a
    /// connection's first count).
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        self.run(
            move |inner| async move { inner.stats(to_sql(now)).await },
            None,
        )
    }

    fn needs_runtime_io(&self) -> bool {
        true
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.inner.round_trips.load(Ordering::Relaxed))
    }
}

/// The parameters of the transition statement that name its target and carry the target's
/// values (`$6` to `$9`, `$13` to `$17`: see the function `transition` of `sql`); `None`
/// where the target has no such value.
#[derive(Debug, Default)]
struct TargetColumns {
    /// The target's name: `outcome_unknown`, `completed`, `not_applied`,
    /// `awaiting_approval`, `approved` or `in_progress`.
    name: &'static str,
    /// Outcome unknown: since when (U1).
    since: Option<i64>,
    /// Completed: the outcome (S11).
    outcome: Option<String>,
    /// Completed: its source's name (U6, A3).
    source: Option<&'static str>,
    /// In progress: the run's owner (A4).
    owner: Option<String>,
    /// In progress: its lease deadline.
    lease_until: Option<i64>,
    /// In progress: its fence (F1).
    fence: Option<i64>,
    /// Approved: when (A3).
    approval_at: Option<i64>,
    /// Approved: until when.
    approval_until: Option<i64>,
}

impl TargetColumns {
    /// The parameters of `target`.
    fn of(target: &Target<'_>) -> Self {
        match target {
            Target::OutcomeUnknown { since } => TargetColumns {
                name: "outcome_unknown",
                since: Some(to_sql(*since)),
                ..TargetColumns::default()
            },
            Target::Completed { outcome, source } => TargetColumns {
                name: "completed",
                outcome: Some(outcome.as_str().to_owned()),
                source: Some(source.as_str()),
                ..TargetColumns::default()
            },
            Target::NotApplied => TargetColumns {
                name: "not_applied",
                ..TargetColumns::default()
            },
            Target::AwaitingApproval => TargetColumns {
                name: "awaiting_approval",
                ..TargetColumns::default()
            },
            Target::Approved { decided_at, until } => TargetColumns {
                name: "approved",
                approval_at: Some(to_sql(*decided_at)),
                approval_until: Some(to_sql(*until)),
                ..TargetColumns::default()
            },
            Target::InProgress {
                owner,
                lease_until,
                fence,
            } => TargetColumns {
                name: "in_progress",
                owner: Some(owner_to_sql(*owner)),
                lease_until: Some(to_sql(*lease_until)),
                fence: Some(fence_to_sql(*fence)),
                ..TargetColumns::default()
            },
        }
    }
}
