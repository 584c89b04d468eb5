package redisstore

import "github.com/redis/go-redis/v9"

// Each script touches the keys of one run only, all tagged {runID}, so it
// runs on a single Redis Cluster slot, except on one Redis node (or
// Sentinel), where the scripts that change a run's status move its index
// entries too (indexLua): their keys are named inside the script, which
// only a node that holds every slot allows. In a Cluster the index
// entries move in a second call (indexScript). The other global keys
// (workflows, due) are written by separate calls and can be repaired; the
// one script on a global key, claimDueScript, touches that key alone.

// Status codes returned by the write scripts; a non-negative reply is the
// run's new revision.
const (
	codeNotFound         = -1
	codeCheckpointExists = -2
	codeConflict         = -3
	// codeIndexArgs: the write changes the run's status and was sent
	// without the index arguments (lightLua); nothing was written.
	codeIndexArgs = -5
)

// indexLua keeps a run's index entries (index.go) in the write that
// changes its status. index(run key, old, a) reads ARGV[a..a+5]: the
// run's new status, the index prefix of its shard, its id, its workflow,
// its creation and the time of this write (unix ms). The run hash's field
// st holds the status the index has, which the caller read (old, false
// when missing) with the fields it reads anyway, so that a write that
// keeps the status costs no call; when the new one differs, st is set
// and the entries move. With an empty prefix (Redis Cluster, where the
// index shard is another slot) the entries are left to the caller and
// the arguments after it are not sent: index returns the old status
// (empty for a run not indexed yet) and the caller moves them with
// indexScript; otherwise it returns false. The prefix '?' (lightLua)
// stands for arguments not sent either, on one node.
//
// reindex moves id from status old (nil: not indexed yet, so the
// creation and workflow entries are added; '*': wherever it is) to new,
// counting each entry it adds or removes: it can be applied twice.
//
// indexing() returns index, reindex and drop: a script makes them only
// where it uses them, as making a Lua function costs each call that runs
// past it (measured: 80 ns of Redis CPU each; a commit made seven).
const indexLua = `
local function indexing()
  local function statuses() return {'running', 'waiting', 'completed', 'failed', 'cancelled', 'dead'} end
  local function unindex(p, id, wf, st)
    if redis.call('ZREM', p .. 's:' .. st, id) == 1 then redis.call('HINCRBY', p .. 'n', 's:' .. st, -1) end
    if redis.call('ZREM', p .. 'ws:' .. wf .. ':' .. st, id) == 1 then redis.call('HINCRBY', p .. 'n', 'w:' .. wf .. ':' .. st, -1) end
  end
  local function reindex(p, id, old, new, wf, created, at)
    if old == new then return end
    if old == '*' then
      for _, st in ipairs(statuses()) do
        if st ~= new then unindex(p, id, wf, st) end
      end
    elseif old then
      unindex(p, id, wf, old)
    end
    if old == nil or old == '*' then
      redis.call('ZADD', p .. 'all', 'NX', created, id)
      redis.call('ZADD', p .. 'w:' .. wf, 'NX', created, id)
    end
    if new == '' then return end
    if redis.call('ZADD', p .. 's:' .. new, 'NX', at, id) == 1 then redis.call('HINCRBY', p .. 'n', 's:' .. new, 1) end
    if redis.call('ZADD', p .. 'ws:' .. wf .. ':' .. new, 'NX', at, id) == 1 then redis.call('HINCRBY', p .. 'n', 'w:' .. wf .. ':' .. new, 1) end
  end
  local function drop(p, id, wf, st, created, tombUntil)
    for _, s in ipairs(statuses()) do unindex(p, id, wf, s) end
    redis.call('ZREM', p .. 'all', id)
    redis.call('ZREM', p .. 'w:' .. wf, id)
    -- Tombstones are counted by the day they expire (unix days).
    local expires = tonumber(tombUntil)
    if expires > 0 then redis.call('HINCRBY', p .. 'n', 't:' .. math.floor(expires / 86400000), 1) end
  end
  local function index(run, old, a)
    local new = ARGV[a]
    if old == new then return false end
    redis.call('HSET', run, 'st', new)
    local p = ARGV[a + 1]
    if p == '' then return old or '' end
    reindex(p, ARGV[a + 2], old or nil, new, ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
    return false
  end
  return index, reindex, drop
end
`

