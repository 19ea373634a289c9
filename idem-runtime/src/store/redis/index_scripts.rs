//! The Lua scripts of the inspection operations (I3–I5, P4): a batch of a walk over the
//! index, a batch of a re-index. Each starts with the [`index_prelude`]; see the
//! [module documentation](super) for the index.

use std::sync::LazyLock;

use redis::Script;

use super::record::{field_position, READABLE};
use super::scripts::{fields_lua, index_helpers};

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

/// One batch of a walk over a sorted set of the index (I3, I5, I7), newest first or oldest
/// first. `KEYS[1]`: the prefix's index; `KEYS[2]`: the set walked (the index or a tool's
/// set). ARGV: `<prefix>rec:`, the score to start from (inclusive; `+inf` newest first,
/// `-inf` oldest first), the member after which to start among those of that score (`''`:
/// from the first), the score to end at (inclusive; `-inf` newest first, `+inf` oldest
/// first), how many members, `1` to leave outcomes out (counting needs no outcome), and the
/// direction (`desc`: newest first, `asc`: oldest first).
///
/// Answers up to that many `{member, score, fields}` in walk order ((score, member)
/// descending, or ascending), `fields` as `HMGET` of [`FIELDS`](super::record::FIELDS);
/// `{member, score}` alone for a member whose record Redis deleted, which it forgets (after
/// the walk, so the walk's offsets stay valid). Fewer than asked: the set holds no more in
/// the range. Members of the cursor's own score are skipped one by one (those that come
/// before the cursor's member in walk order): the cost of a cursor is the number of records
/// created in its millisecond. Members compare byte by byte (Lua's `<` on strings follows
/// the server's locale), as Redis orders them.
pub(super) static LIST_BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{prelude}
local SET = KEYS[2]
local n = tonumber(ARGV[5])
local asc = ARGV[7] == 'asc'
local RANGE = 'ZREVRANGEBYSCORE'
if asc then RANGE = 'ZRANGEBYSCORE' end
local out, gone = {{}}, {{}}
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local function comes_after(m, cursor)
  if asc then return before(cursor, m) end
  return before(m, cursor)
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
local start = ARGV[2]
if ARGV[3] ~= '' then
  local off = 0
  repeat
    local ms = redis.call(RANGE, SET, start, start, 'LIMIT', off, 100)
    off = off + #ms
    for _, m in ipairs(ms) do
      if comes_after(m, ARGV[3]) and #out < n then take(m, start) end
    end
  until #ms < 100 or #out >= n
  start = '(' .. start
end
if #out < n then
  local ms = redis.call(RANGE, SET, start, ARGV[4], 'WITHSCORES', 'LIMIT', 0, n - #out)
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
/// missing from the index, with their tool's set, and removes the Redis expiry of those
/// that are not completed (in progress, outcome unknown, not applied, awaiting approval,
/// approved: a build before layout 4 set one on every record; a record that is not
/// completed never expires, S8, G1). `KEYS[1]`: the prefix's index; `ARGV[1]`:
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
    local r = redis.call('HMGET', key, 'v', 'created_at', 'tool', 'outcome')
    if ({readable}) and is_number(r[2]) then
      local tool = r[3] or ''
      added = added + redis.call('ZADD', IDX, 'NX', r[2], m)
      redis.call('ZADD', tool_set(tool), 'NX', r[2], m)
      redis.call('SADD', TOOLS, tool)
      if not r[4] then redis.call('PERSIST', key) end
    end
  end
end
return added
",
        prelude = index_prelude(),
    ))
});
