--- dpy.checkpoint: a node's whole state at the end of a round, so that a run resumed from it
-- ends bit for bit as the uninterrupted run would. With `checkpoint_every = k` each node writes
-- <run>/ckpt/<uid>/<round>.ckpt at the end of every k-th round (written atomically): a file that
-- torch.load reads as a dict of tensors:
--   model            the parameters as one float32 vector (parameter order)
--   buffer.<name>    the module's buffers (batchnorm's running statistics)
--   optimizer        the optimizer's state (libtorch archive bytes, uint8)
--   rng              the node's default generator (shuffling, dropout, noise; uint8)
--   loader.order     the epoch's sample order (int64), when the loader shuffles
--   loader.rng       the loader's own generator, when it has one
--   meta             uint8 bytes of Lua source (dpy.serialize): format, uid, round, the loader's
--                    position and epoch count, the trainer's step and sample counts, the dropped
--                    peers, the metrics so far, the simulated clock's time (sim_clock), and each
--                    action's checkpoint table
--   a<i>.<n>         the tensors of action i's checkpoint table
-- A node keeps its older checkpoints until every node of the run has a later one (they are read
-- from the run directory: where nodes do not share it, as with dispatch, a node keeps them all).
-- An action with state declares checkpoint = function(node) -> plain table (nil, booleans,
-- numbers, strings, dpy.Tensor and tables of those) and restore = function(node, t).
local tensor = require "dpy.tensor"
local serialize = require "dpy.serialize"
local host = require "dpy.host.core"
local pretty = require "dpy.pretty"

local M = {}

M.FORMAT = 1
local TENSOR = "$tensor"   -- an encoded table's stand-in for a tensor: { ["$tensor"] = key }

--- The checkpoint file of node uid at round r in run directory dir.
function M.path(dir, uid, r) return string.format("%s/ckpt/%d/%d.ckpt", dir, uid, r) end

