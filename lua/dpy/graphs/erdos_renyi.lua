--- Graph erdos_renyi: each pair of nodes linked with probability p, seeded.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "erdos_renyi", doc = "each pair linked with probability p, seeded (graph.erdos_renyi)",
  options = { p = { type = "number", above = 0, max = 1, default = 0.1, doc = "edge probability" } },
  new = function(cfg, ctx) return require("dpy.graph").erdos_renyi(ctx.nodes, cfg.p, ctx.seed) end,
}
