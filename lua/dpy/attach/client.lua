--- dpy.attach.client: `dpy-lua attach RUN_DIR [--uid U]`, a prompt on one node of a running
-- experiment. It connects to the control socket of every process of the run (attach/p<k>.sock,
-- see host/core/attach.c): Lua typed at the prompt runs in node U's own state (dpy.attach.node);
-- pause(), step(k), resume(), nodes(), use(uid), detach() and help() run here and drive every
-- process. Pausing is two steps: each process holds its nodes at their next round boundary and
-- says the highest round one has started; every process then lets its nodes finish that round.
local core = require "dpy.attach.core"
local metrics = require "dpy.metrics"
local launcher = require "dpy.launcher"
local forward = require "dpy.attach.forward"
local attach_node = require "dpy.attach.node"

local M = {}
local Client = {}
Client.__index = Client

local HELP = [[
Lua typed here runs on the node, between two of its events, with these globals:
  node, model, optimizer, loader, trainer, graph, metrics, config, round, log,
  received (the vectors it received this round, by sender uid)
  watch("test_accuracy")   print each round's value as the node records it; unwatch([key])
  break_on("post_exchange", function(node) return ... end)   pause the run when it returns true;
                           clear_breaks()
  add_action{ "model_norm" }           an action from the next event on
Here, for the whole run:
  pause()     every node stops at the next round boundary
  step(k)     k more rounds (default 1), then pause again
  resume()    run on
  wait()      until the run pauses (a breakpoint) or ends: for a session typed ahead, from a pipe
  nodes()     every node's round and state;   use(uid)   another node
  detach()    leave (Ctrl-D too); the run stays as it is, paused or running
Changes take effect from the node's next round; every chunk run is in the node's log and, at the
end of the run, in manifest.json (attached). Ctrl-C interrupts the code running on the node.]]

local function say(self, text)
  self.last_said = text
  if self.tty then core.editor_print(text) else io.stdout:write(text, text:sub(-1) == "\n" and "" or "\n") end
  io.stdout:flush()
end

