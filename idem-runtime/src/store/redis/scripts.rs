//! The Lua scripts: every store operation but a read is one of them, run by `EVALSHA` as
//! one atomic step on the server (S2). Each record script starts with the
//! [`record_prelude`]: the layout check, the fence arithmetic, the garbage deadline and the
//! index upkeep (see the [module documentation](super)); the inspection scripts (a batch of
//! a listing, a batch of a re-index) start with the [`index_prelude`].
//!
//! A record script takes the record's Redis key as `KEYS[1]` and the prefix's index as
//! `KEYS[2]`; instants and fences travel as 20 decimal digits
//! ([`number_arg`](super::record::number_arg)), owner tokens as 32 hex digits, optional
//! label fields as [`optional_arg`](super::record::optional_arg). A script answers `1`/`0`
//! for a compare-and-set that did / did not apply, or an error reply whose code is
//! [`CORRUPT_CODE`] for a record it refuses to touch.
//!
//! The index keys are derived from `KEYS[2]` inside the scripts (`:tool:<hex>`, `:tools`,
//! `:sweep`), and the sweep and the listing read other records' keys: the scripts need one
//! Redis server (or primary), not Redis Cluster.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::record::{field_position, FIELDS, MAX_NUMBER, READABLE};
use super::{GC_MARGIN_MS, GC_MAX_MS, REDIS_LAYOUT_VERSION};

/// The code of the error reply of a script that refuses a record it cannot read (a newer
/// layout, a malformed fence or expiry): reported as
/// [`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt).
pub(super) const CORRUPT_CODE: &str = "IDEM_CORRUPT";

/// How many index members a claim that acquires its key checks for a record Redis deleted
/// (the sweep, see [`index_helpers`]).
const SWEEP_PER_CLAIM: u32 = 2;

