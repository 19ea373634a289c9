//! The Lua scripts of the record operations: every store operation but a read and a
//! history read is one of them, run by `EVALSHA` as one atomic step on the server (S2).
//! Each record script starts with the [`record_prelude`]: the layout check, the fence
//! arithmetic, the history, the Redis key expiry and the index upkeep (see the
//! [module documentation](super)). The inspection scripts are in
//! [`index_scripts`](super::index_scripts).
//!
//! A record script takes the record's Redis key as `KEYS[1]` and the prefix's index as
//! `KEYS[2]`; instants and fences travel as 20 decimal digits
//! ([`number_arg`](super::record::number_arg)), owner tokens as 32 hex digits, optional
//! label fields as [`optional_arg`](super::record::optional_arg), history entries as their
//! JSON line ([`HistoryEntry::to_json`](crate::store::HistoryEntry::to_json)). A script
//! answers `1`/`0` for a compare-and-set that did / did not apply, or an error reply whose
//! code is [`CORRUPT_CODE`] for a record it refuses to touch. A script checks everything it
//! refuses a record for before its first write: Redis does not undo the writes of a script
//! that then answers an error.
//!
//! The index keys are derived from `KEYS[2]` inside the scripts (`:tool:<hex>`, `:tools`,
//! `:sweep`), and the sweep and the listing read other records' keys: the scripts need one
//! Redis server (or primary), not Redis Cluster.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::record::{FIELDS, MAX_NUMBER, READABLE};
use super::{GC_MARGIN_MS, GC_MAX_MS, REDIS_LAYOUT_VERSION};
use crate::store::HISTORY_LIMIT;

/// The code of the error reply of a script that refuses a record it cannot read (a newer
/// layout, a malformed fence or expiry): reported as
/// [`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt).
pub(super) const CORRUPT_CODE: &str = "IDEM_CORRUPT";

/// How many index members a claim that acquires its key checks for a record Redis deleted
/// (the sweep, see [`index_helpers`]).
const SWEEP_PER_CLAIM: u32 = 2;

/// The record fields as Lua arguments: `'v', 'fingerprint', …`.
pub(super) fn fields_lua() -> String {
    FIELDS.map(|f| format!("'{f}'")).join(", ")
}

/// The index upkeep shared by every script (Lua 5.1); expects `IDX` (the prefix's index,
/// `<prefix>index`) and `REC` (`<prefix>rec:`).
///
/// Every indexed record's key (64 hex digits) is a member of `IDX` and of its tool's set
/// `IDX:tool:<tool name in hex>` (a record without label: the tool `""`), scored by its
/// `created_at`; `IDX:tools` holds the tool names that have a set. `index(m, score, tool)`
/// adds a member, `unindex(m, tool)` removes it, `forget(m)` removes the member of a record
/// Redis already deleted (its tool unknown: from every tool's set). `sweep(k)` checks `k`
/// members of `IDX`, from a rotating position kept at `IDX:sweep`, and forgets those whose
/// record Redis deleted: so the index does not keep growing with records that expired and
/// were never listed.
pub(super) fn index_helpers() -> String {
    format!(
        r"
local MAX = '{MAX_NUMBER}'
local ONE = '00000000000000000001'
local TOOLS = IDX .. ':tools'
local function corrupt(why) return redis.error_reply('{CORRUPT_CODE} ' .. why) end
local function is_number(s)
  return s and #s == 20 and not string.find(s, '%D') and s <= MAX
end
local function hex(s)
  return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end))
end
local function tool_set(tool) return IDX .. ':tool:' .. hex(tool) end
local function index(m, score, tool)
  redis.call('ZADD', IDX, score, m)
  redis.call('ZADD', tool_set(tool), score, m)
  redis.call('SADD', TOOLS, tool)
end
local function unindex(m, tool)
  redis.call('ZREM', IDX, m)
  local set = tool_set(tool)
  redis.call('ZREM', set, m)
  if redis.call('EXISTS', set) == 0 then redis.call('SREM', TOOLS, tool) end
end
local function forget(m)
  redis.call('ZREM', IDX, m)
  for _, tool in ipairs(redis.call('SMEMBERS', TOOLS)) do unindex(m, tool) end
