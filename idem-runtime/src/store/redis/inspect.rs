//! Listing, purging, counting and re-indexing records on the Redis store (contract I3–I5,
//! P4), served by the prefix's index: the sorted sets described in the
//! [module documentation](super).

use redis::Value;

use super::record::{self, number_arg};
use super::RedisStore;
use super::{index_scripts, scripts};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::store::{
    KeyedRecord, ListPage, ListQuery, PurgeCounts, PurgeOutcome, Record, StateFilter, StoreError,
    StoreErrorKind, StoreStats, LIST_LIMIT_MAX,
};

/// Index members per batch of a count, a purge by filter and a re-index (`SCAN` count).
const WALK_BATCH: usize = 1000;

/// Fewest index members per batch of a listing: a page of `limit` records reads batches
/// of `max(limit + 1, 100)` members (at most 1001).
const LIST_BATCH_MIN: usize = 100;

/// Where a walk over an index set resumes: at scores from `start` on (inclusive; `+inf`
/// newest first, `-inf` oldest first), and among the members scored `start`, those that
/// come after `after` in walk order (`""`: all of them).
#[derive(Debug, Clone)]
struct Position {
    start: String,
    after: String,
}

/// One member of a batch: its key, its score as Redis wrote it, and its record (`None`:
/// Redis had deleted it, and the batch forgot the member).
struct Member {
    key: IdempotencyKey,
    score: String,
    record: Option<Record>,
}

/// A walk over the index set that serves `query`, newest first (or oldest first with
/// [`ListQuery::oldest_first`]), one batch at a time.
struct Walk<'q> {
    store: &'q RedisStore,
    query: &'q ListQuery,
    now: Timestamp,
    set: String,
    /// The score to end at (inclusive).
    end: String,
    next: Option<Position>,
    batch: usize,
    light: bool,
}

impl<'q> Walk<'q> {
    /// A walk over the set of `query`'s tool (or the whole index), from its cursor (or the
    /// end of its `created_at` range it starts from) to the other end of that range.
    /// `light`: read records without their outcome (for counting and purging).
    fn new(
        store: &'q RedisStore,
        query: &'q ListQuery,
        now: Timestamp,
        batch: usize,
        light: bool,
    ) -> Self {
        let set = match &query.tool {
            Some(tool) => store.tool_index_key(tool),
            None => store.index_key(),
        };
        // The highest score in range (inclusive), `None` when nothing is.
        let highest = match query.created_before {
            None => Some("+inf".to_owned()),
            Some(before) => before.as_millis().checked_sub(1).map(|max| max.to_string()),
        };
        let lowest = query
            .created_from
            .map_or_else(|| "-inf".to_owned(), |from| from.as_millis().to_string());
        let from = |start: String| Position {
            start,
            after: String::new(),
        };
        let cursor = query.after.as_ref().map(|cursor| Position {
            start: cursor.created_at.as_millis().to_string(),
            after: cursor.key.as_str().to_owned(),
        });
        let (next, end) = if query.oldest_first {
            let next = match &query.after {
                Some(c) if query.created_from.is_none_or(|f| c.created_at >= f) => cursor,
                _ => Some(from(lowest)),
            };
            match highest {
                Some(end) => (next, end),
                // Nothing in range: an empty walk.
                None => (None, String::new()),
            }
        } else {
            let next = match &query.after {
                Some(c) if query.created_before.is_none_or(|b| c.created_at < b) => cursor,
                _ => highest.map(from),
            };
            (next, lowest)
        };
        Walk {
            store,
            query,
            now,
            set,
            end,
            next,
            batch,
            light,
        }
    }

    /// The live records of the next batch that match the query at `now` (their state as
    /// at `now`, I7); `None` once the set holds no more in range.
    async fn next_batch(&mut self) -> Result<Option<Vec<KeyedRecord>>, StoreError> {
        let Some(position) = self.next.take() else {
            return Ok(None);
        };
        let direction = if self.query.oldest_first {
            "asc"
        } else {
            "desc"
        };
        let members = self
            .store
            .batch(
                &self.set, &position, &self.end, direction, self.batch, self.light,
            )
            .await?;
        if members.len() >= self.batch {
            self.next = members.last().map(|last| Position {
                start: last.score.clone(),
                after: last.key.as_str().to_owned(),
            });
        }
        Ok(Some(
            members
                .into_iter()
                .filter_map(|m| {
                    let record = m.record?;
                    (record.is_live(self.now) && self.query.matches(&m.key, &record, self.now))
                        .then_some(KeyedRecord { key: m.key, record })
                })
                .collect(),
        ))
    }
}

impl RedisStore {
    /// The prefix's index: `<prefix>index`, a sorted set of every indexed record's key
    /// scored by its `created_at`.
    pub fn index_key(&self) -> String {
        format!("{}index", self.prefix)
    }

