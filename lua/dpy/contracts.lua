--- dpy.contracts: what a user's component must return from its new, by kind, checked where the
-- code that uses it would otherwise fail far from the cause (registry.build runs them on the
-- components loaded from a user's file): contracts[kind](built, ctx, spec) -> nil, or what is wrong.
-- The built-ins check their own data; every node builds its datasets and its sharing rule, and
-- layout.check builds the graph and the partition before anything is written.

-- What is wrong with graph g for a run of nodes nodes (nil: nothing): every node takes its own
-- list as the peers that send to it, so a one-way link leaves a node waiting out peer_timeout.
-- ctx.directed: the run's rule takes a directed graph (a node's list: the nodes it sends to), so
-- a one-way link is no fault; ctx.undirected: else, who needs it undirected and why.
local function graph_problem(g, nodes, ctx)
  if type(g) ~= "table" or type(g.adj) ~= "table" then
    return "must return { n = nodes, adj = { [uid] = neighbour uids } }, got " .. type(g)
  end
  if g.n ~= nodes then return string.format("returned a graph of n = %s for %d nodes", tostring(g.n), nodes) end
  local listed = {}
  for u = 0, nodes - 1 do
    if type(g.adj[u]) ~= "table" then return "returned no neighbour list for node " .. u end
    listed[u] = {}
    for _, v in ipairs(g.adj[u]) do
      local id = math.tointeger(v)   -- 1.0 is uid 1 (a JSON decoder's number, a division's)
      local why = (not id or id < 0 or id >= nodes)
                  and string.format("%s, not a node (an integer 0..%d)", tostring(v), nodes - 1)
                  or id == u and "itself (a self-loop)" or listed[u][id] and id .. " twice"
      if why then return string.format("returned a graph whose node %d lists %s", u, why) end
      listed[u][id] = true
    end
  end
  if ctx.directed then return nil end
  local u, v = require("dpy.graph").one_way(g)
  if u then
    return string.format("returned a directed graph: node %d lists %d as a neighbour, but %d does not list %d%s",
                         u, v, v, u, ctx.undirected and ", which " .. ctx.undirected or "")
  end
end

-- What is wrong with part p of a partition of size samples (nil: nothing); layout.write packs the
-- parts into one int64 tensor, and a node's loader indexes the training set by its part.
local function part_problem(p, size)
  local tensor = require "dpy.tensor"
  if not tensor.is_tensor(p) then return "is a " .. type(p) .. ", not a tensor of sample indices" end
  if not p:dtype():match("^u?int%d+$") then return "is a tensor of " .. p:dtype() .. ", not of an integer type" end
  if p:dim() ~= 1 then return string.format("is a tensor of %d dimensions, not 1", p:dim()) end
  if not size or p:numel() == 0 then return nil end
  local lo, hi = p:min():item(), p:max():item()
  if lo < 0 or hi >= size then
    return string.format("holds index %d, outside the training set's %d samples (0..%d)", lo < 0 and lo or hi, size,
                         size - 1)
  end
end

-- The functions a sharing rule's table may hold: the runtime calls each one it finds.
local RULE_FUNCTIONS = { "combine", "exchange", "bound", "encode", "decode", "checkpoint", "restore" }

-- What is wrong with a sharing rule (nil: nothing): dpsgd calls its exchange when it has one, else
-- its combine; a payload of its own needs all three of bound, encode and decode.
local function rule_problem(rule, spec)
  if type(rule) ~= "table" then return "must return a table holding the rule's functions, got " .. type(rule) end
  for _, name in ipairs(RULE_FUNCTIONS) do
    if rule[name] ~= nil and type(rule[name]) ~= "function" then
      return string.format("returned %s, a %s, not a function", name, type(rule[name]))
    end
  end
  if spec.exchange and not rule.exchange then
    return "returned no exchange (a function(node, round, graph, live_neighbours)), which exchange = true in its "
           .. "spec promises"
  end
  if rule.exchange and not spec.exchange then
    return "returned exchange, but its spec does not say exchange = true (then sim_clock, churn and round_timeout, "
           .. "which its messages do not follow, are refused)"
  end
  if not rule.exchange and not rule.combine then
    return "returned no combine (a function(node, round, got, weights, own_weight))"
  end
  if rule.payload == nil and not rule.encode and not rule.decode then return nil end
  if type(rule.payload) ~= "string" then return "returned encode or decode without payload (its dtype, \"uint8\")" end
  for _, name in ipairs { "bound", "encode", "decode" } do
    if not rule[name] then return string.format("returned a payload of its own without %s (a function)", name) end
  end