end
local function sweep(k)
  local at = tonumber(redis.call('GET', IDX .. ':sweep') or '0') or 0
  local ms = redis.call('ZRANGE', IDX, at, at + k - 1)
  local gone = 0
  for _, m in ipairs(ms) do
    if redis.call('EXISTS', REC .. m) == 0 then forget(m) gone = gone + 1 end
  end
  if #ms < k then at = 0 else at = at + #ms - gone end
  redis.call('SET', IDX .. ':sweep', at)
end
"
    )
}

/// Shared by every record script (Lua 5.1): [`index_helpers`], then the record's layout,
/// history and expiry.
///
/// `layout()` answers the record's layout version (`'1'` to `'5'`), `nil` when there is no
/// record, or `false` and why for a hash this build must not touch; the prelude refuses
/// such a hash, and one whose `history_len` or `history_dropped` is not a count, before the
/// script writes anything. `upgrade(v)` turns a layout-1 record into layout 2 (fence 1)
/// before a renewal writes it in place; `relayout(v)` makes any record this build's layout
/// (5; fence 1 for a layout-1 record) before a script appends to its history.
/// `label(first)` writes the label from `ARGV[first ..]`: tool, scope, namespace, key_args.
///
/// `append(entry)` appends one history line, dropping the oldest first while the history
/// holds `HISTORY_LIMIT` entries (counted in `history_dropped`, U7); `claimed(now, fence,
/// owner)` is the line of a claim, byte for byte what
/// [`HistoryEntry::claimed`](crate::store::HistoryEntry::claimed) writes: `plain(n)` turns
/// a stored 20-digit number into a JSON number (no leading zeros) with string patterns,
/// exactly, never through Lua's doubles.
///
/// `keep_for(now, deadline)` is how long (ms) Redis must keep a completed record: until
/// `deadline` plus the margin by the caller's clock `now` AND by the server's own clock
/// (`TIME`), so that neither a caller whose clock runs ahead nor one whose clock runs behind
/// makes Redis delete a record before the other clock sees it expired (G1); `nil` (keep
/// without expiry) past `GC_MAX`. `span` subtracts two 20-digit instants in two 10-digit
/// halves, exactly whenever the result is below 2^53 (and a result that is not lies beyond
/// `GC_MAX`). `expire` sets that deadline (a completion); `persist()` removes the key's
/// expiry (a record that is not completed never expires, S8).
fn record_prelude() -> String {
    let readable = READABLE.map(|v| format!("v == '{v}'")).join(" or ");
    let readable_list = READABLE.join(", ");
    format!(
        r#"
local K = KEYS[1]
local IDX = KEYS[2]
local REC = string.sub(K, 1, -65)
local M = string.sub(K, -64)
{helpers}
local LAYOUT = '{REDIS_LAYOUT_VERSION}'
local MARGIN = {GC_MARGIN_MS}
local GC_MAX = {GC_MAX_MS}
local HISTORY_LIMIT = {HISTORY_LIMIT}
local function layout()
  local v = redis.call('HGET', K, 'v')
  if {readable} then return v end
  if v then
    return false, 'layout version ' .. v .. ' is not one this build reads ({readable_list})'
  end
  if redis.call('EXISTS', K) == 1 then return false, 'no layout version' end
  return nil
end
local function is_count(s)
  return (not s) or (#s > 0 and #s <= 18 and not string.find(s, '%D'))
end
local function upgrade(v)
  if v == '1' then redis.call('HSET', K, 'v', '2', 'fence', ONE) end
end
local function relayout(v)
  if v == '1' then redis.call('HSET', K, 'fence', ONE) end
  redis.call('HSET', K, 'v', LAYOUT)
end
local function label(first)
  redis.call('HSET', K, 'tool', ARGV[first], 'scope', ARGV[first + 1])
  for i, field in ipairs({{'namespace', 'key_args'}}) do
    local arg = ARGV[first + 1 + i]
    if string.sub(arg, 1, 1) == '+' then redis.call('HSET', K, field, string.sub(arg, 2)) end
  end
end
local function next_fence(f)
  if f == MAX then return f end
  local i = 20
  while string.byte(f, i) == 57 do i = i - 1 end
  return string.sub(f, 1, i - 1) .. string.char(string.byte(f, i) + 1) .. string.rep('0', 20 - i)
end
local function later(a, b) if a > b then return a end return b end
local function plain(n) return string.match(n, '^0*(%d+)$') end
local function claimed(now, fence, owner)
  return '{{"at":' .. plain(now) .. ',"event":"claimed","fence":' .. plain(fence)
    .. ',"owner":"' .. owner .. '"}}'
end
local function append(entry)
  local h = redis.call('HMGET', K, 'history', 'history_len')
  local text, len, dropped = h[1] or '', tonumber(h[2] or '0'), 0
  while len >= HISTORY_LIMIT do
    local nl = string.find(text, '\n', 1, true)
    if not nl then len = 0 break end
    text = string.sub(text, nl + 1)
    len = len - 1
    dropped = dropped + 1
  end
  if dropped > 0 then redis.call('HINCRBY', K, 'history_dropped', dropped) end
  if len == 0 then text = entry else text = text .. '\n' .. entry end
  redis.call('HSET', K, 'history', text, 'history_len', len + 1)
end
local function span(a, b)
  local ms = (tonumber(string.sub(b, 1, 10)) - tonumber(string.sub(a, 1, 10))) * 1e10
    + (tonumber(string.sub(b, 11)) - tonumber(string.sub(a, 11)))
  if ms < 0 then return 0 end
  return ms
end
local function keep_for(now, deadline)
  local t = redis.call('TIME')
  local server_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local server_now = string.format('%020.0f', server_ms)
  local ms = math.max(span(now, deadline), span(server_now, deadline)) + MARGIN
  if ms > GC_MAX then return nil end
  return ms
end
local function persist() redis.call('PERSIST', K) end
local function expire(ms)
  if ms then redis.call('PEXPIRE', K, string.format('%.0f', ms)) else persist() end
end
local v, why = layout()
if v == false then return corrupt(why) end
if v then
  local h = redis.call('HMGET', K, 'history_len', 'history_dropped')
  if not (is_count(h[1]) and is_count(h[2])) then
    return corrupt('history_len or history_dropped is not a count')
  end
end
"#,
        helpers = index_helpers(),
    )
}

fn script(body: &str) -> Script {
    Script::new(&format!("{}{body}", record_prelude()))
}

/// Claim (insert-if-absent, S2, S8, F1, P1, I3, U6, U7). ARGV: now, fingerprint,
/// expires_at, owner, lease_until, tool, scope, namespace, key_args.
///
/// A record that is not completed is live whatever its expiry (S8): answered as it is
/// ([`FIELDS`], as `HMGET`; awaiting approval and approved included, A2, A4: those are
/// never acquired nor reopened by a claim), unless it is not applied (layout 4 or 5, no
/// approval field) with this fingerprint (U6): then it
/// becomes in progress, owned by the caller, with the next fence and the new label,
/// `created_at` and expiry, its history kept and the `claimed` entry appended, and the
/// script answers `reopened:<fence>`. A completed record live at `now` is answered as it
/// is. Otherwise (no record, or an expired completed one) the script writes a new
/// in-progress record, fence 1 or the expired record's + 1, whose history is the one
/// `claimed` entry, and answers the fence (20 digits). A claim that acquires indexes the
/// record (score: now), leaves it without a Redis expiry, and sweeps a few index members.
pub(super) static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r"
local fence = ONE
if v then
  local r = redis.call('HMGET', K, 'outcome', 'expires_at', 'decided_at', 'fingerprint',
    'fence', 'owner', 'approval_at', 'approval_until')
  if r[1] and r[2] and r[2] <= ARGV[1] then
    if v == '1' then fence = next_fence(ONE)
    else
      if not is_number(r[5]) then return corrupt('fence is not 20 decimal digits') end
      fence = next_fence(r[5])
    end
  elseif r[3] and not (r[6] or r[1] or r[7] or r[8]) and r[4] == ARGV[2]
    and (v == '4' or v == LAYOUT) then
    if not is_number(r[5]) then return corrupt('fence is not 20 decimal digits') end
    fence = next_fence(r[5])
    local old_tool = redis.call('HGET', K, 'tool') or ''
    redis.call('HDEL', K, 'decided_at', 'unknown_since', 'source', 'completed_at',
      'namespace', 'key_args')
    redis.call('HSET', K, 'v', LAYOUT, 'created_at', ARGV[1], 'expires_at', ARGV[3],
      'owner', ARGV[4], 'lease_until', ARGV[5], 'fence', fence)
    label(6)
    persist()
    if old_tool ~= ARGV[6] then unindex(M, old_tool) end
    index(M, ARGV[1], ARGV[6])
    append(claimed(ARGV[1], fence, ARGV[4]))
    sweep({SWEEP_PER_CLAIM})
    return 'reopened:' .. fence
  else
    return redis.call('HMGET', K, {fields})
  end
  local old_tool = redis.call('HGET', K, 'tool') or ''
  if old_tool ~= ARGV[6] then unindex(M, old_tool) end
end
redis.call('DEL', K)
redis.call('HSET', K, 'v', LAYOUT, 'fingerprint', ARGV[2], 'created_at', ARGV[1],
  'expires_at', ARGV[3], 'owner', ARGV[4], 'lease_until', ARGV[5], 'fence', fence,
  'history', claimed(ARGV[1], fence, ARGV[4]), 'history_len', 1)
label(6)
index(M, ARGV[1], ARGV[6])
sweep({SWEEP_PER_CLAIM})
return fence
",
        fields = fields_lua(),
    ))
});

