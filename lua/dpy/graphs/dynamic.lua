--- Graph dynamic: a fresh seeded d-regular graph every round, built by every node.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "dynamic", dynamic = true,
  doc = "a fresh seeded d-regular graph every round (graph.regular)",
  options = require("dpy.graphs.regular").options,   -- degree
  new = function(cfg, ctx)
    return require("dpy.graph").regular(ctx.nodes, cfg.degree, (ctx.seed or 0) * 1000003 + (ctx.round or 0))
  end,
}
