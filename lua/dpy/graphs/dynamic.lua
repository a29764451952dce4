--- Graph dynamic: a fresh seeded d-regular graph every round, built by every node.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "dynamic", dynamic = true,
  doc = "a fresh seeded d-regular graph every round (graph.regular)",
  options = { degree = { type = "integer", min = 1, default = 4, doc = "neighbours per node" } },
  new = function(cfg, ctx)
    return require("dpy.graph").regular(ctx.nodes, cfg.degree, (ctx.seed or 0) * 1000003 + (ctx.round or 0))
  end,
}
