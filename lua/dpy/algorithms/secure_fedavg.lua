--- Algorithm secure_fedavg: FedAvg (as fedavg) with secure aggregation (dpy.secagg, Bonawitz et
-- al. 2017): the server learns only the round's weighted sum of the clients' models and of their
-- sample counts, never a client's model or count. A client that leaves mid-round is left out of
-- the average, its masks recovered from the others' shares; below the threshold the server keeps
-- its model for the round.
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"
local crypto = require "dpy.crypto.core"
local host = require "dpy.host.core"
local exchange = require "dpy.exchange"
local secagg = require "dpy.secagg"


local function serve(node, r, chosen, o)
  local t0 = host.clock()
  node:fire("pre_exchange", r)
  local flat = node.model:get_flat()
  local d = flat:numel()
  exchange.send_model(node, chosen, r, flat)
  local session = secagg.open(node, r, { aggregate = chosen, size = d + 1, fraction = o.threshold })
  local sum, survivors = secagg.close(session, {})
  if sum then
    local total = sum[d]:item() / 2 ^ o.fraction_bits   -- the survivors' sample count
    if total > 0 then
      local avg <close> = crypto.decode(sum:narrow(0, 0, d), o.fraction_bits, total)
      node.model:set_flat(avg)
    end
    node.log:write("round %d: secure aggregation of %d of %d clients", r, #survivors, #chosen)
    sum:free()
  end
  flat:free()
  node.exchange_seconds = host.clock() - t0
  node:fire("post_exchange", r)
  return nil, 0
end


local function round(node, r, o)
  local chosen = exchange.sampled(node.cfg, r)
  if node.is_server then return serve(node, r, chosen, o) end
  local mine = false
  for _, c in ipairs(chosen) do mine = mine or c == node.uid end
  if not mine then return nil, 0 end
  local t0 = host.clock()
  local global = exchange.receive(node, 0, r)
  if not global then return nil, 0 end
  node.model:set_flat(global)
  global:free()
  local session = secagg.open(node, r, { contribute = { 0 }, fraction = o.threshold })
  node:fire("pre_train", r)
  local loss, secs = exchange.train(node, node.local_steps)
  node.endpoint:release()
  node:fire("post_train", r)
  node:fire("pre_exchange", r)
  local flat = node.model:get_flat()
  local shared = exchange.modified(node, flat, r)
  local v <close> = tensor.cat { shared:to("float64"), tensor.new({ 1.0 }, "float64") }
  if shared ~= flat then shared:free() end
  flat:free()
  -- limit: no sum of the round's encoded values can leave int64 (they add mod 2^64)
  local y, err = crypto.encode(v, o.fraction_bits, node.indices:numel(), math.min(2 ^ 62, 2 ^ 63 / #chosen))
  if not y then error(string.format("round %d: secure_fedavg: the model's %s", r, err), 0) end
  secagg.close(session, { [0] = y })
  node.exchange_seconds = host.clock() - t0 - secs
  node:fire("post_exchange", r)
  return loss, secs
end

return registry.register {
  kind = "algorithm", name = "secure_fedavg", server = true, samples = true,
  secure = true,   -- the uploads are masked fixed-point sums: no transform chain (dpy.layout.check)
  payload_bound = function(cfg, values, encoded)
    return math.max(encoded or 0, secagg.payload_bound(cfg.nodes, values))
  end,
  doc = "FedAvg with secure aggregation (Bonawitz et al. 2017): the server learns only the round's sums",
  options = {
    fraction_bits = { type = "integer", min = 8, max = 40, default = 24,
                      doc = "fixed point: a value is encoded as round(count * value * 2^bits) in int64" },
    threshold = { type = "number", min = 0, below = 1, default = 0.5,
                  doc = "Shamir threshold: more than this fraction of the round's clients recover a mask" },
  },
  new = function(o) return function(node, r) return round(node, r, o) end end,
}
