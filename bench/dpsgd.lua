-- bench/dpsgd.lua: a DP-SGD step of the cnn (batch 32, Fashion-MNIST) against a plain step, with
-- per-sample gradients from one batched pass and from per-sample passes (the fallback).
--   build/dpy-lua bench/dpsgd.lua [THREADS = 1] [STEPS = 30]
-- Prints the times (ms of wall clock and of CPU time, which the machine's other load disturbs
-- less; medians of 5 alternated runs of STEPS steps each), the ratios (of CPU time) to a plain
-- step beside the target (DP-SGD <= 2x), and dp_batched_ratio / dp_loop_ratio lines for scripts.
local tensor = require "dpy.tensor"
local nn = require "dpy.nn"
local data = require "dpy.data"
local optim = require "dpy.optim"
local privacy = require "dpy.privacy"
local host = require "dpy.host.core"
local registry = require "dpy.registry"

local threads, steps = tonumber(arg[1]) or 1, tonumber(arg[2]) or 30
host.set_threads(threads)
tensor.manual_seed(1)
local train = data.fashion_mnist { train = true }
local model = registry.build("model", "cnn", { dataset = train })
local opt = optim.sgd(model, { lr = 0.01, momentum = 0.9 })
local loader = data.loader(train, { batch_size = 32 })

local function plain()
  local xb, yb = loader:next()
  local x <close> = xb
  local y <close> = yb
  opt:zero_grad()
  local out <close> = model(x)
  local loss <close> = nn.cross_entropy(out, y)
  loss:backward()
  opt:step()
end

-- fused: m:private_grad (the differential_privacy action's step); else per_sample_grads, then
-- privacy.privatize
local function dp(batched, fused)
  return function()
    local xb, yb = loader:next()
    local x <close> = xb
    local y <close> = yb
    local grad, l
    if fused then
      grad, l = model:private_grad(x, y, 1.0, 1.0, "cross_entropy", nil, batched)
    else
      local g
      g, l = model:per_sample_grads(x, y, "cross_entropy", batched)
      grad = privacy.privatize(g, 1.0, 1.0)
      g:free()
    end
    l:free()
    opt:zero_grad()
    model:set_grad_flat(grad)
    grad:free()
    opt:step()
  end
end

local kinds = {
  { "plain", plain }, { "DP-SGD (private_grad)", dp(true, true) },
  { "per_sample_grads, batched", dp(true, false) }, { "per-sample passes", dp(false, false) },
}
local times, walls = {}, {}
for _, k in ipairs(kinds) do k[2](); times[k[1]], walls[k[1]] = {}, {} end   -- warm
for _ = 1, 5 do
  for _, k in ipairs(kinds) do
    local t0, c0 = host.clock(), os.clock()
    for _ = 1, steps do k[2]() end
    table.insert(times[k[1]], (os.clock() - c0) / steps)
    table.insert(walls[k[1]], (host.clock() - t0) / steps)
  end
end
local function median(t) table.sort(t); return t[(#t + 1) // 2] end
local tp = median(times.plain)
print(string.format("== a DP-SGD step against a plain step (cnn, batch 32, %d thread%s)", threads,
                    threads == 1 and "" or "s"))
for _, k in ipairs(kinds) do
  local t = median(times[k[1]])
  print(string.format("%-28s %7.2f ms CPU %7.2f ms wall  %5.2fx%s", k[1], t * 1e3, median(walls[k[1]]) * 1e3, t / tp,
                      k[1]:match("private_grad") and "  (target <= 2x)" or ""))
end
for _, c in ipairs { { "dp_ratio", "DP-SGD (private_grad)" }, { "dp_batched_ratio", "per_sample_grads, batched" },
                     { "dp_loop_ratio", "per-sample passes" } } do
  print(string.format("%s %.3f", c[1], median(times[c[2]]) / tp))
end
print(string.format("figure dpsgd_step_over_plain_%dthread %.3f <= 2", threads,
                    median(times["DP-SGD (private_grad)"]) / tp))