// lightLua lets the writes of the step path (updateScript, commitScript)
// leave out the index arguments after the status when the caller expects
// the status to stay (running, as nearly every step's commit keeps it),
// so that it neither builds nor sends them: their prefix is then '?'.
// light(old, a) reads the status ARGV[a] and prefix ARGV[a+1]: it returns
// -5 (codeIndexArgs) when the status changes from old, so the script
// returns before any write and the caller sends it again with them, and
// otherwise the position of the arguments that follow the index's.
const lightLua = `
local function light(old, a)
  local p = ARGV[a + 1]
  if p == '?' then
    if old ~= ARGV[a] then return -5 end
    return a + 2
  end
  if p == '' then return a + 2 end
  return a + 6
end
`

// indexScript is reindex on its own, on the index shard's slot (KEYS[1]
// is the shard's counters; the other keys share its hash tag): ARGV is
// prefix, id, old status (empty for none, '*' for any), new status (empty to
// remove the run from the status indexes), workflow, created, at.
var indexScript = redis.NewScript(indexLua + `
local old = ARGV[3]
if old == '' then old = nil end
local _, reindex = indexing()
reindex(ARGV[1], ARGV[2], old, ARGV[4], ARGV[5], ARGV[6], ARGV[7])
return 1
`)

// createScript creates the run hash only if it is absent and indexes it
// (ARGV[2..7], see indexLua). Its field fo, the run's fan-outs, starts
// empty: present, it says that every fan-out since the creation is
// listed there (commitScript), which a run created before the field
// existed does not have. A worker of that release commits a fan-out
// without listing it, and a purge would leave its branches' keys: stop
// that release's workers before this one creates runs. Reply: 1 when created and indexed, {1, old}
// when created and the caller indexes it, otherwise {doc, rev, tomb} of
// the existing run (tomb: the tombstone of a purged one).
var createScript = redis.NewScript(indexLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HMGET', KEYS[1], 'doc', 'rev', 'tomb')
end
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'rev', 1, 'last_cp', 0, 'fo', '')
local old = indexing()(KEYS[1], false, 2)
if old then return {1, old} end
return 1
`)

// spillLua stores what Run.Spill moved off the record (see spillArgs):
// from ARGV[a] on, three lists, each a count then that many field/value
// pairs, HSET on KEYS[k], KEYS[k+1] and KEYS[k+2] (the audit log, the
// approval log, the blobs). A loop, not HSET with unpack: the first write
// of a long record from before the bound spills thousands of entries.
const spillLua = `
local function spill(k, a)
  local i = a
  for key = k, k + 2 do
    local n = tonumber(ARGV[i])
    i = i + 1
    for _ = 1, n do
      redis.call('HSET', KEYS[key], ARGV[i], ARGV[i + 1])
      i = i + 2
    end
  end
end
`

// updateScript replaces the run document if its revision is still ARGV[1]
// and stores what its spill moved (KEYS[2..4], after the index
// arguments) with it, and indexes it (ARGV[3..], see indexLua and
// lightLua). Reply: the new revision, a negative code, or {revision, old
// status} when the caller moves the index entries.
var updateScript = redis.NewScript(spillLua + indexLua + lightLua + `
local cur = redis.call('HMGET', KEYS[1], 'rev', 'st')
if not cur[1] then return -1 end
if cur[1] ~= ARGV[1] then return -3 end
local a = light(cur[2], 3)
if a < 0 then return a end
spill(2, a)
local rev = tonumber(cur[1]) + 1
redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'rev', rev)
local old = false
if cur[2] ~= ARGV[3] then old = indexing()(KEYS[1], cur[2], 3) end
if old then return {rev, old} end
return rev
`)

// commitScript writes checkpoint ARGV[4] (KEYS[2]) first-writer-wins and
// the run document in one step, if the run's revision is still ARGV[1].
// An existing checkpoint is reported before a moved revision: a loser must
// learn that the step is done, not just that the run changed. last_cp is
// the highest committed step, so Checkpoints knows how far to read. Three
// calls in the common case: the checkpoint is created with SET NX and
// taken back if the revision moved (the script is atomic: nobody sees it).
// ARGV[5] is how many branches the checkpoint fans out to (0: it does
// not): a fan-out is added to the run hash's list fo as "<step>:<branches>,"
// so that the purge finds its branches' keys without reading checkpoints;
// not where fo is missing (a run created before it existed, whose purge
// reads them). The run is indexed with ARGV[6..] (indexLua, lightLua),
// and what its spill moved goes to KEYS[3..5] (the arguments after the
// index's). The reply is as updateScript's.
var commitScript = redis.NewScript(spillLua + indexLua + lightLua + `
local cur = redis.call('HMGET', KEYS[1], 'rev', 'last_cp', 'st')
if not cur[1] then return -1 end
local a = light(cur[3], 6)
if a < 0 then return a end
if not redis.call('SET', KEYS[2], ARGV[3], 'NX') then return -2 end
if cur[1] ~= ARGV[1] then
  redis.call('DEL', KEYS[2])
  return -3
