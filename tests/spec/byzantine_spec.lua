-- Byzantine robustness: every aggregator against hand-computed results, the (n, f) each refuses,
-- NaN inputs, the attacks' formulas, the partitioners, and the simulation.
local tensor = require "dpy.tensor"
local agg = require "dpy.aggregators"
local attacks = require "dpy.byzantine.attacks"
local byzantine = require "dpy.byzantine"
local partition = require "dpy.partition"
local data = require "dpy.data"

local T = tensor.new
local function close(a, b, tol)
  local x, y = a:totable(), b
  assert.are.equal(#y, #x)
  for i = 1, #y do
    if type(y[i]) == "table" then
      close(a[i - 1], y[i], tol)
    else
      assert.is_true(math.abs(x[i] - y[i]) <= (tol or 1e-5), string.format("[%d] %s vs %s", i, x[i], y[i]))
    end
  end
end

-- five inputs of dimension 3; by hand, the squared distances are
--   a-b 10710  a-c 238  a-d 125  a-e 9851  b-c 10626  b-d 10205  b-e 19433  c-d 27  c-e 9513  d-e 9242
local X = T { { 1., 10, -3 }, { 2., 20, 100 }, { 3., -5, 0 }, { 4., 0, 1 }, { 100., 5, 2 } }

describe("aggregators", function()
  it("mean, median and trimmed mean per coordinate", function()
    close(agg.mean(X), { 22, 6, 20 })
    close(agg.median(X, { f = 1 }), { 3, 5, 1 })
    close(agg.median(X:narrow(0, 0, 4), { f = 1 }), { 2.5, 5, 0.5 })   -- even n: the two middle values
    close(agg.trimmed_mean(X, { f = 1 }), { 3, 5, 1 })                   -- keeps 2,3,4 / 0,5,10 / 0,1,2
    close(agg.trimmed_mean({ X[0], X[1], X[2] }, { f = 1 }), { 2, 10, 0 })   -- n = 2f + 1: the median
  end)

  it("Krum and Multi-Krum by their scores", function()
    -- scores (2 nearest others): a 363, b 20831, c 265, d 152, e 18755
    close(agg.krum(X, { f = 1 }), { 4, 0, 1 })                       -- d
    close(agg.multi_krum(X, { f = 1 }), { 27, 2.5, 0 })               -- m = n - f = 4: d, c, a, e
    close(agg.multi_krum(X, { f = 1, m = 2 }), { 3.5, -2.5, 0.5 })    -- d, c
    local tie = T { { 1., 1 }, { 1., 1 }, { 0., 0 }, { 0., 0 }, { 9., 9 } }
    close(agg.krum(tie, { f = 1 }), { 1, 1 })   -- rows 0-3 all score 2: the first one
  end)

  it("MeaMed, minimum-diameter averaging and the geometric median", function()
    close(agg.meamed(X, { f = 1 }), { 2.5, 2.5, 0 })   -- the 4 values closest to the median (3, 5, 1)
    close(agg.mda(X, { f = 1 }), { 27, 2.5, 0 })       -- {a, c, d, e}: diameter 9851 (a-e) < 10710
    close(agg.geometric_median(T { { 0., 0 }, { 1., 0 }, { 10., 0 } }), { 1, 0 }, 1e-4)   -- collinear: the middle one
    local square = T { { 1., 0 }, { -1., 0 }, { 0., 1 }, { 0., -1 }, { 0., 0 } }
    close(agg.geometric_median(square), { 0, 0 }, 1e-4)
  end)

  it("centered clipping moves from the center by the mean of clipped differences", function()
    local x = T { { 0., 0 }, { 3., 4 }, { -6., 8 } }   -- clipped to norm 1: (0,0), (0.6,0.8), (-0.6,0.8)
    close(agg.centered_clipping(x, { radius = 1 }), { 0, 1.6 / 3 })
    close(agg.centered_clipping(x, { radius = 100, iterations = 3 }), { -1, 4 })   -- no clipping: the mean
    -- from (3, 4): differences (-3, -4), (0, 0), (-9, 4), clipped to norm 1
    local r97 = math.sqrt(97)
    close(agg.centered_clipping(x, { radius = 1, center = T { 3., 4 } }),
          { 3 + (-0.6 - 9 / r97) / 3, 4 + (-0.8 + 4 / r97) / 3 })
  end)

  it("Bulyan keeps the honest cluster", function()
    local rows = {}
    for i = 1, 9 do rows[i] = T { i * 0.1, -i * 0.1 } end
    rows[10], rows[11] = T { 1000., 1000 }, T { -1000., 500 }
    local r = agg.bulyan(rows, { f = 2 }):totable()
    assert.is_true(math.abs(r[1] - 0.5) < 0.25 and math.abs(r[2] + 0.5) < 0.25)
    assert.has_error(function() agg.bulyan(rows, { f = 3 }) end,
                     "bulyan: n = 11, f = 3 is outside what it tolerates (n >= 4f + 3)")
  end)

  it("pre-aggregations: NNM, bucketing and static clipping", function()
    close(agg.nnm(X, { f = 1 }), { { 27, 2.5, 0 }, { 2.5, 6.25, 24.5 }, { 27, 2.5, 0 }, { 27, 2.5, 0 },
                                   { 27, 2.5, 0 } })
    local b = agg.bucketing(X, { bucket = 2, seed = 3 })
    assert.are.same({ 3, 3 }, b:size())
    -- every input in exactly one bucket: 2 + 2 + 1 rows
    close(b[0] * 2 + b[1] * 2 + b[2], { 110, 30, 100 })
    local c = agg.static_clipping(T { { 3., 4 }, { 0.3, 0.4 } }, { radius = 1 })
    close(c, { { 0.6, 0.8 }, { 0.3, 0.4 } })
    close(agg.aggregate({ "median", f = 1 }, X, { { "nnm", f = 1 } }), { 27, 2.5, 0 })
    assert.has_error(function() agg.aggregate("median", X, { "krum" }) end,
                     "aggregators: 'krum' is not a pre-aggregation (nnm, bucketing, static_clipping, or a file "
                     .. "whose spec says pre = true)")
  end)

  it("refuse an (n, f) outside what they tolerate", function()
    assert.has_error(function() agg.krum(X:narrow(0, 0, 4), { f = 1 }) end,
                     "krum: n = 4, f = 1 is outside what it tolerates (n > 2f + 2)")
    assert.has_error(function() agg.median(X, { f = 3 }) end,
                     "median: n = 5, f = 3 is outside what it tolerates (n > 2f)")
    assert.has_error(function() agg.multi_krum(X, { f = 1, m = 5 }) end, "multi_krum: m = 5 exceeds n - f = 4")
    assert.has_error(function() agg.median(T { 1., 2 }) end, "median: needs n x d inputs (n >= 1), got shape [2]")
  end)

  it("keep NaN and infinite inputs out where defined", function()
    local y = T { { 1., 1 }, { 2., 2 }, { 0 / 0, 0 / 0 }, { 3., 3 }, { math.huge, 1 } }
    close(agg.median(y, { f = 1 }), { 3, 2 })          -- NaN sorts last, as the largest
    close(agg.trimmed_mean(y:narrow(0, 0, 4), { f = 1 }), { 2.5, 2.5 })
    close(agg.krum(y, { f = 1 }), { 2, 2 })            -- a non-finite row is infinitely far
    close(agg.geometric_median(y), { 2, 2 }, 1e-3)
    assert.is_false(agg.mean(y)[0]:item() == agg.mean(y)[0]:item())   -- the mean is NaN
  end)
end)

describe("attacks", function()
  local honest = T { { 1., 2 }, { 3., 6 } }
  it("follow their formulas", function()
    close(attacks.craft({ "sign_flip", scale = 2 }, honest, 4, 2), { { -4, -8 }, { -4, -8 } })
    close(attacks.craft("inner_product", honest, 4, 2), { { -0.2, -0.4 }, { -0.2, -0.4 } })
    close(attacks.craft({ "mimic", worker = 1 }, honest, 4, 1), { { 3, 6 } })
    -- a worker past the honest ones failed the node with "attempt to index a nil value"
    assert.error_matches(function() attacks.craft({ "mimic", worker = 2 }, honest, 4, 1) end,
                         "mimic: worker 2 is not one of the 2 honest vectors %(0%.%.1%)")
    -- ALIE: n = 4, f = 2: s = 1, z = Phi^-1(3/4) = 0.6744898; std (unbiased) = (1.4142, 2.8284)
    local z = 0.6744898
    local row = { 2 - z * math.sqrt(2), 4 - z * math.sqrt(8) }
    close(attacks.craft("alie", honest, 4, 2), { row, row }, 1e-5)
    assert.is_true(math.abs(attacks.alie_z(10, 2) - 0.2533471) < 1e-6)   -- Phi^-1(0.6)
    assert.is_true(math.abs(attacks.normal_quantile(0.975) - 1.959964) < 1e-6)
    assert.are.equal(math.huge, attacks.craft("infinity", honest, 4, 1)[0][1]:item())
    local nan = attacks.craft("nan", honest, 4, 1)[0][0]:item()
    assert.is_true(nan ~= nan)
    local g = attacks.craft({ "gaussian", sigma = 2 }, T(tensor.zeros(1, 20000):totable()), 2, 1)
    assert.is_true(math.abs(g:std():item() - 2) < 0.05)
    assert.has_error(function() attacks.craft("flip", honest, 4, 1) end, "no attack named 'flip' (did you mean "
                     .. "'alie'?); valid: alie, gaussian, infinity, inner_product, label_flipping, mimic, nan, "
                     .. "sign_flip, or the path of a Lua file")
  end)
end)

describe("partitioners for Byzantine studies", function()
  local labels = {}
  for i = 1, 1000 do labels[i] = (i * 7) % 10 end
  local function classes_of(part)
    local seen, n = {}, 0
    for _, i in ipairs(part:totable()) do
      if not seen[labels[i + 1]] then seen[labels[i + 1]], n = true, n + 1 end
    end
    return n
  end

  it("gamma_similarity: gamma 1 is IID, gamma 0 gives each node a few classes", function()
    local iid = partition.gamma_similarity(labels, 5, { gamma = 1, seed = 1 })
    local skew = partition.gamma_similarity(labels, 5, { gamma = 0, seed = 1 })
    for k = 1, 5 do
      assert.are.equal(200, iid[k]:numel())
      assert.are.equal(200, skew[k]:numel())
      assert.are.equal(10, classes_of(iid[k]))
      assert.is_true(classes_of(skew[k]) <= 3)
    end
    local half = partition.gamma_similarity(labels, 5, { gamma = 0.5, seed = 1 })
    assert.is_true(classes_of(half[1]) == 10)
  end)

  it("class_list: each node the classes it lists, shared classes split", function()
    local parts = partition.class_list(labels, 3, { classes = { { 0, 1 }, { 1, 2 }, { 3 } } })
    assert.are.same({ 150, 150, 100 }, { parts[1]:numel(), parts[2]:numel(), parts[3]:numel() })
    assert.are.equal(2, classes_of(parts[1]))
    assert.has_error(function() partition.class_list(labels, 2, { classes = { { 0 }, { 11 } } }) end,
                     "partition.class_list: node 1 lists class 11, which has no samples")
  end)
end)

describe("byzantine.simulation", function()
  local train = data.fashion_mnist { train = true }
  local test = data.fashion_mnist { train = false }
  local function sim(o)
    local base = { model = { "mlp", hidden = { 32 } }, train_set = train, n = 6, f = 1, batch_size = 32,
                   learning_rate = 0.1, momentum = 0.9, weight_decay = 1e-4, seed = 42 }
    for k, v in pairs(o or {}) do base[k] = v end
    return byzantine.simulation(base)
  end

  it("returns snapshots of the documented shapes, the same numbers for the same seed", function()
    local a = sim { aggregator = { "median" }, pre_aggregation = { "nnm" } }
    local s = a:step()
    local d = a.d
    assert.are.equal(1, s.step)
    assert.are.same({ 5, d }, s.parameters:size())
    assert.are.same({ 5, d }, s.momentum:size())
    assert.are.same({ 5, d }, s.honest_gradients:size())
    assert.are.same({ 5, d }, s.local_parameters:size())
    assert.are.same({ 1, d }, s.byzantine_parameters:size())
    assert.are.same({ 5 }, s.losses:size())
    local list = a:run(2)
    assert.are.equal(3, list[2].step)
    local again = sim { aggregator = { "median" }, pre_aggregation = { "nnm" } }:run(3)[3]
    assert.are.same(list[2].losses:totable(), again.losses:totable())
    assert.are.same(list[2].parameters:sum():item(), again.parameters:sum():item())
    -- sign flip under "all": the Byzantine model is -1 x the honest local mean
    local light = sim { snapshots = false }:step()
    assert.are.same({ "losses", "step" }, (function()
      local keys = {}
      for k in pairs(light) do keys[#keys + 1] = k end
      table.sort(keys)
      return keys
    end)())
    assert.are.same({ 5 }, light.losses:size())
    local e = sim { byzantine_reach = "all" }:step()
    local want = e.local_parameters:mean(0) * -1
    assert.is_true(e.byzantine_parameters[0]:allclose(want, 1e-5, 1e-6))
  end)

  it("trains a label-flipping worker like an honest one: with momentum, on flipped labels", function()
    -- one honest worker whose every batch is the same 16 samples, a learning rate too small to move
    -- the model: each step the same gradients, so momentum makes step 2's vector 1.9 x step 1's
    for _, mode in ipairs { "server", "decentralized" } do
      local loader = data.loader(train, { batch_size = 16, indices = tensor.arange(16), shuffle = false })
      local s = byzantine.simulation { model = { "mlp", hidden = { 8 } }, train_datasets = { loader }, n = 2, f = 1,
                                       learning_rate = mode == "server" and 1e-30 or 1, momentum = 0.9,
                                       attack = "label_flipping", aggregator = "mean", mode = mode,
                                       byzantine_reach = "sampled", seed = 3 }
      if mode == "server" then
        local one, two = s:step(), s:step()
        assert.is_true(two.momentum:allclose(one.momentum * 1.9, 1e-4, 1e-7))   -- the honest worker's
        assert.is_true(two.byzantine_gradients:allclose(one.byzantine_gradients * 1.9, 1e-4, 1e-7))
      else   -- the Byzantine model: the honest worker's model less lr x its own momentum of flipped gradients
        local start = s.params:clone()
        local one = s:step()
        local m1 = start - one.byzantine_parameters
        s.params:copy_(start)   -- the same model again: the same flipped gradient, added to the momentum
        local two = s:step()
        local m2 = start - two.byzantine_parameters
        assert.is_true(m2:allclose(m1 * 1.9, 1e-4, 1e-6), mode)
      end
    end
  end)

  it("runs a parameter server with the same knobs, and evaluates", function()
    local s = sim { mode = "server", aggregator = { "trimmed_mean" }, attack = "alie" }
    local snap = s:step()
    assert.are.same({ s.d }, snap.parameters:size())
    assert.are.same({ 1, s.d }, snap.byzantine_gradients:size())
    local e = s:evaluate(test, { samples = 200 })
    assert.are.equal(1, #e.accuracies)
    assert.is_true(e.accuracy >= 0 and e.accuracy <= 1)
  end)

  it("shows what the literature shows: sign flip breaks the mean, not the median #e2e", function()
    local results = {}
    for _, rule in ipairs { "mean", "median", "trimmed_mean" } do
      local s = sim { n = 10, f = 2, aggregator = { rule }, attack = { "sign_flip", scale = 1.5 },
                      byzantine_reach = "all", snapshots = false }
      s:run(25)
      results[rule] = s:evaluate(test, { samples = 1000 }).accuracy
    end
    assert.is_true(results.mean < 0.3, "mean: " .. results.mean)
    assert.is_true(results.median > 0.6, "median: " .. results.median)
    assert.is_true(results.trimmed_mean > 0.6, "trimmed_mean: " .. results.trimmed_mean)
  end)

  local function all_finite(t)
    for _, v in ipairs(t:flatten():totable()) do
      if v ~= v or v == math.huge or v == -math.huge then return false end
    end
    return true
  end

  it("keeps every honest model finite under the nan attack: median alone, after NNM, after bucketing", function()
    local bucketing = { "bucketing", bucket = 2, seed = 1 }   -- 5 received: 3 buckets
    for _, c in ipairs { { "nan", "all", {} }, { "nan", "all", { "nnm" } }, { "nan", "all", { bucketing } },
                         { "infinity", "all", { "nnm" } }, { "infinity", "all", { bucketing } },
                         { "nan", "sampled", { "nnm" } } } do
      local s = sim { attack = c[1], byzantine_reach = c[2], aggregator = { "median" }, pre_aggregation = c[3] }
      for _, snap in ipairs(s:run(2)) do
        local what = string.format("%s, %s, pre %s", c[1], c[2], c[3][1] and (c[3][1][1] or c[3][1]) or "none")
        assert.is_true(all_finite(snap.parameters), what)
        assert.is_true(all_finite(snap.mixed_parameters), what)
      end
    end
  end)

  it("snapshots the mixed models, and how many Byzantine models each honest worker received", function()
    -- n = 3, f = 1 under "all": each worker aggregates its own local model and the Byzantine one
    local s = sim { n = 3, f = 1, byzantine_reach = "all", aggregator = "mean", attack = { "sign_flip", scale = 2 } }
    local snap = s:step()
    assert.are.same({ 2, s.d }, snap.mixed_parameters:size())
    assert.is_true(snap.mixed_parameters:eq(snap.parameters):all():item())
    for i = 0, 1 do
      local want = (snap.local_parameters[i] + snap.byzantine_parameters[0]) / 2
      assert.is_true(snap.mixed_parameters[i]:allclose(want, 1e-5, 1e-7))
      assert.is_false(snap.mixed_parameters[i]:allclose(snap.local_parameters[i], 1e-5, 1e-7))
    end
    assert.are.same({ 1, 1 }, snap.byzantine_received:totable())
    assert.are.same({ 2, 2, 2, 2 }, sim { n = 6, f = 2, byzantine_reach = "all" }:step().byzantine_received:totable())
    -- "sampled": n - f - 1 of the n - 1 others; with the mean and +inf attackers, a worker's model
    -- is finite exactly when it received none
    local seen = {}
    for seed = 1, 20 do
      local snap2 = sim { n = 6, f = 2, seed = seed, aggregator = "mean", attack = "infinity" }:step()
      local got = snap2.byzantine_received:totable()
      assert.are.equal(4, #got)
      for i, c in ipairs(got) do
        assert.is_true(c >= 0 and c <= 2 and math.type(c) == "integer")
        assert.are.equal(c == 0, all_finite(snap2.parameters[i - 1]), "worker " .. i .. " received " .. c)
        seen[c] = true
      end
      if seen[0] and seen[1] and seen[2] then break end
    end
    assert.is_true(seen[0] and seen[1] and seen[2], "0, 1 and 2 drawn")
  end)

  it("refuses bad options with a message", function()
    assert.has_error(function() sim { f = 6 } end, "byzantine.simulation: f must be an integer in 0..n-1")
    assert.has_error(function() sim { aggregatr = "mean" } end,
                     "byzantine.simulation: unknown option 'aggregatr' (did you mean 'aggregator'?); valid: "
                     .. "aggregator, attack, batch_size, byzantine_reach, classes, f, learning_rate, loss, mode, "
                     .. "model, momentum, n, partition, pre_aggregation, seed, snapshots, test_set, "
                     .. "train_datasets, train_set, weight_decay")
  end)
end)

describe("aggregators on a GPU", function()
  it("give the cpu's results on cuda tensors #gpu", function()
    tensor.manual_seed(5)
    local x = tensor.randn(11, 1000)
    local g = x:to("cuda")
    for _, c in ipairs { { "median", { f = 2 } }, { "trimmed_mean", { f = 2 } }, { "krum", { f = 2 } },
                         { "geometric_median", {} }, { "bulyan", { f = 2 } }, { "meamed", { f = 2 } },
                         { "nnm", { f = 2 } }, { "centered_clipping", { radius = 1 } } } do
      local want, got = agg[c[1]](x, c[2]), agg[c[1]](g, c[2])
      assert.are.equal("cuda:0", got:device())
      assert.is_true(got:to("cpu"):allclose(want, 1e-4, 1e-5), c[1])
    end
  end)
end)
