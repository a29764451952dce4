--- dpy.actions: what the built-in actions share. An action is a component of kind "action" (a
-- file of lua/dpy/actions/, or a user's file named by path in the config's `actions` list):
--   registry.register { kind = "action", name, options = schema,
--                       new = function(cfg, node) return handlers end }
-- where handlers maps events (init, startup, pre_train, post_train, pre_exchange, post_exchange,
-- shutdown) to functions(node, round), and may hold `outgoing = function(node, flat, round) ->
-- tensor`, a modifier of the model vector the node sends (see dpy.container). The container
-- builds the actions of a config in order, after every other component.
local registry = require "dpy.registry"

local M = {}

--- The nodes an attack action picks (sorted uids, the same in every process): opts.nodes, or a
-- seeded fraction of the training nodes (opts.fraction, opts.seed or the run's seed).
function M.choose_nodes(opts, cfg, what)
  local first = require("dpy.container").has_server(cfg) and 1 or 0   -- not the server
  if opts.nodes then
    for _, u in ipairs(opts.nodes) do
      if math.type(u) ~= "integer" or u < first or u >= cfg.nodes then
        error(string.format("%s: nodes lists %s, not a training node (%d..%d)", what, tostring(u),
                            first, cfg.nodes - 1), 0)
      end
    end
    local list = { table.unpack(opts.nodes) }
    table.sort(list)
    return list
  end
  local fraction = opts.fraction or 0
  if type(fraction) ~= "number" or fraction < 0 or fraction > 1 then
    error(what .. ": fraction must be in [0, 1]", 0)
  end
  local candidates = {}
  for u = first, cfg.nodes - 1 do candidates[#candidates + 1] = u end
  require("dpy.random").new((opts.seed or cfg.seed) * 104729 + 17):shuffle(candidates)
  local list = { table.unpack(candidates, 1, math.floor(fraction * #candidates + 0.5)) }
  table.sort(list)
  return list
end

--- actions.validate_choice(opts) -> nil | message: an attack action's spec validate: it names the
-- nodes it takes one way (an attack on nobody would run as if there were none, without a word).
function M.validate_choice(opts)
  if opts.nodes == nil and opts.fraction == nil then return "give nodes = { uid, ... } or fraction" end
  if opts.nodes ~= nil and opts.fraction ~= nil then return "give nodes or fraction, not both" end
end

--- Whether node is among the nodes an attack action picks.
function M.is_chosen(opts, node, what)
  for _, u in ipairs(M.choose_nodes(opts, node.cfg, what)) do
    if u == node.uid then return true end
  end
  return false
end

--- What the actions of cfg record in the manifest: { [name] = table } for each action whose
-- spec has manifest(opts, cfg).
function M.manifest(cfg)
  local out = {}
  for _, entry in ipairs(cfg.actions or {}) do
    local spec = registry.spec("action", entry, 2)
    if spec.manifest then out[spec.name] = spec.manifest(type(entry) == "table" and entry or {}, cfg) end
  end
  return next(out) and out or nil
end

return M
