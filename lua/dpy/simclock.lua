--- dpy.simclock: stragglers and the simulated clock, so that time-to-accuracy can be studied on one
-- machine.
--   stragglers = { factors = { f0, f1, ... } }       each node's compute slowdown, in uid order
--   stragglers = { fraction = 0.1, slowdown = 4 }     a seeded fraction of the nodes, `slowdown` times slower
--   stragglers = { lognormal = 0.5 }                  each node's factor exp(0.5 N(0, 1)), seeded
--   stragglers = { trace = "file.csv" }               per round and node, from a file (see dpy.trace)
-- Without sim_clock a straggler is emulated in real time: after its training it waits (f - 1) times
-- what the training took (without a compute slot). With
--   sim_clock = { step_seconds = s, latency = l [, latency_max = m] [, bandwidth = b [, bandwidth_min = c]] }
-- every node keeps a simulated clock instead: a round's training takes local steps * s * factor, a
-- model of B bytes sent at simulated time t reaches its receiver at t + the link's latency (l, or
-- per link a seeded uniform draw in [l, m)) + B / the link's bandwidth (b bytes per second, or per
-- link a seeded draw in [c, b); none: no transfer time), and a round ends when the node's training
-- and the models it accepted are done. A sender's clock and its model's byte count travel beside
-- the model (float64s on channel CLOCK, left out of the byte metrics), so the times depend on
-- nothing measured: bit-identical in every layout.
-- With round_timeout, the deadline is simulated too: a model arriving later than round_timeout
-- after the receiver's own send is late (dropped, counted in late_messages).
local random = require "dpy.random"
local tensor = require "dpy.tensor"

local M = {}

M.CLOCK = 6   -- the fabric channel of the senders' simulated clocks

