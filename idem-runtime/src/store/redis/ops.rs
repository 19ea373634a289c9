//! The [`Store`] operations of the Redis store: each one `EVALSHA` of its script (see
//! [`scripts`]), a read and a history read one `HMGET`; the inspection operations are in
//! [`inspect`](super::inspect).

use redis::Value;

use super::record::{self, number_arg, optional_arg, parse_number, FIELDS, HISTORY_FIELDS};
use super::scripts::{self, as_flag};
use super::{RedisStore, BACKEND};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::label::RecordLabel;
use crate::store::in_flight::{self, Undo};
use crate::store::{
    Claim, ClaimRequest, CompleteRequest, Completion, History, ListPage, ListQuery,
    MarkUnknownRequest, OwnerToken, PurgeCounts, PurgeOutcome, Record, RenewRequest, Seen, Store,
    StoreError, StoreFuture, StoreStats, TakeoverRequest, Target, TransitionRequest,
};

/// The script arguments of a label (P1): tool, scope (its text form), namespace, key_args.
fn label_args(label: &RecordLabel) -> [String; 4] {
    [
        label.tool.clone(),
        label.scope.to_string(),
        optional_arg(label.namespace.as_deref()),
        optional_arg(label.key_args.as_deref()),
    ]
}

/// A compare-and-set script's answer, or a corrupt-record error naming `what` answered.
fn flag(
    store: &RedisStore,
    key: &IdempotencyKey,
    what: &str,
    reply: &Value,
) -> Result<bool, StoreError> {
    as_flag(reply).ok_or_else(|| store.corrupt(key, &format!("unexpected {what} reply")))
}

/// The claim script's answer for a claim it granted: the fence, and whether it reopened a
/// key decided not applied (`reopened:<fence>`, U6).
fn acquired(answer: &[u8]) -> Option<Claim> {
    let text = std::str::from_utf8(answer).ok()?;
    let (fence, reopened) = match text.strip_prefix("reopened:") {
        Some(fence) => (fence, true),
        None => (text, false),
    };
    parse_number(fence).map(|fence| Claim::Acquired { fence, reopened })
}

/// The transition script's arguments for `req` (see [`scripts::TRANSITION`]): now, fence,
/// seen state, seen owner, seen lease deadline (for an approval seen: its expiry), target
/// state, since, outcome, source,
/// expires_at, entry, approval_at, approval_until, owner, lease_until, fence of the run; an
/// argument the seen state or the target does not use is `""`.
fn transition_args(req: &TransitionRequest<'_>) -> Vec<String> {
    let none = String::new;
    let (seen, owner, lease) = match req.seen {
        Seen::InProgress { owner, lease_until } => (
            "in_progress",
            owner.to_hex(),
            lease_until.map_or_else(none, |l| number_arg(l.as_millis())),
        ),
        Seen::OutcomeUnknown { owner, lease_until } => (
            "outcome_unknown",
            owner.to_hex(),
            number_arg(lease_until.as_millis()),
        ),
        Seen::NotApplied => ("not_applied", none(), none()),
        Seen::AwaitingApproval => ("awaiting_approval", none(), none()),
        Seen::Approved { until } => ("approved", none(), number_arg(until.as_millis())),
    };
    // since, outcome, source; approval_at, approval_until; owner, lease_until, fence.
    let mut target_args: [String; 8] = Default::default();
    let target = match &req.target {
        Target::OutcomeUnknown { since } => {
            target_args[0] = number_arg(since.as_millis());
            "outcome_unknown"
        }
        Target::Completed { outcome, source } => {
            target_args[1] = outcome.as_str().to_owned();
            target_args[2] = source.as_str().to_owned();
            "completed"
        }
        Target::NotApplied => "not_applied",
        Target::AwaitingApproval => "awaiting_approval",
        Target::Approved { decided_at, until } => {
            target_args[3] = number_arg(decided_at.as_millis());
            target_args[4] = number_arg(until.as_millis());
            "approved"
        }
        Target::InProgress {
            owner,
            lease_until,
            fence,
        } => {
            target_args[5] = owner.to_hex();
            target_args[6] = number_arg(lease_until.as_millis());
            target_args[7] = number_arg(*fence);
            "in_progress"
        }
    };
    let [since, outcome, source, approval_at, approval_until, run_owner, run_lease, run_fence] =
        target_args;
    vec![
        number_arg(req.now.as_millis()),
        number_arg(req.fence),
        seen.to_owned(),
        owner,
        lease,
        target.to_owned(),
        since,
        outcome,
        source,
        number_arg(req.expires_at.as_millis()),
        req.entry.to_json(),
        approval_at,
        approval_until,
        run_owner,
        run_lease,
        run_fence,
    ]
}

