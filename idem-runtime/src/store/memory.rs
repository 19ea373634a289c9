//! The in-memory store: one process, forgotten on restart.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use super::history::StoredHistory;
use super::{
    gc_cutoff, is_garbage, ChangeSignal, Claim, ClaimRequest, CompleteRequest, Completion, History,
    HistoryEntry, KeyedRecord, ListPage, ListQuery, MarkUnknownRequest, PurgeCounts, PurgeOutcome,
    Record, RecordState, RenewRequest, Seen, StateFilter, Store, StoreFuture, StoreStats,
    TakeoverRequest, Target, TransitionRequest,
};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::store::OwnerToken;

/// How many claims between two sweeps of expired records.
const SWEEP_EVERY: u64 = 4096;

/// A [`Store`] in this process's memory: every operation is one step under one mutex
/// (S2), so it is exact within a process and shares nothing across processes or restarts.
///
/// Expired records (completed ones past their expiry, S8) are treated as absent on every
/// read and swept every 4096 claims once they expired more than
/// [`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS) (one hour) before both the sweeping
/// claim's `now` and this machine's wall clock, so a caller whose clock runs ahead, even by
/// a year, never drops other callers' live records (G1); records that are not completed
/// are never swept, and live records are never evicted (S8). Each record keeps its history
/// (U7) beside it. Waiting duplicates are woken by their key's change signal, not by
/// polling and not by other keys' changes (S5). Every future it returns is ready at once,
/// so sync tools can use it.
///
/// It counts its operations as round trips ([`Store::round_trips`]): one per claim, take
/// over, renew, mark unknown, complete, release, transition and read.
pub struct MemoryStore {
    state: Mutex<State>,
    round_trips: AtomicU64,
}

/// A record and its history.
struct Held {
    record: Record,
    history: StoredHistory,
}