/// Take over (compare-and-set on owner and lease deadline of a record in progress or with
/// an unknown outcome, S6, U2, F1, P1, I3, U7). ARGV: seen owner, seen lease_until, now,
/// owner, lease_until, expires_at, fence, tool, scope, namespace, key_args, entry.
/// Re-scores the record's index members (its `created_at` is now); no Redis expiry.
pub(super) static TAKE_OVER: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'lease_until', 'outcome', 'decided_at',
  'approval_at')
if r[1] == ARGV[1] and r[2] == ARGV[2] and not (r[3] or r[4] or r[5]) then
  local old_tool = redis.call('HGET', K, 'tool') or ''
  redis.call('HDEL', K, 'unknown_since', 'namespace', 'key_args')
  redis.call('HSET', K, 'v', LAYOUT, 'owner', ARGV[4], 'lease_until', ARGV[5],
    'created_at', ARGV[3], 'expires_at', ARGV[6], 'fence', ARGV[7])
  label(8)
  persist()
  if old_tool ~= ARGV[8] then unindex(M, old_tool) end
  index(M, ARGV[3], ARGV[8])
  append(ARGV[12])
  return 1
end
return 0
",
    )
});

/// Renew, the heartbeat (compare-and-set on the owner of an in-progress record, L1). ARGV:
/// owner, lease_until. Raises the expiry to the lease deadline; no Redis expiry, no
/// history entry.
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'expires_at', 'unknown_since', 'outcome',
  'decided_at', 'approval_at')