impl Store for RedisStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        let key = req.key.clone();
        let mut args = vec![
            number_arg(req.now.as_millis()),
            req.fingerprint.as_str().to_owned(),
            number_arg(req.expires_at.as_millis()),
            req.owner.to_hex(),
            number_arg(req.lease_until.as_millis()),
        ];
        args.extend(label_args(req.label));
        let eval = self.eval("claim", &scripts::CLAIM, &key, args);
        let store = self.clone();
        // Abandoned by its caller, the claim is given back: released, or returned to not
        // applied when it reopened a key decided so (U4, U6).
        let undo = Undo {
            key: key.clone(),
            owner: req.owner,
            now: req.now,
            acquired: in_flight::claimed,
        };
        self.run(
            async move {
                match eval.await? {
                    Value::BulkString(answer) => acquired(&answer)
                        .ok_or_else(|| store.corrupt(&key, "the claim answered a bad fence")),
                    reply => match record::decode(reply).map_err(|e| store.corrupt(&key, &e))? {
                        Some(record) => Ok(Claim::Existing(record)),
                        None => Err(store.corrupt(&key, "claim conflicted with an empty record")),
                    },
                }
            },
            Some(undo),
        )
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let mut args = vec![
            req.seen_owner.to_hex(),
            number_arg(req.seen_lease_until.as_millis()),
            number_arg(req.now.as_millis()),
            req.owner.to_hex(),
            number_arg(req.lease_until.as_millis()),
            number_arg(req.expires_at.as_millis()),
            number_arg(req.fence),
        ];
        args.extend(label_args(req.label));
        args.push(req.entry.to_json());
        let eval = self.eval("take over", &scripts::TAKE_OVER, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move { flag(&store, &key, "takeover", &eval.await?) },
            // No undo: a takeover whose caller went away must not delete the record, whose
            // outcome is unknown (U2); the claim lapses with its lease instead.
            None,
        )
    }

    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        let args = vec![req.owner.to_hex(), number_arg(req.lease_until.as_millis())];
        let eval = self.eval("renew", &scripts::RENEW, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move { flag(&store, &key, "renewal", &eval.await?) },
            None,
        )
    }

    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        let args = vec![
            req.owner.to_hex(),
            number_arg(req.since.as_millis()),
            req.entry.to_json(),
        ];
        let eval = self.eval("mark unknown", &scripts::MARK_UNKNOWN, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move { flag(&store, &key, "mark-unknown", &eval.await?) },
            None,
        )
    }

    fn complete<'a>(&'a self, req: CompleteRequest<'a>) -> StoreFuture<'a, Completion> {
        let args = vec![
            req.owner.to_hex(),
            number_arg(req.now.as_millis()),
            req.outcome.as_str().to_owned(),
            req.source.as_str().to_owned(),
            req.entry.to_json(),
        ];
        let eval = self.eval("complete", &scripts::COMPLETE, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move {
                Ok(match flag(&store, &key, "completion", &eval.await?)? {
                    true => Completion::Saved,
                    false => Completion::Fenced,
                })
            },
            None,
        )
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        let eval = self.eval("release", &scripts::RELEASE, key, vec![owner.to_hex()]);
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move { flag(&store, &key, "release", &eval.await?) },
            None,
        )
    }

    /// One `EVALSHA`: compares the fence and the state, moves the record and appends the
    /// entry to its history.
    fn transition<'a>(&'a self, req: TransitionRequest<'a>) -> StoreFuture<'a, bool> {
        let args = transition_args(&req);
        let eval = self.eval("transition", &scripts::TRANSITION, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move { flag(&store, &key, "transition", &eval.await?) },
            None,
        )
    }

    /// One `HMGET` of the record's fields and its history.
    fn history<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<History>> {
        let fields: Vec<&str> = FIELDS.iter().chain(&HISTORY_FIELDS).copied().collect();
        let hmget = self.hmget(key, &fields);
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move {
                let read = record::decode_with_history(hmget.await?)
                    .map_err(|e| store.corrupt(&key, &e))?;
                Ok(read
                    .filter(|(record, _)| record.is_live(now))
                    .map(|(_, history)| history))
            },
            None,
        )
    }

    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        let hmget = self.hmget(key, &FIELDS);
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move {
                let record = record::decode(hmget.await?).map_err(|e| store.corrupt(&key, &e))?;
                Ok(record.filter(|record| record.is_live(now)))
            },
            None,
        )
    }

    /// Walks the prefix's index (or the tool's) newest first (or oldest first), in batches
    /// of `max(limit + 1, 100)` members, one `EVALSHA` each; see the
    /// [module documentation](super) for the cost.
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let (store, query) = (self.clone(), query.clone());
        self.run(async move { store.list_page(&query, now).await }, None)
    }

    /// One `EVALSHA`: compares the state, then deletes the record and its index members.
    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        let (store, key) = (self.clone(), key.clone());
        self.run(async move { store.purge_key(&key, force, now).await }, None)
    }

    /// Walks the index as [`list`](Store::list) does (batches of 1000 members), then one
    /// `EVALSHA` per matching record.
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        let (store, query) = (self.clone(), query.clone());
        self.run(
            async move { store.purge_all(&query, force, now).await },
            None,
        )
    }

    /// Walks the whole index (batches of 1000 members, outcomes left out): O(records).
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        let store = self.clone();
        self.run(async move { store.count(now).await }, None)
    }

    fn needs_runtime_io(&self) -> bool {
        true
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.round_trips.load(std::sync::atomic::Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::acquired;
    use crate::store::Claim;

    // pins F1, U6: the claim's answer tells a new claim from a reopened one
    #[test]
    fn claim_answers_decode() {
        assert_eq!(
            acquired(b"00000000000000000007"),
            Some(Claim::Acquired {
                fence: 7,
                reopened: false
            })
        );
        assert_eq!(
            acquired(b"reopened:00000000000000000003"),
            Some(Claim::Acquired {
                fence: 3,
                reopened: true
            })
        );
        for bad in [&b"7"[..], b"reopened:7", b"reopened", b"\xff"] {
            assert_eq!(acquired(bad), None);
        }
    }
}
