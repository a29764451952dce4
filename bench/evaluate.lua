-- bench/evaluate.lua: evaluating N nodes (cnn models) on the 10,000 Fashion-MNIST test images
-- in one process, as dpy.node does each eval round (trainer.evaluate, batch 100), against the
-- forward-pass floor: the same forward passes back to back on batches decoded beforehand.
--   build/dpy-lua bench/evaluate.lua [NODES = 16] [ROUNDS = 3] [THREADS = 1]
-- CPU time (os.clock; the machine's other load disturbs it less than the wall clock); the first
-- round apart (a process decodes its test set once), then the median of the other rounds.
local tensor = require "dpy.tensor"
local data = require "dpy.data"
local host = require "dpy.host.core"
local registry = require "dpy.registry"
local trainer = require "dpy.trainer"

local nodes, rounds, threads = tonumber(arg[1]) or 16, tonumber(arg[2]) or 3, tonumber(arg[3]) or 1
host.set_threads(threads)
tensor.manual_seed(1)
local test = registry.build("dataset", "fashion_mnist", { train = false })
local models = {}
for i = 1, nodes do models[i] = registry.build("model", "cnn", { classes = 10 }) end

local function eval_round()
  local c = os.clock()
  for i = 1, nodes do trainer.evaluate(models[i], test, { batch_size = 100 }) end
  return os.clock() - c
end

-- the floor: every batch decoded once, outside the timing; then only the forward passes
local batches = {}
for x in data.loader(test, { batch_size = 100, shuffle = false }):epoch() do batches[#batches + 1] = x end
local function floor_round()
  local c = os.clock()
  tensor.no_grad(function()
    for i = 1, nodes do
      models[i]:eval()
      for _, x in ipairs(batches) do models[i](x):free() end
      models[i]:train()
    end
  end)
  return os.clock() - c
end

-- what evaluation adds to the forward passes for its inputs, per node: a loader decoding each
-- batch (uint8 -> normalized float32), against views of the process's decoded copy (data.decoded)
local function inputs(decoded)
  local c = os.clock()
  for _ = 1, 20 do
    if decoded then
      local x, y = data.decoded(test)
      for pos = 0, data.size(test) - 1, 100 do x:narrow(0, pos, 100):free(); y:narrow(0, pos, 100):free() end
      x:free(); y:free()
    else
      for x, y in data.loader(test, { batch_size = 100, shuffle = false }):epoch() do x:free(); y:free() end
    end
  end
  return (os.clock() - c) / 20
end

local first = eval_round()
local evals, floors = {}, {}
for _ = 2, rounds do
  floors[#floors + 1] = floor_round()
  evals[#evals + 1] = eval_round()
end
local function median(t) table.sort(t); return t[(#t + 1) // 2] end
local e, f = median(evals), median(floors)
print(string.format("== evaluation, %d nodes x %d test images, one process, %d thread%s", nodes,
                    data.size(test), threads, threads == 1 and "" or "s"))
print(string.format("first round %.3f s (the test set decoded then); later rounds %.3f s; forward passes "
                    .. "alone %.3f s: ratio %.3f (target <= 1.1)", first, e, f, e / f))
print(string.format("the inputs of one node's evaluation: decoded per batch %.2f ms, views of the shared "
                    .. "decoded set %.3f ms", inputs(false) * 1e3, inputs(true) * 1e3))
print(string.format("eval_ratio %.3f", e / f))
print(string.format("figure evaluation_over_forward_floor %.3f <= 1.1", e / f))
