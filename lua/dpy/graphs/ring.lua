--- Graph ring: node u linked to u - 1 and u + 1 (mod n). Like every built-in graph, its builder
-- is in dpy.graph, loaded when the graph is built: a node reads the graph the launcher wrote.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "ring", doc = "node u linked to u - 1 and u + 1, mod n (graph.ring)",
  new = function(_, ctx) return require("dpy.graph").ring(ctx.nodes) end,
}