/// The record fields as Lua arguments: `'v', 'fingerprint', …`.
fn fields_lua() -> String {
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
fn index_helpers() -> String {
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

/// Shared by every record script (Lua 5.1): [`index_helpers`], then the record's layout.
///
/// `layout()` answers the record's layout version (`'1'`, `'2'`, `'3'`), `nil` when there is
/// no record, or `false` and why for a hash this build must not touch. `upgrade(v)` turns a
/// layout-1 record into layout 2 (fence 1) before a renewal, a marking as unknown or a
/// completion writes it in place (only claims and takeovers write the label of layout 3).
/// `label(first)` writes the label from `ARGV[first ..]`: tool, scope, namespace, key_args.
///
/// `keep_for(now, deadline)` is how long (ms) Redis must keep the record: until `deadline`
/// plus the margin by the caller's clock `now` AND by the server's own clock (`TIME`), so
/// that neither a caller whose clock runs ahead nor one whose clock runs behind makes Redis
/// delete a record before the other clock sees it expired (G1); `nil` (keep without expiry)
/// past `GC_MAX`. `span` subtracts two 20-digit instants in two 10-digit halves, exactly
/// whenever the result is below 2^53 (and a result that is not lies beyond `GC_MAX`).
/// `expire` sets the deadline; `extend` only ever lengthens it.
fn record_prelude() -> String {
    let readable = READABLE.map(|v| format!("v == '{v}'")).join(" or ");
    let readable_list = READABLE.join(", ");
    format!(
        r"
local K = KEYS[1]
local IDX = KEYS[2]
local REC = string.sub(K, 1, -65)
local M = string.sub(K, -64)
{helpers}
local LAYOUT = '{REDIS_LAYOUT_VERSION}'
local MARGIN = {GC_MARGIN_MS}
local GC_MAX = {GC_MAX_MS}
local function layout()
  local v = redis.call('HGET', K, 'v')
  if {readable} then return v end
  if v then
    return false, 'layout version ' .. v .. ' is not one this build reads ({readable_list})'
  end
  if redis.call('EXISTS', K) == 1 then return false, 'no layout version' end
  return nil
end
local function upgrade(v)
  if v == '1' then redis.call('HSET', K, 'v', '2', 'fence', ONE) end
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
local function expire(ms)
  if ms then redis.call('PEXPIRE', K, string.format('%.0f', ms))
  else redis.call('PERSIST', K) end
end
local function extend(ms)
  local current = redis.call('PTTL', K)
  if current == -1 then return end
  if not ms then redis.call('PERSIST', K)
  elseif ms > current then redis.call('PEXPIRE', K, string.format('%.0f', ms)) end
end
local v, why = layout()
if v == false then return corrupt(why) end
",
        helpers = index_helpers(),
    )
}

/// Shared by the inspection scripts: `KEYS[1]` is the prefix's index, `ARGV[1]` the
/// records' key prefix (`<prefix>rec:`), then [`index_helpers`].
fn index_prelude() -> String {
    format!(
        r"
local IDX = KEYS[1]
local REC = ARGV[1]
{}",
        index_helpers()
    )
}

fn script(body: &str) -> Script {
    Script::new(&format!("{}{body}", record_prelude()))
}

/// Claim (insert-if-absent, S2, S8, F1, P1, I3). ARGV: now, fingerprint, expires_at, owner,
/// lease_until, tool, scope, namespace, key_args. Answers the new claim's fence (20 digits)
/// if it acquired the key, else the live record's [`FIELDS`] (as `HMGET`). A claim that
/// acquires indexes the record (score: now) and sweeps a few index members.
pub(super) static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r"
local e = redis.call('HGET', K, 'expires_at')
if v and ((not e) or e > ARGV[1]) then
  return redis.call('HMGET', K, {fields})
end
local fence = ONE
if v == '1' then fence = next_fence(ONE)
elseif v then
  local f = redis.call('HGET', K, 'fence')
  if not is_number(f) then return corrupt('fence is not 20 decimal digits') end
  fence = next_fence(f)
end
if v then
  local old_tool = redis.call('HGET', K, 'tool') or ''
  if old_tool ~= ARGV[6] then unindex(M, old_tool) end
end
redis.call('DEL', K)
redis.call('HSET', K, 'v', LAYOUT, 'fingerprint', ARGV[2], 'created_at', ARGV[1],
  'expires_at', ARGV[3], 'owner', ARGV[4], 'lease_until', ARGV[5], 'fence', fence)
label(6)
expire(keep_for(ARGV[1], later(ARGV[3], ARGV[5])))
index(M, ARGV[1], ARGV[6])
sweep({SWEEP_PER_CLAIM})
return fence
",
        fields = fields_lua(),
    ))
});

/// Take over (compare-and-set on owner and lease deadline, S6, U2, F1, P1, I3). ARGV: seen
/// owner, seen lease_until, now, owner, lease_until, expires_at, fence, tool, scope,
/// namespace, key_args. Re-scores the record's index members (its `created_at` is now).
pub(super) static TAKE_OVER: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'lease_until', 'expires_at')
if r[1] == ARGV[1] and r[2] == ARGV[2] and r[3] and r[3] > ARGV[3] then
  local old_tool = redis.call('HGET', K, 'tool') or ''
  redis.call('HDEL', K, 'unknown_since', 'namespace', 'key_args')
  redis.call('HSET', K, 'v', LAYOUT, 'owner', ARGV[4], 'lease_until', ARGV[5],
    'created_at', ARGV[3], 'expires_at', ARGV[6], 'fence', ARGV[7])
  label(8)
  expire(keep_for(ARGV[3], later(ARGV[6], ARGV[5])))
  if old_tool ~= ARGV[8] then unindex(M, old_tool) end
  index(M, ARGV[3], ARGV[8])
  return 1
end
return 0
",
    )
});

