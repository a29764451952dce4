--- Graph regular: a seeded random d-regular graph (the default, degree 4).
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "regular", doc = "a seeded random d-regular graph (graph.regular)",
  options = { degree = { type = "integer", min = 1, default = 4, doc = "neighbours per node" } },
  new = function(cfg, ctx) return require("dpy.graph").regular(ctx.nodes, cfg.degree, ctx.seed) end,
}
