--- Graph full: every node linked to every other.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "full", doc = "every node linked to every other (graph.full)",
  new = function(_, ctx) return require("dpy.graph").full(ctx.nodes) end,
}
