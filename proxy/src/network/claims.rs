//! One session per name on the network (`duplicate_login`): the Lua scripts that release and renew the
//! logins' claims of their names in Redis ([`super::Claim`]).

use crate::players::{Change, Update};

/// Deletes a name's claim only while it holds one login's value (`KEYS[1]` the claim, `ARGV[1]` the value): a
/// claim another login has taken since stays.
/// A key of another type there is left alone (`pcall`: its error answer is not the value).
pub(super) const RELEASE_CLAIM: &str =
    "if redis.pcall('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// Renews this instance's claims (`KEYS`: the claims; `ARGV`: their values, then `older` or `newer`, then the
/// lease in milliseconds). A claim that holds its value or nothing (Redis lost it) is set with a new lease.
/// Held by another login (one that got in while Redis had lost this claim, or whose kick did not arrive), the
/// `duplicate_login` policy decides by the logins' times (the values' third field; ties by value): `older`
/// (`refuse_new`) keeps the earlier login, `newer` (`kick_existing`) the later one. The claim is set when this
/// login wins; otherwise it is left to the holder. Returns, for each claim this instance lost, its position in
/// `KEYS` (1-based, as a string) and its holder (its first 257 bytes at most); the instance ends its own
/// session when it loses to a holder
/// signed by the network (Lua cannot check: [`super::entries::claim_signed`] does), and takes the claim back
/// from any other. A claim of another Redis type (not written by any instance) is replaced by this one and answered as
/// `w<position>` and an empty string, so that one bad key neither stops the script halfway (Redis would keep
/// what it had written and lose the rest) nor ends a session.
pub(super) const RENEW_CLAIMS: &str = r"
local keep = ARGV[#KEYS + 1]
local lease = ARGV[#KEYS + 2]
local function born(v)
  return tonumber(string.match(v, '^[^:]*:[^:]*:(%d+)') or '0') or 0
end
local lost = {}
for i, key in ipairs(KEYS) do
  local mine = ARGV[i]
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' and holder.err then
    redis.call('DEL', key)
    table.insert(lost, 'w' .. tostring(i))
    table.insert(lost, '')
    holder = false
  end
  local wins = holder == false or holder == mine
  if not wins then
    local a, b = born(mine), born(holder)
    if keep == 'older' then
      wins = a < b or (a == b and mine < holder)
    else
      wins = a > b or (a == b and mine > holder)
    end
  end
  if wins then
    redis.call('SET', key, mine, 'PX', lease)
  else
    table.insert(lost, tostring(i))
    table.insert(lost, string.sub(holder, 1, 257))
  end
end
return lost
";

/// A `refuse_new` login's claim of a name (`KEYS[1]` the claim, `ARGV[1]` the value, `ARGV[2]` the lease in
/// milliseconds), in one step: a key of another Redis type there (no instance wrote it) is deleted first, then
/// the claim is set unless another login holds the name. Returns `{claimed, replaced}`: 1 when set, else 0; 1
/// when a key of another type was deleted, else 0.
pub(super) const CLAIM_NEW: &str = r"
local replaced = 0
local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'string' and t ~= 'none' then
  redis.call('DEL', KEYS[1])
  replaced = 1
end
local set = redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX')
if set then return {1, replaced} else return {0, replaced} end
";

/// Bytes of a claim's holder read at most: 256 (a claim of the network is about 115; a longer value is not
/// one). Scripts answer with at most this many bytes and one more, so a longer one is seen as such.
pub(super) const MAX_CLAIM_READ: usize = 256;

/// Replaces a name's claim only while it holds what was read (`KEYS[1]` the claim, `ARGV[1]` what holds it, as
/// read: its first 257 bytes at most, `ARGV[2]` the new value, `ARGV[3]` the lease in milliseconds): 1 when
/// replaced, else 0.
pub(super) const REPLACE_CLAIM: &str = r"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'string' and string.sub(v, 1, 257) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Claims renewed by one [`RENEW_CLAIMS`] call at most: 1,000 (a larger table takes several calls in the
/// pipeline, so Redis is never busy with one for long).
pub(super) const CLAIMS_PER_CALL: usize = 1000;

/// The claim a change gives back, if any: a player who left, or a login that did not get in.
pub(super) fn release_of(update: Update) -> Option<(String, String)> {
    match update {
        Update { key, change: Change::Left | Change::NotIn, claim: Some(value) } => Some((key, value)),
        _ => None,
    }
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub(super) use crate::players::now_ms;
