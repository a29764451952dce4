--- dpy.churn: nodes that leave the run for some rounds and rejoin, on a schedule every node derives
-- from the config alone (no messages), so that its neighbours know who is absent.
--   churn = { { uid = 3, leave = 5, rejoin = 9 }, ... }   node 3 is absent in rounds 5 .. 8 (without
--                                                        rejoin: to the end); a uid may leave again
--   churn = { fraction = 0.25, leave_rounds = 3 }        a seeded quarter of the nodes, each absent for 3
--                                                        rounds from a seeded round
-- An absent node neither trains nor sends nor receives; it keeps its model and rejoins with it.
-- Its neighbours aggregate without it (dpsgd: Metropolis-Hastings weights of the graph without the
-- absent nodes; epidemic: the round graph's edges to and from it left out).
local random = require "dpy.random"
local options = require "dpy.options"

local M = {}

local ENTRY = {
  uid = { type = "integer", min = 0, required = true, doc = "the node" },
  leave = { type = "integer", min = 1, required = true, doc = "its first absent round" },
  rejoin = { type = "integer", min = 2, doc = "its first round back (default: never)" },
}
local SEEDED = {
  fraction = { type = "number", above = 0, max = 1, required = true, doc = "the share of nodes that leave" },
  leave_rounds = { type = "integer", min = 1, required = true, doc = "rounds each of them is absent" },
}

--- churn.check(t) -> nil, or a message saying what is wrong with the config value t
function M.check(t)
  if t[1] == nil then return options.problem(t, SEEDED, "churn") end
  for k in pairs(t) do
    if math.type(k) ~= "integer" then
      return string.format("churn: a list of { uid =, leave = [, rejoin =] }, or { fraction =, leave_rounds = }; "
                           .. "got both (key '%s')", tostring(k))
    end
  end
  for i, e in ipairs(t) do
    if type(e) ~= "table" then
      return string.format("churn[%d]: a table { uid =, leave = [, rejoin =] } expected", i)
    end
    local err = options.problem(e, ENTRY, string.format("churn[%d]", i))
    if err then return err end
    if e.rejoin and e.rejoin <= e.leave then
      return string.format("churn[%d]: rejoin (%d) must come after leave (%d)", i, e.rejoin, e.leave)
    end
  end
end

--- churn.schedule(cfg) -> { [uid] = { {leave, rejoin}, ... } } (rejoin: the first round back, or
-- math.huge); raises on a uid that is not a node of the run. The same on every node.
function M.schedule(cfg)
  local c, out = cfg.churn, {}
  if not c then return out end
  local function add(uid, leave, rejoin)
    out[uid] = out[uid] or {}
    table.insert(out[uid], { leave, rejoin or math.huge })
  end
  if c[1] == nil then
    local all = {}
    for u = 0, cfg.nodes - 1 do all[u + 1] = u end
    local rng = random.new(cfg.seed * 7919 + 29)
    rng:shuffle(all)
    local last = math.max(1, cfg.rounds - c.leave_rounds + 1)   -- the latest start that rejoins by the end
    for i = 1, math.floor(c.fraction * cfg.nodes + 0.5) do
      local leave = 1 + rng:int(last)
      add(all[i], leave, leave + c.leave_rounds)
    end
  else
    for i, e in ipairs(c) do
      if e.uid >= cfg.nodes then
        error(string.format("churn[%d]: uid %d is not a node of the run (nodes = %d)", i, e.uid, cfg.nodes), 0)
      end
      add(e.uid, e.leave, e.rejoin)
    end
  end
  return out
end

local cache = setmetatable({}, { __mode = "k" })   -- cfg -> its schedule, or a seeded one's leaves

-- A seeded schedule as every node's first absent round (0: never), drawn once per process and
-- shared by its nodes (data.shared): each node drawing the whole schedule was O(nodes) a node.
local function seeded_leaves(cfg)
  local c = cfg.churn
  local key = string.format("churn: fraction %.17g, leave_rounds %d, rounds %d: seed %d, %d nodes", c.fraction,
                            c.leave_rounds, cfg.rounds, cfg.seed, cfg.nodes)
  return require("dpy.data").shared(key, function()
    local leaves = {}
    for u = 0, cfg.nodes - 1 do leaves[u + 1] = 0 end
    for u, spans in pairs(M.schedule(cfg)) do leaves[u + 1] = spans[1][1] end
    return { leaves = require("dpy.tensor").new(leaves, "int64") }
  end).leaves
end

--- churn.absent(cfg, uid, r) -> whether node uid is absent in round r
function M.absent(cfg, uid, r)
  if not cfg.churn then return false end
  local s = cache[cfg]
  if not s then
    s = cfg.churn[1] == nil and seeded_leaves(cfg) or M.schedule(cfg)
    cache[cfg] = s
  end
  uid = math.tointeger(uid)
  if type(s) ~= "table" then   -- seeded: the shared leaves; one span of leave_rounds from a leave
    local leave = s[uid]:item()
    return leave > 0 and r >= leave and r < leave + cfg.churn.leave_rounds
  end
  for _, span in ipairs(s[uid] or {}) do
    if r >= span[1] and r < span[2] then return true end
  end
  return false
end

--- churn.rejoin(cfg, uid, r) -> the first round from r on where uid is present (nil: none)
function M.rejoin(cfg, uid, r)
  for q = r, cfg.rounds do
    if not M.absent(cfg, uid, q) then return q end
  end
end

--- churn.present(cfg, list, r) -> the uids of list present in round r (list itself without churn)
function M.present(cfg, list, r)
  if not cfg.churn then return list end
  local out = {}
  for _, v in ipairs(list) do
    if not M.absent(cfg, v, r) then out[#out + 1] = v end
  end
  return out
end

return M