-- The rounds of uid's files named as checkpoints in dir, ascending, whole or not.
local function named(dir, uid)
  local names = require("dpy.paths").list(string.format("%s/ckpt/%d", dir, uid)) or {}
  local list = {}
  for _, name in ipairs(names) do
    local r = name:match("^(%d+)%.ckpt$")
    if r then list[#list + 1] = math.tointeger(tonumber(r)) end
  end
  table.sort(list)
  return list
end

-- Whether the file at path is a whole zip archive, as tensor.pickle writes one (a zip's local
-- header first, its end record, without a comment, last): 8 bytes read, not the file.
local function whole(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local ok = f:read(4) == "PK\3\4" and f:seek("end", -22) ~= nil and f:read(4) == "PK\5\6"
  f:close()
  return ok
end

--- The rounds of uid's checkpoints in dir, ascending (empty when none): those whose file is whole
-- (of names, uid's files named as checkpoints, when the caller listed them already),
-- so that a file under a checkpoint's name that is none (an empty 999.ckpt, one cut short) counts
-- for neither a resume nor the pruning of real ones.
function M.rounds(dir, uid, names)
  local list = {}
  for _, r in ipairs(names or named(dir, uid)) do
    if whole(M.path(dir, uid, r)) then list[#list + 1] = r end
  end
  return list
end

-- uid's last whole checkpoint's round in dir, or nil (the files from the last down, to the first whole one).
local function last(dir, uid)
  local list = named(dir, uid)
  for i = #list, 1, -1 do
    if whole(M.path(dir, uid, list[i])) then return list[i] end
  end
end

--- checkpoint.resume_round(dir, nodes, [every]) -> the round every node has a checkpoint of and to
-- resume from: the minimum over nodes of their last checkpoint | nil, message naming a node with
-- none (every: the run's checkpoint_every, for the message).
function M.resume_round(dir, nodes, every)
  local r
  local skipped = {}   -- files under a checkpoint's name past a node's last whole one: named in a refusal
  local function why(msg)
    if #skipped == 0 then return msg end
    return string.format("%s (%s: not a checkpoint, not counted)", msg, table.concat(skipped, ", "))
  end
  local lists = {}   -- by uid, listed and read once
  for u = 0, nodes - 1 do
    local names = named(dir, u)
    local list = M.rounds(dir, u, names)
    lists[u] = list
    for _, x in ipairs(names) do
      if x > (list[#list] or -1) and #skipped < 3 then
        skipped[#skipped + 1] = string.format("ckpt/%d/%d.ckpt", u, x)
      end
    end
    if #list == 0 then
      return nil, why(string.format("%s: node %d has no checkpoint (ckpt/%d/<round>.ckpt): nothing to resume (%s)", dir,
                                    u, u, every and string.format("it stopped before its first, of round %d: run the "
                                                                  .. "config again", every)
                                      or "the run needs checkpoint_every"))
    end
    r = math.min(r or math.huge, list[#list])
  end
  for u = 0, nodes - 1 do   -- a node ahead rolls back: it must still hold round r
    local has = false
    for _, x in ipairs(lists[u]) do has = has or x == r end
    if not has then
      return nil, why(string.format("%s: node %d has no checkpoint of round %d, the last round every node "
                                    .. "completed", dir, u, r))
    end
  end
  return r
end

-- {==== plain values with tensors ====}

-- v with every tensor replaced by a stand-in (the tensor goes to names/ts under prefix.<n>).
local function encode(v, where, prefix, names, ts, seen)
  if tensor.is_tensor(v) then
    local key = string.format("%s.%d", prefix, #names + 1)
    names[#names + 1], ts[#ts + 1] = key, v
    return { [TENSOR] = key }
  end
  local kind = type(v)
  if kind == "table" then
    if seen[v] then error(where .. ": a table met twice (a cycle?)", 0) end
    seen[v] = true
    local out = {}
    for k, x in pairs(v) do
      if type(k) ~= "string" and math.type(k) ~= "integer" then
        error(string.format("%s: key %s is not a string or an integer", where, tostring(k)), 0)
      end
      out[k] = encode(x, where .. "." .. tostring(k), prefix, names, ts, seen)
    end
    seen[v] = nil
    return out
  end
  if kind == "nil" or kind == "boolean" or kind == "number" or kind == "string" then return v end
  error(string.format("%s: a %s cannot be checkpointed (plain values and dpy.Tensor only)", where, kind), 0)
end

local function decode(v, tensors, where)
  if type(v) ~= "table" then return v end
  local key = v[TENSOR]
  if key ~= nil then
    local t = tensors[key]
    if not t then error(string.format("%s: no tensor '%s' in the file", where, tostring(key)), 0) end
    return t
  end
  local out = {}
  for k, x in pairs(v) do out[k] = decode(x, tensors, where) end
  return out
end

-- {==== save ====}

--- checkpoint.save(node, r) -> path: writes node's state at the end of round r; raises on failure.
function M.save(node, r)
  local names, ts, owned = {}, {}, {}
  local function put(name, t, own)
    names[#names + 1], ts[#ts + 1] = name, t
    if own then owned[#owned + 1] = t end
  end
  put("model", node.model:get_flat(), true)
  local buffers, order = node.model:named_buffers()
  for _, n in ipairs(order) do put("buffer." .. n, buffers[n]) end
  if node.optimizer then put("optimizer", tensor.from_bytes(node.optimizer:state(), "uint8"), true) end
  local default = tensor.default_generator()
  put("rng", default:state(), true)
  local meta = { format = M.FORMAT, uid = node.uid, round = r, metrics = node.metrics:export(), actions = {} }
  local loader = node.loader
  if loader then
    local shuffled = loader.order ~= nil and loader.order ~= loader.indices
    meta.loader = { pos = loader.pos, epochs = loader.epochs, n = loader.n, started = loader.order ~= nil,
                    shuffled = shuffled }
    if shuffled then put("loader.order", loader.order) end
    if loader.gen ~= default then put("loader.rng", loader.gen:state(), true) end
  end
  if node.trainer then meta.trainer = { steps = node.trainer.steps, samples = node.trainer.samples } end
  local clock = node.simclock
  if clock and clock.simulated then meta.sim_clock = clock.now end   -- a resumed run's clock goes on from it
  if node.dropped then
    meta.dropped = {}
    for u in pairs(node.dropped) do meta.dropped[#meta.dropped + 1] = u end
    table.sort(meta.dropped)
  end
  for i, a in ipairs(node.checkpointers) do
    local state = a.checkpoint(node)
    meta.actions[i] = { name = a.name,
                        state = encode(state, string.format("action '%s': checkpoint", a.name), "a" .. i, names,
                                       ts, {}) }
  end
  local sharing = node.sharing
  if sharing and sharing.checkpoint then   -- a rule with state (topk's residual, CHOCO's copies)
    meta.sharing = encode(sharing.checkpoint(node), "sharing: checkpoint", "s", names, ts, {})
  end
  put("meta", tensor.from_bytes(serialize.value(meta, "checkpoint"), "uint8"), true)
  local ok, bytes = pcall(tensor.pickle, names, ts)
  for _, t in ipairs(owned) do t:free() end
  if not ok then error(bytes, 0) end
  local dir = string.format("%s/ckpt/%d", node.dir, node.uid)
  if not require("dpy.paths").is_dir(node.dir) then   -- mkdir -p would make it again, without the run's files
    error(string.format("cannot write checkpoint: the run directory %s was removed", node.dir), 0)
  end
  local made, err = host.mkdir_p(dir)
  local path = M.path(node.dir, node.uid, r)
  if made then made, err = host.write_atomic(path, bytes) end
  if not made then error("cannot write checkpoint: " .. err, 0) end
  return path
end

--- checkpoint.prune(dir, uid, nodes): removes uid's checkpoints older than every node's last one
-- (no resume can need them: it resumes from the minimum of the last ones, which only grows). Only
-- whole files count as a node's last one (M.rounds).
function M.prune(dir, uid, nodes)
  local mine = named(dir, uid)
  if #mine < 2 then return end
  local floor = last(dir, uid) or 0
  for u = 0, nodes - 1 do
    if floor <= mine[1] then return end   -- nothing to remove
    if u ~= uid then floor = math.min(floor, last(dir, u) or 0) end
  end
  for _, r in ipairs(mine) do
    if r < floor then os.remove(M.path(dir, uid, r)) end
  end
end

--- checkpoint.drop_after(dir, uid, r): removes uid's checkpoints of rounds after r (a resumed
-- node rolled back to r writes them anew), whole or not.
function M.drop_after(dir, uid, r)
  for _, x in ipairs(named(dir, uid)) do
    if x > r then os.remove(M.path(dir, uid, x)) end
  end
end

-- {==== load ====}

--- checkpoint.read(path) -> { tensors = { [name] = tensor }, meta = table } | nil, message
function M.read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot read checkpoint: " .. err end
  local bytes = f:read("a")
  f:close()
  local names, ts = tensor.unpickle(bytes)
  if not names then return nil, string.format("%s: not a checkpoint (%s)", path, ts) end
  local tensors = {}
  for i, n in ipairs(names) do tensors[n] = ts[i] end
  local m = tensors.meta
  if not m or m:dtype() ~= "uint8" then return nil, path .. ": not a checkpoint (no meta)" end
  local src = m:bytes()
  local chunk = load("return " .. src, "=" .. path, "t", {})
  local ok, meta = false, nil
  if chunk then   -- data, run under a budget of instructions: a file made to loop does not hang the resume
    local co = coroutine.create(chunk)   -- a constructor takes about one instruction a value, a value a byte or more
    debug.sethook(co, function() error("not data: too many instructions", 0) end, "", 4 * #src + 1000)
    ok, meta = coroutine.resume(co)
  end
  if not ok or type(meta) ~= "table" then return nil, path .. ": not a checkpoint (its meta does not read)" end
  if meta.format ~= M.FORMAT then
    return nil, string.format("%s: checkpoint format %s, this dpy-lua reads %d", path, tostring(meta.format),
                              M.FORMAT)
  end
  return { tensors = tensors, meta = meta }
end

local function need(t, name, path, dtype, numel)
  if not t then error(string.format("%s: the checkpoint has no '%s'", path, name), 0) end
  if t:dtype() ~= dtype or (numel and t:numel() ~= numel) then
    error(string.format("%s: '%s' is %s[%d], this node's is %s[%s] (another config?)", path, name, t:dtype(),
                        t:numel(), dtype, numel and tostring(numel) or "?"), 0)
  end
  return t
end

-- Raises naming path and the field when meta's state is of the wrong kind or out of range (a file
-- edited by hand or by another tool): a loader position outside its samples, say, would otherwise
-- draw other samples without a word. nodes: the run's node count (dropped holds uids).
local function check_meta(meta, path, nodes)
  local function bad(field, v, want)
    error(string.format("%s: the checkpoint's %s is %s, where %s belongs", path, field, pretty.line(v), want), 0)
  end
  local function count(field, v, hi)
    if math.type(v) ~= "integer" or v < 0 or (hi and v > hi) then
      bad(field, v, hi and "an integer in 0.." .. hi or "a non-negative integer")
    end
  end
  local function kind(field, v, want, name)
    if v ~= nil and type(v) ~= want then bad(field, v, name) end
  end
  count("round", meta.round)
  local lm = meta.loader
  kind("loader", lm, "table", "a table")
  if lm then
    count("loader.n", lm.n)
    count("loader.pos", lm.pos, lm.n)
    count("loader.epochs", lm.epochs)
    kind("loader.started", lm.started, "boolean", "a boolean")
    kind("loader.shuffled", lm.shuffled, "boolean", "a boolean")
  end
  kind("trainer", meta.trainer, "table", "a table")
  if meta.trainer then
    count("trainer.steps", meta.trainer.steps)
    count("trainer.samples", meta.trainer.samples)
  end
  local clock = meta.sim_clock
  if clock ~= nil and not (type(clock) == "number" and clock >= 0 and clock < math.huge) then
    bad("sim_clock", clock, "a finite time in seconds")
  end
  kind("dropped", meta.dropped, "table", "a list of node uids")
  for i, u in ipairs(meta.dropped or {}) do count(string.format("dropped[%d]", i), u, nodes - 1) end
  kind("metrics", meta.metrics, "table", "a table of series")
  for name, list in pairs(meta.metrics or {}) do
    kind("metrics." .. tostring(name), list, "table", "a list")
    for i, e in ipairs(list) do
      if type(e) ~= "table" or e[1] == nil then   -- a tracker keeps rounds of any kind (metrics.lua)
        bad(string.format("metrics.%s[%d]", name, i), e, "a {round, value} pair")
      end
    end
  end
  if type(meta.actions) ~= "table" then bad("actions", meta.actions, "a list") end
end

--- checkpoint.restore(node, path [, round]) -> the round: node's state as the checkpoint holds it; raises
-- naming the file and what does not match (with round: a checkpoint of another round).
function M.restore(node, path, round)
  local ck, err = M.read(path)
  if not ck then error(err, 0) end
  local t, meta = ck.tensors, ck.meta
  if meta.uid ~= node.uid then
    error(string.format("%s: a checkpoint of node %s, not of node %d", path, tostring(meta.uid), node.uid), 0)
  end
  if round and meta.round ~= round then   -- a file copied or renamed: the node would go on from another round
    error(string.format("%s: a checkpoint of round %s, not of round %d", path, tostring(meta.round), round), 0)
  end
  check_meta(meta, path, node.cfg.nodes)
  node.model:set_flat(need(t.model, "model", path, "float32", node.model:numel()))
  local buffers, order = node.model:named_buffers()
  for _, n in ipairs(order) do
    local b = buffers[n]
    buffers[n]:copy_(need(t["buffer." .. n], "buffer." .. n, path, b:dtype(), b:numel()):view(b:size()))
  end
  if node.optimizer then
    local bytes = need(t.optimizer, "optimizer", path, "uint8"):bytes()
    local ok, msg = pcall(node.optimizer.set_state, node.optimizer, bytes)
    if not ok then error(string.format("%s: optimizer: %s", path, msg), 0) end
  end
  local default = tensor.default_generator()
  default:set_state(need(t.rng, "rng", path, "uint8"))
  local loader, lm = node.loader, meta.loader
  if loader then
    if not lm or lm.n ~= loader.n then
      error(string.format("%s: the loader's %s samples do not match this node's %d (another partition?)", path,
                          lm and tostring(lm.n) or "no", loader.n), 0)
    end
    if loader.order and loader.order ~= loader.indices then loader.order:free() end
    loader.order = nil
    if lm.shuffled then
      loader.order = need(t["loader.order"], "loader.order", path, "int64", loader.n)
    elseif lm.started then
      loader.order = loader.indices
    end
    loader.pos, loader.epochs = lm.pos, lm.epochs
    if loader.gen ~= default then loader.gen:set_state(need(t["loader.rng"], "loader.rng", path, "uint8")) end
  end
  if node.trainer and meta.trainer then
    node.trainer.steps, node.trainer.samples = meta.trainer.steps, meta.trainer.samples
  end
  local clock = node.simclock
  if clock and clock.simulated then
    if not meta.sim_clock then error(path .. ": the run has a simulated clock, but the checkpoint has none", 0) end
    clock.now, clock.sent, clock.done = meta.sim_clock, meta.sim_clock, meta.sim_clock
  end
  if meta.dropped then
    node.dropped = {}
    for _, u in ipairs(meta.dropped) do node.dropped[u] = true end
  end
  node.metrics:import(meta.metrics)
  for i, a in ipairs(node.checkpointers) do
    local saved = meta.actions[i]
    if not saved or saved.name ~= a.name then
      error(string.format("%s: action %d is '%s' here but '%s' in the checkpoint", path, i, a.name,
                          saved and saved.name or "none"), 0)
    end
    a.restore(node, decode(saved.state, t, path))
  end
  local sharing = node.sharing
  if sharing and sharing.restore then
    if not meta.sharing then error(path .. ": the sharing rule has state, but the checkpoint has none", 0) end
    sharing.restore(node, decode(meta.sharing, t, path))
  end
  node.round = meta.round
  return meta.round
end

--- checkpoint.save_model(node) -> path: the final model as <uid>.model.pt, a state dict (the
-- parameters' and buffers' names, as torch.load and load_state_dict read it).
function M.save_model(node)
  local params, porder = node.model:named_parameters()
  local buffers, border = node.model:named_buffers()
  local names, ts = {}, {}
  for _, n in ipairs(porder) do names[#names + 1], ts[#ts + 1] = n, params[n] end
  for _, n in ipairs(border) do names[#names + 1], ts[#ts + 1] = n, buffers[n] end
  local bytes = tensor.pickle(names, ts)
  local path = string.format("%s/%d.model.pt", node.dir, node.uid)
  local ok, err = host.write_atomic(path, bytes)
  if not ok then error("cannot write the model: " .. err, 0) end
  return path
end

return M
