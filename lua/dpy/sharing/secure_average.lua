--- Sharing secure_average: the Metropolis-Hastings average of average.lua, each node learning
-- only the weighted sum of its neighbours' models (secure aggregation, dpy.secagg: every node
-- aggregates its neighbours, who mask w_ij x_j pairwise among themselves), as DecentralizePy's
-- secure aggregation does. A neighbour that leaves mid-round is left out of the sum (its masks
-- recovered from the others' shares) and its weight stays with the node; below the threshold the
-- node keeps its own model for the round. With one neighbour the sum is that neighbour's model.
-- It runs its own messages: dpsgd hands it the round's exchange (exchange, not combine).
local registry = require "dpy.registry"
local mixing = require "dpy.mixing"
local crypto = require "dpy.crypto.core"
local secagg = require "dpy.secagg"
local exchange = require "dpy.exchange"

local function masked_round(o, node, r, g, peers)
  local w = mixing.metropolis_hastings(g, node.uid)
  local flat = node.model:get_flat()
  local shared = exchange.modified(node, flat, r)
  local inputs = {}
  for _, a in ipairs(peers) do
    -- limit: the sum of a's neighbours' encoded values stays in int64 (they add mod 2^64)
    local y, err = crypto.encode(shared, o.fraction_bits, w[a], math.min(2 ^ 62, 2 ^ 63 / #g.adj[a]))
    if not y then error(string.format("round %d: secure_average: the model's %s", r, err), 0) end
    inputs[a] = y
  end
  if shared ~= flat then shared:free() end
  node.endpoint:release()
  local session = secagg.open(node, r, { aggregate = peers, contribute = peers, size = flat:numel(),
                                         fraction = o.threshold })
  local sum, survivors = secagg.close(session, inputs)
  node.endpoint:acquire(r + 1)   -- as dpsgd: the combine opens the node's next round of compute
  if sum then
    local kept, alive = w[node.uid], {}
    for _, v in ipairs(survivors) do alive[v] = true end
    for _, v in ipairs(peers) do
      if not alive[v] then kept = kept + w[v] end   -- a neighbour left out: its weight stays home
    end
    local mixed <close> = crypto.decode(sum, o.fraction_bits)
    mixed:add_(flat, kept)
    node.model:set_flat(mixed)
    sum:free()
  end
  flat:free()
end

return registry.register {
  kind = "sharing", name = "secure_average",
  exchange = true,   -- its messages are its own: no simulated clock, churn or round deadline (dpy.layout.check)
  payload_bound = function(cfg, values, encoded)
    return math.max(encoded or 0, secagg.payload_bound(cfg.nodes, values))
  end,
  doc = "Metropolis-Hastings average by secure aggregation: a node learns only its neighbours' weighted sum",
  options = {
    fraction_bits = { type = "integer", min = 8, max = 48, default = 32,
                      doc = "fixed point: w_ij x_j is encoded as round(w_ij * x_j * 2^bits) in int64" },
    threshold = { type = "number", min = 0, below = 1, default = 0.5,
                  doc = "Shamir threshold: more than this fraction of a node's neighbours recover a mask" },
  },
  new = function(o)
    return {
      exchange = function(node, r, g, peers) return masked_round(o, node, r, g, peers) end,
      combine = function() error("secure_average runs its own exchange (dpsgd calls sharing.exchange)", 0) end,
    }
  end,
}
