--- Graph star: one hub linked to every other node.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "star", doc = "one hub linked to every other node (graph.star)",
  options = { center = { type = "integer", min = 0, doc = "the hub (0)" } },
  new = function(cfg, ctx) return require("dpy.graph").star(ctx.nodes, cfg.center) end,
}