if r[1] == ARGV[1] and not (r[3] or r[4] or r[5] or r[6]) then
  if not is_number(r[2]) then return corrupt('expires_at is not 20 decimal digits') end
  upgrade(v)
  redis.call('HSET', K, 'lease_until', ARGV[2])
  if ARGV[2] > r[2] then redis.call('HSET', K, 'expires_at', ARGV[2]) end
  persist()
  return 1
end
return 0
",
    )
});

/// Mark the outcome unknown (compare-and-set on the owner of an in-progress record, U1,
/// U7). ARGV: owner, since, entry. Keeps the owner and the lease deadline; no Redis expiry.
pub(super) static MARK_UNKNOWN: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'unknown_since', 'outcome', 'decided_at',
  'approval_at')
if r[1] == ARGV[1] and not (r[2] or r[3] or r[4] or r[5]) then
  relayout(v)
  redis.call('HSET', K, 'unknown_since', ARGV[2])
  persist()
  append(ARGV[3])
  return 1
end
return 0
",
    )
});

/// Complete (compare-and-set on the owner of an in-progress record, S3, S6, U7). ARGV:
/// owner, now, outcome, source, entry. Sets the Redis expiry from the record's
/// `expires_at` ([`record_prelude`]'s `keep_for`).
pub(super) static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'expires_at', 'unknown_since', 'outcome',
  'decided_at', 'approval_at')