-- Connects to process p's socket: directly, or through ssh when the process wrote that it runs
-- on another host (attach/p<p>.host); -> connection | nil, message.
function Client:reach(p)
  local path = launcher.attach_socket(self.dir, p)
  local where = metrics.read(launcher.attach_where(self.dir, p))
  if not (where and where.host and where.socket) or where.host == launcher.hostname() then
    local c, err = core.connect(path)
    if c then return c end
    return nil, string.format("process %d of %s does not answer (%s: %s): the run has ended", p, self.dir, path, err)
  end
  if not self.folder then
    local err
    self.folder, err = forward.folder()
    if not self.folder then return nil, err end
  end
  local c, fwd = forward.connect { ssh = self.ssh, host = where.host, remote = where.socket,
                                   here = string.format("%s/p%d.sock", self.folder, p),
                                   log = string.format("%s/p%d.ssh.log", self.folder, p) }
  if not c then return nil, string.format("process %d of %s runs on %s: %s", p, self.dir, where.host, fwd) end
  self.forwards[#self.forwards + 1] = fwd
  return c
end

--- client:close(): closes every connection and forward
function Client:close()
  for p, c in pairs(self.conns) do if not self.ended[p] then c:close() end end
  for _, f in ipairs(self.forwards) do f:close() end
  self.forwards = {}
  if self.folder then
    os.remove(self.folder)
    self.folder = nil
  end
end

--- client.open(dir [, { ssh, uid }]) -> client | nil, message [, usage]: connected to every process of run
-- dir; processes on other hosts through `ssh` (the command, default "ssh"). usage: uid is no node of
-- the run (a usage error), said before any process is reached.
function M.open(dir, opts)
  local manifest = metrics.read(dir .. "/manifest.json")
  if not manifest then return nil, dir .. " is not a run directory (no manifest.json)" end
  if not manifest.processes then return nil, dir .. " is a centralized run: it has no nodes to attach to" end
  local uid, count = opts and opts.uid, math.tointeger(manifest.nodes)
  if uid and count and (uid < 0 or uid >= count) then   -- a usage error, whether the run goes on or not
    return nil, string.format("--uid %d: no such node in %s (nodes 0-%d)", uid, dir, count - 1), true
  end
  local self = setmetatable({ dir = dir, conns = {}, where = {}, ended = {}, refused = {}, next_id = 0,
                              nodes = manifest.nodes,
                              tty = false, forwards = {}, ssh = opts and opts.ssh or "ssh" }, Client)
  for p = 0, (manifest.processes or 1) - 1 do
    local c, err = self:reach(p)
    if not c then
      self:close()
      return nil, err
    end
    self.conns[p + 1] = c
  end
  local st = self:status()
  for p = 1, #self.conns do
    if not st[p] then
      self:close()
      if self.refused[p] then return nil, string.format("process %d of %s refused the session: %s", p - 1, dir,
                                                        self.refused[p]) end
      return nil, string.format("process %d of %s does not answer%s", p - 1, dir,
                                self.forwards[1] and " (through ssh: has the run ended?)" or ": the run has ended")
    end
  end
  for p, list in pairs(st) do
    for _, n in ipairs(list) do self.where[n.uid] = p end
    if list.limit and list.limit >= 0 then self.paused_at = list.limit end   -- paused by another session
  end
  return self
end

-- A frame nobody asked for: a watched value, a breakpoint, a process done.
function Client:unsolicited(p, kind, _, id, text)
  if kind == "W" then
    say(self, text)
  elseif kind == "B" then
    say(self, "break: " .. text)
    self.want_pause = true
  elseif kind == "Z" then
    self:gone(p)
  elseif kind == "C" then   -- names for a Tab given up on
    return
  elseif kind == "X" and id == 0 then   -- the process refused this session (it closes it)
    self.refused[p] = text
  elseif kind == "R" or kind == "X" then   -- the answer to an interrupted request, come late
    if text ~= "" then say(self, text) end
  end
end

function Client:gone(p)
  if self.ended[p] then return end
  self.ended[p] = true
  self.conns[p]:close()
  local left = 0
  for q = 1, #self.conns do if not self.ended[q] then left = left + 1 end end
  if left == 0 then self.over = true end
end

-- Reads every whole frame connection p has.
function Client:drain(p)
  while not self.ended[p] do
    local kind, uid, id, text = self.conns[p]:recv(0)
    if not kind then
      if uid == "closed" then self:gone(p) end
      return
    end
    if self.awaiting and self.awaiting.p == p and self.awaiting.id == id and kind ~= "W" and kind ~= "B" then
      self.awaiting.reply = { kind = kind, text = text }
    else
      self:unsolicited(p, kind, uid, id, text)
    end
  end
end

-- Sends a frame to process p (index from 1) and waits for its answer: kind, text | nil, why.
-- on_wait(seconds) is called while it waits (returning true gives up); Ctrl-C calls on_interrupt(id).
function Client:request(p, kind, uid, payload, on_wait, on_interrupt)
  if self.ended[p] then return nil, "its process has finished" end
  self.next_id = self.next_id + 1
  local id = self.next_id
  local ok, err = self.conns[p]:send(kind, uid, id, payload)
  if not ok then
    self:drain(p)   -- what the process wrote before it closed (a refusal) is still to be read
    self:gone(p)
    return nil, "its process has gone: " .. err
  end
  self.awaiting = { p = p, id = id }
  local start = os.time()
  while not self.awaiting.reply do
    local ready = core.wait(self.conns, 0.25)
    if core.interrupted() and on_interrupt then on_interrupt(id) end
    for _, q in ipairs(ready) do if q > 0 then self:drain(q) end end
    if self.ended[p] and not self.awaiting.reply then
      self.awaiting = nil
      return nil, "its process has finished"
    end
    if on_wait and on_wait(os.time() - start) then
      self.awaiting = nil
      return nil, "no answer yet"
    end
  end
  local reply = self.awaiting.reply
  self.awaiting = nil
  return reply.kind, reply.text
end

--- client:status() -> { [p] = { limit, hold, { uid, round, state }... } } of the live processes
function Client:status()
  local all = {}
  for p = 1, #self.conns do
    local kind, text = self:request(p, "S", 0, "")
    if kind == "S" then
      local list = {}
      local limit, hold = text:match("^limit (%-?%d+) hold (%d)")
      list.limit, list.hold = tonumber(limit), hold == "1"
      for uid, round, state in text:gmatch("\n(%d+) (%-?%d+) (%a+)") do
        list[#list + 1] = { uid = tonumber(uid), round = tonumber(round), state = state }
      end
      all[p] = list
    end
  end
  return all
end

--- client:node_list() -> { { uid, round, state, process }... } of every live process, by uid
function Client:node_list()
  local all = {}
  for p, list in pairs(self:status()) do
    for _, n in ipairs(list) do all[#all + 1] = { uid = n.uid, round = n.round, state = n.state, p = p - 1 } end
  end
  table.sort(all, function(a, b) return a.uid < b.uid end)
  return all
end

-- Every process holds its nodes at their next boundary; -> the highest round any has started.
function Client:hold_all()
  local top = 0
  for p = 1, #self.conns do
    local kind, text = self:request(p, "H", 0, "")
    if kind == "H" then top = math.max(top, tonumber(text)) end
  end
  return top
end

function Client:set_limit(round)
  for p = 1, #self.conns do self:request(p, "L", 0, round and tostring(round) or "") end
end

-- Waits until every node has stopped at the limit (or finished); -> the nodes' rounds, or nil on Ctrl-C.
function Client:wait_stopped(limit)
  while not self.over do
    local all = self:node_list()
    local stopped, hi, done = true, -1, 0
    for _, n in ipairs(all) do
      if n.state == "done" then
        done = done + 1
      elseif n.state ~= "paused" or n.round < limit then
        stopped = false
      else
        hi = math.max(hi, n.round)
      end
    end
    if stopped then
      if done == #all then return "every node has finished" end
      return string.format("paused: every node has finished round %d%s", hi,
                           done > 0 and string.format(" (%d finished the run)", done) or "")
    end
    core.wait(self.conns, 0.1)
    if core.interrupted() then return self:interrupt_breaks() end
    for p = 1, #self.conns do self:drain(p) end
  end
  return "the run has ended"
end

-- Ctrl-C while waiting: a breakpoint function of this session's that loops holds its node, and so
-- the run; each node evaluating one is sent its interrupt (it fails: "break_on failed: interrupted").
function Client:interrupt_breaks()
  for _, n in ipairs(self:node_list()) do
    if n.state == "evaluating" and not self.ended[n.p + 1] then
      self.conns[n.p + 1]:send("I", n.uid, attach_node.BREAK_ID, "")
    end
  end
end

function Client:pause()
  if self.paused_at then return "paused already, after round " .. self.paused_at end
  local top = self:hold_all()
  self:set_limit(top)
  self.paused_at = top
  return self:wait_stopped(top) or "(still pausing; nodes() shows where each node is)"
end

function Client:step(k)
  k = math.tointeger(k or 1)
  if not k or k < 1 then error("step(k): k a positive integer", 0) end
  local base = self.paused_at or self:hold_all()
  self.paused_at = base + k
  self:set_limit(base + k)
  return self:wait_stopped(base + k) or "(still stepping; nodes() shows where each node is)"
end

function Client:wait()
  if self.paused_at then   -- paused already (pause, step): nothing would wake it
    return self:wait_stopped(self.paused_at) or "(still pausing; nodes() shows where each node is)"
  end
  while not self.over do
    if self.want_pause then
      self.want_pause = false
      return self:pause()
    end
    core.wait(self.conns, 0.25)
    if core.interrupted() then return self:interrupt_breaks() end
    for p = 1, #self.conns do self:drain(p) end
  end
  return "the run has ended"
end

function Client:resume()
  self:set_limit(nil)
  self.paused_at = nil
  return "running"
end

function Client:nodes_text()
  local lines = { "uid  rounds done  state       process" }
  for _, n in ipairs(self:node_list()) do
    lines[#lines + 1] = string.format("%3d  %11d  %-10s  %d", n.uid, math.max(n.round, 0), n.state, n.p)
  end
  return table.concat(lines, "\n")
end

--- The names Tab may complete text with, in the node's session (dpy.help.complete there); none
-- when the node is busy in its round for more than a second or two.
function Client:complete(text)
  local kind, words = self:request(self.where[self.uid], "C", self.uid, text, function(waited) return waited >= 2 end)
  local out = {}
  if kind == "C" then for w in words:gmatch("[^\n]+") do out[#out + 1] = w end end
  return out
end

--- Runs code on the node in use; -> ok, text
function Client:eval(code)
  local p = self.where[self.uid]
  local told, interrupted = false, false
  local kind, text = self:request(p, "E", self.uid, code, function(waited)
    if waited >= 2 and not told then
      told = true
      say(self, string.format("(node %d is in its round: the code runs at its next event or round boundary; "
                              .. "Ctrl-C cancels)", self.uid))
    end
  end, function(id)
    if not interrupted then
      interrupted = true
      self.conns[p]:send("I", self.uid, id, "")
    end
  end)
  if not kind then return false, string.format("node %d: %s", self.uid, text) end
  return kind == "R", text
end

-- The commands that run here, not on the node.
function Client:controls()
  return {
    pause = function() return self:pause() end,
    step = function(k) return self:step(k) end,
    resume = function() return self:resume() end,
    wait = function() return self:wait() end,
    nodes = function() return self:nodes_text() end,
    use = function(uid)
      uid = math.tointeger(uid)
      if not uid or not self.where[uid] then error("use(uid): no node " .. tostring(uid) .. " in this run", 0) end
      self.uid = uid
      return "node " .. uid
    end,
    detach = function() self.detached = true end,
    help = function() return HELP end,
  }
end

-- One chunk typed: a control of the run, or code for the node.
function Client:run_chunk(code)
  local controls = self:controls()
  local name = code:match("^%s*([%a_][%w_]*)%s*%(")
  if name and controls[name] then
    local fn = load("return " .. code, "=attach", "t", controls)
    if fn then
      local ok, res = pcall(fn)
      if not ok then return say(self, tostring(res)) end
      if res ~= nil then say(self, tostring(res)) end
      return
    end
  end
  local ok, text = self:eval(code)
  if text ~= "" or not ok then say(self, text) end
end

-- Whether code is an unfinished chunk (more lines wanted), as lua.c decides.
local function incomplete(code)
  if load("return " .. code, "=attach") then return false end
  local fn, err = load(code, "=attach")
  return not fn and err:sub(-5) == "<eof>"
end

-- Reads one line, handling the run's frames meanwhile; -> line | false (end of input, or the run ended)
function Client:read_line(prompt)
  if self.tty then core.editor_prompt(prompt) end
  while not self.over do
    if self.want_pause then
      self.want_pause = false
      say(self, self:pause())
    end
    local ready = core.wait(self.conns, 0.5, true)
    if core.interrupted() then
      core.editor_cancel()
      self.buffer = nil
      return ""
    end
    for _, q in ipairs(ready) do
      if q == 0 then
        local line = core.editor_line()
        if line ~= nil then return line end
      else
        self:drain(q)
      end
    end
  end
  return false
end

function Client:loop()
  while not self.over and not self.detached do
    local line = self:read_line(self.buffer and ">> " or string.format("node %d> ", self.uid))
    if line == false then break end
    local code = self.buffer and (self.buffer .. "\n" .. line) or line
    code = code:gsub("^=", "")   -- "=expr" as in Lua 5.1
    if incomplete(code) then
      self.buffer = code
    else
      self.buffer = nil
      if code:match("%S") then self:run_chunk(code) end
    end
  end
end

--- client.main{ dir, uid } -> exit code
function M.main(a)
  local self, err, usage = M.open(a.dir, { ssh = a.ssh, uid = a.uid })
  if not self then
    io.stderr:write("dpy-lua attach: ", err, "\n")
    return usage and 2 or 1
  end
  self.tty = require("dpy.host.core").isatty(0)
  if a.uid == nil then
    io.stdout:write(self:nodes_text(), "\n")
    if not self.tty then
      io.stderr:write("dpy-lua attach: --uid U: which node (the list above)\n")
      self:close()
      return 2
    end
    io.stdout:write("node? ")
    io.stdout:flush()
    a.uid = math.tointeger(tonumber(io.read("l") or ""))
  end
  if not a.uid or not self.where[a.uid] then
    io.stderr:write(string.format("dpy-lua attach: --uid %s: no such node in %s (nodes 0-%d)\n", tostring(a.uid),
                                  a.dir, (self.nodes or 1) - 1))
    self:close()
    return 2
  end
  self.uid = a.uid
  local home = os.getenv("HOME")
  core.editor_open(home and home .. "/.dpy_lua_history", function(text) return self:complete(text) end)
  local round, state
  for _, n in ipairs(self:node_list()) do if n.uid == self.uid then round, state = n.round, n.state end end
  say(self, string.format("attached to node %d of %s (%s, %d rounds done): help() lists what you can do; "
                          .. "Ctrl-D detaches", self.uid, a.dir, state or "?", math.max(round or 0, 0)))
  if self.paused_at then say(self, "the run is paused, after round " .. self.paused_at) end
  local done, why = pcall(self.loop, self)
  core.editor_close()
  self:close()
  if not done then
    io.stderr:write("dpy-lua attach: ", tostring(why), "\n")
    return 1
  end
  if self.over then
    if self.last_said ~= "the run has ended" then io.stdout:write("the run has ended\n") end
  else
    io.stdout:write(self.tty and "\n" or "", "detached; the run goes on", self.paused_at and " (paused)" or "", "\n")
  end
  return 0
end

return M