-- Raises unless s gives one form of stragglers, whole: a factors list of n, or fraction with slowdown.
local function check_form(s, n)
  local forms = (s.factors and 1 or 0) + ((s.fraction or s.slowdown) and 1 or 0) + (s.lognormal and 1 or 0)
                + (s.trace and 1 or 0)
  if forms ~= 1 then error("stragglers: give one of factors, fraction (with slowdown), lognormal or trace", 0) end
  if s.factors and #s.factors ~= n then
    error(string.format("stragglers: factors lists %d nodes, the config has %d", #s.factors, n), 0)
  elseif s.fraction and not s.slowdown then
    error(string.format("stragglers: fraction = %s needs slowdown (how many times slower those nodes compute)",
                        tostring(s.fraction)), 0)
  elseif s.slowdown and not s.fraction then
    error(string.format("stragglers: slowdown = %s needs fraction (the share of the nodes that are that slow)",
                        tostring(s.slowdown)), 0)
  end
end

--- simclock.factors(cfg [, r]) -> { [uid] = compute slowdown } for every node in round r (default 1;
-- only a trace changes with the round; 1 without stragglers). Raises on a list of the wrong
-- length, an ambiguous table or a malformed trace file.
function M.factors(cfg, r)
  local s, n, f = cfg.stragglers, cfg.nodes, {}
  for u = 0, n - 1 do f[u] = 1 end
  if not s then return f end
  check_form(s, n)
  if s.trace then
    local trace = require "dpy.trace"   -- only for a trace: a node's Lua state holds what it runs
    local row = trace.row(trace.load(s.trace, n), r or 1)
    for u = 0, n - 1 do f[u] = row[u + 1] end
  elseif s.factors then
    for u = 0, n - 1 do f[u] = s.factors[u + 1] end
  elseif s.lognormal then
    local rng = random.new(cfg.seed * 7919 + 17)
    for u = 0, n - 1 do f[u] = math.exp(s.lognormal * rng:normal()) end
  else
    local all = {}
    for u = 0, n - 1 do all[u + 1] = u end
    random.new(cfg.seed * 7919 + 13):shuffle(all)
    for i = 1, math.floor(s.fraction * n + 0.5) do f[all[i]] = s.slowdown end
  end
  -- exp(sigma N) overflows: an infinite slowdown ran the simulated clock to inf; past 1e9 (the
  -- config's bound on slowdown and factors) a node failed at its wait of (slowdown - 1) x its training
  for u = 0, n - 1 do
    if not (f[u] > 0 and f[u] <= 1e9) then
      local form = s.lognormal and "lognormal = " .. tostring(s.lognormal) or s.trace and "trace " .. s.trace
                   or "the table"
      error(string.format("stragglers: %s gives node %d a slowdown of %s (a number > 0 and <= 1e9)", form, u,
                          tostring(f[u])), 0)
    end
  end
  return f
end

--- simclock.latency(cfg, from, to) -> the simulated seconds a message takes on the link from -> to
function M.latency(cfg, from, to)
  local c = cfg.sim_clock
  if not c.latency_max then return c.latency or 0 end
  -- uids read from graph.json are floats
  local u = random.new((cfg.seed * 1000003 + math.tointeger(from)) * 1000003 + math.tointeger(to)):uniform()
  return (c.latency or 0) + u * (c.latency_max - (c.latency or 0))
end

--- simclock.bandwidth(cfg, from, to) -> the bytes per second of the link from -> to (nil: unlimited)
function M.bandwidth(cfg, from, to)
  local c = cfg.sim_clock
  if not c.bandwidth_min then return c.bandwidth end
  local u = random.new((cfg.seed * 1000033 + math.tointeger(from)) * 1000033 + math.tointeger(to)):uniform()
  return c.bandwidth_min + u * (c.bandwidth - c.bandwidth_min)
end

local Clock = {}
Clock.__index = Clock

-- Every node's slowdowns of a drawn or traced form, drawn or read once per process and shared by
-- its nodes (data.shared): float64, the trace's rows one after the other (one row otherwise), a
-- node's own at row * nodes + uid. Every node drawing or reading them all was O(nodes) a node, and
-- with a trace a round.
local function shared_factors(cfg)
  local s = cfg.stragglers
  -- a trace by its path, size and time: a file written again is read again
  local form = s.trace and string.format("trace %s (%s)", s.trace, require("dpy.data.core").stamp(s.trace))
               or s.lognormal and string.format("lognormal %.17g", s.lognormal)
               or string.format("fraction %.17g, slowdown %.17g", s.fraction, s.slowdown)
  local key = string.format("stragglers %s: seed %d, %d nodes", form, cfg.seed, cfg.nodes)
  local shared = require("dpy.data").shared(key, function()
    local rows = s.trace and #require("dpy.trace").load(s.trace, cfg.nodes) or 1
    local all = {}
    for r = 1, rows do
      local f = M.factors(cfg, r)
      for u = 0, cfg.nodes - 1 do all[#all + 1] = f[u] end
    end
    return { factors = tensor.new(all, "float64") }
  end)
  return shared.factors
end

-- The slowdown of node uid of nodes in round r, of the shared factors.
local function read(factors, nodes, r, uid)
  return factors[(r - 1) % (factors:numel() // nodes) * nodes + uid]:item()
end

--- simclock.new(cfg, uid) -> the node's clock: { factor (round 1's slowdown), simulated (whether
-- sim_clock is on), now }
function M.new(cfg, uid)
  -- every node builds one: its own factor, not a table of every node's (O(nodes)); a run without
  -- stragglers or sim_clock gets dpy.container's STEADY instead, with these fields
  local s, factor, shared = cfg.stragglers, 1, nil
  if s then
    check_form(s, cfg.nodes)
    if s.factors then
      factor = s.factors[uid + 1]
    else
      local all = shared_factors(cfg)
      factor = read(all, cfg.nodes, 1, uid)
      if s.trace then shared = all else all:free() end   -- a trace's clock reads it every round
    end
  end
  return setmetatable({ cfg = cfg, uid = uid, factor = factor, simulated = cfg.sim_clock ~= nil,
                        traced = s and s.trace ~= nil, shared = shared,
                        now = 0, sent = 0, done = 0, late = 0 }, Clock)
end

--- clock:slowdown(r) -> the node's compute slowdown in round r
function Clock:slowdown(r)
  if not self.traced then return self.factor end
  return read(self.shared, self.cfg.nodes, r, self.uid)
end

--- clock:trained(steps, r): the node trained steps in round r; its models leave at now + their time
function Clock:trained(steps, r)
  self.sent = self.now + steps * self.cfg.sim_clock.step_seconds * self:slowdown(r)
  self.done = self.sent
end

--- clock:stamp(bytes) -> a float64 tensor of the send's simulated time and the bytes sent (what the
-- receivers get)
function Clock:stamp(bytes) return tensor.new({ self.sent, bytes }, "float64") end

--- clock:accept(peer, t, bytes) -> whether a model of bytes that peer sent at simulated time t
-- arrives in time (by the deadline of round_timeout after this node's send, when set); an accepted
-- one extends the round.
function Clock:accept(peer, t, bytes)
  local bw = M.bandwidth(self.cfg, peer, self.uid)
  local arrive = t + M.latency(self.cfg, peer, self.uid) + (bw and bytes / bw or 0)
  local timeout = self.cfg.round_timeout
  if timeout and arrive > self.sent + timeout then
    self.late = self.late + 1
    return false
  end
  if arrive > self.done then self.done = arrive end
  return true
end

--- clock:finish() -> the simulated time at the end of the round (the next one starts there)
function Clock:finish()
  self.now = self.done
  return self.now
end

return M