/// Renew, the heartbeat (compare-and-set on the owner of a live in-progress record, L1).
/// ARGV: owner, now, lease_until. Lengthens Redis's deadline to cover the new lease, never
/// shortens it.
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'expires_at', 'unknown_since')
if r[1] == ARGV[1] and r[2] and r[2] > ARGV[2] and not r[3] then
  if not is_number(r[2]) then return corrupt('expires_at is not 20 decimal digits') end
  upgrade(v)
  redis.call('HSET', K, 'lease_until', ARGV[3])
  if ARGV[3] > r[2] then redis.call('HSET', K, 'expires_at', ARGV[3]) end
  extend(keep_for(ARGV[2], later(r[2], ARGV[3])))
  return 1
end
return 0
",
    )
});

/// Mark the outcome unknown (compare-and-set on the owner of a live in-progress record,
/// U1). ARGV: owner, now, since. The lease deadline, and so Redis's deadline, is kept.
pub(super) static MARK_UNKNOWN: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'expires_at', 'unknown_since')
if r[1] == ARGV[1] and r[2] and r[2] > ARGV[2] and not r[3] then
  upgrade(v)
  redis.call('HSET', K, 'unknown_since', ARGV[3])
  return 1
end
return 0
",
    )
});

/// Complete (compare-and-set on the owner of a live in-progress record, S3, S6). ARGV:
/// owner, now, outcome.
pub(super) static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'expires_at', 'unknown_since')
if r[1] == ARGV[1] and r[2] and r[2] > ARGV[2] and not r[3] then
  upgrade(v)
  redis.call('HDEL', K, 'owner', 'lease_until')
  redis.call('HSET', K, 'outcome', ARGV[3], 'completed_at', ARGV[2])
  return 1
end
return 0
",
    )
});

/// Release (compare-and-delete on the owner of an in-progress record, S4, S7); removes the
/// record's index members. ARGV: owner.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'unknown_since')
if r[1] == ARGV[1] and not r[2] then
  local tool = redis.call('HGET', K, 'tool') or ''
  redis.call('DEL', K)
  unindex(M, tool)
  return 1
end
return 0
",
    )
});

/// Purge one key (I4). ARGV: now, force (`1` or `0`). Answers `{'absent'}` when there is no
/// live record (an expired record is left to Redis's expiry, G1, and keeps its fence, F1;
/// a member of a record Redis deleted is forgotten), `{'kept', fields}` for a record that is
/// not completed without force, `{'deleted', fields}` after deleting the record and its
/// index members; `fields` are [`FIELDS`] as they were.
pub(super) static PURGE: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        r"
if not v then
  forget(M)
  return {{'absent'}}
end
local e = redis.call('HGET', K, 'expires_at')
if not (e and e > ARGV[1]) then return {{'absent'}} end
local r = redis.call('HMGET', K, {fields})
if redis.call('HEXISTS', K, 'outcome') == 0 and ARGV[2] ~= '1' then return {{'kept', r}} end
local tool = redis.call('HGET', K, 'tool') or ''
redis.call('DEL', K)
unindex(M, tool)
return {{'deleted', r}}
",
        fields = fields_lua(),
    ))
});

/// One batch of a walk over a sorted set of the index (I3, I5), newest first. `KEYS[1]`:
/// the prefix's index; `KEYS[2]`: the set walked (the index or a tool's set). ARGV:
/// `<prefix>rec:`, the highest score (inclusive, or `+inf`), the member after which to
/// start among those of that score (`''`: from the first), the lowest score (inclusive, or
/// `-inf`), how many members, and `1` to leave outcomes out (counting needs no outcome).
///
/// Answers up to that many `{member, score, fields}` in (score, member) descending order,
/// `fields` as `HMGET` of [`FIELDS`]; `{member, score}` alone for a member whose record
/// Redis deleted, which it forgets (after the walk, so the walk's offsets stay valid). Fewer
/// than asked: the set holds no more in the range. Members of the cursor's own score are
/// skipped one by one (those that sort after the cursor's member): the cost of a cursor is
/// the number of records created in its millisecond. Members compare byte by byte (Lua's
/// `<` on strings follows the server's locale), as Redis orders them.
pub(super) static LIST_BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{prelude}
local SET = KEYS[2]
local n = tonumber(ARGV[5])
local out, gone = {{}}, {{}}
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local function take(m, score)
  local key = REC .. m
  if redis.call('EXISTS', key) == 0 then
    table.insert(gone, m)
    table.insert(out, {{m, score}})
    return
  end
  local r = redis.call('HMGET', key, {fields})
  if ARGV[6] == '1' and r[{outcome}] then r[{outcome}] = '' end
  table.insert(out, {{m, score, r}})
