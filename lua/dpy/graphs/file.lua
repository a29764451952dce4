--- Graph file: a graph file in DecentralizePy's formats (an edge list or an adjacency list).
local registry = require "dpy.registry"

return registry.register {
  kind = "graph", name = "file", doc = "a DecentralizePy graph file (graph.from_file)",
  options = { path = { type = "path", required = true, exists = "file",
                       doc = "a DecentralizePy graph file (graph.from_file)" },
              format = { one_of = { "edges", "adjacency" }, doc = "its format; default: the one its content allows" },
              directed = { type = "boolean", default = false,
                           doc = "its lines are arcs: 'u v' (or node u's line) lists whom u sends to; "
                                 .. "for a rule that takes a directed graph" } },
  new = function(cfg, ctx)
    local graph, n = require "dpy.graph", ctx.nodes
    local g = graph.from_file(cfg.path, cfg.format, n, "the config's nodes", cfg.directed)
    if g.n ~= n then error(string.format("graph file %s has %d nodes, the config %d", cfg.path, g.n, n), 0) end
    local u, v
    if cfg.directed and not ctx.directed then u, v = graph.one_way(g) end
    if u then
      error(string.format("graph file %s (directed = true): node %d sends to %d, but %d not to %d, which %s",
                          cfg.path, u, v, v, u, ctx.undirected or "a rule of links both ways cannot use"), 0)
    end
    return g
  end,
}
