--- Algorithm ps (a synchronous parameter server): node 0 holds the model. Each round the workers
-- pull it, compute the gradient of local_steps batches (the mean of the batches' means; local_epochs:
-- an epoch's batches, a shorter last one weighing as much as the others) and
-- push it, with the targets and loss of a node's own training (a binary task's too); the server
-- applies the mean of the workers' gradients with its optimizer.
local registry = require "dpy.registry"
local host = require "dpy.host.core"
local exchange = require "dpy.exchange"

local function live_workers(node)
  local workers = {}
  for u = 1, node.cfg.nodes - 1 do
    if not (node.dropped and node.dropped[u]) then workers[#workers + 1] = u end
  end
  return workers
end

-- The mean gradient into .grad of each parameter, then one optimizer step.
local function apply(node, mean)
  node.optimizer:zero_grad()
  local off = 0
  for _, p in ipairs(node.model:parameters()) do
    local k = p:numel()
    local gp = mean:narrow(0, off, k):view(p:size())
    local loss = (p * gp):sum()   -- d loss / d p = gp
    loss:backward()
    off = off + k
  end
  node.optimizer:step()
end

local function serve(node, r)
  local t0 = host.clock()
  node:fire("pre_exchange", r)
  local flat = node.model:get_flat()
  local workers = live_workers(node)
  exchange.send_model(node, workers, r, flat)
  local sum, n = flat:mul(0), 0
  local deadline = exchange.deadline(node)   -- one for all the workers: they are waited for together
  for _, u in ipairs(workers) do
    local g = exchange.receive(node, u, r, deadline)
    if g then
      sum:add_(g)
      g:free()
      n = n + 1
    end
  end
  if n > 0 then apply(node, sum / n) end
  node.exchange_seconds = host.clock() - t0
  node:fire("post_exchange", r)
  return nil, 0
end

local function round(node, r)
  if node.is_server then return serve(node, r) end
  local t0 = host.clock()
  local model = exchange.receive(node, 0, r)
  if not model then return nil, 0 end
  node.model:set_flat(model)
  node:fire("pre_train", r)
  node.endpoint:acquire(r)
  local t1 = host.clock()
  node.optimizer:zero_grad()
  local sum, k = 0, node.local_steps   -- local_epochs' steps, when set
  for _ = 1, k do sum = sum + node.trainer:backward() end   -- the batches, targets and loss a node's training takes
  local grad = node.model:grad_flat() / k
  exchange.straggle(node, k, t1)   -- stragglers (in real time: ps has no simulated clock)
  local secs = host.clock() - t1
  node.endpoint:release()
  node:fire("post_train", r)
  node:fire("pre_exchange", r)
  exchange.send_model(node, 0, r, grad)
  grad:free()
  node.exchange_seconds = host.clock() - t0 - secs
  node:fire("post_exchange", r)
  return sum / k, secs
end

return registry.register {
  kind = "algorithm", name = "ps", server = true,
  doc = "parameter server: node 0 applies the mean of the workers' gradients with its optimizer",
  new = function() return round end,
}
