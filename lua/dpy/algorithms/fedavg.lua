--- Algorithm fedavg (FedAvg, McMahan et al. 2017): node 0 is the server. Each round it sends the
-- global model to a seeded `fraction` of the clients (the same choice on every node); they train
-- local_steps and send it back with their sample counts; the server averages them weighted by
-- those counts. With sharing topk or random_subsample a client sends only a part of its model
-- (dpy.sparse.upload; topk with error feedback), and the server averages each coordinate over the
-- clients that sent it (dpy.sparse.federated_mean; a coordinate nobody sent keeps its value).
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"
local host = require "dpy.host.core"
local exchange = require "dpy.exchange"
local sparse = require "dpy.sparse"
local transforms = require "dpy.transforms"

local SPARSE = { topk = true, random_subsample = true }   -- the rules a client's upload may follow

-- The run's sparse upload ({ sharing = dpy.sparse.upload, chain = the transforms over its payload }),
-- or nil: sharing average, the whole model.
local function upload(node)
  local spec, o = registry.options("sharing", node.cfg.sharing)
  if not SPARSE[spec.name] then return nil end
  local up = sparse.upload(spec.name, o, node)
  return { sharing = up, chain = transforms.chain(node.cfg.transforms, { dtype = up.payload, bound = up.bound }) }
end

local function serve(node, r, chosen, codec)
  local t0 = host.clock()
  node:fire("pre_exchange", r)
  local flat = node.model:get_flat()
  exchange.send_model(node, chosen, r, flat)
  local sum, total = flat:mul(0), 0
  local got, counts = {}, {}
  local deadline = exchange.deadline(node)   -- one for all the clients: they are waited for together
  for _, c in ipairs(chosen) do
    local x = exchange.receive(node, c, r, deadline, false, codec)
    local size = x and node.endpoint:recv(c, exchange.COUNT, r, exchange.timeout(node, deadline), "float64")
    if x and size and codec then
      got[#got + 1], counts[#counts + 1] = x, size:item()
    elseif x and size then
      sum:add_(x, size:item())
      total = total + size:item()
    end
    if x and not (size and codec) then x:free() end
  end
  if #got > 0 then
    local mean <close> = sparse.federated_mean(flat, got, counts)
    node.model:set_flat(mean)
    for _, m in ipairs(got) do m:free() end
  elseif total > 0 then
    node.model:set_flat(sum / total)
  end
  node.exchange_seconds = host.clock() - t0
  node:fire("post_exchange", r)
  return nil, 0
end

local function round(node, r, codec)
  if node.is_server then return serve(node, r, exchange.sampled(node.cfg, r), codec) end
  if not exchange.is_sampled(node.cfg, r, node.uid) then return nil, 0 end
  local t0 = host.clock()
  local global = exchange.receive(node, 0, r)
  if not global then return nil, 0 end
  node.model:set_flat(global)
  if codec then   -- the server's model: what the upload's change is measured from
    if codec.sharing.global then codec.sharing.global:free() end
    codec.sharing.global = global
  end
  node:fire("pre_train", r)
  local loss, secs = exchange.train(node, node.local_steps)
  node.endpoint:release()
  node:fire("post_train", r)
  node:fire("pre_exchange", r)
  local flat = node.model:get_flat()
  exchange.send_model(node, 0, r, flat, codec)
  flat:free()
  exchange.send(node, 0, r, tensor.new({ node.indices:numel() + 0.0 }, "float64"), exchange.COUNT)
  node.exchange_seconds = host.clock() - t0 - secs
  node:fire("post_exchange", r)
  return loss, secs
end

return registry.register {
  kind = "algorithm", name = "fedavg", server = true, samples = true,
  doc = "FedAvg: node 0 is the server; a seeded fraction of clients trains each round, averaged by sample count",
  check = function(_, cfg)
    local name = registry.spec("sharing", cfg.sharing).name
    if name ~= "average" and not SPARSE[name] then
      return string.format("fedavg: sharing '%s' does not apply: a client sends its whole model (average) or "
                           .. "a part of it (topk, random_subsample)", name)
    end
    if SPARSE[name] then   -- the transforms also run over the clients' sparse payloads
      local ok, err = pcall(transforms.chain, cfg.transforms, { dtype = "uint8" })
      if not ok then return "fedavg with sharing " .. name .. ": " .. err end
    end
  end,
  -- a sparse upload: the payload limit of its rule (the server's model goes out dense, as ever)
  payload_bound = function(cfg, values)
    if SPARSE[registry.spec("sharing", cfg.sharing).name] then return sparse.payload_bound(cfg, values) end
    return 0
  end,
  new = function(_, node)
    local codec = upload(node)
    if codec and codec.sharing.state and not node.is_server then   -- topk's residual, in checkpoints
      node:wrap("sharing", function() return codec.sharing.state end)
    end
    return function(nd, r) return round(nd, r, codec) end
  end,
}