end

-- The methods the run calls on an optimizer, with their signatures, and the config key that needs
-- each (nil: every run): the trainer steps it, a checkpoint saves and restores its state.
local OPTIMIZER_METHODS = {
  { "zero_grad", "a function(self)" }, { "step", "a function(self)" },
  { "state", "a function(self) -> bytes", "checkpoint_every" },
  { "set_state", "a function(self, bytes)", "checkpoint_every" },
  { "reset", "a function(self)", "reset_optimizer" },
}

-- What is wrong with optimizer opt for a run of config (nil: nothing); a dpy.Optimizer (userdata) has every method.
local function optimizer_problem(opt, config)
  if type(opt) ~= "table" and type(opt) ~= "userdata" then
    return "must return a dpy.Optimizer (optim.sgd(ctx.model, cfg)) or a table of its methods, got " .. type(opt)
  end
  for _, m in ipairs(OPTIMIZER_METHODS) do
    local ok, f = pcall(function() return opt[m[1]] end)   -- a userdata of another type may not index
    if not ok then return "must return a dpy.Optimizer or a table of its methods, got " .. tostring(opt) end
    if f ~= nil and type(f) ~= "function" then
      return string.format("returned an optimizer whose %s is a %s, not a function", m[1], type(f))
    end
    if f == nil and (not m[3] or (config or {})[m[3]]) then
      return string.format("returned an optimizer without %s (%s)%s", m[1], m[2],
                           m[3] and ", which " .. m[3] .. " needs" or "")
    end
  end
end

-- What is wrong with transform t (nil: nothing): the chain calls encode and decode, hashes the labels
-- into its id, and sizes the payload limit by bound when there is one.
local function transform_problem(t)
  if type(t) ~= "table" then
    return "must return a table { label, input, encode, decode, bound }, got " .. type(t)
  end
  if type(t.label) ~= "string" then return "returned no label (a string naming it and its options)" end
  if t.input ~= nil and t.input ~= "float32" and t.input ~= "any" then
    return string.format("returned input %s, not \"float32\" or \"any\"", tostring(t.input))
  end
  for _, f in ipairs { { "encode", "a function(t) -> uint8 tensor" },
                       { "decode", "a function(payload, dtype, max_bytes) -> tensor or nil, err" } } do
    if t[f[1]] == nil then return string.format("returned no %s (%s)", f[1], f[2]) end
  end
  for _, name in ipairs { "encode", "decode", "bound" } do
    if t[name] ~= nil and type(t[name]) ~= "function" then
      return string.format("returned %s, a %s, not a function", name, type(t[name]))
    end
  end
end

-- What is wrong with an action's handlers (nil: nothing): nil is none; each event's and the outgoing
-- modifier's, checkpoint's and restore's value is called.
local function action_problem(handlers)
  if handlers == nil then return nil end
  if type(handlers) ~= "table" then
    return "must return nil or a table of handlers ({ [event] = function(node, round) }), got " .. type(handlers)
  end
  local events = require("dpy.container").EVENTS   -- an unknown key: container.build_actions names it
  local called = { outgoing = true, checkpoint = true, restore = true }
  for event, h in pairs(handlers) do
    if (events[event] or called[event]) and type(h) ~= "function" then
      return string.format("returned %s, a %s, not a function", event, type(h))
    end
  end
end