if r[1] == ARGV[1] and not (r[3] or r[4] or r[5] or r[6]) then
  if not is_number(r[2]) then return corrupt('expires_at is not 20 decimal digits') end
  relayout(v)
  redis.call('HDEL', K, 'owner', 'lease_until')
  redis.call('HSET', K, 'outcome', ARGV[3], 'completed_at', ARGV[2], 'source', ARGV[4])
  append(ARGV[5])
  expire(keep_for(ARGV[2], r[2]))
  return 1
end
return 0
",
    )
});

/// Release (compare-and-delete on the owner of an in-progress record, S4, S7); removes the
/// record's index members; the history goes with the record. ARGV: owner.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'unknown_since', 'outcome', 'decided_at',
  'approval_at')
if r[1] == ARGV[1] and not (r[2] or r[3] or r[4] or r[5]) then
  local tool = redis.call('HGET', K, 'tool') or ''
  redis.call('DEL', K)
  unindex(M, tool)
  return 1
end
return 0
",
    )
});

/// Transition (compare-and-set on the fence and the state the caller saw, U2, U6, U7,
/// A2–A5). ARGV: now, fence, seen state (`in_progress`, `outcome_unknown`, `not_applied`,
/// `awaiting_approval`, `approved`), seen owner (`''` for the states without one), seen
/// lease_until (`''`: any), target state (`outcome_unknown`, `completed`, `not_applied`,
/// `awaiting_approval`, `approved`, `in_progress`), since (target outcome unknown), outcome
/// and source (target completed), expires_at (target completed: the expiry is raised to
/// it; target in progress: the run's expiry), entry, then approval_at and approval_until
/// (target approved), owner, lease_until and fence (target in progress); an argument a
/// target does not use is `''`.
///
/// The seen state is read from the fields as the decoder does: an owner and a lease
/// without other state fields is in progress (outcome unknown with `unknown_since`);
/// `decided_at` alone not applied; `approval_at` alone awaiting approval, with
/// `approval_until` approved. A completed record is never moved. Outcome unknown only from
/// in progress, keeping owner and lease; completed clears owner, lease, the unknown mark,
/// the decision and the approval fields and sets the Redis expiry as a completion does;
/// not applied clears owner, lease, the unknown mark, any outcome and the approval fields
/// and sets `decided_at`; awaiting approval (only from in progress or approved) clears
/// owner, lease and `approval_until` and sets `approval_at = now`; approved (only from
/// awaiting approval or in progress) clears owner and lease and sets `approval_at` and
/// `approval_until`; in progress (only from approved) clears the approval fields and sets
/// owner, lease, fence, `created_at = now` and `expires_at`, and re-scores the record's
/// index members (I3). The fence is otherwise kept. Not completed: no Redis expiry.
pub(super) static TRANSITION: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if not v then return 0 end
local r = redis.call('HMGET', K, 'fence', 'owner', 'lease_until', 'unknown_since', 'outcome',
  'decided_at', 'expires_at', 'approval_at', 'approval_until')
if r[5] then return 0 end
local fence = r[1]
if v == '1' then fence = ONE end
if fence ~= ARGV[2] then return 0 end
local state
if r[2] and r[3] and not (r[6] or r[8] or r[9]) then
  if r[4] then state = 'outcome_unknown' else state = 'in_progress' end
elseif r[6] and not (r[2] or r[3] or r[4] or r[8] or r[9]) then state = 'not_applied'
elseif r[8] and not (r[2] or r[3] or r[4] or r[6]) then
  if r[9] then state = 'approved' else state = 'awaiting_approval' end
else return 0 end
if state ~= ARGV[3] then return 0 end
if (state == 'in_progress' or state == 'outcome_unknown')
  and (r[2] ~= ARGV[4] or (ARGV[5] ~= '' and r[3] ~= ARGV[5])) then
  return 0
end
if state == 'approved' and r[9] ~= ARGV[5] then return 0 end
local target = ARGV[6]
if target == 'outcome_unknown' then
  if state ~= 'in_progress' then return 0 end
  relayout(v)
  redis.call('HSET', K, 'unknown_since', ARGV[7])
  persist()
