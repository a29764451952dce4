--- Graph torus: the nodes on a grid of rows x (n / rows), each linked to its four neighbours.
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "torus", doc = "a grid, each node linked to its 4 neighbours (graph.torus)",
  options = { rows = { type = "integer", min = 1, doc = "rows (about sqrt(n))" },
              wrap = { type = "boolean", doc = "wrap around the edges (true)" } },
  new = function(cfg, ctx)
    local n = ctx.nodes
    local rows = cfg.rows or math.floor(math.sqrt(n))
    if n % rows ~= 0 then error(string.format("torus: %d nodes do not fill %d rows", n, rows), 0) end
    return require("dpy.graph").torus(rows, n // rows, cfg.wrap)
  end,
}
