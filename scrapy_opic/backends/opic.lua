-- The OPIC engine and frontier as one Redis script: every call is atomic on the server, so
-- processes that visit and pay at once never create or lose cash, and the greedy pop is global.
--
-- The formulas are those of scrapy_opic/opic/engine.py (OpicEngine.visit, _distribute, _credit,
-- payout, forfeit, transfer) and frontier.py (statuses, schedule, retry, redirect), in the same
-- order and the same floating-point operations, so that a crawl on Redis and one on the embedded
-- engine agree to the last bits (tests/test_differential.py replays one random sequence of every
-- operation on both and compares every number after every step).
--
-- The constants (SCALARS, N_PARAMS, LAYOUTS, the statuses DISCOVERED..VISITED, the
-- schedule codes DUPLICATE..LOCAL, ESTIMATORS, WIN_INTERPOLATION, VISIT_DECAY, RATE_DECAY,
-- BLEND_LEMMA, SLOPE_NOISE) and unpack_page/pack_page are not written here: they are generated
-- from Python (scrapy_opic/backends/redis.py, lua_constants) and prepended when the script loads.
--
-- KEYS[1] is the crawl's namespace, a Redis Cluster hash tag such as "{opic:site}". Every key
-- below is built from it, so all of them live in the namespace's hash slot:
--   <ns>:s            string: the parameters and global scalars (G, virtual cash, accumulators,
--                     status counts, the wall clock of the last window step) packed as
--                     little-endian doubles, in the order of SCALARS
--   <ns>:g            hash: the parameters again, readable (written once, by init)
--   <ns>:p:<b>        hash, bucket b of the pages: fingerprint -> the page's numbers packed
--                     (pack_page: stored cash s, history h, teleport-credit baseline cb, link
--                     credit lc, G at last visit lg, received-cash moments b and d or the wall
--                     time of the last visit lt; then a header byte with status st, flags f and
--                     which of o and a the page has; visits v; the page's id, its place in
--                     discovery order). Fingerprint-keyed data of a page lives in the buckets
--                     of the same number b, each one hash per bucket (see bucket_of):
--   <ns>:r:<b>        pending and in-flight pages: fingerprint -> priority pr, download slot
--                     sl and URL (when it is not the page's: a page known under another URL
--                     first) of the page's request, length-prefixed, then the request's bytes
--   <ns>:o:<b>        fingerprint -> the outcome of the page's last fetch, only when it was not
--                     OK (an outcome code of constants.py or an HTTP status)
--   <ns>:a:<b>        fingerprint -> the fingerprint of the page it permanently redirects to
--   <ns>:w            hash: in-flight fingerprint -> the token of its lease
--   <ns>:u:<c>        list: the URLs of the pages of ids c * URL_CHUNK .. (c + 1) * URL_CHUNK - 1,
--                     in id order (as the frontier's Python side packs them)
--   <ns>:q:<pr>:u|f:<slot>  sorted sets of the pending pages of priority pr, never fetched (u) /
--                     fetched (f), in one download slot, scored by stored cash s
--   <ns>:h:<pr>:u|f   sorted sets of slot heads: slot -> the best stored cash of its queue
--   <ns>:tiers        sorted set of the priorities that have pending pages
--   <ns>:leases       sorted set: in-flight fingerprint -> lease expiry (server time, ms)
--   <ns>:pol          hash: the fleet's politeness (conc, delay in ms, jitter), written by each
--                     process as it joins; absent: politeness is each process's own
--   <ns>:lim          hash: slot -> "conc delay_ms jitter" for slots with limits of their own
--   <ns>:busy         hash: slot -> pages leased in the slot, by every process (fleet politeness)
--   <ns>:next         hash: slot -> server time (ms) before which no page of the slot is leased
--   <ns>:blocked      sorted set: slot -> server time (ms) it opens at ('inf': full, until a lease
--                     in it ends). A blocked slot is out of every slot-head index, so that a pop
--                     never looks at it: the pop stays exact among the slots with room.
--   <ns>:holds        sorted set: lease token of a visit whose links came back NEEDS_PAYLOAD ->
--                     expiry (server time, ms). Its process still has to file those links, so
--                     the crawl is not over while it lasts; the process removes it once they are
--                     filed (or renews it), and a dead process's hold expires like a lease.
--
-- A page's true cash is s + acc_all (+ acc_unfetched while never fetched): the virtual page's
-- payout is two additions to the accumulators, O(1), and the queue scores never move on a payout
-- (a broadcast to a set keeps the order inside the set). A pop takes, per side, the best slot
-- head whose slot has room (skipping at most the full slots), then the richer side: exact
-- greedy among the slots with room, in O(log n + full slots).
--
-- Packed numbers, not text: one GET/SET per call for the globals and one field per page, which
-- halves the server time of a call and the memory of a page (the commands a script issues,
-- and their arguments, are most of its cost).
--
-- ARGV[1] is the command; the rest are its arguments (see the Python side, redis.py). The code
-- below reads them as A (ARGV, less an 'ack' prefix).

local ns = KEYS[1]
local SK = ns .. ':s'
-- A sharded crawl's outbox (see the shard commands below): entry id -> entry, and entry id ->
-- the server time it was written (ms), for the upkeep's replay of old entries.
local OUT, OUTT = ns .. ':out', ns .. ':outt'
-- Any command may come after 'ack n id...': the outbox entries of this partition that their
-- destinations have applied, acknowledged on the way (no round trip of their own).
local A = ARGV
if A[1] == 'ack' then
  local n = tonumber(A[2])
  if n > 0 then
    local ids = {}
    for k = 3, 2 + n do ids[#ids + 1] = A[k] end
    redis.call('HDEL', OUT, unpack(ids))
    redis.call('ZREM', OUTT, unpack(ids))
  end
  local rest = {}
  for k = 3 + n, #A do rest[#rest + 1] = A[k] end
  A = rest
end
-- A visit may come after 'vs token live unfetched ...' (the live and never-fetched page counts
-- of every partition): it sends this partition's virtual cash too (send_virtual).
local VS = nil
if A[1] == 'vs' then
  VS = {token = A[2], lives = {}, unfs = {}}
  local n = 0
  local k = 3
  while A[k] and A[k] ~= 'visit' do
    VS.lives[n], VS.unfs[n] = tonumber(A[k]), tonumber(A[k + 1])
    n, k = n + 1, k + 2
  end
  VS.n = n
  local rest = {}
  for j = k, #A do rest[#rest + 1] = A[j] end
  A = rest
end
local cmd = A[1]

local GFMT = '<' .. string.rep('d', #SCALARS)

local g = {}
local eps, refresh, cont, interp, wall, mom, T, estimator, sharded

local function fmt(x)
  return string.format('%.17g', x)
end

local function load_g()
  local blob = redis.call('GET', SK)
  if not blob then return false end
  -- A crawl started by an older version packed fewer globals: the new ones start at 0.
  if #blob < 8 * #SCALARS then blob = blob .. string.rep('\0', 8 * #SCALARS - #blob) end
  local vals = {struct.unpack(GFMT, blob)}
  for k, name in ipairs(SCALARS) do g[name] = vals[k] end
  eps = g.eps
  refresh = g.refresh
  cont = g.cont == 1
  interp = g.win == WIN_INTERPOLATION
  wall = g.wall == 1
  mom = g.mom == 1
  layout = LAYOUTS[mom and 1 or (wall and 2 or 0)]
  T = g.T
  estimator = ESTIMATORS[g.est]
  sharded = g.parts > 1
  return true
end

local function save_g()
  local vals = {}
  for k, name in ipairs(SCALARS) do vals[k] = g[name] end
  redis.call('SET', SK, struct.pack(GFMT, unpack(vals)))
end

local function server_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end

-- The server's time in whole milliseconds: the clock of leases, holds and slot delays.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The crawl's G clock: G, and in a sharded crawl the other partitions' G as they last sent it
-- (gother, see apply): one clock for every partition, the crawl's G but for what the others
-- absorbed since they last sent their virtual cash. (gother is 0 unsharded: G exactly.)
local function gclock()
  return g.G + g.gother
end

-- The clock of the window policy: the G clock, or wall seconds (the server's, read once per
-- call and recorded in g.clock, so that a replay can feed the embedded engine the same time).
local now_cache
local function now()
  if not wall then return gclock() end
  if not now_cache then
    now_cache = server_time()
    g.clock = now_cache
  end
  return now_cache
end

-- ---------------------------------------------------------------- pages (cached per call)
local P = {}       -- fp -> page table, loaded once per call
local order = {}   -- fps in load order (flush order)

-- Buckets. A page is not a key of its own but an entry of a few hashes, so that it costs a
-- listpack entry (a few bytes over its data) instead of a key, a hash object and their
-- allocations. The number of buckets follows the number of pages n (linear hashing):
-- B = max(1, floor(n / BUCKET_LOAD)); with m the largest power of two <= B, a fingerprint of
-- hash h lives in bucket h mod 2m, or h mod m if that is B or more. Each new multiple of
-- BUCKET_LOAD adds bucket B and moves into it the pages of bucket B - m that now belong there
-- (split), so a bucket holds about BUCKET_LOAD to 2 * BUCKET_LOAD pages: under Redis's
-- hash-max-listpack-entries (128), the hashes keep their compact encoding. The hash of a
-- 20-byte fingerprint (Scrapy's is a SHA-1, uniform already) is the XOR of its five 32-bit
-- words, of any other key the first 32 bits of its SHA-1 (hashing a fingerprint again would
-- cost server time on every page a call touches). Where a page lives is a function of its
-- fingerprint and n only: every process finds it.
local nb_n, nb_B, nb_m
local function nbuckets()
  if nb_n ~= g.n then
    nb_n = g.n
    nb_B = math.max(1, math.floor(g.n / BUCKET_LOAD))
    nb_m = 1
    while nb_m * 2 <= nb_B do nb_m = nb_m * 2 end
  end
  return nb_B, nb_m
end

local function fphash(fp)
  if #fp == 20 then
    local a, b, c, d, e = struct.unpack('>I4I4I4I4I4', fp)
    return bit.bxor(a, b, c, d, e) % 4294967296
  end
  return tonumber(string.sub(redis.sha1hex(fp), 1, 8), 16)
end

local function bucket_of(hb)
  local B, m = nbuckets()
  local b = hb % (2 * m)
  if b >= B then b = hb % m end
  return b
end

local bkeys = {}  -- family -> bucket -> key name (a call builds each name once)
local function bkey(family, b)
  local names = bkeys[family]
  if not names then
    names = {}
    bkeys[family] = names
  end
  local name = names[b]
  if not name then
    name = ns .. ':' .. family .. ':' .. b
    names[b] = name
  end
  return name
end

-- The bucket families, all split together (a page's entries are in buckets of one number).
local FAMILIES = {'p', 'r', 'o', 'a'}

-- n just reached a multiple of BUCKET_LOAD (2 or more): bucket B - 1 is new, and the pages of
-- bucket B - 1 - m (m for B - 1 buckets) that belong there now move.
local function split()
  local B = nbuckets()
  local new = B - 1
  local m = 1
  while m * 2 <= new do m = m * 2 end
  local from = new - m
  local where = {}  -- fingerprint -> stays (every family's fingerprints are pages of 'p')
  for _, family in ipairs(FAMILIES) do
    local all = redis.call('HGETALL', bkey(family, from))
    local moved, gone = {}, {}
    for k = 1, #all, 2 do
      local fp = all[k]
      local stays = where[fp]
      if stays == nil then
        stays = bucket_of(fphash(fp)) == from
        where[fp] = stays
      end
      if not stays then
        moved[#moved + 1] = fp
        moved[#moved + 1] = all[k + 1]
        gone[#gone + 1] = fp
      end
    end
    if #gone > 0 then
      redis.call('HSET', bkey(family, new), unpack(moved))
      redis.call('HDEL', bkey(family, from), unpack(gone))
    end
  end
end

-- The URL of page id (kept once, in discovery order, URL_CHUNK to a list).
local function url_of(id)
  return redis.call('LINDEX', bkey('u', math.floor(id / URL_CHUNK)), id % URL_CHUNK)
end

-- The pending pages of one priority, one side (never fetched: u, fetched: f) and one download
-- slot; and, per priority and side, the index of slot heads (slot -> its best stored cash).
local function qkey(pr, unfetched, sl)
  return ns .. ':q:' .. pr .. (unfetched and ':u:' or ':f:') .. sl
end

local function hkey(pr, unfetched)
  return ns .. ':h:' .. pr .. (unfetched and ':u' or ':f')
end

-- The page's flags (OpicEngine.flags): fetched once, closed for good.
local function unfetched(p) return bit.band(p.f, FETCHED) == 0 end
local function dead(p) return bit.band(p.f, DEAD) ~= 0 end

-- The priority tier a pending page waits in: its request's priority, but 0 for a refetch in a
-- continuous crawl (Frontier._push).
local function tier(pr, u)
  if cont and not u then return '0' end
  return pr
end

local function page(fp)
  local p = P[fp]
  if p then return p end
  local hb = fphash(fp)
  local b = bucket_of(hb)
  local x = redis.call('HGET', bkey('p', b), fp)
  if not x then return nil end
  p = unpack_page(x)
  p.hb = hb
  -- pr and sl: the priority and download slot of its request, which a page has only while it
  -- is pending or in flight (rq: the request's bytes; rurl: its URL if not the page's); w: the
  -- token of its lease, in flight.
  p.pr, p.sl = '0', ''
  if p.st == PENDING or p.st == IN_FLIGHT then
    local r = redis.call('HGET', bkey('r', b), fp)
    if r then
      local pr, sl, url, at = struct.unpack('<Bc0Hc0I4c0', r)
      p.pr, p.sl, p.rq = pr, sl, string.sub(r, at)
      if url ~= '' then p.rurl = url end
    end
    if p.st == IN_FLIGHT then p.w = redis.call('HGET', ns .. ':w', fp) or nil end
  end
  -- a: the fingerprint of the page it permanently redirects to (Frontier.redirect); a0 what
  -- the bucket holds.
  if p.ha == 1 then p.a = redis.call('HGET', bkey('a', b), fp) or nil end
  p.a0 = p.a
  -- o: the outcome of the page's last fetch, kept only when it is not OK (a fetched page
  -- without it was fetched OK); o0 what the bucket holds.
  local o = p.ho == 1 and tonumber(redis.call('HGET', bkey('o', b), fp)) or nil
  p.o = o or (unfetched(p) and 0 or OK)
  p.o0 = o
  if p.st == PENDING then
    local u = unfetched(p)
    local t = tier(p.pr, u)
    p.q0, p.h0, p.sl0 = qkey(t, u, p.sl), hkey(t, u), p.sl
  end
  P[fp] = p
  order[#order + 1] = fp
  return p
end

-- ---------------------------------------------------------------- fleet politeness
-- Per download slot, every process together: at most conc pages leased at once, and a pop at
-- least delay (with Scrapy's jitter) after the slot's last pop, as one Scrapy process would
-- send them. A slot with no room is blocked: taken out of the slot-head indices until it
-- has room again (a lease in it ends, or its delay passes), so a pop only sees slots with room.
local BUSY, NEXT, BLOCKED = ns .. ':busy', ns .. ':next', ns .. ':blocked'
local pol = nil      -- the fleet's default limits, loaded once per call (false: none)
local blocked = {}   -- slot -> whether it is blocked (cached per call)

local function polite()
  if pol == nil then
    local r = redis.call('HMGET', ns .. ':pol', 'conc', 'delay', 'jitter')
    if r[1] then
      pol = {conc = tonumber(r[1]), delay = tonumber(r[2]), jitter = tonumber(r[3])}
    else
      pol = false
    end
  end
  return pol
end

-- The slot's limits: its own (DOWNLOAD_SLOTS), else the fleet's.
local function limits(sl)
  local own = redis.call('HGET', ns .. ':lim', sl)
  if own then
    local c, d, j = string.match(own, '(%S+) (%S+) (%S+)')
    return tonumber(c), tonumber(d), tonumber(j)
  end
  return pol.conc, pol.delay, pol.jitter
end

local function is_blocked(sl)
  local b = blocked[sl]
  if b == nil then
    b = polite() and redis.call('ZSCORE', BLOCKED, sl) ~= false or false
    blocked[sl] = b
  end
  return b
end

-- Out of (or back into) every slot-head index of every tier and side.
local function unindex(sl)
  for _, t in ipairs(redis.call('ZRANGE', ns .. ':tiers', 0, -1)) do
    redis.call('ZREM', hkey(t, true), sl)
    redis.call('ZREM', hkey(t, false), sl)
  end
end

local function reindex(sl)
  for _, t in ipairs(redis.call('ZRANGE', ns .. ':tiers', 0, -1)) do
    for _, u in ipairs({true, false}) do
      local top = redis.call('ZREVRANGE', qkey(t, u, sl), 0, 0, 'WITHSCORES')
      if #top > 0 then redis.call('ZADD', hkey(t, u), top[2], sl) end
    end
  end
end

local function block(sl, until_ms)
  if not is_blocked(sl) then unindex(sl) end
  redis.call('ZADD', BLOCKED, until_ms, sl)
  blocked[sl] = true
end

local function unblock(sl)
  redis.call('ZREM', BLOCKED, sl)
  redis.call('HDEL', NEXT, sl)
  blocked[sl] = false
  reindex(sl)
end

-- A page of slot sl was just leased at ms (u: a uniform draw in [0, 1) from the process, for
-- the jitter: a script's own random numbers repeat from call to call).
local function slot_leased(sl, ms, u)
  if not polite() then return end
  local conc, delay, jitter = limits(sl)
  local busy = redis.call('HINCRBY', BUSY, sl, 1)
  local open_at = nil
  if delay > 0 then
    open_at = ms + math.max(0, math.floor(delay * (1 + jitter * (2 * u - 1)) + 0.5))
    redis.call('HSET', NEXT, sl, open_at)
  end
  if busy >= conc then
    block(sl, 'inf')
  elseif open_at then
    block(sl, open_at)
  end
end

-- With pages pending and slots held by the fleet's politeness: ms until the first held slot
-- opens, or 'inf' if all wait for a lease to end; nil if none is held.
local function held_for(ms)
  if not (polite() and g.st1 > 0) then return nil end
  local first = redis.call('ZRANGE', BLOCKED, 0, 0, 'WITHSCORES')
  if #first == 0 then return nil end
  if first[2] == 'inf' then return 'inf' end
  return math.max(0, tonumber(first[2]) - ms)
end

-- A lease in slot sl ended (an outcome, a release, an expiry).
local function slot_freed(sl)
  if not polite() then return end
  local busy = redis.call('HINCRBY', BUSY, sl, -1)
  if busy <= 0 then redis.call('HDEL', BUSY, sl) end
  local score = redis.call('ZSCORE', BLOCKED, sl)
  if score ~= 'inf' or busy >= limits(sl) then return end
  local open_at = tonumber(redis.call('HGET', NEXT, sl) or '0')
  if open_at > now_ms() then
    redis.call('ZADD', BLOCKED, open_at, sl)
  else
    unblock(sl)
  end
end

-- Slots whose delay has passed open again (before a pop looks at the heads).
local function open_slots(ms)
  if not polite() then return end
  for _, sl in ipairs(redis.call('ZRANGEBYSCORE', BLOCKED, '-inf', ms, 'LIMIT', 0, 1000)) do
    unblock(sl)
  end
end

local function set_status(p, st)
  g['st' .. p.st] = g['st' .. p.st] - 1
  p.st = st
  g['st' .. st] = g['st' .. st] + 1
  p.dirty = true
end

-- OpicEngine.add_page (+ the window's on_new): a new page with no cash.
local function new_page(fp, url)
  -- (cb = 0: back pay, the teleport credit given before the page joined.)
  local p = {s = -(g.acca + g.accu), h = 0, cb = 0, lc = 0, lg = gclock(), v = 0, f = 0,
    st = DISCOVERED, b = 0, d = 0, lt = 0, pr = '0', sl = '', o = 0, dirty = true,
    id = g.n, hb = fphash(fp), fresh = true}
  if interp then
    p.h = g.rate * T
    if wall then p.lt = now() end
  end
  g.n = g.n + 1
  g.nunf = g.nunf + 1
  g.st0 = g.st0 + 1
  -- The URL, once: in the list of its id's chunk (the page's bucket holds its id).
  redis.call('RPUSH', bkey('u', math.floor(p.id / URL_CHUNK)), url)
  if g.n % BUCKET_LOAD == 0 and g.n >= 2 * BUCKET_LOAD then split() end
  P[fp] = p
  order[#order + 1] = fp
  return p
end

local function page_or_new(fp, url)
  return page(fp) or new_page(fp, url)
end

-- What the accumulators add to the page's stored cash: its true cash is s + offset.
local function offset(p)
  if dead(p) then return 0 end
  if not unfetched(p) then return g.acca end
  return g.acca + g.accu
end

local function cash_of(p)
  return p.s + offset(p)
end

-- Take all of a page's cash without a visit (OpicEngine.forfeit).
local function empty(p)
  local off = offset(p)
  local c = p.s + off
  p.s = -off
  p.dirty = true
  return c
end

local revive
-- OpicEngine.kill: closed for good; its cash to the virtual page, nothing received from now on.
local function kill(p)
  if dead(p) then return end
  g.vcash = g.vcash + empty(p)
  p.s = 0
  if unfetched(p) then g.nunf = g.nunf - 1 end
  p.f = bit.bor(p.f, DEAD)
  g.ndead = g.ndead + 1
end

-- OpicEngine.revive: open again, with no cash.
revive = function(p)
  if not dead(p) then return end
  p.f = bit.band(p.f, bit.bnot(DEAD))
  g.ndead = g.ndead - 1
  if unfetched(p) then g.nunf = g.nunf + 1 end
  p.s = -offset(p)
  p.dirty = true
end

-- Write back every page this call touched, and keep the queues in step with status and cash.
-- (A priority whose queues empty stays in <ns>:tiers until a pop finds it empty.)
local function flush()
  for _, fp in ipairs(order) do
    local p = P[fp]
    if p.dirty then
      local b = bucket_of(p.hb)
      local o = p.o ~= OK and p.o ~= 0 and p.o or nil
      redis.call('HSET', bkey('p', b), fp, pack_page(p, o and 1 or 0, p.a and 1 or 0))
      if p.req then
        local url = p.rurl or ''
        redis.call('HSET', bkey('r', b), fp,
          struct.pack('<Bc0Hc0I4c0', #p.pr, p.pr, #p.sl, p.sl, #url, url) .. p.req)
        p.rq = p.req
      end
      if p.token then
        redis.call('HSET', ns .. ':w', fp, p.token)
      elseif p.w and p.st ~= IN_FLIGHT then
        -- (A token matters only in flight: a settled page keeps none.)
        redis.call('HDEL', ns .. ':w', fp)
        p.w = nil
      end
      if o and o ~= p.o0 then redis.call('HSET', bkey('o', b), fp, o) end
      if p.o0 and not o then redis.call('HDEL', bkey('o', b), fp) end
      if p.a and p.a ~= p.a0 then redis.call('HSET', bkey('a', b), fp, p.a) end
      if p.a0 and not p.a then redis.call('HDEL', bkey('a', b), fp) end
      p.o0, p.a0 = o, p.a
      if p.drop then
        redis.call('HDEL', bkey('r', b), fp)
        p.rq, p.rurl = nil, nil
      end
    end
    local q1 = nil
    local h1 = nil
    local t = nil
    if p.st == PENDING then
      local u = unfetched(p)
      t = tier(p.pr, u)
      q1, h1 = qkey(t, u, p.sl), hkey(t, u)
    end
    if p.q0 and p.q0 ~= q1 then
      redis.call('ZREM', p.q0, fp)
      -- The slot's head may have been this page: the index takes the queue's new head.
      local top = redis.call('ZREVRANGE', p.q0, 0, 0, 'WITHSCORES')
      if #top == 0 then
        redis.call('ZREM', p.h0, p.sl0)
      elseif not is_blocked(p.sl0) then
        redis.call('ZADD', p.h0, top[2], p.sl0)
      end
    end
    if q1 and (p.dirty or p.q0 ~= q1) then
      redis.call('ZADD', q1, fmt(p.s), fp)
      -- A pending page's cash only grows: the slot's head is the larger of the two.
      if not is_blocked(p.sl) then redis.call('ZADD', h1, 'GT', fmt(p.s), p.sl) end
      if p.q0 ~= q1 then redis.call('ZADD', ns .. ':tiers', tonumber(t), t) end
    end
    -- The cached page now matches Redis: a later flush in the same call (a pop that reclaims
    -- a lease, then pops the same page) starts from here.
    p.q0, p.h0, p.sl0, p.dirty, p.req, p.drop = q1, h1, p.sl, false, nil, nil
    if p.token then p.w, p.token = p.token, nil end
  end
end

-- ---------------------------------------------------------------- cash movements
-- OpicEngine._credit: cash taken from elsewhere (the caller books the debit) and, with y,
-- link credit.
local function credit(p, x, y)
  p.s = p.s + x
  if y then
    p.lc = p.lc + y
    if mom then
      local t = gclock()
      p.b = p.b + y * t
      p.d = p.d + y * (t * t)
    end
  end
  p.dirty = true
end

-- The totals of the link credit just paid (after the pages', as in OpicEngine._credit).
local function credit_total(total)
  g.ctot = g.ctot + total
  if mom then
    local t = gclock()
    g.btot = g.btot + total * t
    g.dtot = g.dtot + total * (t * t)
  end
end

-- OpicEngine._take: all of the page's cash, the page marked fetched.
local function take(p)
  local c
  if dead(p) then revive(p) end
  if not unfetched(p) then
    c = p.s + g.acca
  else
    c = p.s + g.acca + g.accu
    p.f = bit.bor(p.f, FETCHED)
    g.nunf = g.nunf - 1
  end
  p.s = -g.acca
  p.dirty = true
  return c
end

-- The window policy's absorb_one: unbounded history, or the paper's Interpolation.
local function absorb(p, c, t)
  if not interp then
    p.h = p.h + c
    return
  end
  local dt = t - (wall and p.lt or p.lg)
  if dt < T then
    p.h = p.h * (T - dt) / T + c
  else
    p.h = c * T / dt
  end
end

-- OpicEngine.payout: the virtual page pays out (before every selection).
local function payout()
  local live = g.n - g.ndead  -- closed pages receive nothing
  if sharded then
    -- A partition's virtual page pays what the crawl's virtual page sent it (vsend, apply):
    -- vin to every live page, vinu to those never fetched, and vcred as teleport credit.
    local a, u = g.vin, g.vinu
    if a + u <= 0 or live == 0 then return end
    if g.nunf == 0 then a, u = a + u, 0 end
    g.acca = g.acca + a / live
    if u ~= 0 then g.accu = g.accu + u / g.nunf end
    g.vin, g.vinu = 0, 0
    g.vhist = g.vhist + a + u
    g.G = g.G + a + u
    g.accc = g.accc + g.vcred
    g.vcred = 0
    return
  end
  local v = g.vcash
  if v <= 0 or live == 0 then return end
  local to_unf = 0
  if g.nunf > 0 then to_unf = (1 - refresh) * v end
  g.acca = g.acca + (v - to_unf) / live
  if to_unf ~= 0 then g.accu = g.accu + to_unf / g.nunf end
  g.vcash = 0
  g.vhist = g.vhist + v
  g.G = g.G + v
  g.accc = g.accc + v  -- teleport credit: the same to every page, known or not yet
end

-- OpicEngine._take_credit: the link credit received since the last visit, and all the credit
-- the page holds (with its teleport credit since then); both taken.
local function take_credit(p)
  local received = p.lc
  local k = g.accc - p.cb + received
  p.cb = g.accc
  p.lc = 0
  return received, k
end

-- OpicEngine.visit up to the payout to children: returns the cash and the credit taken.
local function visit_take(p)
  local first = unfetched(p)
  local c = take(p)
  local t = now()
  local received, k = take_credit(p)
  absorb(p, received, t)
  p.lg = gclock()
  if wall then p.lt = t end
  p.v = p.v + 1
  g.G = g.G + c
  g.greal = g.greal + c
  g.visits = g.visits + 1
  local w = 1.0 - VISIT_DECAY
  g.ema = g.ema + w * (c * g.n - g.ema)
  if first and interp then
    -- The learned default history: the rate of a page just visited for the first time (its
    -- interpolated estimate at dt = 0 is h / T).
    local rate = (p.h * T / T) / T  -- (the same operations as the embedded estimate at dt = 0)
    g.rate = g.rate + (1.0 - RATE_DECAY) * (rate - g.rate)
  end
  return c, k
end

-- OpicEngine._distribute over child pages (self-links already left out by the caller): the
-- cash c and the credit kc in the same shares.
local function distribute(c, kc, kids, weights, boosts, vweight)
  local d = #kids
  g.cpass = g.cpass + kc
  if d == 0 then
    g.vcash = g.vcash + c
    g.cdang = g.cdang + kc
    return
  end
  local to_virtual = eps * c
  local rest = c - to_virtual
  local k_rest = kc - eps * kc
  local shares, credits = {}, {}
  if not weights and vweight == 0 then
    local each, each_k = rest / d, k_rest / d
    for k = 1, d do shares[k] = each; credits[k] = each_k end
  else
    local total_w = 0
    if not weights then
      weights = {}
      for k = 1, d do weights[k] = 1.0 end
    end
    for k = 1, d do total_w = total_w + weights[k] end
    total_w = total_w + vweight
    if not (total_w > 0) then
      g.vcash = g.vcash + c
      g.cdang = g.cdang + kc
      return
    end
    for k = 1, d do
      shares[k] = rest * weights[k] / total_w
      credits[k] = k_rest * weights[k] / total_w
    end
    to_virtual = to_virtual + rest * vweight / total_w
  end
  local paid = 0
  for k = 1, d do
    credit(kids[k], shares[k], credits[k])
    -- (A page of another partition, a stub here: its partition books the credit it receives.)
    if not kids[k].remote then paid = paid + credits[k] end
  end
  credit_total(paid)
  g.vcash = g.vcash + to_virtual
  if boosts then
    local want = 0
    local extra = {}
    for k = 1, d do
      extra[k] = boosts[k] * shares[k]
      want = want + extra[k]
    end
    if want > 0 and g.vcash > 0 then
      local scale = math.min(1.0, g.vcash / want)
      for k = 1, d do
        credit(kids[k], extra[k] * scale)
      end
      g.vcash = g.vcash - want * scale
      if g.vcash < 0 then g.vcash = 0 end
    end
  end
end

-- ---------------------------------------------------------------- life cycle
-- The URL a request scheduled with url keeps apart from its page's: none if it is the page's
-- (always for a page created by this call).
local function request_url(p, url)
  if p.fresh or url == url_of(p.id) then return nil end
  return url
end

-- MemoryFrontier.schedule: SCHEDULED, DUPLICATE, or NEEDS_PAYLOAD (schedulable, but no request
-- came with it).
local function schedule(p, pr, sl, req, again, url)
  local st = p.st
  if st == PENDING or st == IN_FLIGHT then return DUPLICATE end
  if dead(p) then  -- closed for good: only asked for explicitly
    if not again then return DUPLICATE end
  elseif st == VISITED and not (cont or again) then
    return DUPLICATE
  end
  if req == '' then return NEEDS_PAYLOAD end
  revive(p)
  p.req, p.pr, p.sl, p.drop = req, pr, sl, nil
  p.rurl = request_url(p, url)
  set_status(p, PENDING)
  return SCHEDULED
end

local function unlease(fp)
  redis.call('ZREM', ns .. ':leases', fp)
  slot_freed(P[fp].sl)
end

-- Frontier._retire: never fetched again (its request forgotten).
local function retire(p)
  set_status(p, VISITED)
  p.req = nil
  p.drop = true
end

-- Frontier._done after a visit: pending again in a continuous crawl (with req instead of its
-- request if req is not empty), else retired.
local function done(p, req)
  if cont then
    if req ~= '' then p.req = req end
    set_status(p, PENDING)
  else
    retire(p)
  end
end

-- Is fp in flight under this lease token? (A stale token: the lease expired and the page was
-- handed to another process, whose outcome counts instead.)
local function leased(fp, token)
  local p = page(fp)
  if not p or p.st ~= IN_FLIGHT or p.w ~= token then return nil end
  return p
end

local function stale()
  g.stale = g.stale + 1
  save_g()
  return {0}
end

-- O(1) importance of a page just visited, for OPIC_ITEM_FIELD (unbounded windows only: a
-- windowed policy's normaliser is a sum over all pages).
local function slope(b, d)
  local G = gclock()
  if G <= 0 then return 0 end
  local spread = G * b - d
  if spread > SLOPE_NOISE * G * b then return 6.0 * spread / (G * G * G) end
  return 0
end

-- (OpicEngine.importance_of: a / n for the teleport, the rest by the page's share of the link
-- credit received.)
local function importance_of(p)
  if interp then return -1 end
  -- (In a sharded crawl, the crawl's totals as this partition knows them: its own and the
  -- others' as they last sent them; unsharded, the others' are 0.)
  local received = g.ctot + g.octot
  local n = g.n + g.on
  local lemma = p.h + p.lc
  local est, total
  local slopes = slope(g.btot + g.obtot, g.dtot + g.odtot)
  if estimator == 'paper' or estimator == 'lemma' then
    est, total = lemma, received
  elseif estimator == 'regression' then
    est, total = slope(p.b, p.d), slopes
  else
    local x = received > 0 and lemma / received or lemma
    local sl = slope(p.b, p.d)
    local y = slopes > 0 and sl / slopes or sl
    est, total = BLEND_LEMMA * x + (1.0 - BLEND_LEMMA) * y, 1.0
  end
  if not (total > 0) then return 1.0 / n end
  local dangling = 0
  local passed = g.cpass + g.ocpass
  if passed > 0 then dangling = (g.cdang + g.ocdang) / passed end
  local a = eps + (1.0 - eps) * dangling
  return a / n + (1.0 - a) / total * est
end

-- ---------------------------------------------------------------- shards
-- A crawl of P partitions (tags {<key>:0} .. {<key>:P-1}, each a whole frontier of the pages
-- of the download slots that hash to it): cash that leaves a partition (a link's share, a
-- redirect's cash, the virtual page's income) is written, in the same call that takes it,
-- as an entry of the partition's outbox; the process then applies the entry on its
-- destination (which records its id in <ns>:applied, so that applying it twice does nothing)
-- and acknowledges it here (the 'ack' prefix). Cash in an outbox is in no page's books but in
-- the crawl's: the total is the partitions' cash plus their outboxes'.
--   entry: the cash it carries (a little-endian double), then a msgpack array: {'l', links},
--   each link {fp, url, again, pr, sl, req, cash, credit}; or {'v', to all pages, to pages
--   never fetched, teleport credit}.
local APPLIED = ns .. ':applied'
-- What a partition knows of the others (the sums of what each last sent, <ns>:gk: partition ->
-- its numbers packed): G, and the totals importance reads.
local OTHERS = {'gother', 'octot', 'ocpass', 'ocdang', 'obtot', 'odtot', 'on'}
local OTHERS_FMT = '<ddddddd'

-- Write an outbox entry for partition dest (id: the call's token and dest) and list it in
-- entries (dest, id, entry) for the reply.
local function write_entry(entries, token, dest, cash, body)
  local id = fmt(g.part) .. ':' .. token .. '>' .. dest
  local blob = struct.pack('<d', cash) .. cmsgpack.pack(body)
  redis.call('HSET', OUT, id, blob)
  redis.call('ZADD', OUTT, now_ms(), id)
  entries[#entries + 1] = dest
  entries[#entries + 1] = id
  entries[#entries + 1] = blob
end

-- The partition's head, for the process's choice among partitions: the highest tier with a
-- pending page in a slot with room, and the best true cash there ({'', ''}: none).
local function head()
  for _, pr in ipairs(redis.call('ZREVRANGE', ns .. ':tiers', 0, -1)) do
    local best = nil
    local hu = redis.call('ZREVRANGE', hkey(pr, true), 0, 0, 'WITHSCORES')
    local hf = redis.call('ZREVRANGE', hkey(pr, false), 0, 0, 'WITHSCORES')
    if #hu > 0 then best = tonumber(hu[2]) + g.acca + g.accu end
    if #hf > 0 then
      local c = tonumber(hf[2]) + g.acca
      if not best or c > best then best = c end
    end
    if best then return {pr, fmt(best)} end
  end
  return {'', ''}
end

-- The partition's virtual cash, sent to every partition: to all of its live pages in
-- proportion to their number and, (1 - refresh) of it, to the pages never fetched in
-- proportion to theirs; and as teleport credit, the whole amount to every partition (each of
-- its pages receives it, as from one virtual page). One virtual page in P parts, whose payout
-- stays uniform over the crawl's pages however the partitions' incomes differ. lives, unfs:
-- the partitions' counts (0 .. n-1), as the process last read them.
local function send_virtual(entries, token, lives, unfs, n)
  local v = g.vcash
  local L, U = 0, 0
  for j = 0, n - 1 do L, U = L + lives[j], U + unfs[j] end
  if not (v > 0) or L == 0 then return end
  g.vcash = 0
  local me = g.part
  local sent = 0
  local share = {}
  for j = 0, n - 1 do
    local a, u
    if U > 0 then
      a, u = refresh * v * lives[j] / L, (1 - refresh) * v * unfs[j] / U
    else
      a, u = v * lives[j] / L, 0
    end
    share[j] = {a, u}
    if j ~= me then sent = sent + a + u end
  end
  for j = 0, n - 1 do
    local a, u = share[j][1], share[j][2]
    if j == me then
      -- (This partition keeps what the others do not receive: exactly what was taken.)
      g.vin, g.vinu, g.vcred = g.vin + (v - sent) - u, g.vinu + u, g.vcred + v
    else
      write_entry(entries, token, tostring(j), a + u, {'v', a, u, v, g.part, struct.pack(
        OTHERS_FMT, g.G, g.ctot, g.cpass, g.cdang, g.btot, g.dtot, g.n)})
    end
  end
end

-- ---------------------------------------------------------------- commands
if cmd == 'init' then
  -- A: the N_PARAMS first SCALARS (numbers; win and est are ids in the generated WINDOWS
  -- and ESTIMATORS orders). Creates the crawl if there is none;
  -- returns the crawl's parameters (a joining process compares them with its own).
  if redis.call('EXISTS', SK) == 0 then
    for k, name in ipairs(SCALARS) do g[name] = 0 end
    local readable = {}
    for k = 1, N_PARAMS do
      g[SCALARS[k]] = tonumber(A[k + 1])
      readable[#readable + 1] = SCALARS[k]
      readable[#readable + 1] = A[k + 1]
    end
    -- All the cash starts in the virtual page; in a crawl of P partitions (parts), in
    -- partition 0's: A[N_PARAMS + 2] is this one's number (part).
    g.part = tonumber(A[N_PARAMS + 2] or '0')
    g.parts = tonumber(A[N_PARAMS + 3] or '1')
    g.vcash = g.part == 0 and 1.0 or 0.0
    save_g()
    redis.call('HSET', ns .. ':g', unpack(readable))
  end
  load_g()
  local out = {}
  for k = 1, N_PARAMS do out[k] = fmt(g[SCALARS[k]]) end
  return out
end

if not load_g() then
  return redis.error_reply('OPIC: no crawl in ' .. ns .. ' (not initialised)')
end

if cmd == 'sched' then
  -- A: again, then (fp url pr sl req) per request. Returns a code per request (schedule()).
  local again = A[2] == '1'
  local out = {}
  for k = 3, #A, 5 do
    local p = page_or_new(A[k], A[k + 1])
    out[#out + 1] = schedule(p, A[k + 2], A[k + 3], A[k + 4], again, A[k + 1])
  end
  flush()
  save_g()
  return out

elseif cmd == 'pop' then
  -- A: token lease_ms share u full-slot... Reclaims expired leases, opens the slots whose
  -- delay has passed, pays the virtual page out, then leases the pending page with the most
  -- cash (highest priority first) whose download slot has room (not full in this process,
  -- not blocked for the fleet); when the discovery debt is due (share > 0: frontier.py,
  -- discovery_step), the best page never fetched of the highest tier that has one. u: a
  -- uniform draw in [0, 1) for the delay's jitter. Returns {fp, {url, request}, slot} or {}.
  local token, lease_ms, share = A[2], tonumber(A[3]), tonumber(A[4])
  local u = tonumber(A[5])
  local discover = share > 0 and g.debt + share >= 1.0
  local full = {}
  local n_full = 0
  for k = 6, #A do
    full[A[k]] = true
    n_full = n_full + 1
  end
  local ms = now_ms()
  local lk = ns .. ':leases'
  redis.call('ZREMRANGEBYSCORE', ns .. ':holds', '-inf', ms)
  local expired = redis.call('ZRANGEBYSCORE', lk, '-inf', ms, 'LIMIT', 0, 100)
  for _, fp in ipairs(expired) do
    local p = page(fp)
    redis.call('ZREM', lk, fp)
    if p and p.st == IN_FLIGHT then
      set_status(p, PENDING)
      slot_freed(p.sl)
      g.reclaimed = g.reclaimed + 1
    end
  end
  if #expired > 0 then flush() end
  open_slots(ms)
  payout()
  local best = nil
  local lk_tiers = ns .. ':tiers'
  local tiers = redis.call('ZREVRANGE', lk_tiers, 0, -1)
  -- Per tier and side, the best slot head whose slot has room: among the n_full + 1 best heads
  -- there is one, if the side has any.
  local function best_head(pr, unfetched)
    local heads = redis.call('ZREVRANGE', hkey(pr, unfetched), 0, n_full, 'WITHSCORES')
    for k = 1, #heads, 2 do
      if not full[heads[k]] then return heads[k], tonumber(heads[k + 1]) end
    end
    return nil, nil
  end
  if discover then  -- the best page never fetched, of the highest tier that has one
    for _, pr in ipairs(tiers) do
      local su = best_head(pr, true)
      if su then
        best = redis.call('ZREVRANGE', qkey(pr, true, su), 0, 0)[1]
        break
      end
    end
  end
  if not best then
    for _, pr in ipairs(tiers) do
      -- The richer of the two sides (by true cash).
      local su, cu = best_head(pr, true)
      local sf, cf = best_head(pr, false)
      local unfetched = nil
      if su and (not sf or cu + g.accu >= cf) then
        unfetched = true
      elseif sf then
        unfetched = false
      end
      if unfetched ~= nil then
        local sl = unfetched and su or sf
        best = redis.call('ZREVRANGE', qkey(pr, unfetched, sl), 0, 0)[1]
        break
      end
      -- A priority with no pending page left (not if slots are blocked: their pages are out
      -- of the heads, and the tier is how they are indexed again).
      if redis.call('EXISTS', hkey(pr, true), hkey(pr, false)) == 0
          and not (polite() and redis.call('ZCARD', BLOCKED) > 0) then
        redis.call('ZREM', lk_tiers, pr)
      end
    end
  end
  if not best then
    save_g()
    -- Pages pending, none in a slot with room: when to ask again (ms until the first slot whose
    -- delay ends; -1 if all wait for a lease to end). In a sharded crawl, then the head (a
    -- page in a slot full for this process is there for others).
    local wait = held_for(ms)
    if wait == 'inf' then wait = -1 end
    if sharded and n_full > 0 then return {'', wait or -3, head()} end
    if wait then return {'', wait} end
    return {}
  end
  local p = page(best)
  if share > 0 then
    g.debt = math.min(g.debt + share, 1.0)
    if unfetched(p) then g.debt = math.max(g.debt - 1.0, 0.0) end
  end
  set_status(p, IN_FLIGHT)
  p.token = token
  redis.call('ZADD', lk, ms + lease_ms, best)
  slot_leased(p.sl, ms, u)
  flush()
  save_g()
  return {best, {p.rurl or url_of(p.id), p.rq}, p.sl, sharded and head() or {}}

elseif cmd == 'visit' then
  -- A: fp token plain has_boosts vweight later closed_virtual lease_ms, then (cfp url
  -- weight boost again pr sl req) per followed link; later: the page's request from now on
  -- ('' keeps it); closed_virtual: links to closed pages pay the virtual page; lease_ms: how
  -- long the hold lasts if a link needs its request. Returns {1, importance, code per link} or
  -- {0} for a stale lease.
  local fp, token = A[2], A[3]
  local p = leased(fp, token)
  if not p then return stale() end
  local plain, has_boosts, vweight = A[4] == '1', A[5] == '1', tonumber(A[6])
  -- Children first (Scrapy's page_of: every followed link becomes a page before the visit).
  local links = {}
  local stubs = {}  -- fp -> the stub of a page of another partition (a sharded crawl)
  for k = 10, #A, 9 do
    local l = {fp = A[k], url = A[k + 1],
      w = tonumber(A[k + 2]), boost = tonumber(A[k + 3]), again = A[k + 4] == '1',
      pr = A[k + 5], sl = A[k + 6], req = A[k + 7], dest = A[k + 8]}
    if l.dest == '' then
      l.p = page_or_new(l.fp, l.url)
    else
      -- Its partition files it (apply): here it only collects its shares of cash and credit.
      l.p = stubs[l.fp] or {remote = l.dest, s = 0, lc = 0, b = 0, d = 0}
      stubs[l.fp] = l.p
    end
    links[#links + 1] = l
  end
  local c, kc = visit_take(p)
  local kids, weights, boosts = {}, nil, nil
  local seen = {}  -- fp -> its index in kids
  -- Links to closed pages, when they pay the virtual page (OpicEngine.closed_links_virtual):
  -- each page once, its largest weight, in order.
  local closed_virtual = A[8] == '1'
  local gone, gone_w = {}, {}
  if not plain then weights = {} end
  if has_boosts then boosts = {} end
  for _, l in ipairs(links) do
    -- A link to a closed alias is a link to its target (Frontier._target: up to 8 hops).
    local q, qfp = l.p, l.fp
    for _ = 1, 8 do
      if q.remote or not (q.a and dead(q)) then break end
      qfp = q.a
      q = page(qfp)
    end
    -- A self-link is not an endorsement; a link to a closed page is no link; a page links to
    -- another page once (after aliases), with the largest weight and boost.
    if qfp ~= fp and (q.remote or not dead(q)) then
      local k = seen[qfp]
      if k then
        if weights and l.w > weights[k] then weights[k] = l.w end
        if boosts and l.boost > boosts[k] then boosts[k] = l.boost end
      else
        kids[#kids + 1] = q
        seen[qfp] = #kids
        if weights then weights[#weights + 1] = l.w end
        if boosts then boosts[#boosts + 1] = l.boost end
      end
    elseif qfp ~= fp and closed_virtual then
      local w = weights and l.w or 1.0
      local k = gone[qfp]
      if k then
        if w > gone_w[k] then gone_w[k] = w end
      else
        gone_w[#gone_w + 1] = w
        gone[qfp] = #gone_w
      end
    end
  end
  for _, w in ipairs(gone_w) do vweight = vweight + w end
  distribute(c, kc, kids, weights, boosts, vweight)
  p.o = OK
  unlease(fp)
  done(p, A[7])
  local codes = {}
  local owed = false
  local items = {}  -- dest -> the links it files, in order
  for _, l in ipairs(links) do
    if l.dest == '' then
      local code = schedule(l.p, l.pr, l.sl, l.req, l.again, l.url)
      codes[#codes + 1] = code
      if code == NEEDS_PAYLOAD then owed = true end
    else
      codes[#codes + 1] = -1  -- (its partition answers)
      local it = items[l.dest]
      if not it then
        it = {}
        items[l.dest] = it
      end
      -- A page's shares go with its first link; the others are only filed.
      local x, y = l.p.s, l.p.lc
      l.p.s, l.p.lc = 0, 0
      it[#it + 1] = {l.fp, l.url, l.again and 1 or 0, l.pr, l.sl, l.req, x, y}
    end
  end
  local entries = {}
  for dest, it in pairs(items) do
    local cash = 0
    for _, x in ipairs(it) do cash = cash + x[7] end
    write_entry(entries, token, dest, cash, {'l', it})
  end
  if VS then send_virtual(entries, VS.token, VS.lives, VS.unfs, VS.n) end
  local out = {1, fmt(importance_of(p)), codes, entries}
  if owed then
    -- The process files those links next: until then, the crawl is not over (another
    -- process asking whether anything is pending must not leave).
    redis.call('ZADD', ns .. ':holds', now_ms() + tonumber(A[9]), token)
  end
  flush()
  save_g()
  if sharded then out[5], out[6] = head(), fmt(g.vcash) end
  return out

elseif cmd == 'fail' then
  -- A: fp token outcome later. Fetched but nothing to follow: a visit with no out-links;
  -- closed, unless the crawl is continuous and the outcome not final (then pending again, with
  -- later as its request unless empty).
  local fp = A[2]
  local p = leased(fp, A[3])
  if not p then return stale() end
  local o = tonumber(A[4])
  local c, kc = visit_take(p)
  distribute(c, kc, {}, nil, nil, 0)
  p.o = o
  unlease(fp)
  if cont and not FINAL_OUTCOMES[o] then
    done(p, A[5])
  else
    retire(p)
    kill(p)
  end
  flush()
  save_g()
  return {1}

elseif cmd == 'forfeit' then
  -- A: fp token outcome. Given up unfetched: cash to the virtual page, closed. With an
  -- empty token (a request a dupefilter refused: Frontier.drop), only a page discovered or
  -- pending, never one in flight or visited.
  local fp, token = A[2], A[3]
  local p
  if token == '' then
    p = page(fp)
    if not p or not (p.st == DISCOVERED or p.st == PENDING) then
      return {0}
    end
  else
    p = leased(fp, token)
    if not p then return stale() end
    unlease(fp)
  end
  retire(p)
  p.o = tonumber(A[4])
  kill(p)
  flush()
  save_g()
  return {1}

elseif cmd == 'redirect' then
  -- A: fp token target url pr sl req permanent. The cash moves to the target, which is
  -- scheduled; a permanent redirect makes the page a closed alias of the target.
  local fp, token = A[2], A[3]
  local p = leased(fp, token)
  if not p then return stale() end
  local dest = A[10] or ''
  if dest ~= '' then
    -- The target is in partition dest: the cash and the credit travel in an outbox entry,
    -- which files it there. (No alias across partitions: a permanent redirect closes the
    -- page, and a link to it is a link to a closed page.)
    unlease(fp)
    local c = take(p)
    p.o = REDIRECTED
    local held, kc = take_credit(p)
    g.ctot = g.ctot - held
    retire(p)
    if A[9] == '1' then kill(p) end
    local entries = {}
    write_entry(entries, token, dest, c, {'l', {{A[4], A[5], 0, A[6], A[7], A[8], c, kc}}})
    flush()
    save_g()
    return {1, -1, entries}
  end
  local q = page_or_new(A[4], A[5])
  unlease(fp)
  if A[4] == fp then  -- a redirect to itself: a retry
    p.req, p.pr, p.sl = A[8], A[6], A[7]
    p.rurl = request_url(p, A[5])
    set_status(p, PENDING)
    flush()
    save_g()
    return {1, SCHEDULED}
  end
  local c = take(p)  -- (fetched: its answer was the redirect)
  p.o = REDIRECTED
  if dead(q) then
    -- OpicEngine.transfer: to a closed page, the cash goes to the virtual page.
    g.vcash = g.vcash + c
  else
    -- The credit goes with the cash: the target receives all that the source held.
    local held, kc = take_credit(p)
    g.ctot = g.ctot - held
    credit(q, c, kc)
    credit_total(kc)
  end
  retire(p)
  if A[9] == '1' then  -- permanent: an alias of the target, closed
    kill(p)
    p.a = A[4]
  else
    p.a = nil
  end
  local code = schedule(q, A[6], A[7], A[8], false, A[5])
  flush()
  save_g()
  return {1, code}

elseif cmd == 'apply' then
  -- A: lease_ms, then (id token entry)... Files the entries of other partitions' outboxes here, each once
  -- (an entry applied already is skipped: a replay, or the upkeep's after a process died).
  -- token: the lease token of the visit that wrote it, whose process holds the crawl open
  -- while links it must file came back NEEDS_PAYLOAD ('': a replay, nobody holds). Returns,
  -- per entry, the schedule code of each of its links ({} if applied already), then the head.
  local ms = now_ms()
  local out = {}
  local owed = {}
  for k = 3, #A, 3 do
    local id, token, blob = A[k], A[k + 1], A[k + 2]
    local codes = {}
    if not redis.call('ZSCORE', APPLIED, id) then
      redis.call('ZADD', APPLIED, ms, id)
      local e = cmsgpack.unpack(string.sub(blob, 9))
      if e[1] == 'v' then
        g.vin = g.vin + e[2]
        g.vinu = g.vinu + e[3]
        g.vcred = g.vcred + e[4]
        -- The source's G and totals, for the crawl's clock and figures here (the latest it
        -- sent counts: its G never decreases).
        local was = redis.call('HGET', ns .. ':gk', e[5])
        local old = {0, 0, 0, 0, 0, 0, 0}
        if was then old = {struct.unpack(OTHERS_FMT, was)} end
        local new = {struct.unpack(OTHERS_FMT, e[6])}
        if new[1] > old[1] then
          for k, name in ipairs(OTHERS) do g[name] = g[name] + (new[k] - old[k]) end
          redis.call('HSET', ns .. ':gk', e[5], e[6])
        end
      else
        local paid = 0
        for _, it in ipairs(e[2]) do
          local fp, url, again, pr, sl, req, x, y = unpack(it)
          local p = page_or_new(fp, url)
          if x ~= 0 or y ~= 0 then
            local q = p
            for _ = 1, 8 do
              if not (q.a and dead(q)) then break end
              q = page(q.a)
              if not q then break end
            end
            if q and not dead(q) then
              credit(q, x, y)
              paid = paid + y
            else
              g.vcash = g.vcash + x  -- a closed page receives nothing (OpicEngine.transfer)
            end
          end
          local code = schedule(p, pr, sl, req, again == 1, url)
          codes[#codes + 1] = code
          if code == NEEDS_PAYLOAD and token ~= '' then owed[token] = true end
        end
        credit_total(paid)
      end
    end
    out[#out + 1] = codes
  end
  for token in pairs(owed) do
    redis.call('ZADD', ns .. ':holds', ms + tonumber(A[2]), token)
  end
  flush()
  payout()  -- (so that the head below is the pages' true cash)
  save_g()
  out[#out + 1] = head()
  return out

elseif cmd == 'vsend' then
  -- A: token, then (live unfetched) per partition 0..P-1: send_virtual. Returns the entries
  -- (dest id entry...) for the other partitions.
  local lives, unfs = {}, {}
  local n = 0
  for k = 3, #A, 2 do
    lives[n], unfs[n] = tonumber(A[k]), tonumber(A[k + 1])
    n = n + 1
  end
  local entries = {}
  send_virtual(entries, A[2], lives, unfs, n)
  payout()
  save_g()
  return entries

elseif cmd == 'head' then
  -- The partition's head (after the virtual page's payout), its live and never-fetched page
  -- counts, its virtual cash, its outbox size, and ms until a held slot opens (-1: none held;
  -- -2: all held until a lease ends).
  local ms = now_ms()
  open_slots(ms)
  payout()
  save_g()
  local wait = held_for(ms) or -1
  if wait == 'inf' then wait = -2 end
  return {head(), g.n - g.ndead, g.nunf, fmt(g.vcash), redis.call('HLEN', OUT), wait}

elseif cmd == 'retry' then
  -- A: fp token pr sl req. Pending again, nothing moves.
  local fp = A[2]
  local p = leased(fp, A[3])
  if not p then return stale() end
  unlease(fp)
  p.req, p.pr, p.sl = A[6], A[4], A[5]
  set_status(p, PENDING)
  flush()
  save_g()
  return {1}

elseif cmd == 'release' then
  -- A: (fp token)... A leaving process hands its in-flight pages back, cash intact.
  local n = 0
  for k = 2, #A, 2 do
    local p = leased(A[k], A[k + 1])
    if p then
      unlease(A[k])
      set_status(p, PENDING)
      n = n + 1
    end
  end
  flush()
  save_g()
  return n

elseif cmd == 'polite' then
  -- A: conc delay_ms jitter, then (slot conc delay_ms jitter) per slot with limits of its
  -- own; conc = 0: no fleet politeness (each process keeps its own). Sets the fleet's limits
  -- (the last process to join sets them for all). Switched on, the slots' lease counts are
  -- taken from the leases out; switched off, every blocked slot is indexed again.
  local was = polite()
  local conc = tonumber(A[2])
  redis.call('DEL', ns .. ':lim')
  if conc <= 0 then
    redis.call('DEL', ns .. ':pol')
    if was then
      for _, sl in ipairs(redis.call('ZRANGE', BLOCKED, 0, -1)) do reindex(sl) end
      redis.call('DEL', BLOCKED, BUSY, NEXT)
    end
    return 0
  end
  redis.call('HSET', ns .. ':pol', 'conc', A[2], 'delay', A[3], 'jitter', A[4])
  for k = 5, #A, 4 do
    redis.call('HSET', ns .. ':lim', A[k], A[k + 1] .. ' ' .. A[k + 2] .. ' ' .. A[k + 3])
  end
  pol = nil
  polite()
  if not was then
    for _, fp in ipairs(redis.call('ZRANGE', ns .. ':leases', 0, -1)) do
      local p = page(fp)
      if p and p.st == IN_FLIGHT then slot_leased(p.sl, now_ms(), 0.5) end
    end
    flush()
  else
    -- Limits may have changed: a slot blocked as full opens if it has room now.
    for _, sl in ipairs(redis.call('ZRANGEBYSCORE', BLOCKED, 'inf', 'inf')) do
      local busy = tonumber(redis.call('HGET', BUSY, sl) or '0')
      if busy < limits(sl) then unblock(sl) end
    end
  end
  return 1

elseif cmd == 'renew' then
  -- A: lease_ms n_holds hold... (fp token)... Extends the holds and the leases this process
  -- still has.
  local until_ms = now_ms() + tonumber(A[2])
  local n_holds = tonumber(A[3])
  for k = 4, 3 + n_holds do
    redis.call('ZADD', ns .. ':holds', 'XX', until_ms, A[k])
  end
  local n = 0
  for k = 4 + n_holds, #A, 2 do
    if leased(A[k], A[k + 1]) then
      redis.call('ZADD', ns .. ':leases', 'XX', until_ms, A[k])
      n = n + 1
    end
  end
  return n
end

return redis.error_reply('OPIC: unknown command ' .. tostring(cmd))