#[derive(Default)]
struct State {
    records: HashMap<IdempotencyKey, Held>,
    /// One change signal per key that has waiters; dropped once nobody listens.
    signals: HashMap<IdempotencyKey, watch::Sender<()>>,
    claims_since_sweep: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore {
            state: Mutex::new(State::default()),
            round_trips: AtomicU64::new(0),
        }
    }

    /// How many records (live or not yet swept) the store holds.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts one operation ([`Store::round_trips`]).
    fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written record: every
        // mutation below is a single insert/remove/assignment.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the waiters of `key` (S5), and forgets its signal once nobody listens.
    fn notify(state: &mut State, key: &IdempotencyKey) {
        if let Some(signal) = state.signals.get(key) {
            signal.send_replace(());
            if signal.receiver_count() == 0 {
                state.signals.remove(key);
            }
        }
    }

    fn live<'s>(
        state: &'s mut State,
        key: &IdempotencyKey,
        now: Timestamp,
    ) -> Option<&'s mut Held> {
        state
            .records
            .get_mut(key)
            .filter(|held| held.record.is_live(now))
    }

    /// Applies `change` to the live record of `key` if `applies` says so, appends `entry`
    /// to its history and wakes the key's waiters; answers whether it applied.
    fn compare_and_set(
        &self,
        key: &IdempotencyKey,
        now: Timestamp,
        entry: &HistoryEntry,
        change: impl FnOnce(&mut Record) -> bool,
    ) -> bool {
        self.count();
        let mut state = self.lock();
        let changed = match Self::live(&mut state, key, now) {
            Some(held) => {
                let changed = change(&mut held.record);
                if changed {
                    held.history.append(entry);
                }
                changed
            }
            None => false,
        };
        if changed {
            Self::notify(&mut state, key);
        }
        changed
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("records", &self.len())
            .finish()
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

/// Whether `state` is in progress with `owner`.
fn owned_by(state: &RecordState, owner: OwnerToken) -> bool {
    matches!(state, RecordState::InProgress { owner: o, .. } if *o == owner)
}

impl Store for MemoryStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        self.count();
        let mut state = self.lock();
        state.claims_since_sweep += 1;
        if state.claims_since_sweep >= SWEEP_EVERY {
            state.claims_since_sweep = 0;
            if let Some(cutoff) = gc_cutoff(req.now) {
                state
                    .records
                    .retain(|_, held| !is_garbage(&held.record, cutoff));
            }
            state
                .signals
                .retain(|_, signal| signal.receiver_count() > 0);
        }
        let in_progress = RecordState::InProgress {
            owner: req.owner,
            lease_until: req.lease_until,
        };
        if let Some(held) = Self::live(&mut state, req.key, req.now) {
            // U6: a key decided not applied is claimed by a call with the same fingerprint.
            let reopens = matches!(held.record.state, RecordState::NotApplied { .. })
                && held.record.fingerprint == *req.fingerprint;
            if !reopens {
                return ready(Claim::Existing(held.record.clone()));
            }
            let fence = held.record.fence.saturating_add(1);
            held.record = Record {
                fingerprint: req.fingerprint.clone(),
                created_at: req.now,
                expires_at: req.expires_at,
                fence,
                state: in_progress,
                label: Some(req.label.clone()),
            };
            held.history
                .append(&HistoryEntry::claimed(req.now, fence, req.owner));
            Self::notify(&mut state, req.key);
            return ready(Claim::Acquired {
                fence,
                reopened: true,
            });
        }
        // F1: an expired record still held passes its fence on.
        let fence = state
            .records
            .get(req.key)
            .map_or(1, |expired| expired.record.fence.saturating_add(1));
        state.records.insert(
            req.key.clone(),
            Held {
                record: Record {
                    fingerprint: req.fingerprint.clone(),
                    created_at: req.now,
                    expires_at: req.expires_at,
                    fence,
                    state: in_progress,
                    label: Some(req.label.clone()),
                },
                history: StoredHistory::starting(&HistoryEntry::claimed(req.now, fence, req.owner)),
            },
        );
        ready(Claim::Acquired {
            fence,
            reopened: false,
        })
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let taken = self.compare_and_set(req.key, req.now, &req.entry, |record| {
            let unchanged = match record.state {
                RecordState::InProgress { owner, lease_until }
                | RecordState::OutcomeUnknown {
                    owner, lease_until, ..
                } => owner == req.seen_owner && lease_until == req.seen_lease_until,
                _ => false,
            };
            if unchanged {
                record.state = RecordState::InProgress {
                    owner: req.owner,
                    lease_until: req.lease_until,
                };
                record.created_at = req.now;
                record.expires_at = req.expires_at;
                record.fence = req.fence;
                record.label = Some(req.label.clone());
            }
            unchanged
        });
        ready(taken)
    }

    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        self.count();
        let mut state = self.lock();
        let renewed = match Self::live(&mut state, req.key, req.now) {
            Some(Held {
                record:
                    Record {
                        state: RecordState::InProgress { owner, lease_until },
                        expires_at,
                        ..
                    },
                ..
            }) if *owner == req.owner => {
                *lease_until = req.lease_until;
                *expires_at = (*expires_at).max(req.lease_until);
                true
            }
            _ => false,
        };
        ready(renewed)
    }

    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        let marked =
            self.compare_and_set(req.key, req.now, &req.entry, |record| match record.state {
                RecordState::InProgress { owner, lease_until } if owner == req.owner => {
                    record.state = RecordState::OutcomeUnknown {
                        owner,
                        lease_until,
                        since: req.since,
                    };
                    true
                }
                _ => false,
            });
        ready(marked)
    }

    fn complete<'a>(&'a self, req: CompleteRequest<'a>) -> StoreFuture<'a, Completion> {
        let saved = self.compare_and_set(req.key, req.now, &req.entry, |record| {
            if !owned_by(&record.state, req.owner) {
                return false;
            }
            record.state = RecordState::Completed {
                outcome: req.outcome.clone(),
                completed_at: req.now,
                source: req.source,
            };
            true
        });
        ready(if saved {
            Completion::Saved
        } else {
            Completion::Fenced
        })
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        self.count();
        let mut state = self.lock();
        let owned = state
            .records
            .get(key)
            .is_some_and(|held| owned_by(&held.record.state, owner));
        if owned {
            state.records.remove(key);
            Self::notify(&mut state, key);
        }
        ready(owned)
    }

    fn transition<'a>(&'a self, req: TransitionRequest<'a>) -> StoreFuture<'a, bool> {
        let moved = self.compare_and_set(req.key, req.now, &req.entry, |record| {
            let seen = record.fence == req.fence
                && match (req.seen, &record.state) {
                    (
                        Seen::InProgress { owner, lease_until },
                        RecordState::InProgress {
                            owner: o,
                            lease_until: l,
                        },
                    ) => owner == *o && lease_until.is_none_or(|lease| lease == *l),
                    (
                        Seen::OutcomeUnknown { owner, lease_until },
                        RecordState::OutcomeUnknown {
                            owner: o,
                            lease_until: l,
                            ..
                        },
                    ) => owner == *o && lease_until == *l,
                    (Seen::NotApplied, RecordState::NotApplied { .. })
                    | (Seen::AwaitingApproval, RecordState::AwaitingApproval { .. }) => true,
                    (Seen::Approved { until }, RecordState::Approved { until: u, .. }) => {
                        until == *u
                    }
                    _ => false,
                };
            if !seen {
                return false;
            }
            record.state = match (&req.target, &record.state) {
                (
                    Target::OutcomeUnknown { since },
                    RecordState::InProgress { owner, lease_until },
                ) => RecordState::OutcomeUnknown {
                    owner: *owner,
                    lease_until: *lease_until,
                    since: *since,
                },
                (Target::OutcomeUnknown { .. }, _) => return false,
                (Target::Completed { outcome, source }, _) => {
                    record.expires_at = record.expires_at.max(req.expires_at);
                    RecordState::Completed {
                        outcome: (*outcome).clone(),
                        completed_at: req.now,
                        source: *source,
                    }
                }
                (Target::NotApplied, _) => RecordState::NotApplied {
                    decided_at: req.now,
                },
                (
                    Target::AwaitingApproval,
                    RecordState::InProgress { .. } | RecordState::Approved { .. },
                ) => RecordState::AwaitingApproval { since: req.now },
                (Target::AwaitingApproval, _) => return false,
                (
                    Target::Approved { decided_at, until },
                    RecordState::AwaitingApproval { .. } | RecordState::InProgress { .. },
                ) => RecordState::Approved {
                    decided_at: *decided_at,
                    until: *until,
                },
                (Target::Approved { .. }, _) => return false,
                (
                    Target::InProgress {
                        owner,
                        lease_until,
                        fence,
                    },
                    RecordState::Approved { .. },
                ) => {
                    record.fence = *fence;
                    record.created_at = req.now;
                    record.expires_at = req.expires_at;
                    RecordState::InProgress {
                        owner: *owner,
                        lease_until: *lease_until,
                    }
                }
                (Target::InProgress { .. }, _) => return false,
            };
            true
        });
        ready(moved)
    }

    fn history<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<History>> {
        let mut state = self.lock();
        ready(Self::live(&mut state, key, now).map(|held| held.history.read()))
    }

    /// Scans every record in the map under its lock: O(records held), then sorts the
    /// matches. Fine for the memory store's sizes; listing a large one blocks its other
    /// operations for the scan.
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let state = self.lock();
        let matching = state
            .records
            .iter()
            .filter(|(key, held)| held.record.is_live(now) && query.matches(key, &held.record, now))
            .map(|(key, held)| KeyedRecord {
                key: key.clone(),
                record: held.record.clone(),
            })
            .collect();
        ready(ListPage::cut(matching, query))
    }

    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        let mut state = self.lock();
        let outcome = match state.records.get(key) {
            None => PurgeOutcome::Absent,
            // Expired: absent, and left to the sweep (it keeps the fence, F1), as the other
            // stores do.
            Some(held) if !held.record.is_live(now) => PurgeOutcome::Absent,
            Some(held) if !force && !completed(&held.record) => {
                PurgeOutcome::Kept(held.record.clone())
            }
            Some(_) => match state.records.remove(key) {
                Some(held) => PurgeOutcome::Deleted(held.record),
                None => PurgeOutcome::Absent,
            },
        };
        if matches!(outcome, PurgeOutcome::Deleted(_)) {
            Self::notify(&mut state, key);
        }
        ready(outcome)
    }

    /// Scans every record under the lock, as [`list`](Store::list) does.
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        let query = ListQuery {
            after: None,
            ..query.clone()
        };
        let mut state = self.lock();
        let mut counts = PurgeCounts::default();
        let mut deleted = Vec::new();
        state.records.retain(|key, held| {
            if !held.record.is_live(now) || !query.matches(key, &held.record, now) {
                return true;
            }
            if !force && !completed(&held.record) {
                counts.kept += 1;
                return true;
            }
            counts.deleted += 1;
            deleted.push(key.clone());
            false
        });
        for key in &deleted {
            Self::notify(&mut state, key);
        }
        ready(counts)
    }

    /// Scans every record under the lock.
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        let state = self.lock();
        let mut stats = StoreStats::default();
        for held in state.records.values().filter(|h| h.record.is_live(now)) {
            let record = &held.record;
            let tool = record.label.as_ref().map_or("", |l| l.tool.as_str());
            stats.add(tool, StateFilter::at(&record.state, now), 1);
        }
        ready(stats)
    }

    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        self.count();
        let mut state = self.lock();
        ready(Self::live(&mut state, key, now).map(|held| held.record.clone()))
    }

    fn watch(&self, key: &IdempotencyKey) -> Option<ChangeSignal> {
        let mut receiver = {
            let mut state = self.lock();
            let signal = state
                .signals
                .entry(key.clone())
                .or_insert_with(|| watch::Sender::new(()));
            signal.subscribe()
        };
        Some(Box::pin(async move {
            // An error means the store was dropped: nothing more will change.
            let _ = receiver.changed().await;
        }))
    }

    fn backend(&self) -> &'static str {
        "memory"
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.round_trips.load(Ordering::Relaxed))
    }
}