end
spill(3, a)
local rev = tonumber(cur[1]) + 1
if tonumber(ARGV[4]) > tonumber(cur[2] or '0') then
  redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'rev', rev, 'last_cp', ARGV[4])
else
  redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'rev', rev)
end
if ARGV[5] ~= '0' then
  local fo = redis.call('HGET', KEYS[1], 'fo')
  if fo then redis.call('HSET', KEYS[1], 'fo', fo .. ARGV[4] .. ':' .. ARGV[5] .. ',') end
end
local old = false
if cur[3] ~= ARGV[6] then old = indexing()(KEYS[1], cur[3], 6) end
if old then return {rev, old} end
return rev
`)

// loadScript reads what a worker needs for step n as one consistent read.
// KEYS: run, checkpoint n, journal n, failures n[, checkpoint n-1[, spend
// of a fan-out's branches]]. Reply: nil when the run is missing, else
// {doc, rev, cp n, {journal field, value...}, cp n-1, {failure...}[, spend]}.
var loadScript = redis.NewScript(`
local run = redis.call('HMGET', KEYS[1], 'doc', 'rev')
if not run[1] then return false end
local prev = false
if #KEYS >= 5 then prev = redis.call('GET', KEYS[5]) end
local out = {run[1], run[2], redis.call('GET', KEYS[2]), redis.call('HGETALL', KEYS[3]), prev,
  redis.call('LRANGE', KEYS[4], 0, -1)}
if #KEYS >= 6 then out[7] = redis.call('GET', KEYS[6]) end
return out
`)

// recordScript journals a call first-writer-wins by name and returns the
// record that is stored.
var recordScript = redis.NewScript(`
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], ARGV[1])
`)

// failureScript counts a failure of a step and appends its record, keeping
// the last ARGV[2] records. KEYS: run, failures n (list), failure count n.
// Reply: the new count, or -1 when the run is missing.
var failureScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local count = redis.call('INCR', KEYS[3])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
return count
`)

// claimDueScript claims up to ARGV[2] members of the deadline index
// (KEYS[1]) scored at or before ARGV[1], earliest first, by moving each
// score to the lease's end, ARGV[3]. Reply: the claimed ids in due order.
// It touches the one global key only, so it too runs on a single slot.
// A lease's score is its end in milliseconds plus one half (leaseScore):
// IndexDue writes whole milliseconds, so a score tells a claim's lease
// from a deadline written since, which finishDueScript relies on.
var claimDueScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[3], id)
end
return ids
`)

// finishDueScript ends the claims of one ClaimDue: for each pair
// (ARGV[i], ARGV[i+1]) from ARGV[2] on, if member ARGV[i] of the deadline
// index (KEYS[1]) still has the claim's lease score ARGV[1], it is moved
// to ARGV[i+1], or removed when that is empty. Reply: how many it moved
// or removed; the others were written since (or are gone) and are left.
var finishDueScript = redis.NewScript(`
local lease = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == lease then
    if ARGV[i + 1] == '' then
      redis.call('ZREM', KEYS[1], ARGV[i])
    else
      redis.call('ZADD', KEYS[1], ARGV[i + 1], ARGV[i])
    end
    n = n + 1
  end
