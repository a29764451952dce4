--- A sharing rule: ClippedGossip (He, Karimireddy and Jaggi 2022, "Byzantine-robust
-- decentralized learning via ClippedGossip"): x <- x + sum_j w_j clip(x_j - x, radius), each
-- neighbour's pull clipped to L2 norm `radius`, so no neighbour moves the model further than
-- w_j * radius. The contract of a sharing rule: new(cfg, node) returns { combine = function(node,
-- round, got, weights, own_weight) } that sets node.model from the received flat models `got`
-- (freed by the caller) and their Metropolis-Hastings weights.
local registry = require "dpy.registry"

return registry.register {
  kind = "sharing", name = "clipped_gossip",
  doc = "gossip averaging with every neighbour's difference clipped to an L2 radius",
  options = { radius = { type = "number", above = 0, required = true, doc = "the clipping radius" } },
  new = function(cfg)
    return { combine = function(node, _, got, weights)
      local x <close> = node.model:get_flat()
      local step <close> = x * 0
      for i, xj in ipairs(got) do
        local d <close> = xj - x
        local norm = d:norm():item()
        step:add_(d, weights[i] * math.min(1, cfg.radius / math.max(norm, 1e-12)))
      end
      local new <close> = x + step
      node.model:set_flat(new)
    end }
  end,
}
