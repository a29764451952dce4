--- Algorithm dpsgd (D-PSGD, Lian et al. 2017): each round a node trains, sends its model to its
-- graph neighbours and combines it with theirs through the run's sharing rule (by default the
-- Metropolis-Hastings average). A neighbour that failed keeps its weight with the node.
local registry = require "dpy.registry"
local mixing = require "dpy.mixing"
local host = require "dpy.host.core"
local exchange = require "dpy.exchange"

local function round(node, r)
  if exchange.absent(node, r) then return nil, 0 end   -- churn: out this round
  node:fire("pre_train", r)
  local loss, secs = exchange.train(node, node.local_steps)
  node:fire("post_train", r)
  node:fire("pre_exchange", r)
  local t0 = host.clock()
  local g, peers = exchange.neighbours(node, r)
  if node.sharing.exchange then   -- a rule with messages of its own (secure_average)
    node.sharing.exchange(node, r, g, peers)
    node.exchange_seconds = host.clock() - t0
    node:fire("post_exchange", r)
    return loss, secs
  end
  local flat = exchange.model_flat(node)
  if #peers > 0 then exchange.send_model(node, peers, r, flat) end
  flat:free()   -- before the wait: at the barrier a node holds only the bytes it sent
  node.endpoint:release()
  local w = mixing.metropolis_hastings(g, node.uid)
  local got, weights, kept = {}, {}, 0
  local deadline = exchange.deadline(node, true)   -- one for all the peers: they are waited for together
  for _, v in ipairs(peers) do
    local x = exchange.receive(node, v, r, deadline, true)
    if x then
      got[#got + 1], weights[#weights + 1] = x, w[v]
    else
      kept = kept + w[v]   -- a dropped peer's weight stays with this node
    end
  end
  -- the combine opens the node's next round of compute: it keeps the slot through the next
  -- training and sending, so that a node computes only while it holds a slot
  node.endpoint:acquire(r + 1)
  exchange.combine(node, r, got, weights, w[node.uid] + kept)
  for _, x in ipairs(got) do x:free() end
  node.exchange_seconds = host.clock() - t0
  node:fire("post_exchange", r)
  return loss, secs
end

return registry.register {
  kind = "algorithm", name = "dpsgd", graph = true, simulated = true, churn = true, deadlines = true,
  directed = "sharing",   -- a directed graph when its sharing rule runs the exchange and says it takes one
  doc = "D-PSGD: train, send the model to the graph's neighbours, combine by the sharing rule",
  new = function() return round end,
}
