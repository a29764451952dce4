-- dpy.aggregators beyond the hand-computed values of byzantine_spec: every rule and
-- pre-aggregation on non-finite rows, the documented tie rules, the geometric median's stopping
-- rule, and the options the C binding refuses.
local tensor = require "dpy.tensor"
local agg = require "dpy.aggregators"

local T = tensor.new
local NAN, INF, FAR = 0 / 0, math.huge, 1e6

local function finite(t)
  for _, v in ipairs(t:flatten():totable()) do
    if v ~= v or v == INF or v == -INF then return false end
  end
  return true
end

local function same(a, b, what)   -- bit for bit (NaN equal to NaN)
  local x, y = a:flatten():totable(), b:flatten():totable()
  assert.are.equal(#y, #x, what)
  for i = 1, #x do
    assert.is_true(x[i] == y[i] or (x[i] ~= x[i] and y[i] ~= y[i]),
                   string.format("%s: [%d] %s vs %s", what, i, x[i], y[i]))
  end
end

local function near(a, want, tol, what)
  local x = a:flatten():totable()
  assert.are.equal(#want, #x, what)
  for i = 1, #x do
    assert.is_true(math.abs(x[i] - want[i]) <= tol, string.format("%s: [%d] %.17g vs %.17g", what, i, x[i], want[i]))
  end
end

local function with_row(rows, p, row)   -- a copy of rows (a Lua list) with row p (0-based) replaced
  local out = {}
  for i, r in ipairs(rows) do out[i] = r end
  out[p + 1] = row
  return T(out, "float64")
end

-- seven honest rows of dimension 3, no two values of a column equal (no ties)
local H = { { 0.5, -1, 2 }, { 1, 0.25, 1.5 }, { -0.75, 0.5, 3 }, { 0.25, -0.5, 2.5 }, { 1.5, 1, 1 },
            { -0.25, -0.75, 2.25 }, { 0.75, 0.75, 1.75 } }
-- the bad rows, each with its far finite stand-in (NaN and +Inf coordinates at +FAR, -Inf at -FAR)
local BAD = {
  { "a NaN row", { NAN, NAN, NAN }, { FAR, FAR, FAR } },
  { "a +Inf row", { INF, INF, INF }, { FAR, FAR, FAR } },
  { "a -Inf row", { -INF, -INF, -INF }, { -FAR, -FAR, -FAR } },
  { "a row with one NaN", { 0.5, NAN, 1 }, { 0.5, FAR, 1 } },
  { "a row with one Inf", { 0.5, INF, 1 }, { 0.5, FAR, 1 } },
  { "a row with +Inf and -Inf", { INF, 0, -INF }, { FAR, 0, -FAR } },
}
-- rules that tolerate f = 1 of n = 7 and give the result they give with the bad row replaced by a
-- far finite one: a non-finite row is never chosen (it is infinitely far, or sorts to an end)
local ROBUST = { "median", "trimmed_mean", "krum", "multi_krum", "mda", "bulyan", "meamed" }

describe("aggregators' inputs", function()
  it("name the rule and what they take for inputs that are neither a list nor a tensor", function()
    -- '#' of them raised "aggregators.lua:82: attempt to get length of a nil value (local 'vectors')"
    assert.error_matches(function() agg.median(nil, { f = 1 }) end,
                         "aggregators.median: a list of 1%-d tensors or an n x d tensor expected, got nil")
    assert.error_matches(function() agg.krum(3) end, "aggregators.krum: .* expected, got number")
    assert.error_matches(function() agg.aggregate("mean", true) end, "aggregators.aggregate: .* got boolean")
  end)
end)

describe("aggregators on non-finite rows", function()
  it("the robust rules: finite, and what a far finite row in its place gives (f = 1, n = 7)", function()
    for _, bad in ipairs(BAD) do
      for _, p in ipairs { 0, 3, 6 } do
        local x, far = with_row(H, p, bad[2]), with_row(H, p, bad[3])
        for _, rule in ipairs(ROBUST) do
          local what = string.format("%s with %s at row %d", rule, bad[1], p)
          local got = agg[rule](x, { f = 1 })
          assert.is_true(finite(got), what .. ": " .. tostring(got))
          same(got, agg[rule](far, { f = 1 }), what)
        end
        -- the geometric median leaves the row out
        local others = {}
        for i, r in ipairs(H) do if i ~= p + 1 then others[#others + 1] = r end end
        same(agg.geometric_median(x, { f = 1 }), agg.geometric_median(T(others, "float64"), { f = 1 }),
             "geometric_median with " .. bad[1])
      end
    end
  end)

  it("two bad rows of different kinds, f = 2, n = 11", function()
    local rows = {}
    for i = 1, 11 do rows[i] = { math.sin(i) * 3, math.cos(i * 1.7), (i * 0.37) % 1 } end
    rows[3], rows[8] = BAD[1][2], BAD[3][2]
    local x = T(rows, "float64")
    rows[3], rows[8] = BAD[1][3], BAD[3][3]
    local far = T(rows, "float64")
    for _, rule in ipairs(ROBUST) do
      local got = agg[rule](x, { f = 2 })
      assert.is_true(finite(got), rule .. ": " .. tostring(got))
      same(got, agg[rule](far, { f = 2 }), rule)
    end
    assert.is_true(finite(agg.geometric_median(x, { f = 2 })))
    assert.is_true(finite(agg.centered_clipping(x, { f = 2, radius = 1, iterations = 3 })))
  end)

  it("the mean propagates them", function()
    same(agg.mean(with_row(H, 2, BAD[1][2])), T { NAN, NAN, NAN }, "NaN row")
    same(agg.mean(with_row(H, 2, BAD[2][2])), T { INF, INF, INF }, "+Inf row")
    local m = agg.mean(with_row(H, 2, BAD[4][2])):totable()
    assert.is_true(m[2] ~= m[2] and m[1] == m[1] and m[3] == m[3])
  end)

  -- the documented clipping of a row x to norm r: finite rows scaled by min(1, r / |x|); a row
  -- with an infinity (and no NaN) as the limit of scaling, +-r / sqrt(#inf) at each infinite
  -- coordinate and 0 elsewhere; a row with a NaN all NaN (centered clipping: it contributes 0)
  local function clip(row, r)
    local out, infs, sq = {}, 0, 0
    for _, v in ipairs(row) do
      if v ~= v then
        for i = 1, #row do out[i] = NAN end
        return out, true
      end
      if v == INF or v == -INF then infs = infs + 1 end
      sq = sq + v * v
    end
    for i, v in ipairs(row) do
      if infs > 0 then
        out[i] = (v == INF and r or v == -INF and -r or 0) / math.sqrt(infs)
      else
        local norm = math.sqrt(sq)
        out[i] = norm > r and v * (r / norm) or v
      end
    end
    return out, false
  end

  it("static clipping: an infinite row clipped as the limit of scaling, a row with a NaN all NaN", function()
    local rows = { { 3, 4, 0 }, { 0.3, 0.4, 0 }, { INF, INF, INF }, { -INF, 2, 0 }, { INF, 0, -INF },
                   { 0.5, NAN, 1 }, { NAN, NAN, NAN }, { 0, 0, 0 } }
    local got = agg.static_clipping(T(rows, "float64"), { radius = 2 })
    for i, row in ipairs(rows) do
      local want = clip(row, 2)
      local g = got[i - 1]:totable()
      for c = 1, 3 do
        assert.is_true(math.abs(g[c] - want[c]) < 1e-12 or (g[c] ~= g[c] and want[c] ~= want[c]),
                       string.format("row %d [%d]: %s vs %s", i, c, g[c], want[c]))
      end
    end
    near(got[2], { 2 / math.sqrt(3), 2 / math.sqrt(3), 2 / math.sqrt(3) }, 1e-12, "+Inf row")
    near(got[4], { math.sqrt(2), 0, -math.sqrt(2) }, 1e-12, "+Inf and -Inf")
    -- a finite row whose norm overflows float32 is still clipped, not zeroed
    near(agg.static_clipping(T { { 3e30, 4e30 } }, { radius = 1 }), { 0.6, 0.8 }, 1e-6, "overflow")
  end)

  it("centered clipping: infinite rows clipped as the limit, NaN rows contribute nothing", function()
    local rows = { { 0.5, -1, 2 }, { 1, 0.25, 1.5 }, { INF, INF, INF }, { 0.5, NAN, 1 }, { -INF, 3, 0 } }
    for _, o in ipairs { { radius = 1, iterations = 1 }, { radius = 0.5, iterations = 4 },
                         { radius = 3, iterations = 2, center = { 1, 1, 1 } } } do
      local v = o.center and { table.unpack(o.center) } or { 0, 0, 0 }
      for _ = 1, o.iterations do
        local acc = { 0, 0, 0 }
        for _, row in ipairs(rows) do
          local diff = {}
          for c = 1, 3 do diff[c] = row[c] - v[c] end
          local cl, nan = clip(diff, o.radius)
          if not nan then for c = 1, 3 do acc[c] = acc[c] + cl[c] end end
        end
        for c = 1, 3 do v[c] = v[c] + acc[c] / #rows end
      end
      local opts = { f = 2, radius = o.radius, iterations = o.iterations,
                     center = o.center and T(o.center, "float64") }
      near(agg.centered_clipping(T(rows, "float64"), opts), v, 1e-12, "radius " .. o.radius)
    end
  end)

  it("NNM and bucketing: a bad row spoils only its own output row, not the others (no NaN x 0)", function()
    for _, bad in ipairs(BAD) do
      local x, far = with_row(H, 3, bad[2]), with_row(H, 3, bad[3])
      local got, want = agg.nnm(x, { f = 1 }), agg.nnm(far, { f = 1 })
      for i = 0, 6 do
        if i == 3 then
          assert.is_false(finite(got[i]), "nnm: the bad row stays bad with " .. bad[1])
        else
          same(got[i], want[i], "nnm row " .. i .. " with " .. bad[1])
        end
      end
      local b, bfar = agg.bucketing(x, { bucket = 2, seed = 3 }), agg.bucketing(far, { bucket = 2, seed = 3 })
      local spoilt = 0
      for i = 0, 3 do
        if finite(b[i]) then same(b[i], bfar[i], "bucket " .. i) else spoilt = spoilt + 1 end
      end
      assert.are.equal(1, spoilt, "bucketing with " .. bad[1])
      for _, pre in ipairs { { { "nnm", f = 1 } }, { { "bucketing", bucket = 2, seed = 3 } },
                             { { "static_clipping", radius = 1 }, { "nnm", f = 1 } } } do
        assert.is_true(finite(agg.aggregate({ "median", f = 1 }, x, pre)), pre[1][1] .. " then median, " .. bad[1])
      end
    end
  end)
end)

describe("aggregators' tie rules (lowest index)", function()
  it("MeaMed and Bulyan: ties in |v - median| go to the lowest row index", function()
    near(agg.meamed(T { { 1., 3 }, { 2., 2 }, { 3., 1 } }, { f = 1 }), { 1.5, 2.5 }, 1e-6, "meamed")
    -- by a pure-Python Bulyan (Krum picks rows 0-4; per column the 3 values closest to the median)
    local x = T { { 0., 4 }, { 1., 1 }, { 2., 2 }, { 4., 0 }, { 5., 5 }, { 100., 100 }, { -100., -100 } }
    near(agg.bulyan(x, { f = 1 }), { 1, 7 / 3 }, 1e-6, "bulyan")
  end)

  it("NNM: its own row first, then the lowest index among equal distances", function()
    near(agg.nnm(T { { 0. }, { 1. }, { -1. } }, { f = 1 }), { 0.5, 0.5, -0.5 }, 1e-6, "nnm")
    near(agg.nnm(T { { 0. }, { -1. }, { 1. } }, { f = 1 }), { -0.5, -0.5, 0.5 }, 1e-6, "nnm reversed")
  end)

  it("Krum, Multi-Krum and MDA: equal scores or diameters go to the lowest index", function()
    local x = T { { 0. }, { 1. }, { -1. }, { 10. }, { -10. } }   -- scores 2, 5, 5, 181, 181
    near(agg.multi_krum(x, { f = 1, m = 2 }), { 0.5 }, 1e-6, "multi_krum")
    near(agg.multi_krum(T { { 0. }, { -1. }, { 1. }, { 10. }, { -10. } }, { f = 1, m = 2 }), { -0.5 }, 1e-6, "reversed")
    near(agg.multi_krum(x, { f = 1, m = 4 }), { 2.5 }, 1e-6, "m = 4: rows 0, 1, 2 and 3 (not 4)")
    near(agg.krum(T { { -1. }, { 1. }, { -3. }, { 3. }, { 100. } }, { f = 1 }), { -1 }, 1e-6, "krum: 8 = 8")
    near(agg.krum(T { { 1. }, { -1. }, { 3. }, { -3. }, { 100. } }, { f = 1 }), { 1 }, 1e-6, "krum reversed")
    near(agg.mda(T { { 0. }, { 1. }, { 2. } }, { f = 1 }), { 0.5 }, 1e-6, "mda: {0, 1} before {1, 2}")
    near(agg.mda(T { { 2. }, { 1. }, { 0. } }, { f = 1 }), { 1.5 }, 1e-6, "mda reversed")
  end)
end)

describe("the geometric median's stopping rule", function()
  -- Weiszfeld from the mean of the finite rows: z' = sum w_i x_i / sum w_i, w_i = 1 / max(|x_i - z|, eps);
  -- it stops after the first step with |z' - z| <= tol * max(|z'|, eps), or after max_iter steps
  local function weiszfeld(rows, tol, max_iter, eps)
    local d, z = #rows[1], {}
    for c = 1, d do
      z[c] = 0
      for _, r in ipairs(rows) do z[c] = z[c] + r[c] / #rows end
    end
    local function norm(v)
      local s = 0
      for _, a in ipairs(v) do s = s + a * a end
      return math.sqrt(s)
    end
    for it = 1, max_iter do
      local num, den = {}, 0
      for c = 1, d do num[c] = 0 end
      for _, r in ipairs(rows) do
        local diff = {}
        for c = 1, d do diff[c] = r[c] - z[c] end
        local w = 1 / math.max(norm(diff), eps)
        den = den + w
        for c = 1, d do num[c] = num[c] + w * r[c] end
      end
      local step = {}
      for c = 1, d do num[c] = num[c] / den; step[c] = num[c] - z[c] end
      z = num
      if norm(step) <= tol * math.max(norm(z), eps) then return z, it end
    end
    return z, max_iter
  end

  local rows = { { 1, 0 }, { 0, 2 }, { -1, -1 }, { 5, 5 }, { 0.5, 0.25 } }

  it("matches Weiszfeld with the documented rule, relative to |z|", function()
    for _, c in ipairs { { 1e-3, 100 }, { 1e-6, 100 }, { 1e-12, 7 }, { 1e-3, 1 } } do
      local want, its = weiszfeld(rows, c[1], c[2], 1e-8)
      near(agg.geometric_median(T(rows, "float64"), { tol = c[1], max_iter = c[2] }), want, 1e-12,
           string.format("tol %g, max_iter %d (%d steps)", c[1], c[2], its))
    end
    -- relative: the same steps for the rows scaled by 1e6, so the result scales exactly
    local big = {}
    for i, r in ipairs(rows) do big[i] = { r[1] * 1e6, r[2] * 1e6 } end
    local want, its = weiszfeld(rows, 1e-3, 100, 1e-8)
    local want_big, its_big = weiszfeld(big, 1e-3, 100, 1e-8)
    assert.are.equal(its, its_big)
    near(agg.geometric_median(T(big, "float64"), { tol = 1e-3 }), want_big, 1e-5, "scaled")
    near(agg.geometric_median(T(big, "float64"), { tol = 1e-3 }) / 1e6, want, 1e-11, "scaled back")
  end)
end)

describe("aggregators' options in the C binding", function()
  local x = T { { 1., 2 }, { 3., 4 }, { 5., 6 }, { 7., 8 }, { 9., 10 }, { 11., 12 }, { 13., 14 } }
  local ALL = { "mean", "median", "trimmed_mean", "krum", "multi_krum", "geometric_median", "centered_clipping",
                "bulyan", "meamed", "mda", "nnm", "bucketing", "static_clipping" }
  local core = require "dpy.aggregate.core"

  it("refuse a non-integer or negative f for every rule", function()
    for _, rule in ipairs(ALL) do
      for _, f in ipairs { 1.5, -1, "1", true } do
        local shown = type(f) == "number" and tostring(f) or "a " .. type(f)
        assert.has_error(function() core.aggregate(rule, x, { f = f, radius = 1 }) end,
                         rule .. ": option f must be an integer >= 0, got " .. shown)
      end
    end
    near(agg.median(x, { f = 1.0 }), { 7, 8 }, 0, "an integral float is an integer")
  end)

  it("refuse m outside 1..n - f", function()
    for _, m in ipairs { 0, -2, 2.5 } do
      assert.has_error(function() core.aggregate("multi_krum", x, { f = 1, m = m }) end,
                       "multi_krum: option m must be an integer >= 1, got " .. tostring(m))
    end
    assert.has_error(function() agg.multi_krum(x, { f = 1, m = 7 }) end, "multi_krum: m = 7 exceeds n - f = 6")
  end)

  it("refuse non-positive or non-finite numbers and non-positive counts", function()
    local cases = {
      { "geometric_median", "tol", { 0, -1, NAN, INF }, "a finite number > 0" },
      { "geometric_median", "eps", { 0, -1e-8, NAN }, "a finite number > 0" },
      { "geometric_median", "max_iter", { 0, -1, 2.5 }, "an integer >= 1" },
      { "centered_clipping", "radius", { 0, -1, NAN, INF }, "a finite number > 0" },
      { "centered_clipping", "iterations", { 0, 1.5 }, "an integer >= 1" },
      { "static_clipping", "radius", { 0, -2 }, "a finite number > 0" },
      { "bucketing", "bucket", { 0, -1, 1.5 }, "an integer >= 1" },
      { "bucketing", "seed", { -1, 0.5 }, "an integer >= 0" },
    }
    for _, c in ipairs(cases) do
      for _, v in ipairs(c[3]) do
        local o = { radius = 1 }
        o[c[2]] = v
        local ok, err = pcall(core.aggregate, c[1], x, o)
        assert.is_false(ok, c[1] .. " " .. c[2] .. " = " .. tostring(v))
        local want = string.format("%s: option %s must be %s, got %s", c[1], c[2], c[4], tostring(v))
        assert.are.equal(want, (tostring(err):gsub("^[^:]*:%d+: ", "")))
      end
    end
    assert.has_error(function() agg.centered_clipping(x) end,
                     "centered_clipping: needs option radius (a finite number > 0)")
    assert.has_error(function() agg.static_clipping(x, {}) end,
                     "static_clipping: needs option radius (a finite number > 0)")
  end)

  it("refuse a center that is not a live d-vector of finite values", function()
    assert.has_error(function() core.aggregate("centered_clipping", x, { radius = 1, center = { 0, 0 } }) end,
                     "centered_clipping: option center must be a dpy.Tensor, got a table")
    assert.has_error(function() agg.centered_clipping(x, { radius = 1, center = { 0, 0 } }) end,   -- options' check
                     "aggregators.centered_clipping: option 'center' must be a dpy.Tensor (a d-vector of finite "
                     .. "values), got a table")
    local freed = T { 0., 0 }
    freed:free()
    assert.has_error(function() agg.centered_clipping(x, { radius = 1, center = freed }) end,
                     "centered_clipping: option center must be a dpy.Tensor, got a freed dpy.Tensor")
    assert.has_error(function() agg.centered_clipping(x, { radius = 1, center = T { 0., 0, 0 } }) end,
                     "centered_clipping: option center must be a vector of d = 2 values, got shape [3]")
    assert.has_error(function() agg.centered_clipping(x, { radius = 1, center = T { 0., NAN } }) end,
                     "centered_clipping: option center must be finite")
  end)

  it("mean tolerates f = 0 only", function()
    assert.has_error(function() core.aggregate("mean", x, { f = 1 }) end,
                     "mean: n = 7, f = 1 is outside what it tolerates (f = 0)")
  end)
end)
