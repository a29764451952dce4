--- Built-in action differential_privacy.
-- mode = "sgd" (default): DP-SGD on the local optimizer: per-sample gradients (one C call per
--   batch) clipped to L2 norm `clip`, N(0, (noise * clip)^2) added to their sum, then the
--   optimizer's step. The Renyi-DP accountant (dpy.privacy) records the (epsilon, delta) spent so
--   far every round, with sampling rate batch_size / the node's sample count: metric "epsilon" by
--   the standard RDP conversion, "epsilon_balle2020" by the tighter one of Balle et al. 2020.
-- mode = "local": the model is noised before it is shared: the round's update (model after
--   training minus before) is clipped to norm `clip` and N(0, (noise * clip)^2) added to what is
--   sent; the node keeps its own model. Both epsilons are then node-level: one Gaussian mechanism
--   of sensitivity clip per round.
-- Options: clip = 1.0, noise = 1.0 (the noise multiplier sigma), delta = 1e-5, mode.
-- A checkpoint keeps the steps taken (sgd: what the accountant counts) or the round's starting
-- model (local); the noise comes from the node's generator, which the checkpoint keeps too.
local registry = require "dpy.registry"
local privacy = require "dpy.privacy"

-- Records both epsilons after steps steps of a mechanism whose per-step RDP at privacy.ORDERS is
-- per_step (computed once: the fractional orders' series are the costly part).
local function record(metrics, r, per_step, steps, delta)
  local total = {}
  for i, v in ipairs(per_step) do total[i] = steps * v end
  for _, c in ipairs { { "epsilon", "standard" }, { "epsilon_balle2020", "balle2020" } } do
    metrics:add(c[1], r, steps == 0 and 0 or (privacy.spent(privacy.ORDERS, total, delta, c[2])))
  end
end

-- DP-SGD: the trainer's step, privatized.
local function dp_step(self, o, loss_name)
  local xb, yb, last = self.loader:next()
  local x <close> = xb
  local y <close> = yb
  -- privacy.privatize over m:per_sample_grads, in one call that never forms the n x numel matrix
  local g <close>, losses = self.model:private_grad(x, y, o.clip, o.noise, loss_name)
  self.opt:zero_grad()
  self.model:set_grad_flat(g)
  self.opt:step()
  local n = y:size(0)
  self.steps, self.samples = self.steps + 1, self.samples + n
  local loss = losses:mean():item()
  losses:free()
  return loss, n, last
end

return registry.register {
  kind = "action",
  name = "differential_privacy",
  wraps = "trainer",   -- its node:wrap: given in the config only, not added to a running node
  options = {
    clip = { type = "number", above = 0, default = 1.0, doc = "the L2 norm each gradient (or update) is clipped to" },
    noise = { type = "number", above = 0, default = 1.0, doc = "the noise multiplier sigma" },
    delta = { type = "number", above = 0, below = 1, default = 1e-5, doc = "the delta of (epsilon, delta)" },
    mode = { one_of = { "sgd", "local" }, default = "sgd", doc = "DP-SGD, or noise on the shared model" },
  },
  doc = "DP-SGD (per-sample clipping + Gaussian noise, RDP accountant) or local DP on shared models",
  check = function(o, cfg, algorithm)   -- before anything is written
    local counts, why = pcall(privacy.rdp, 1, o.noise, 1)   -- a noise the accountant cannot count hung the nodes
    if not counts then
      return "differential_privacy: option 'noise': " .. tostring(why):gsub("^.*privacy%.rdp: ", "")
    end
    if algorithm.name == "ps" then return "differential_privacy: runs with dpsgd or fedavg (ps workers share raw "
                                          .. "gradients)" end
    if o.mode ~= "sgd" then return nil end
    if cfg.task == "binary" then return "differential_privacy: DP-SGD supports multiclass tasks only" end
    if cfg.loss == "mse" or cfg.loss == "bce_with_logits" then
      return "differential_privacy: DP-SGD's per-sample gradients take cross_entropy or nll, not " .. cfg.loss
    end
  end,
  new = function(opts, node)
    local o = opts
    if not node.trainer then return {} end   -- a server does not train
    if o.mode == "sgd" then
      local loss_name = node.cfg.loss
      local trainer = node:wrap("trainer", function(t)
        t.step = function(self) return dp_step(self, o, loss_name) end
        return t
      end)
      local q = math.min(1, node.cfg.batch_size / node.indices:numel())
      local per_step = privacy.rdp(q, o.noise, 1)
      return {
        startup = function(n)
          n.log:write("differential_privacy: DP-SGD, clip %g, noise multiplier %g, sampling rate %.5f, "
                      .. "delta %g", o.clip, o.noise, q, o.delta)
        end,
        post_train = function(n, r)
          record(n.metrics, r, per_step, trainer.steps, o.delta)
        end,
        checkpoint = function() return { steps = trainer.steps } end,
        restore = function(_, t) trainer.steps = t.steps end,
      }
    end
    local start
    local per_step = privacy.rdp(1, o.noise, 1)
    return {
      outgoing = function(_, flat)
        local update <close> = flat - start
        local norm = update:norm():item()
        if norm > o.clip then update:mul_(o.clip / norm) end
        local noise <close> = require("dpy.tensor").randn(flat:numel())
        return (start + update):add_(noise, o.noise * o.clip)
      end,
      pre_train = function(n) if start then start:free() end; start = n.model:get_flat() end,
      post_exchange = function(n, r)
        record(n.metrics, r, per_step, r, o.delta)
      end,
      checkpoint = function() return { start = start } end,
      restore = function(_, t)
        if start then start:free() end
        start = t.start
      end,
    }
  end,
}