    /// The index of one tool's records: `<prefix>index:tool:<the tool name's UTF-8 bytes in
    /// lower-case hex>` (hex, so that no tool name can make it another key's name).
    pub fn tool_index_key(&self, tool: &str) -> String {
        let hex: String = tool.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}index:tool:{hex}", self.prefix)
    }

    /// One `EVALSHA` of [`index_scripts::LIST_BATCH`]: up to `count` members of `set` from
    /// `position` to `end` in `direction` (`desc` or `asc`), with their records.
    async fn batch(
        &self,
        set: &str,
        position: &Position,
        end: &str,
        direction: &str,
        count: usize,
        light: bool,
    ) -> Result<Vec<Member>, StoreError> {
        let args = vec![
            format!("{}rec:", self.prefix),
            position.start.clone(),
            position.after.clone(),
            end.to_owned(),
            count.to_string(),
            if light { "1" } else { "0" }.to_owned(),
            direction.to_owned(),
        ];
        let fail = self.failure_at("list", format!("index {set}"));
        let keys = vec![self.index_key(), set.to_owned()];
        let reply = self
            .eval_on(&index_scripts::LIST_BATCH, keys, args, fail)
            .await?;
        let bad = |what: &str| self.index_corrupt(set, what);
        let Value::Array(items) = reply else {
            return Err(bad("unexpected reply shape"));
        };
        items
            .into_iter()
            .map(|item| {
                let Value::Array(parts) = item else {
                    return Err(bad("unexpected member shape"));
                };
                let mut parts = parts.into_iter();
                let member = parts.next().and_then(|v| text(&v)).unwrap_or_default();
                let key = IdempotencyKey::from_hex(&member)
                    .ok_or_else(|| bad(&format!("member {member:?} is not a key")))?;
                let score = parts
                    .next()
                    .and_then(|v| text(&v))
                    .ok_or_else(|| bad("a member without a score"))?;
                let record = match parts.next() {
                    None => None,
                    Some(fields) => Some(
                        record::decode(fields)
                            .map_err(|e| self.corrupt(&key, &e))?
                            .ok_or_else(|| self.corrupt(&key, "an empty record"))?,
                    ),
                };
                Ok(Member { key, score, record })
            })
            .collect()
    }

    /// One page of the live records matching `query` (I3).
    pub(super) async fn list_page(
        &self,
        query: &ListQuery,
        now: Timestamp,
    ) -> Result<ListPage, StoreError> {
        let want = query.page_size() + 1;
        let batch = want.clamp(LIST_BATCH_MIN, LIST_LIMIT_MAX + 1);
        let mut walk = Walk::new(self, query, now, batch, false);
        let mut found = Vec::with_capacity(want);
        while found.len() < want {
            let Some(records) = walk.next_batch().await? else {
                break;
            };
            found.extend(records);
        }
        found.truncate(want);
        Ok(ListPage::cut(found, query))
    }

    /// Purges `key` (I4): one `EVALSHA` of [`scripts::PURGE`].
    pub(super) async fn purge_key(
        &self,
        key: &IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> Result<PurgeOutcome, StoreError> {
        let args = vec![
            number_arg(now.as_millis()),
            if force { "1" } else { "0" }.to_owned(),
        ];
        let reply = self.eval("purge", &scripts::PURGE, key, args).await?;
        let bad = |what: &str| self.corrupt(key, what);
        let Value::Array(parts) = reply else {
            return Err(bad("unexpected purge reply"));
        };
        let mut parts = parts.into_iter();
        let status = parts.next().and_then(|v| text(&v)).unwrap_or_default();
        let record = |fields: Option<Value>| -> Result<Record, StoreError> {
            let fields = fields.ok_or_else(|| bad("a purge reply without the record"))?;
            record::decode(fields)
                .map_err(|e| bad(&e))?
                .ok_or_else(|| bad("an empty record"))
        };
        match status.as_str() {
            "absent" => Ok(PurgeOutcome::Absent),
            "kept" => Ok(PurgeOutcome::Kept(record(parts.next())?)),
            "deleted" => Ok(PurgeOutcome::Deleted(record(parts.next())?)),
            _ => Err(bad("unexpected purge reply")),
        }
    }

    /// Purges every live record matching `query` (its limit and cursor ignored): walks the
    /// index as a listing does, then one [`purge_key`](Self::purge_key) per match.
    pub(super) async fn purge_all(
        &self,
        query: &ListQuery,
        force: bool,
        now: Timestamp,
    ) -> Result<PurgeCounts, StoreError> {
        let query = ListQuery {
            after: None,
            ..query.clone()
        };
        let mut walk = Walk::new(self, &query, now, WALK_BATCH, true);
        let mut counts = PurgeCounts::default();
        while let Some(records) = walk.next_batch().await? {
            for KeyedRecord { key, .. } in records {
                match self.purge_key(&key, force, now).await? {
                    PurgeOutcome::Deleted(_) => counts.deleted += 1,
                    PurgeOutcome::Kept(_) => counts.kept += 1,
                    PurgeOutcome::Absent => {}
                }
            }
        }
        Ok(counts)
    }

    /// Counts the live records (I5), each in its state at `now` (I7): walks the whole index.
    pub(super) async fn count(&self, now: Timestamp) -> Result<StoreStats, StoreError> {
        let query = ListQuery::new();
        let mut walk = Walk::new(self, &query, now, WALK_BATCH, true);
        let mut stats = StoreStats::default();
        while let Some(records) = walk.next_batch().await? {
            for KeyedRecord { record, .. } in records {
                let tool = record.label.as_ref().map_or("", |l| l.tool.as_str());
                stats.add(tool, StateFilter::at(&record.state, now), 1);
            }
        }
        Ok(stats)
    }

    /// Adds to the index every record under this store's prefix that it lacks, removes the
    /// Redis expiry of every record that is not completed, and answers how many members the
    /// index gained (P4, I3, G1).
    ///
    /// Records written by a build of layout 1 or 2 (before the index existed) are not in
    /// the index until they are claimed over or taken over, so [`list`](crate::Store::list),
    /// [`purge_matching`](crate::Store::purge_matching) and
    /// [`stats`](crate::Store::stats) do not see them (reads, replays and
    /// [`purge`](crate::Store::purge) of a key do). Records written by a build of layouts 1
    /// to 3 that are not completed (in progress, outcome unknown) carry the Redis expiry that
    /// build set, which would let Redis delete an undecided record (G1, U2) until a write of
    /// this build removes it. Run this once after upgrading every process sharing the prefix;
    /// running it again adds nothing that is indexed already.
    ///
    /// Cost: `SCAN … MATCH <prefix>rec:* COUNT 1000` over the whole key space of the
    /// database (one round trip per `SCAN` call, each examining about 1000 keys of any
    /// prefix), plus one `EVALSHA` per `SCAN` reply that names records; each record costs
    /// O(log N). Records live or expired alike are added (an expired record's member is
    /// forgotten once Redis deletes the record). Keys of a type other than a hash, of a
    /// layout this build does not read, or without a valid `created_at` are skipped.
    ///
    /// # Errors
    /// [`StoreErrorKind::Unavailable`] when the server
    /// cannot be reached, [`StoreErrorKind::Unsupported`] outside a tokio runtime.
    pub async fn reindex(&self) -> Result<u64, StoreError> {
        let store = self.clone();
        self.run(async move { store.reindex_all().await }, None)
            .await
    }

    async fn reindex_all(&self) -> Result<u64, StoreError> {
        let records = format!("{}rec:", self.prefix);
        let pattern = format!("{}*", glob_escape(&records));
        let index = self.index_key();
        let bad = |what: &str| self.index_corrupt(&index, what);
        let mut cursor = "0".to_owned();
        let mut added = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(&cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(WALK_BATCH);
            let reply = self
                .command(scan, self.failure_at("reindex", format!("keys {pattern}")))
                .await?;
            let Value::Array(parts) = reply else {
                return Err(bad("unexpected SCAN reply"));
            };
            let mut parts = parts.into_iter();
            cursor = parts
                .next()
                .and_then(|v| text(&v))
                .ok_or_else(|| bad("unexpected SCAN cursor"))?;
            let names = match parts.next() {
                Some(Value::Array(names)) => names,
                _ => return Err(bad("unexpected SCAN reply")),
            };
            let members: Vec<String> = names
                .iter()
                .filter_map(text)
                .filter_map(|name| {
                    let member = name.strip_prefix(&records)?;
                    IdempotencyKey::from_hex(member).map(|_| member.to_owned())
                })
                .collect();
            if !members.is_empty() {
                let mut args = vec![records.clone()];
                args.extend(members);
                let fail = self.failure_at("reindex", format!("index {index}"));
                match self
                    .eval_on(&index_scripts::REINDEX, vec![index.clone()], args, fail)
                    .await?
                {
                    Value::Int(n) => added += u64::try_from(n).unwrap_or_default(),
                    _ => return Err(bad("unexpected reindex reply")),
                }
            }
            if cursor == "0" {
                return Ok(added);
            }
        }
    }

    /// A [`StoreErrorKind::Corrupt`] error about the index set `set`.
    fn index_corrupt(&self, set: &str, what: &str) -> StoreError {
        StoreError::new(
            super::BACKEND,
            StoreErrorKind::Corrupt,
            format!("index {set} at {}: {what}", self.url),
        )
    }
}

/// A reply's text: a bulk or simple string, or a number (a score in RESP3).
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

/// `text` with the glob characters of `SCAN … MATCH` (`*`, `?`, `[`, `]`, `\`) escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::glob_escape;

    // pins I3, P4: a prefix with glob characters matches only itself in SCAN
    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("idem:rec:"), "idem:rec:");
        assert_eq!(glob_escape(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
    }
}
