--- dpy.secagg: secure aggregation (Bonawitz et al., "Practical Secure Aggregation for
-- Privacy-Preserving Machine Learning", CCS 2017; its honest-but-curious protocol). An aggregator
-- learns only the sum of its clients' vectors: each client adds to its fixed-point vector a
-- self mask PRG(b_u) and, for every other client v, +PRG(s_uv) if u < v else -PRG(s_uv), where
-- s_uv comes from X25519 key agreement; in the sum the pairwise masks cancel (mod 2^64). Each
-- client Shamir-shares its mask secret key and b_u among the others (t of them recover either),
-- encrypted to each recipient and relayed by the aggregator; once the masked vectors are in,
-- the survivors give the aggregator b_u of every survivor and the secret key of every client
-- that left, so it removes exactly the masks that do not cancel.
--
-- The messages of one aggregation, in order (client -> aggregator unless marked):
--   0 KEYS: c_pk .. s_pk          1 ROSTER (agg ->): the round's clients and their keys
--   2 SHARES: sealed shares        3 FORWARD (agg ->): the shares addressed to each client
--   4 MASKED: the masked vector    5 SURVIVORS (agg ->): who sent one
--   6 UNMASK: b shares of survivors, key shares of those who left
-- The objects below turn messages into messages (no transport: the spec drives them directly);
-- M.open / M.close run them over the fabric for any set of aggregations a node takes part in.
local crypto = require "dpy.crypto.core"
local tensor = require "dpy.tensor"

local M = {}

M.CHANNEL = 2   -- the fabric channel; a step's messages travel in sub-round round * 8 + step
local KEYS, ROSTER, SHARES, FORWARD, MASKED, SURVIVORS, UNMASK = 0, 1, 2, 3, 4, 5, 6
local KEY = 32
local SHARE = 2 * KEY                -- a Shamir share of a 32-byte secret: 8 field elements
local SEALED = 24 + 16 + 8 + 2 * SHARE   -- nonce, MAC, (from, to), the two shares
local ROSTER_ENTRY = 4 + 2 * KEY

--- secagg.payload_bound(parties, values) -> the largest message of an aggregation among that many
-- parties of vectors of that many values: the masked int64 vector (and a count: fedavg's weight),
-- or the shares of every party.
function M.payload_bound(parties, values)
  return math.max(8 * (values + 1), parties * (4 + SEALED))
end

--- secagg.threshold(n, fraction) -> t: shares needed out of n (more than fraction of them).
function M.threshold(n, fraction)
  return math.max(1, math.min(n, math.floor(fraction * n) + 1))
end

local function context(agg, r, use)
  return string.format("dpy-secagg/%s/aggregator %d/round %d", use, agg, r)
end

local function set_of(list)
  local s = {}
  for _, u in ipairs(list) do s[u] = true end
  return s
end

-- {==== a client's side of one aggregation ====}

local Client = {}
Client.__index = Client

--- secagg.client(me, agg, r, fraction) -> a client of aggregator agg for round r, with fresh
-- keys; client.advertise is its KEYS message.
function M.client(me, agg, r, fraction)
  local c = setmetatable({ me = me, agg = agg, r = r, fraction = fraction }, Client)
  c.c_pk, c.c_sk = crypto.keypair()
  c.s_pk, c.s_sk = crypto.keypair()
  c.advertise = c.c_pk .. c.s_pk
  return c
end

--- client:share(roster) -> the SHARES message | nil, why (a roster that leaves this client out,
-- changes its keys, or repeats a uid; an empty one: the aggregator gave up)
function Client:share(roster)
  if #roster == 0 then return nil, "the aggregator gave up the round" end
  if #roster % ROSTER_ENTRY ~= 0 then return nil, "malformed roster" end
  local keys, uids = {}, {}
  for off = 1, #roster, ROSTER_ENTRY do
    local u = string.unpack("<I4", roster, off)
    if keys[u] then return nil, "roster names node " .. u .. " twice" end
    keys[u] = { c = roster:sub(off + 4, off + 3 + KEY), s = roster:sub(off + 4 + KEY, off + 3 + 2 * KEY) }
    uids[#uids + 1] = u
  end
  local mine = keys[self.me]
  if not mine or mine.c ~= self.c_pk or mine.s ~= self.s_pk then
    return nil, "the roster does not hold this node's keys"
  end
  self.keys, self.t = keys, M.threshold(#uids, self.fraction)
  self.b = crypto.random_bytes(KEY)
  local xs = {}
  for i, u in ipairs(uids) do xs[i] = u + 1 end
  local s_shares = crypto.shamir_split(self.s_sk, self.t, xs)
  local b_shares = crypto.shamir_split(self.b, self.t, xs)
  self.held = {}   -- from uid -> { s = share, b = share }: this node's own shares are kept too
  local out = {}
  for i, v in ipairs(uids) do
    if v == self.me then
      self.held[v] = { s = s_shares[i], b = b_shares[i] }
    else
      local key, err = crypto.agree(self.c_sk, keys[v].c, context(self.agg, self.r, "shares"))
      if not key then return nil, string.format("node %d's key: %s", v, err) end
      out[#out + 1] = string.pack("<I4", v) .. crypto.seal(key, string.pack("<I4I4", self.me, v)
                                                            .. s_shares[i] .. b_shares[i])
    end
  end
  return table.concat(out)
end

--- client:receive(forward) -> true | nil, why: opens the shares the other clients sent it; they
-- are the round's clients from now on (U2: those who sent shares, and this node).
function Client:receive(forward)
  if #forward % (4 + SEALED) ~= 0 then return nil, "malformed forwarded shares" end
  self.peers = {}
  for off = 1, #forward, 4 + SEALED do
    local u = string.unpack("<I4", forward, off)
    local from = self.keys[u]
    if not from or u == self.me or self.held[u] then return nil, "forwarded shares of node " .. u .. " unexpected" end
    local key, err = crypto.agree(self.c_sk, from.c, context(self.agg, self.r, "shares"))
    local plain = key and crypto.open(key, forward:sub(off + 4, off + 3 + SEALED))
    if not plain then return nil, string.format("node %d's shares: %s", u, err or "do not open") end
    local a, b = string.unpack("<I4I4", plain)
    if a ~= u or b ~= self.me then return nil, string.format("node %d's shares are addressed to another", u) end
    self.held[u] = { s = plain:sub(9, 8 + SHARE), b = plain:sub(9 + SHARE, 8 + 2 * SHARE) }
    self.peers[#self.peers + 1] = u
  end
  if #self.peers + 1 < self.t then
    return nil, string.format("only %d clients shared keys (threshold %d)", #self.peers + 1, self.t)
  end
  return true
end

--- client:mask(y) -> y, the int64 fixed-point vector, masked in place: +PRG(b), and per peer v
-- +PRG(s_uv) when this node's uid is below v's, -PRG(s_uv) otherwise.
function Client:mask(y)
  crypto.mask_(y, self.b)
  local ctx = context(self.agg, self.r, "masks")
  for _, v in ipairs(self.peers) do
    local key = assert(crypto.agree(self.s_sk, self.keys[v].s, ctx))   -- checked in receive
    crypto.mask_(y, key, self.me < v and 1 or -1)
  end
  return y
end

--- client:unmask(survivors) -> the UNMASK message | nil, why: b's share of every survivor, the
-- mask key's share of every client that left after sharing (never both for one client).
function Client:unmask(survivors)
  if #survivors == 0 then return nil, "the aggregator gave up the round" end
  if #survivors % 4 ~= 0 then return nil, "malformed survivor list" end
  local alive, n = {}, 0
  for off = 1, #survivors, 4 do
    local u = string.unpack("<I4", survivors, off)
    if not self.held[u] or alive[u] then return nil, "survivor list names node " .. u .. " unexpectedly" end
    alive[u], n = true, n + 1
  end
  if not alive[self.me] then return nil, "survivor list leaves this node out" end
  if n < self.t then return nil, string.format("only %d survivors (threshold %d)", n, self.t) end
  local out = {}
  for u, share in pairs(self.held) do
    local kind = alive[u] and 0 or 1
    out[#out + 1] = string.pack("<I4B", u, kind) .. (kind == 0 and share.b or share.s)
  end
  table.sort(out)
  return table.concat(out)
end

-- {==== the aggregator's side ====}

local Aggregator = {}
Aggregator.__index = Aggregator

--- secagg.aggregator(me, r, fraction) -> an aggregator for round r
function M.aggregator(me, r, fraction)
  return setmetatable({ me = me, r = r, fraction = fraction, keys = {} }, Aggregator)
end

--- agg:roster(advertised) -> the ROSTER message ("" when too few clients advertised), from
-- { [uid] = KEYS message } of the clients that did.
function Aggregator:roster(advertised)
  local uids = {}
  for u, m in pairs(advertised) do
    if #m == 2 * KEY then uids[#uids + 1] = u end
  end
  table.sort(uids)
  self.u1, self.t = uids, M.threshold(#uids, self.fraction)
  local out = {}
  for i, u in ipairs(uids) do
    self.keys[u] = { c = advertised[u]:sub(1, KEY), s = advertised[u]:sub(KEY + 1) }
    out[i] = string.pack("<I4", u) .. advertised[u]
  end
  return #uids >= 1 and table.concat(out) or ""
end

--- agg:forward(shared) -> { [uid] = FORWARD message } | nil, why: from { [uid] = SHARES
-- message } of the clients that sent theirs (U2), what each of them receives.
function Aggregator:forward(shared)
  local u2, out = {}, {}
  for _, u in ipairs(self.u1) do
    if shared[u] then u2[#u2 + 1], out[u] = u, {} end
  end
  if #u2 < self.t then
    return nil, string.format("%d of %d clients shared keys (threshold %d)", #u2, #self.u1, self.t)
  end
  local in2 = set_of(u2)
  for _, u in ipairs(u2) do
    local m = shared[u]
    if #m % (4 + SEALED) ~= 0 then return nil, "node " .. u .. "'s shares are malformed" end
    for off = 1, #m, 4 + SEALED do
      local v = string.unpack("<I4", m, off)
      if in2[v] and v ~= u then out[v][#out[v] + 1] = string.pack("<I4", u) .. m:sub(off + 4, off + 3 + SEALED) end
    end
  end
  self.u2 = u2
  for v, parts in pairs(out) do out[v] = table.concat(parts) end
  return out
end

--- agg:survivors(masked) -> the SURVIVORS message (or "" and why, when fewer than the threshold), from
-- { [uid] = masked int64 vector }; the masked vectors are summed mod 2^64 into agg.sum.
function Aggregator:survivors(masked)
  local u3, out = {}, {}
  for _, u in ipairs(self.u2) do
    if masked[u] then
      u3[#u3 + 1], out[#out + 1] = u, string.pack("<I4", u)
      if not self.sum then self.sum = tensor.zeros(masked[u]:numel(), "int64") end
      crypto.add_(self.sum, masked[u])
    end
  end
  self.u3 = u3
  if #u3 < self.t then return "", string.format("only %d survivors (threshold %d)", #u3, self.t) end
  return table.concat(out)
end

-- The secret of uid u from the shares of the responding clients (at least t), or nil, why.
local function recover(shares, u, t, what)
  local xs, ys = {}, {}
  for holder, share in pairs(shares) do xs[#xs + 1], ys[#ys + 1] = holder + 1, share end
  if #xs < t then return nil, string.format("%d shares of node %d's %s (threshold %d)", #xs, u, what, t) end
  return crypto.shamir_combine(xs, ys)
end

--- agg:unmask(responses) -> the sum of the survivors' vectors (int64) and the survivors' uids
-- | nil, why: from { [uid] = UNMASK message } (at least t of the survivors).
function Aggregator:unmask(responses)
  local alive = set_of(self.u3)
  local b, s = {}, {}   -- uid -> { [holder] = share }
  for holder, m in pairs(responses) do
    if #m % (5 + SHARE) ~= 0 then return nil, "node " .. holder .. "'s unmasking shares are malformed" end
    for off = 1, #m, 5 + SHARE do
      local u, kind = string.unpack("<I4B", m, off)
      local share = m:sub(off + 5, off + 4 + SHARE)
      local into = kind == 0 and alive[u] and b or kind == 1 and not alive[u] and s or nil
      if into then
        into[u] = into[u] or {}
        into[u][holder] = share
      end
    end
  end
  local sum = self.sum
  for _, u in ipairs(self.u3) do
    local seed, err = recover(b[u] or {}, u, self.t, "self mask")
    if not seed then return nil, err end
    crypto.mask_(sum, seed, -1)
  end
  local ctx = context(self.me, self.r, "masks")
  for _, u in ipairs(self.u2) do
    if not alive[u] then   -- left after sharing: its pairwise masks with the survivors remain
      local sk, err = recover(s[u] or {}, u, self.t, "mask key")
      if not sk then return nil, err end
      if crypto.public_key(sk) ~= self.keys[u].s then return nil, "node " .. u .. "'s mask key shares are wrong" end
      for _, v in ipairs(self.u3) do
        local key = assert(crypto.agree(sk, self.keys[v].s, ctx))
        crypto.mask_(sum, key, v < u and -1 or 1)   -- v added +PRG when v < u
      end
    end
  end
  self.sum = nil
  return sum, self.u3
end

-- {==== over the fabric ====}
-- Steps alternate: clients send the even ones and aggregators receive them, aggregators send the
-- odd ones. A party that gives up sends GIVE_UP where its next message was due, so that nobody
-- waits peer_timeout for it; a party that is gone is dropped as exchange.receive drops it.

M.GIVE_UP = "give up!"   -- 8 bytes: no valid message of any step has this length

local function send(node, peer, r, step, payload)
  local ok, err = node.endpoint:send(peer, M.CHANNEL, r * 8 + step, payload)
  if not ok then
    if node.cfg.on_peer_failure == "abort" then error(string.format("round %d: %s", r, err), 0) end
    node.log:write("round %d: secure aggregation: send failed (%s); continuing", r, err)
  end
end

-- What peer sent at the step: a string, or an int64 tensor for MASKED; nil when it is gone or
-- silent (raises under on_peer_failure = "abort", as exchange.receive does).
local function recv(node, peer, r, step)
  local cfg = node.cfg
  local x, why = node.endpoint:recv(peer, M.CHANNEL, r * 8 + step, cfg.peer_timeout, step == MASKED and "int64" or nil)
  if x then return x end
  local what = why == "dead" and "is gone"
               or why == "timeout" and string.format("sent nothing for %g s", cfg.peer_timeout) or why
  if cfg.on_peer_failure == "abort" then
    error(string.format("round %d: peer %d %s; stopping (on_peer_failure = \"abort\")", r, peer, what), 0)
  end
  node.log:write("round %d: peer %d %s (secure aggregation, step %d); continuing without it", r, peer, what, step)
  node.dropped = node.dropped or {}
  node.dropped[peer] = true
  return nil
end

local function gave_up(node, r, who, why)
  node.log:write("round %d: secure aggregation %s gave up: %s", r, who, why)
end

--- secagg.open(node, r, opts) -> a session after the key steps (KEYS to FORWARD) of every
-- aggregation node takes part in this round: opts.aggregate lists the clients of the one it
-- aggregates (opts.size: the length of their vectors), opts.contribute the aggregators it is a
-- client of; opts.fraction sets the threshold (secagg.threshold).
function M.open(node, r, opts)
  local me, f = node.uid, opts.fraction
  local s = { node = node, r = r, size = opts.size, clients = {} }
  for _, a in ipairs(opts.contribute or {}) do
    s.clients[a] = M.client(me, a, r, f)
    send(node, a, r, KEYS, s.clients[a].advertise)
  end
  local agg
  if opts.aggregate and #opts.aggregate > 0 then
    agg = M.aggregator(me, r, f)
    local adv = {}
    for _, u in ipairs(opts.aggregate) do adv[u] = recv(node, u, r, KEYS) end
    local roster = agg:roster(adv)
    for _, u in ipairs(agg.u1) do send(node, u, r, ROSTER, roster) end
    if #agg.u1 == 0 then agg = nil end
  end
  for a, c in pairs(s.clients) do
    local roster = recv(node, a, r, ROSTER)
    local msg, why
    if roster and roster ~= M.GIVE_UP then msg, why = c:share(roster) end
    if why then gave_up(node, r, "with aggregator " .. a, why) end
    if roster and roster ~= M.GIVE_UP then send(node, a, r, SHARES, msg or M.GIVE_UP) end
    if not msg then s.clients[a] = nil end
  end
  if agg then
    local shared = {}
    for _, u in ipairs(agg.u1) do
      local m = recv(node, u, r, SHARES)
      if m ~= M.GIVE_UP then shared[u] = m end
    end
    local fwd, why = agg:forward(shared)
    if fwd then
      for _, v in ipairs(agg.u2) do send(node, v, r, FORWARD, fwd[v]) end
    else
      gave_up(node, r, "as aggregator", why)
      for u in pairs(shared) do send(node, u, r, FORWARD, M.GIVE_UP) end
      agg = nil
    end
  end
  for a, c in pairs(s.clients) do
    local m = recv(node, a, r, FORWARD)
    local ok, why = false, nil
    if m and m ~= M.GIVE_UP then ok, why = c:receive(m) end
    if why then gave_up(node, r, "with aggregator " .. a, why) end
    if why then c.failed = true elseif not ok then s.clients[a] = nil end
  end
  s.agg = agg
  return s
end

--- secagg.close(session, inputs) -> for an aggregating node, the sum of its surviving clients'
-- vectors (int64, mod 2^64) and their uids, or nil and why; inputs = { [aggregator uid] = the
-- int64 vector this node gives it } (masked in place, then freed).
function M.close(s, inputs)
  local node, r, agg = s.node, s.r, s.agg
  for a, c in pairs(s.clients) do
    local y = inputs[a]
    if c.failed or not y then
      send(node, a, r, MASKED, M.GIVE_UP)
      s.clients[a] = nil
    else
      send(node, a, r, MASKED, c:mask(y))
    end
  end
  for _, y in pairs(inputs) do y:free() end
  local survivors, why
  if agg then
    local masked = {}
    for _, u in ipairs(agg.u2) do
      local y = recv(node, u, r, MASKED)
      if y and y:numel() == s.size then masked[u] = y elseif y then y:free() end
    end
    survivors, why = agg:survivors(masked)
    for _, y in pairs(masked) do y:free() end
    if why then gave_up(node, r, "as aggregator", why) end
    for _, u in ipairs(agg.u3) do send(node, u, r, SURVIVORS, why and M.GIVE_UP or survivors) end
  end
  for a, c in pairs(s.clients) do
    local m = recv(node, a, r, SURVIVORS)
    if m and m ~= M.GIVE_UP then
      local out, err = c:unmask(m)
      if err then gave_up(node, r, "with aggregator " .. a, err) end
      send(node, a, r, UNMASK, out or M.GIVE_UP)
    end
  end
  if not agg then return nil, "not aggregating" end
  if why then
    if agg.sum then agg.sum:free() end
    return nil, why
  end
  local responses = {}
  for _, u in ipairs(agg.u3) do
    local m = recv(node, u, r, UNMASK)
    if m ~= M.GIVE_UP then responses[u] = m end
  end
  local sum, got = agg:unmask(responses)
  if not sum then
    gave_up(node, r, "as aggregator", got)
    if agg.sum then agg.sum:free() end
  end
  return sum, got
end

return M
