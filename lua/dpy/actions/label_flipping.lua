--- Built-in action label_flipping: chosen nodes train on flipped labels (a data-poisoning attack).
-- Options: nodes = { uid, ... } or fraction = 0.2 (a seeded choice among the training nodes),
-- map = { [0] = new label, ... } (default y -> classes - 1 - y), seed (default: the run's).
-- The poisoned uids are recorded in manifest.json (actions.label_flipping.poisoned).
local registry = require "dpy.registry"
local random = require "dpy.random"
local data = require "dpy.data"

local M = {}

--- The poisoned uids of a run (sorted), the same in every process.
function M.poisoned(opts, cfg)
  local first = (cfg.algorithm == "fedavg" or cfg.algorithm == "ps") and 1 or 0   -- not the server
  if opts.nodes then
    for _, u in ipairs(opts.nodes) do
      if math.type(u) ~= "integer" or u < first or u >= cfg.nodes then
        error(string.format("label_flipping: nodes lists %s, not a training node (%d..%d)",
                            tostring(u), first, cfg.nodes - 1), 0)
      end
    end
    local list = { table.unpack(opts.nodes) }
    table.sort(list)
    return list
  end
  local fraction = opts.fraction or 0
  if type(fraction) ~= "number" or fraction < 0 or fraction > 1 then
    error("label_flipping: fraction must be in [0, 1]", 0)
  end
  local candidates = {}
  for u = first, cfg.nodes - 1 do candidates[#candidates + 1] = u end
  random.new((opts.seed or cfg.seed) * 104729 + 17):shuffle(candidates)
  local k = math.floor(fraction * #candidates + 0.5)
  local list = { table.unpack(candidates, 1, k) }
  table.sort(list)
  return list
end

M.spec = registry.register {
  kind = "action",
  name = "label_flipping",
  options = { nodes = true, fraction = true, map = true, seed = true },
  doc = "chosen nodes train on flipped labels (y -> classes - 1 - y, or map)",
  manifest = function(opts, cfg) return { poisoned = M.poisoned(opts, cfg) } end,
  new = function(opts, node)
    local mine = false
    for _, u in ipairs(M.poisoned(opts, node.cfg)) do mine = mine or u == node.uid end
    if not mine or not node.loader then return {} end
    local classes = node.train_set.classes
    local map = opts.map
    if not map then
      map = {}
      for c = 0, classes - 1 do map[c] = classes - 1 - c end
    end
    node.train_set = data.relabel(node.train_set, map)
    node.loader.ds = node.train_set
    node.poisoned = true
    return { startup = function(n) n.log:write("label_flipping: this node trains on flipped labels") end }
  end,
}

return M.spec
