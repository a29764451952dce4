--- Built-in action label_flipping: chosen nodes train on flipped labels (a data-poisoning attack).
-- Options: nodes = { uid, ... } or fraction = 0.2 (a seeded choice among the training nodes),
-- map = { [0] = new label, ... } (the classes it leaves out keep theirs; default y -> classes - 1 - y),
-- seed (default: the run's).
-- The poisoned uids are recorded in manifest.json (actions.label_flipping.poisoned).
local registry = require "dpy.registry"
local actions = require "dpy.actions"
local data = require "dpy.data"

-- A class of 0..classes - 1 (2.0 is class 2), or nil.
local function class(v, classes)
  local k = type(v) == "number" and math.tointeger(v)
  return k and k >= 0 and k < classes and k or nil
end

-- nil, or why map does not fit the data's classes
local function map_problem(map, classes)
  for c, to in pairs(map or {}) do
    if not class(c, classes) or not class(to, classes) then
      return string.format("label_flipping: map[%s] = %s: the data's classes are 0..%d", tostring(c), tostring(to),
                           classes - 1)
    end
  end
end

return registry.register {
  kind = "action",
  name = "label_flipping",
  wraps = "train_set",   -- its node:wrap: given in the config only, not added to a running node
  options = {
    nodes = { type = "list", of = "integer", doc = "the poisoned uids" },
    fraction = { type = "number", min = 0, max = 1, doc = "or a seeded fraction of the training nodes" },
    map = { type = "table", doc = "{ [0] = new label, ... } (default y -> classes - 1 - y)" },
    seed = { type = "integer", doc = "the seed of that choice (the run's)" },
  },
  doc = "chosen nodes train on flipped labels (y -> classes - 1 - y, or map)",
  validate = actions.validate_choice,
  -- before the run: a map the data does not have failed the poisoned nodes as they started
  check = function(opts, _, _, train) return train and map_problem(opts.map, train.classes) end,
  manifest = function(opts, cfg) return { poisoned = actions.choose_nodes(opts, cfg, "label_flipping") } end,
  new = function(opts, node)
    if not actions.is_chosen(opts, node, "label_flipping") or not node.loader then return {} end
    local classes = node.train_set.classes
    local bad = map_problem(opts.map, classes)
    if bad then error(bad, 0) end
    local map = {}   -- a class the option's map leaves out keeps its label
    for c = 0, classes - 1 do map[c] = opts.map and class(opts.map[c] or c, classes) or classes - 1 - c end
    node:wrap("train_set", function(ds) return data.relabel(ds, map) end)   -- the loader follows
    node.poisoned = true
    return { startup = function(n) n.log:write("label_flipping: this node trains on flipped labels") end }
  end,
}