/// Whether `record` is completed (a purge without `force` deletes only those, I4).
fn completed(record: &Record) -> bool {
    matches!(record.state, RecordState::Completed { .. })
}

#[cfg(test)]
mod tests {
    use super::{MemoryStore, SWEEP_EVERY};
    use crate::clock::Timestamp;
    use crate::envelope::Envelope;
    use crate::key::{Fingerprint, IdempotencyKey};
    use crate::store::OutcomeSource;
    use crate::store::{
        Claim, ClaimRequest, CompleteRequest, Completion, HistoryEntry, HistoryEvent, OwnerToken,
        Store, GC_DRIFT_MARGIN_MS,
    };

    fn key(n: u64) -> IdempotencyKey {
        IdempotencyKey::from_hex(&format!("{n:064x}")).expect("64 hex digits")
    }

    /// Claims `SWEEP_EVERY` fresh keys (from `first` on) at `now`: one of them sweeps.
    fn sweep_at(store: &MemoryStore, first: u64, now: Timestamp) {
        let fingerprint = Fingerprint::from_hex(&"f".repeat(64)).expect("64 hex digits");
        for n in 0..SWEEP_EVERY {
            let k = key(first + n);
            let claim = pollster::block_on(store.claim(ClaimRequest {
                key: &k,
                fingerprint: &fingerprint,
                owner: OwnerToken::random(),
                now,
                lease_until: now,
                expires_at: Timestamp::from_millis(u64::MAX),
                label: &crate::RecordLabel::default(),
            }));
            assert!(matches!(claim, Ok(Claim::Acquired { .. })));
        }
    }