-- The most channels the loader normalizes (data.core.batch's limit).
local MAX_CHANNELS = 16

-- What is wrong with a dataset's mean or std (nil: nothing): data.loader normalizes each of the
-- images' channels with one number of each, and divides by std; uint8 pixels are scaled to [0, 1]
-- first, so a mean or std above 1 is one on the 0..255 scale (it would make every input nearly
-- the same number).
local function stats_problem(d, key, channels, u8)
  local v = d[key]
  if type(v) ~= "table" then
    return string.format("returned no %s, a list of %d number%s (one per channel) that the loader normalizes with",
                         key, channels, channels == 1 and "" or "s")
  end
  if #v ~= channels then
    return string.format("returned %s of %d numbers for images of %d channel%s", key, #v, channels,
                         channels == 1 and "" or "s")
  end
  for i = 1, channels do
    local x = v[i]
    if type(x) ~= "number" or x ~= x or (key == "std" and x <= 0) then
      return string.format("returned %s[%d] = %s, not a number%s", key, i, tostring(x), key == "std" and " > 0" or "")
    end
  end
  local why = u8 and require("dpy.data").unit_scale(v)
  if why then return string.format("returned %s for uint8 images, which %s", key, why) end
end

-- What is wrong with what a dataset's images, shape, mean and std tell the loader and the models
-- (nil: nothing): images N×C×H×W, shape {C, H, W} (what a model is built for), mean and std per channel.
local function layout_problem(d)
  local dims = d.images:size()
  if #dims ~= 4 then
    return string.format("returned images of %s, not N×C×H×W (a grey image has C = 1)", table.concat(dims, "×"))
  end
  local s = d.shape
  if type(s) ~= "table" then
    return "returned no shape, a list {C, H, W} of one image's dimensions (what a model is built for)"
  end
  if #s ~= 3 or s[1] ~= dims[2] or s[2] ~= dims[3] or s[3] ~= dims[4] then
    local shown = {}
    for i, v in ipairs(s) do shown[i] = tostring(v) end
    return string.format("returned shape {%s}, but its images are %s", table.concat(shown, ", "),
                         table.concat(dims, "×", 2))
  end
  if dims[2] > MAX_CHANNELS then
    return string.format("returned images of %d channels; the loader normalizes %d at most", dims[2], MAX_CHANNELS)
  end
  local u8 = d.images:dtype() == "uint8"
  return stats_problem(d, "mean", dims[2], u8) or stats_problem(d, "std", dims[2], u8)
end

local M = {
  graph = function(g, ctx) return graph_problem(g, ctx.nodes, ctx) end,
  partitioner = function(parts, ctx)
    if type(parts) ~= "table" then return "must return a list of tensors of sample indices, got " .. type(parts) end
    if #parts ~= ctx.nodes then return string.format("returned %d parts for %d training nodes", #parts, ctx.nodes) end
    local labels = ctx.labels
    local size = require("dpy.tensor").is_tensor(labels) and labels:size(0) or labels and #labels
    for k, p in ipairs(parts) do
      local wrong = part_problem(p, size)
      if wrong then return string.format("returned part %d that %s", k, wrong) end
    end
  end,
  sharing = function(rule, _, spec) return rule_problem(rule, spec) end,
  model = function(m)
    if not require("dpy.nn").is_module(m) then return "must return a dpy.Module, got " .. type(m) end
  end,
  dataset = function(d)
    if type(d) ~= "table" then return "must return a table, got " .. type(d) end
    local tensor = require "dpy.tensor"
    if not (tensor.is_tensor(d.images) and d.images:dim() >= 2) then
      return "must return images, a tensor N×C×H×W (one image a row)"
    end
    local n, labels = d.images:size(0), d.labels
    if not (tensor.is_tensor(labels) and labels:dim() == 1) then return "must return labels, a tensor of N labels" end
    if labels:numel() ~= n then return string.format("returned %d labels for %d images", labels:numel(), n) end
    local dtype = labels:dtype()   -- the loader widens any integer type to int64
    if not dtype:match("^u?int%d+$") then return "returned labels of " .. dtype .. ", not of an integer type" end
    if math.type(d.classes) ~= "integer" or d.classes < 1 then return "must return classes, an integer >= 1" end
    local lo, hi = n > 0 and labels:min():item() or 0, n > 0 and labels:max():item() or 0
    if lo < 0 or hi >= d.classes then
      return string.format("returned labels from %d to %d for %d classes (0 to %d)", lo, hi, d.classes, d.classes - 1)
    end
    return layout_problem(d)
  end,
  optimizer = function(opt, ctx) return optimizer_problem(opt, ctx.config) end,
  algorithm = function(round)
    if type(round) ~= "function" then
      return "must return a function(node, round) -> train_loss or nil, train_seconds; got " .. type(round)
    end
  end,
  transform = function(t) return transform_problem(t) end,
  action = function(handlers) return action_problem(handlers) end,
}

return M
