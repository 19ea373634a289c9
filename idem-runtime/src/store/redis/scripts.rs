//! The Lua scripts: every store operation but a read is one of them, run by `EVALSHA` as
//! one atomic step on the server (S2). Each script starts with the [`prelude`]: the layout
//! check, the fence arithmetic and the garbage deadline (see the
//! [module documentation](super)).
//!
//! Every script takes the record's Redis key as `KEYS[1]`; instants and fences travel as 20
//! decimal digits ([`number_arg`](super::record::number_arg)), owner tokens as 32 hex digits.
//! A script answers `1`/`0` for a compare-and-set that did / did not apply, or an error
//! reply whose code is [`CORRUPT_CODE`] for a record it refuses to touch.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::record::{FIELDS, MAX_NUMBER, READABLE};
use super::{GC_MARGIN_MS, GC_MAX_MS, REDIS_LAYOUT_VERSION};

/// The code of the error reply of a script that refuses a record it cannot read (a newer
/// layout, a malformed fence or expiry): reported as
/// [`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt).
pub(super) const CORRUPT_CODE: &str = "IDEM_CORRUPT";

/// Shared by every script (Lua 5.1).
///
/// `layout()` answers the record's layout version (`'1'`, `'2'`), `nil` when there is no
/// record, or `false` and why for a hash this build must not touch. `upgrade(v)` turns a
/// layout-1 record into layout 2 (fence 1) before a script writes it in place.
///
/// `keep_for(now, deadline)` is how long (ms) Redis must keep the record: until `deadline`
/// plus the margin by the caller's clock `now` AND by the server's own clock (`TIME`), so
/// that neither a caller whose clock runs ahead nor one whose clock runs behind makes Redis
/// delete a record before the other clock sees it expired (G1); `nil` (keep without expiry)
/// past `GC_MAX`. `span` subtracts two 20-digit instants in two 10-digit halves, exactly
/// whenever the result is below 2^53 (and a result that is not lies beyond `GC_MAX`).
/// `expire` sets the deadline; `extend` only ever lengthens it.
fn prelude() -> String {
    let readable = READABLE.map(|v| format!("v == '{v}'")).join(" or ");
    let readable_list = READABLE.join(", ");
    format!(
        r"
local K = KEYS[1]
local LAYOUT = '{REDIS_LAYOUT_VERSION}'
local MARGIN = {GC_MARGIN_MS}
local GC_MAX = {GC_MAX_MS}
local MAX = '{MAX_NUMBER}'
local ONE = '00000000000000000001'
local function corrupt(why) return redis.error_reply('{CORRUPT_CODE} ' .. why) end
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
  if v == '1' then redis.call('HSET', K, 'v', LAYOUT, 'fence', ONE) end
end
local function is_number(s)
  return s and #s == 20 and not string.find(s, '%D') and s <= MAX
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
"
    )
}

fn script(body: &str) -> Script {
    Script::new(&format!("{}{body}", prelude()))
}

/// Claim (insert-if-absent, S2, S8, F1). ARGV: now, fingerprint, expires_at, owner,
/// lease_until. Answers the new claim's fence (20 digits) if it acquired the key, else the
/// live record's [`FIELDS`] (as `HMGET`).
pub(super) static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    let fields = FIELDS.map(|f| format!("'{f}'")).join(", ");
    script(&format!(
        r"
local e = redis.call('HGET', K, 'expires_at')
if v and ((not e) or e > ARGV[1]) then
  return redis.call('HMGET', K, {fields})
end
local fence = ONE
if v == '1' then fence = next_fence(ONE)
elseif v == '2' then
  local f = redis.call('HGET', K, 'fence')
  if not is_number(f) then return corrupt('fence is not 20 decimal digits') end
  fence = next_fence(f)
end
redis.call('DEL', K)
redis.call('HSET', K, 'v', LAYOUT, 'fingerprint', ARGV[2], 'created_at', ARGV[1],
  'expires_at', ARGV[3], 'owner', ARGV[4], 'lease_until', ARGV[5], 'fence', fence)
expire(keep_for(ARGV[1], later(ARGV[3], ARGV[5])))
return fence
"
    ))
});

/// Take over (compare-and-set on owner and lease deadline, S6, U2, F1). ARGV: seen owner,
/// seen lease_until, now, owner, lease_until, expires_at, fence.
pub(super) static TAKE_OVER: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'lease_until', 'expires_at')
if r[1] == ARGV[1] and r[2] == ARGV[2] and r[3] and r[3] > ARGV[3] then
  redis.call('HDEL', K, 'unknown_since')
  redis.call('HSET', K, 'v', LAYOUT, 'owner', ARGV[4], 'lease_until', ARGV[5],
    'created_at', ARGV[3], 'expires_at', ARGV[6], 'fence', ARGV[7])
  expire(keep_for(ARGV[3], later(ARGV[6], ARGV[5])))
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

/// Release (compare-and-delete on the owner of an in-progress record, S4, S7). ARGV: owner.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local r = redis.call('HMGET', K, 'owner', 'unknown_since')
if r[1] == ARGV[1] and not r[2] then
  redis.call('DEL', K)
  return 1
end
return 0
",
    )
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
        let prelude = prelude();
        assert!(prelude.contains("if v == '1' or v == '2' then return v end"));
        assert!(prelude.contains("is not one this build reads (1, 2)"));
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
        ] {
            assert_eq!(script.get_hash().len(), 40);
        }
    }
}