    // pins S8, G1: the sweep deletes a completed record only once it expired more than the
    // drift margin before the sweeping caller's `now`, and never one that is not completed
    // (in progress past its expiry)
    #[test]
    fn the_sweep_keeps_the_drift_margin() {
        let store = MemoryStore::new();
        let fingerprint = Fingerprint::from_hex(&"a".repeat(64)).expect("64 hex digits");
        let expires_at = Timestamp::from_millis(10_000_000);
        let owners = [OwnerToken::random(), OwnerToken::random()];
        for (n, owner) in [1, 2].into_iter().zip(owners) {
            let claim = pollster::block_on(store.claim(ClaimRequest {
                key: &key(n),
                fingerprint: &fingerprint,
                owner,
                now: Timestamp::from_millis(0),
                lease_until: Timestamp::from_millis(0),
                expires_at,
                label: &crate::RecordLabel::default(),
            }));
            assert!(matches!(claim, Ok(Claim::Acquired { .. })));
        }
        // Key 1 is completed; key 2 stays in progress (its owner died).
        let outcome = Envelope::from_stored(r#"{"ok":1,"version":1}"#);
        let completed_at = Timestamp::from_millis(1);
        let completion = pollster::block_on(store.complete(CompleteRequest {
            key: &key(1),
            owner: owners[0],
            outcome: &outcome,
            source: OutcomeSource::Executed,
            now: completed_at,
            entry: HistoryEntry::new(
                completed_at,
                HistoryEvent::Completed {
                    source: OutcomeSource::Executed,
                },
                1,
            ),
        }));
        assert_eq!(completion, Ok(Completion::Saved));
        let at_margin = Timestamp::from_millis(expires_at.as_millis() + GC_DRIFT_MARGIN_MS);
        sweep_at(&store, 100_000, at_margin);
        assert_eq!(
            store.len(),
            2 + SWEEP_EVERY as usize,
            "kept within the margin"
        );
        let past_margin = Timestamp::from_millis(at_margin.as_millis() + 1);
        sweep_at(&store, 200_000, past_margin);
        assert_eq!(
            store.len(),
            1 + 2 * SWEEP_EVERY as usize,
            "the completed record is collected past the margin"
        );
        let kept = pollster::block_on(store.read(&key(2), past_margin))
            .expect("read")
            .expect("a record in progress is never collected (G1) nor expires (S8)");
        assert!(kept.is_overdue(past_margin));
        assert_eq!(
            pollster::block_on(store.read(&key(1), past_margin)),
            Ok(None)
        );
    }
}