end
local max = ARGV[2]
if ARGV[3] ~= '' then
  local off = 0
  repeat
    local ms = redis.call('ZREVRANGEBYSCORE', SET, max, max, 'LIMIT', off, 100)
    off = off + #ms
    for _, m in ipairs(ms) do
      if before(m, ARGV[3]) and #out < n then take(m, max) end
    end
  until #ms < 100 or #out >= n
  max = '(' .. max
end
if #out < n then
  local ms = redis.call('ZREVRANGEBYSCORE', SET, max, ARGV[4], 'WITHSCORES', 'LIMIT', 0, n - #out)
  for i = 1, #ms, 2 do take(ms[i], ms[i + 1]) end
end
for _, m in ipairs(gone) do forget(m) end
return out
",
        prelude = index_prelude(),
        fields = fields_lua(),
        outcome = field_position("outcome"),
    ))
});

/// Re-index (I3, P4): adds the records named by `ARGV[2..]` (keys, 64 hex digits) that are
/// missing from the index, with their tool's set. `KEYS[1]`: the prefix's index; `ARGV[1]`:
/// `<prefix>rec:`. Skips keys that are not hashes of a layout this build reads or whose
/// `created_at` is not a stored instant. Answers how many members the index gained.
pub(super) static REINDEX: LazyLock<Script> = LazyLock::new(|| {
    let readable = READABLE.map(|v| format!("r[1] == '{v}'")).join(" or ");
    Script::new(&format!(
        r"{prelude}
local added = 0
for i = 2, #ARGV do
  local m = ARGV[i]
  local key = REC .. m
  if redis.call('TYPE', key)['ok'] == 'hash' then
    local r = redis.call('HMGET', key, 'v', 'created_at', 'tool')
    if ({readable}) and is_number(r[2]) then
      local tool = r[3] or ''
      added = added + redis.call('ZADD', IDX, 'NX', r[2], m)
      redis.call('ZADD', tool_set(tool), 'NX', r[2], m)
      redis.call('SADD', TOOLS, tool)
    end
  end
end
return added
",
        prelude = index_prelude(),
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

    // pins S10: the scripts read exactly the layouts the decoder reads, and write this
    // build's layout
    #[test]
    fn scripts_know_the_layouts() {
        let prelude = record_prelude();
        assert!(prelude.contains("if v == '1' or v == '2' or v == '3' then return v end"));
        assert!(prelude.contains("is not one this build reads (1, 2, 3)"));
        assert!(prelude.contains(&format!("local LAYOUT = '{REDIS_LAYOUT_VERSION}'\n")));
        assert!(prelude.contains(&format!("local MARGIN = {GC_MARGIN_MS}\n")));
        assert!(prelude.contains(&format!("local MAX = '{MAX_NUMBER}'\n")));
        for script in [
            &CLAIM,
            &TAKE_OVER,
            &RENEW,
            &MARK_UNKNOWN,
            &COMPLETE,
            &RELEASE,
            &PURGE,
            &LIST_BATCH,
            &REINDEX,
        ] {
            assert_eq!(script.get_hash().len(), 40);
        }
    }
}
