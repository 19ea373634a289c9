//! Reading, listing, purging and counting records for the people who operate a store
//! (contract I3–I6): the shapes every backend answers in.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{Record, RecordState, StoreError, StoreErrorKind, StoreFuture};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::label::ScopePath;

/// The most records one [`Store::list`](super::Store::list) page returns.
pub const LIST_LIMIT_MAX: usize = 1000;

/// A record's state, as list filters and counts name it: what a call would meet (I7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StateFilter {
    /// [`RecordState::InProgress`] with a live lease.
    InProgress,
    /// [`RecordState::OutcomeUnknown`], or in progress with a lapsed lease (U1, I7).
    OutcomeUnknown,
    /// [`RecordState::Completed`].
    Completed,
    /// [`RecordState::NotApplied`] (U6).
    NotApplied,
    /// [`RecordState::AwaitingApproval`] (A2, A6).
    AwaitingApproval,
    /// [`RecordState::Approved`] (A3, A6), whatever its validity.
    Approved,
}

impl StateFilter {
    /// The state `state` counts as at `now` (I7): an in-progress record whose lease lapsed
    /// at or before `now` is [`OutcomeUnknown`](StateFilter::OutcomeUnknown).
    pub fn at(state: &RecordState, now: Timestamp) -> Self {
        match state {
            RecordState::InProgress { lease_until, .. } if *lease_until <= now => {
                StateFilter::OutcomeUnknown
            }
            RecordState::InProgress { .. } => StateFilter::InProgress,
            RecordState::OutcomeUnknown { .. } => StateFilter::OutcomeUnknown,
            RecordState::Completed { .. } => StateFilter::Completed,
            RecordState::NotApplied { .. } => StateFilter::NotApplied,
            RecordState::AwaitingApproval { .. } => StateFilter::AwaitingApproval,
            RecordState::Approved { .. } => StateFilter::Approved,
        }
    }

    /// `in_progress`, `outcome_unknown`, `completed`, `not_applied`, `awaiting_approval`
    /// or `approved`: the name in JSON output and in stores' state columns.
    pub fn as_str(self) -> &'static str {
        match self {
            StateFilter::InProgress => "in_progress",
            StateFilter::OutcomeUnknown => "outcome_unknown",
            StateFilter::Completed => "completed",
            StateFilter::NotApplied => "not_applied",
            StateFilter::AwaitingApproval => "awaiting_approval",
            StateFilter::Approved => "approved",
        }
    }
}

