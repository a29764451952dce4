--- dpy.nn: layers and containers (dpy.Module userdata over libtorch modules) and losses.
-- Built-in layers and sequential stacks of them run their forward in C++; nn.module builds a
-- custom module whose forward is a Lua function over its children and tensor ops.
local core = require "dpy.nn.core"
local options = require "dpy.options"
require "dpy.tensor"   -- the tensor methods used by Lua forwards

local M = { is_module = core.is_module }

local function bool(v, default)
  if v == nil then return default end
  return v and 1 or 0
end

-- Builds a layer from positional numbers after checking the option table's keys.
local function layer(kind, allowed, opts, args)
  opts = opts or {}
  options.check(opts, allowed, "nn." .. kind, 3)
  return core.layer(kind, args, opts.generator)
end

local GEN = { generator = true }

--- nn.linear(in, out [, {bias = true, generator = g}])
function M.linear(i, o, opts)
  opts = opts or {}
  return layer("linear", { bias = true, generator = true }, opts, { i, o, bool(opts.bias, 1) })
end

--- nn.conv2d(in, out, kernel [, {stride = 1, padding = 0, dilation = 1, groups = 1, bias = true}])
function M.conv2d(i, o, k, opts)
  opts = opts or {}
  return layer("conv2d", { stride = true, padding = true, dilation = true, groups = true,
                           bias = true, generator = true }, opts,
               { i, o, k, opts.stride or 1, opts.padding or 0, opts.dilation or 1,
                 opts.groups or 1, bool(opts.bias, 1) })
end

--- nn.maxpool2d(kernel [, {stride = kernel, padding = 0}]); nn.avgpool2d likewise
for _, kind in ipairs { "maxpool2d", "avgpool2d" } do
  M[kind] = function(k, opts)
    opts = opts or {}
    return layer(kind, { stride = true, padding = true }, opts,
                 { k, opts.stride or k, opts.padding or 0 })
  end
end

--- nn.adaptive_avgpool2d(h [, w])
function M.adaptive_avgpool2d(h, w) return core.layer("adaptive_avgpool2d", { h, w or h }) end

--- nn.relu(), nn.gelu(), nn.tanh(), nn.sigmoid(), nn.identity()
for _, kind in ipairs { "relu", "gelu", "tanh", "sigmoid", "identity" } do
  M[kind] = function() return core.layer(kind, {}) end
end

--- nn.softmax(dim), nn.log_softmax(dim)
function M.softmax(dim) return core.layer("softmax", { dim }) end
function M.log_softmax(dim) return core.layer("log_softmax", { dim }) end

--- nn.dropout([p = 0.5 [, {generator = g}]]): masks drawn from the state's generator
function M.dropout(p, opts) return layer("dropout", GEN, opts, { p or 0.5 }) end

--- nn.batchnorm2d(channels [, {eps = 1e-5, momentum = 0.1}])
function M.batchnorm2d(c, opts)
  opts = opts or {}
  return layer("batchnorm2d", { eps = true, momentum = true }, opts,
               { c, opts.eps or 1e-5, opts.momentum or 0.1 })
end

--- nn.groupnorm(groups, channels [, {eps = 1e-5}])
function M.groupnorm(g, c, opts)
  opts = opts or {}
  return layer("groupnorm", { eps = true }, opts, { g, c, opts.eps or 1e-5 })
end

--- nn.layernorm(size or {sizes...} [, {eps = 1e-5}])
function M.layernorm(shape, opts)
  opts = opts or {}
  local args = { opts.eps or 1e-5 }
  for _, s in ipairs(type(shape) == "table" and shape or { shape }) do args[#args + 1] = s end
  return layer("layernorm", { eps = true }, opts, args)
end

--- nn.flatten([start = 1 [, end = -1]])
function M.flatten(s, e) return core.layer("flatten", { s or 1, e or -1 }) end

--- nn.embedding(count, dim [, {generator = g}])
function M.embedding(n, d, opts) return layer("embedding", GEN, opts, { n, d }) end

--- nn.sequential{ m1, m2, ... } -> dpy.Module; children are named "0", "1", ...
-- Runs in C++ when every child does, else in Lua.
function M.sequential(list)
  if type(list) ~= "table" then error("nn.sequential: a list of modules expected", 2) end
  local names, native = {}, true
  for i, m in ipairs(list) do
    if not core.is_module(m) then
      error(string.format("nn.sequential: element %d is not a dpy.Module", i), 2)
    end
    names[i] = tostring(i - 1)
    native = native and m:is_native()
  end
  if native then return core.container(names, list, true) end
  return core.container(names, list, false, function(_, x)
    for _, m in ipairs(list) do x = m(x) end
    return x
  end)
end

--- nn.module{ name = child, ..., forward = function(self, x) ... end } -> dpy.Module
-- A custom module: children become m.name and own the parameters (in name order); forward is
-- called by m(x) and m:forward(x).
function M.module(spec)
  if type(spec) ~= "table" or type(spec.forward) ~= "function" then
    error("nn.module: a table with a forward function expected", 2)
  end
  local names, children = {}, {}
  for k, v in pairs(spec) do
    if k ~= "forward" then
      if type(k) ~= "string" or not core.is_module(v) then
        error(string.format("nn.module: field '%s' is not a dpy.Module", tostring(k)), 2)
      end
      names[#names + 1] = k
    end
  end
  table.sort(names)
  for i, k in ipairs(names) do children[i] = spec[k] end
  return core.container(names, children, false, spec.forward)
end

--- Losses: nn.cross_entropy(logits, target [, reduction]), nn.nll, nn.mse,
-- nn.bce_with_logits; reduction "mean" (default), "sum" or "none".
for _, kind in ipairs { "cross_entropy", "nll", "mse", "bce_with_logits" } do
  M[kind] = function(input, target, reduction) return core.loss(kind, input, target, reduction) end
end

return M
