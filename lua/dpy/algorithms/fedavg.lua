--- Algorithm fedavg (FedAvg, McMahan et al. 2017): node 0 is the server. Each round it sends the
-- global model to a seeded `fraction` of the clients (the same choice on every node); they train
-- local_steps and send it back with their sample counts; the server averages them weighted by
-- those counts.
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"
local host = require "dpy.host.core"
local exchange = require "dpy.exchange"


local function serve(node, r, chosen)
  local t0 = host.clock()
  node:fire("pre_exchange", r)
  local flat = node.model:get_flat()
  exchange.send_model(node, chosen, r, flat)
  local sum, total = flat:mul(0), 0
  local deadline = exchange.deadline(node)   -- one for all the clients: they are waited for together
  for _, c in ipairs(chosen) do
    local x = exchange.receive(node, c, r, deadline)
    local size = x and node.endpoint:recv(c, exchange.COUNT, r, exchange.timeout(node, deadline), "float64")
    if x and size then
      sum:add_(x, size:item())
      total = total + size:item()
    end
    if x then x:free() end
  end
  if total > 0 then node.model:set_flat(sum / total) end
  node.exchange_seconds = host.clock() - t0
  node:fire("post_exchange", r)
  return nil, 0
end

local function round(node, r)
  local chosen = exchange.sampled(node.cfg, r)
  if node.is_server then return serve(node, r, chosen) end
  local mine = false
  for _, c in ipairs(chosen) do mine = mine or c == node.uid end
  if not mine then return nil, 0 end
  local t0 = host.clock()
  local global = exchange.receive(node, 0, r)
  if not global then return nil, 0 end
  node.model:set_flat(global)
  node:fire("pre_train", r)
  local loss, secs = exchange.train(node, node.local_steps)
  node.endpoint:release()
  node:fire("post_train", r)
  node:fire("pre_exchange", r)
  local flat = node.model:get_flat()
  exchange.send_model(node, 0, r, flat)
  flat:free()
  exchange.send(node, 0, r, tensor.new({ node.indices:numel() + 0.0 }, "float64"), exchange.COUNT)
  node.exchange_seconds = host.clock() - t0 - secs
  node:fire("post_exchange", r)
  return loss, secs
end

return registry.register {
  kind = "algorithm", name = "fedavg", server = true,
  doc = "FedAvg: node 0 is the server; a seeded fraction of clients trains each round, averaged by sample count",
  new = function() return round end,
}