impl fmt::Display for StateFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Store::list`](super::Store::list) and
/// [`Store::purge_matching`](super::Store::purge_matching) select: live records (S8) that
/// match every filter given. Build with [`ListQuery::new`] and the `with_*`/field setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only records of this tool.
    pub tool: Option<String>,
    /// Only records derived in this namespace (K11); `None`: any namespace.
    pub namespace: Option<String>,
    /// Only records whose scope begins with these parts (I3); empty: any scope.
    pub scope: ScopePath,
    /// Only records in this state.
    pub state: Option<StateFilter>,
    /// Only records created at or after this instant.
    pub created_from: Option<Timestamp>,
    /// Only records created before this instant.
    pub created_before: Option<Timestamp>,
    /// At most this many records per page: 1 to [`LIST_LIMIT_MAX`].
    pub limit: usize,
    /// The page after this cursor (from [`ListPage::next`]); `None`: the first page.
    pub after: Option<ListCursor>,
    /// Oldest first (`created_at` ascending, then key ascending) instead of newest first:
    /// the order of a queue of records waiting for a decision (I7).
    pub oldest_first: bool,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            tool: None,
            namespace: None,
            scope: ScopePath::new(),
            state: None,
            created_from: None,
            created_before: None,
            limit: 100,
            after: None,
            oldest_first: false,
        }
    }
}

impl ListQuery {
    /// Every live record, 100 per page.
    pub fn new() -> Self {
        ListQuery::default()
    }

    /// Only records of `tool`.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Only records whose scope begins with `scope`'s parts.
    pub fn scope(mut self, scope: ScopePath) -> Self {
        self.scope = scope;
        self
    }

    /// Only records in `state`.
    pub fn state(mut self, state: StateFilter) -> Self {
        self.state = Some(state);
        self
    }

    /// At most `limit` records per page (clamped to 1..=[`LIST_LIMIT_MAX`] by stores).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Oldest first instead of newest first (I7).
    pub fn oldest_first(mut self) -> Self {
        self.oldest_first = true;
        self
    }

    /// The page after `cursor`.
    pub fn after(mut self, cursor: ListCursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// The page size a store uses: [`limit`](Self::limit) within 1..=[`LIST_LIMIT_MAX`].
    pub fn page_size(&self) -> usize {
        self.limit.clamp(1, LIST_LIMIT_MAX)
    }

    /// Whether `record` (of `key`, live at `now`) matches every filter, its state counted
    /// as at `now` (I7), and lies after the cursor. For stores that filter in process
    /// (memory, Redis).
    pub fn matches(&self, key: &IdempotencyKey, record: &Record, now: Timestamp) -> bool {
        let label = record.label.as_ref();
        let tool = label.map_or("", |l| l.tool.as_str());
        let namespace = label.and_then(|l| l.namespace.as_deref());
        let scope_ok = match label {
            Some(label) => label.scope.starts_with(&self.scope),
            None => self.scope.is_global(),
        };
        self.tool.as_deref().is_none_or(|t| t == tool)
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| Some(n) == namespace)
            && scope_ok
            && self
                .state
                .is_none_or(|s| s == StateFilter::at(&record.state, now))
            && self.created_from.is_none_or(|t| record.created_at >= t)
            && self.created_before.is_none_or(|t| record.created_at < t)
            && self.after.as_ref().is_none_or(|c| {
                if self.oldest_first {
                    c.is_after(record.created_at, key)
                } else {
                    c.is_before(record.created_at, key)
                }
            })
    }
}

/// Where a listing stopped: the `created_at` and key of the last record of a page. Pages
/// run newest first, so the next page holds records that sort before it (older, or as old
/// with a smaller key). Its text form (`<milliseconds>.<key>`) is what the CLI prints and
/// takes back; treat it as opaque.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    /// `created_at` of the page's last record.
    pub created_at: Timestamp,
    /// Key of the page's last record.
    pub key: IdempotencyKey,
}

impl ListCursor {
    /// The cursor after `record` of `key`.
    pub fn after(key: &IdempotencyKey, record: &Record) -> Self {
        ListCursor {
            created_at: record.created_at,
            key: key.clone(),
        }
    }

    /// Whether a record created at `created_at` with `key` comes after this cursor in
    /// listing order (newest first, then key descending).
    pub fn is_before(&self, created_at: Timestamp, key: &IdempotencyKey) -> bool {
        (created_at, key) < (self.created_at, &self.key)
    }

    /// Whether a record created at `created_at` with `key` comes after this cursor in
    /// oldest-first order ([`ListQuery::oldest_first`]).
    pub fn is_after(&self, created_at: Timestamp, key: &IdempotencyKey) -> bool {
        (created_at, key) > (self.created_at, &self.key)
    }
}

/// A cursor text that is not `<milliseconds>.<64 hex digits>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("list cursor {0:?} is not one a listing printed (<milliseconds>.<key>)")]
pub struct ListCursorError(pub String);

impl fmt::Display for ListCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_at.as_millis(), self.key)
    }
}

impl FromStr for ListCursor {
    type Err = ListCursorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || ListCursorError(text.to_owned());
        let (millis, key) = text.split_once('.').ok_or_else(bad)?;
        let millis = millis.parse::<u64>().map_err(|_| bad())?;
        let key = IdempotencyKey::from_hex(key).ok_or_else(bad)?;
        Ok(ListCursor {
            created_at: Timestamp::from_millis(millis),
            key,
        })
    }
}

