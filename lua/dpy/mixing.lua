--- dpy.mixing: the weights a node averages its neighbours' models with. Apart from dpy.graph (the
-- topologies, which only the launcher builds for a fixed graph), so that a node need not load it.
local M = {}

--- mixing.metropolis_hastings(g, u) -> { [v] = weight } for u and its neighbours:
-- w_uv = 1 / (1 + max(deg u, deg v)), w_uu = 1 - sum of the others (a doubly stochastic matrix)
function M.metropolis_hastings(g, u)
  local w, du, sum = {}, #g.adj[u], 0
  for _, v in ipairs(g.adj[u]) do
    w[v] = 1 / (1 + math.max(du, #g.adj[v]))
    sum = sum + w[v]
  end
  w[u] = 1 - sum
  return w
end

return M
