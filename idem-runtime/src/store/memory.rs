//! The in-memory store: one process, forgotten on restart.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use super::{
    gc_cutoff, is_garbage, ChangeSignal, Claim, ClaimRequest, Completion, KeyedRecord, ListPage,
    ListQuery, MarkUnknownRequest, OwnerToken, PurgeCounts, PurgeOutcome, Record, RecordState,
    RenewRequest, StateFilter, Store, StoreFuture, StoreStats, TakeoverRequest,
};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::IdempotencyKey;

/// How many claims between two sweeps of expired records.
const SWEEP_EVERY: u64 = 4096;

/// A [`Store`] in this process's memory: every operation is one step under one mutex
/// (S2), so it is exact within a process and shares nothing across processes or restarts.
///
/// Expired records are treated as absent on every read and swept every 4096 claims once
/// they (and, unless completed, their leases) expired more than
/// [`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS) (one hour) before both the sweeping
/// claim's `now` and this machine's wall clock, so a caller whose clock runs ahead, even by
/// a year, never drops other callers' live records (G1); live records are never evicted
/// (S8). Waiting duplicates are woken by their key's change signal, not by polling and not
/// by other keys' changes (S5). Every future it returns is ready at once, so sync tools can
/// use it.
///
/// It counts its operations as round trips ([`Store::round_trips`]): one per claim, take
/// over, renew, mark unknown, complete, release and read.
pub struct MemoryStore {
    state: Mutex<State>,
    round_trips: AtomicU64,
}

#[derive(Default)]
struct State {
    records: HashMap<IdempotencyKey, Record>,
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
    ) -> Option<&'s mut Record> {
        state
            .records
            .get_mut(key)
            .filter(|record| now < record.expires_at)
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
                    .retain(|_, record| !is_garbage(record, cutoff));
            }
            state
                .signals
                .retain(|_, signal| signal.receiver_count() > 0);
        }
        if let Some(record) = Self::live(&mut state, req.key, req.now) {
            return ready(Claim::Existing(record.clone()));
        }
        // F1: an expired record still held passes its fence on.
        let fence = state
            .records
            .get(req.key)
            .map_or(1, |expired| expired.fence.saturating_add(1));
        state.records.insert(
            req.key.clone(),
            Record {
                fingerprint: req.fingerprint.clone(),
                created_at: req.now,
                expires_at: req.expires_at,
                fence,
                state: RecordState::InProgress {
                    owner: req.owner,
                    lease_until: req.lease_until,
                },
                label: Some(req.label.clone()),
            },
        );
        ready(Claim::Acquired { fence })
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        self.count();
        let mut state = self.lock();
        let Some(record) = Self::live(&mut state, req.key, req.now) else {
            return ready(false);
        };
        let unchanged = match record.state {
            RecordState::InProgress { owner, lease_until }
            | RecordState::OutcomeUnknown {
                owner, lease_until, ..
            } => owner == req.seen_owner && lease_until == req.seen_lease_until,
            RecordState::Completed { .. } => false,
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
        ready(unchanged)
    }

    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        self.count();
        let mut state = self.lock();
        let renewed = match Self::live(&mut state, req.key, req.now) {
            Some(Record {
                state: RecordState::InProgress { owner, lease_until },
                expires_at,
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
        self.count();
        let mut state = self.lock();
        let marked = match Self::live(&mut state, req.key, req.now) {
            Some(record) => match record.state {
                RecordState::InProgress { owner, lease_until } if owner == req.owner => {
                    record.state = RecordState::OutcomeUnknown {
                        owner,
                        lease_until,
                        since: req.since,
                    };
                    true
                }
                _ => false,
            },
            None => false,
        };
        if marked {
            Self::notify(&mut state, req.key);
        }
        ready(marked)
    }

    fn complete<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        owner: OwnerToken,
        outcome: &'a Envelope,
        now: Timestamp,
    ) -> StoreFuture<'a, Completion> {
        self.count();
        let mut state = self.lock();
        let completion = match Self::live(&mut state, key, now) {
            Some(record) if matches!(record.state, RecordState::InProgress { owner: o, .. } if o == owner) =>
            {
                record.state = RecordState::Completed {
                    outcome: outcome.clone(),
                    completed_at: now,
                };
                Completion::Saved
            }
            _ => Completion::Fenced,
        };
        if completion == Completion::Saved {
            Self::notify(&mut state, key);
        }
        ready(completion)
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        self.count();
        let mut state = self.lock();
        let owned = matches!(
            state.records.get(key),
            Some(Record { state: RecordState::InProgress { owner: o, .. }, .. }) if *o == owner
        );
        if owned {
            state.records.remove(key);
            Self::notify(&mut state, key);
        }
        ready(owned)
    }

    /// Scans every record in the map under its lock: O(records held), then sorts the
    /// matches. Fine for the memory store's sizes; listing a large one blocks its other
    /// operations for the scan.
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let state = self.lock();
        let matching = state
            .records
            .iter()
            .filter(|(key, record)| now < record.expires_at && query.matches(key, record))
            .map(|(key, record)| KeyedRecord {
                key: key.clone(),
                record: record.clone(),
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
            Some(record) if now >= record.expires_at => PurgeOutcome::Absent,
            Some(record) if !force && StateFilter::of(&record.state) != StateFilter::Completed => {
                PurgeOutcome::Kept(record.clone())
            }
            Some(_) => match state.records.remove(key) {
                Some(record) => PurgeOutcome::Deleted(record),
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
        state.records.retain(|key, record| {
            if now >= record.expires_at || !query.matches(key, record) {
                return true;
            }
            if !force && StateFilter::of(&record.state) != StateFilter::Completed {
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
        for record in state.records.values().filter(|r| now < r.expires_at) {
            let tool = record.label.as_ref().map_or("", |l| l.tool.as_str());
            stats.add(tool, StateFilter::of(&record.state), 1);
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
        ready(Self::live(&mut state, key, now).cloned())
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

#[cfg(test)]
mod tests {
    use super::{MemoryStore, SWEEP_EVERY};
    use crate::clock::Timestamp;
    use crate::key::{Fingerprint, IdempotencyKey};
    use crate::store::{Claim, ClaimRequest, OwnerToken, Store, GC_DRIFT_MARGIN_MS};

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

    // pins S8: the sweep deletes a record only once it expired more than the drift margin
    // before the sweeping caller's `now`
    #[test]
    fn the_sweep_keeps_the_drift_margin() {
        let store = MemoryStore::new();
        let fingerprint = Fingerprint::from_hex(&"a".repeat(64)).expect("64 hex digits");
        let expires_at = Timestamp::from_millis(10_000_000);
        let claim = pollster::block_on(store.claim(ClaimRequest {
            key: &key(1),
            fingerprint: &fingerprint,
            owner: OwnerToken::random(),
            now: Timestamp::from_millis(0),
            lease_until: Timestamp::from_millis(0),
            expires_at,
            label: &crate::RecordLabel::default(),
        }));
        assert!(matches!(claim, Ok(Claim::Acquired { .. })));
        let at_margin = Timestamp::from_millis(expires_at.as_millis() + GC_DRIFT_MARGIN_MS);
        sweep_at(&store, 100_000, at_margin);
        assert_eq!(
            store.len(),
            1 + SWEEP_EVERY as usize,
            "kept within the margin"
        );
        sweep_at(
            &store,
            200_000,
            Timestamp::from_millis(at_margin.as_millis() + 1),
        );
        assert_eq!(
            store.len(),
            2 * SWEEP_EVERY as usize,
            "collected past the margin"
        );
    }
}