/// One record and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedRecord {
    /// The idempotency key.
    pub key: IdempotencyKey,
    /// Its record.
    pub record: Record,
}

/// One page of a listing (I3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPage {
    /// The records, newest first (`created_at` descending, then key descending).
    pub records: Vec<KeyedRecord>,
    /// The cursor of the next page, `None` on the last page.
    pub next: Option<ListCursor>,
}

impl ListPage {
    /// A page of `records` already filtered and sorted, cut at `query`'s page size, with
    /// the cursor of the next page when more remain. For stores that list in process.
    pub fn cut(mut records: Vec<KeyedRecord>, query: &ListQuery) -> Self {
        sort_newest_first(&mut records);
        if query.oldest_first {
            records.reverse();
        }
        let size = query.page_size();
        let more = records.len() > size;
        records.truncate(size);
        let next = more
            .then(|| records.last().map(|r| ListCursor::after(&r.key, &r.record)))
            .flatten();
        ListPage { records, next }
    }
}

/// Sorts records in listing order: newest first, then key descending.
pub(crate) fn sort_newest_first(records: &mut [KeyedRecord]) {
    records.sort_by(|a, b| (b.record.created_at, &b.key).cmp(&(a.record.created_at, &a.key)));
}

/// What [`Store::purge`](super::Store::purge) did (I4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeOutcome {
    /// The live record was deleted; here it is as it was.
    Deleted(Record),
    /// The record is not completed (in progress, outcome unknown, not applied, awaiting
    /// approval, approved) and `force` was not given: kept.
    Kept(Record),
    /// No live record.
    Absent,
}

/// What [`Store::purge_matching`](super::Store::purge_matching) did (I4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PurgeCounts {
    /// Records deleted.
    pub deleted: u64,
    /// Records that are not completed, kept for want of `force`.
    pub kept: u64,
}

/// Live records by state (I5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StateCounts {
    /// Records in progress.
    pub in_progress: u64,
    /// Records whose outcome is unknown.
    pub outcome_unknown: u64,
    /// Completed records.
    pub completed: u64,
    /// Records decided not applied, waiting for their next call (U6).
    #[serde(default)]
    pub not_applied: u64,
    /// Records awaiting approval (A2).
    #[serde(default)]
    pub awaiting_approval: u64,
    /// Records approved and not yet run (A3).
    #[serde(default)]
    pub approved: u64,
}

impl StateCounts {
    /// Adds `n` records in `state`.
    pub fn add(&mut self, state: StateFilter, n: u64) {
        match state {
            StateFilter::InProgress => self.in_progress += n,
            StateFilter::OutcomeUnknown => self.outcome_unknown += n,
            StateFilter::Completed => self.completed += n,
            StateFilter::NotApplied => self.not_applied += n,
            StateFilter::AwaitingApproval => self.awaiting_approval += n,
            StateFilter::Approved => self.approved += n,
        }
    }

    /// All records counted.
    pub fn total(&self) -> u64 {
        self.in_progress
            + self.outcome_unknown
            + self.completed
            + self.not_applied
            + self.awaiting_approval
            + self.approved
    }
}

/// Live records by state and by tool (I5). Records written before labels existed count
/// under the tool `""`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoreStats {
    /// Every live record, by state.
    pub total: StateCounts,
    /// Per tool name, by state.
    pub by_tool: BTreeMap<String, StateCounts>,
}

impl StoreStats {
    /// Adds `n` live records of `tool` in `state`.
    pub fn add(&mut self, tool: &str, state: StateFilter, n: u64) {
        self.total.add(state, n);
        self.by_tool
            .entry(tool.to_owned())
            .or_default()
            .add(state, n);
    }
}

/// The answer of a store that does not provide an inspection operation (I6).
pub(super) fn unsupported<'a, T: Send + 'a>(
    backend: &'static str,
    what: &'static str,
) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Err(StoreError::new(
        backend,
        StoreErrorKind::Unsupported,
        format!("this store does not support {what}"),
    ))))
}
