--- Graph small_world: Watts-Strogatz, a ring of k neighbours each rewired with probability beta.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "small_world",
  doc = "Watts-Strogatz: a ring of k neighbours, each link rewired with probability beta (graph.small_world)",
  options = { k = { type = "integer", min = 2, default = 4, doc = "ring neighbours per node" },
              beta = { type = "number", min = 0, max = 1, default = 0.1, doc = "rewiring probability" } },
  new = function(cfg, ctx) return require("dpy.graph").small_world(ctx.nodes, cfg.k, cfg.beta, ctx.seed) end,
}