elseif target == 'completed' then
  if not is_number(r[7]) then return corrupt('expires_at is not 20 decimal digits') end
  local e = later(r[7], ARGV[10])
  relayout(v)
  redis.call('HDEL', K, 'owner', 'lease_until', 'unknown_since', 'decided_at', 'approval_at',
    'approval_until')
  redis.call('HSET', K, 'outcome', ARGV[8], 'completed_at', ARGV[1], 'source', ARGV[9],
    'expires_at', e)
  expire(keep_for(ARGV[1], e))
elseif target == 'not_applied' then
  relayout(v)
  redis.call('HDEL', K, 'owner', 'lease_until', 'unknown_since', 'outcome', 'completed_at',
    'source', 'approval_at', 'approval_until')
  redis.call('HSET', K, 'decided_at', ARGV[1])
  persist()
elseif target == 'awaiting_approval' then
  if state ~= 'in_progress' and state ~= 'approved' then return 0 end
  relayout(v)
  redis.call('HDEL', K, 'owner', 'lease_until', 'approval_until')
  redis.call('HSET', K, 'approval_at', ARGV[1])
  persist()
elseif target == 'approved' then
  if state ~= 'awaiting_approval' and state ~= 'in_progress' then return 0 end
  relayout(v)
  redis.call('HDEL', K, 'owner', 'lease_until')
  redis.call('HSET', K, 'approval_at', ARGV[12], 'approval_until', ARGV[13])
  persist()
elseif target == 'in_progress' then
  if state ~= 'approved' then return 0 end
  relayout(v)
  redis.call('HDEL', K, 'approval_at', 'approval_until')
  redis.call('HSET', K, 'owner', ARGV[14], 'lease_until', ARGV[15], 'fence', ARGV[16],
    'created_at', ARGV[1], 'expires_at', ARGV[10])
  persist()
  index(M, ARGV[1], redis.call('HGET', K, 'tool') or '')
else
  return redis.error_reply('IDEM_ARGUMENT unknown target ' .. target)
end
append(ARGV[11])
return 1
",
    )
});

/// Purge one key (I4). ARGV: now, force (`1` or `0`). Answers `{'absent'}` when there is no
/// live record (an expired completed record is left to Redis's expiry, G1, and keeps its
/// fence, F1; a member of a record Redis deleted is forgotten), `{'kept', fields}` for a
/// record that is not completed without force (whatever its expiry, S8), `{'deleted',
/// fields}` after deleting the record, its history and its index members; `fields` are
/// [`FIELDS`] as they were.
pub(super) static PURGE: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r"
if not v then
  forget(M)
  return {{'absent'}}
end
local o = redis.call('HMGET', K, 'outcome', 'expires_at')
if o[1] and not (o[2] and o[2] > ARGV[1]) then return {{'absent'}} end
local r = redis.call('HMGET', K, {fields})
if not o[1] and ARGV[2] ~= '1' then return {{'kept', r}} end
local tool = redis.call('HGET', K, 'tool') or ''
redis.call('DEL', K)
unindex(M, tool)
return {{'deleted', r}}
",
        fields = fields_lua(),
    ))
});

/// A compare-and-set script's answer: `Some(true)` for 1, `Some(false)` for 0.
pub(super) fn as_flag(value: &Value) -> Option<bool> {
    match value {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins S10, P4: the scripts read exactly the layouts the decoder reads (1 to 5), and
    // write this build's layout, history bound and margin
    #[test]
    fn scripts_know_the_layouts() {
        let prelude = record_prelude();
        assert!(prelude.contains(
            "if v == '1' or v == '2' or v == '3' or v == '4' or v == '5' then return v end"
        ));
        assert!(prelude.contains("is not one this build reads (1, 2, 3, 4, 5)"));
        assert!(prelude.contains(&format!("local LAYOUT = '{REDIS_LAYOUT_VERSION}'\n")));
        assert!(prelude.contains(&format!("local MARGIN = {GC_MARGIN_MS}\n")));
        assert!(prelude.contains(&format!("local MAX = '{MAX_NUMBER}'\n")));
        assert!(prelude.contains("local HISTORY_LIMIT = 32\n"));
        for script in [
            &CLAIM,
            &TAKE_OVER,
            &RENEW,
            &MARK_UNKNOWN,
            &COMPLETE,
            &RELEASE,
            &TRANSITION,
            &PURGE,
        ] {
            assert_eq!(script.get_hash().len(), 40);
        }
    }
}