end
return n
`)

// backfillScript indexes a run written before the index existed (no st
// field), if its revision is still ARGV[1]; ARGV[2..7] as indexLua. Reply:
// 0 when it was indexed already, -1 when the run is gone, -3 when it
// moved (read it again), 1 when indexed, {1, old} when the caller moves
// its entries (Cluster).
var backfillScript = redis.NewScript(indexLua + `
local cur = redis.call('HMGET', KEYS[1], 'rev', 'st')
if not cur[1] then return -1 end
if cur[2] then return 0 end
if cur[1] ~= ARGV[1] then return -3 end
local old = indexing()(KEYS[1], false, 2)
if old then return {1, old} end
return 1
`)

// purgeScript deletes a run whose revision is still ARGV[1] with every
// key stored under it, which it names itself from ARGV[9], the prefix of
// the run's keys (all in the run's slot): for each step up to the
// highest of ARGV[10] (the cursor and one past it) and last_cp + 1, its
// checkpoint, journal and failures; for each fan-out, its branches' and
// its join's bitmap and spend; the audit, approval and blob logs and the
// liveness mark. It reads no checkpoint and not the run's document: the
// fan-outs are the run hash's list fo (commitScript), except in a run
// created before that list existed, whose checkpoints it reads (MGET) to
// find them. The run hash KEYS[1] then holds the tombstone ARGV[2] for
// ARGV[3] ms (none when 0), and only it; its index entries go:
// ARGV[4..8] are the shard's prefix (empty in a Cluster: the caller drops
// them with dropScript), id, workflow, created, and the tombstone's expiry
// (unix ms). Reply: 1, or -1 when the run is gone (a tombstone has no
// rev), -3 when it moved, -4 when it has not ended (its index status, st,
// is live).
var purgeScript = redis.NewScript(indexLua + `
local cur = redis.call('HMGET', KEYS[1], 'rev', 'st', 'last_cp', 'fo')
if not cur[1] then return -1 end
if cur[1] ~= ARGV[1] then return -3 end
local st = cur[2] or ''
if st == 'running' or st == 'waiting' then return -4 end
local tag = ARGV[9]
local last = math.max(tonumber(ARGV[10]), tonumber(cur[3] or '0') + 1)
local keys = {KEYS[1], tag .. 'audit', tag .. 'approvals', tag .. 'blobs', tag .. 'alive'}
local function gone(k)
  keys[#keys + 1] = k
  if #keys == 512 then
    redis.call('UNLINK', unpack(keys))
    keys = {}
  end
end
local function fanOut(n, branches)
  local join = tag .. 'cp:' .. (n + 1)
  for i = 1, branches do
    local b = (n + 1) .. '.' .. i
    gone(tag .. 'cp:' .. b); gone(tag .. 'j:' .. b); gone(tag .. 'f:' .. b); gone(tag .. 'fc:' .. b)
  end
  gone(join .. ':bits'); gone(join .. ':spend')
end
if cur[4] then
  for n, branches in string.gmatch(cur[4], '(%d+):(%d+),') do fanOut(tonumber(n), tonumber(branches)) end
else
  for from = 1, last, 1000 do
    local cps = {}
    for n = from, math.min(last, from + 999) do cps[#cps + 1] = tag .. 'cp:' .. n end
    for i, doc in ipairs(redis.call('MGET', unpack(cps))) do
      if doc and string.find(doc, '"fan_out"', 1, true) then
        local fan = cjson.decode(doc).fan_out
        if type(fan) == 'table' and type(fan.branches) == 'table' then fanOut(from + i - 1, #fan.branches) end
      end
    end
  end
end
for n = 1, last do
  gone(tag .. 'cp:' .. n); gone(tag .. 'j:' .. n); gone(tag .. 'f:' .. n); gone(tag .. 'fc:' .. n)
end
if #keys > 0 then redis.call('UNLINK', unpack(keys)) end
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', KEYS[1], 'tomb', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
if ARGV[4] ~= '' and st ~= '' then
  local _, _, drop = indexing()
  drop(ARGV[4], ARGV[5], ARGV[6], st, ARGV[7], ARGV[8])
end
return 1
`)

// dropScript is drop on its own, on the index shard's slot (KEYS[1], the
// shard's counters): ARGV is prefix, id, workflow, status, created,
// tombstone expiry.
var dropScript = redis.NewScript(indexLua + `
local _, _, drop = indexing()
drop(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
return 1
`)

// checkpointsScript reads every checkpoint of a run up to its highest
// committed step: KEYS[1] the run hash, ARGV[1] the prefix of its
// checkpoint keys (the keys are named in the script, all in the run's
// slot). Reply: nil when the run is missing, else the documents of steps
// 1..last_cp (nil where one is missing).
var checkpointsScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'rev', 'last_cp')
if not cur[1] then return false end
local last = tonumber(cur[2] or '0')
if last < 1 then return {} end
local out = {}
for from = 1, last, 1000 do
  local keys = {}
  for n = from, math.min(last, from + 999) do keys[#keys + 1] = ARGV[1] .. n end
  for _, doc in ipairs(redis.call('MGET', unpack(keys))) do out[#out + 1] = doc end
end
return out
`)

// fixScript sets the indexed status st of a run whose record, at
// revision ARGV[1], is in status ARGV[2] (read by a listing that found
// it under another status), and on one node moves its index entries
// there (ARGV[2..7] as indexLua's, the old status '*'). Reply: 1, or 0
// when the run moved since it was read (its writer indexed it).
var fixScript = redis.NewScript(indexLua + `
if redis.call('HGET', KEYS[1], 'rev') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'st', ARGV[2])
if ARGV[3] ~= '' then
  local _, reindex = indexing()
  reindex(ARGV[3], ARGV[4], '*', ARGV[2], ARGV[5], ARGV[6], ARGV[7])
end
return 1
`)
