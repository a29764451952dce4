--- dpy.attach.node: a node's side of `dpy-lua attach`. The process's control socket (host/core/
-- attach.c) queues Lua code for a node; the node runs it in its own state at a round boundary
-- (dpy.node) or between two events (node:fire), never while it trains or exchanges. Each client
-- connection is a session with its own globals over the node's: node, model, optimizer, loader,
-- trainer, graph, metrics, config, received (the vectors received this round, by sender), round,
-- log, and watch / unwatch / break_on / clear_breaks / add_action. Every chunk run is written to
-- the node's log and to attach/<uid>.jsonl, which the run's manifest gathers at its end
-- (`attached`): an experiment changed by hand says so.
local pretty = require "dpy.pretty"
local metrics = require "dpy.metrics"
local host = require "dpy.host.core"

local M = {}

--- The request id a session's breakpoint functions run under: a client's Ctrl-C sends an interrupt
-- of it (its own requests count up from 1).
M.BREAK_ID = 0xFFFFFFFF

-- What a session's globals read from the node at each access.
local LIVE = {
  node = function(n) return n end, model = function(n) return n.model end,
  optimizer = function(n) return n.optimizer end, loader = function(n) return n.loader end,
  trainer = function(n) return n.trainer end, graph = function(n) return n.graph end,
  metrics = function(n) return n.metrics end, config = function(n) return n.cfg end,
  received = function(n) return n.received or {} end, round = function(n) return n.round or 0 end,
  log = function(n) return n.log end,
}

local function drop_session(node, conn)
  node.attach_sessions[conn] = nil
  for _, list in pairs(node.attach_breaks or {}) do
    for i = #list, 1, -1 do if list[i].conn == conn then table.remove(list, i) end end
  end
  local w = node.attach_watches or {}
  for i = #w, 1, -1 do if w[i].conn == conn then table.remove(w, i) end end
end

local function send(node, conn, kind, id, text)
  local sent, why = node.endpoint:attach_send(conn, kind, id, text)
  if sent then return end
  if why then node.log:write("attach: session %d closed: %s", conn, why) end   -- a client too slow
  drop_session(node, conn)
end

-- tostring(v) that cannot fail: a client's value whose __tostring raises, or gives no string, must
-- not fail the node that shows it (it is named by its type instead).
local function shown(v)
  local ok, s = pcall(tostring, v)
  if ok and type(s) == "string" then return s end
  return string.format("(a %s that tostring cannot show)", type(v))
end

-- The session of client connection conn: its globals (a table of its own over the node's).
local function session(node, conn)
  node.attach_sessions = node.attach_sessions or {}
  local s = node.attach_sessions[conn]
  if s then return s end
  s = { out = {} }
  local own = {
    print = function(...)   -- as Lua's own (and the local REPL's): tostring, tab-separated
      local words = table.pack(...)
      for i = 1, words.n do words[i] = tostring(words[i]) end
      s.out[#s.out + 1] = table.concat(words, "\t", 1, words.n) .. "\n"
    end,
    --- watch(key): each round's value of metric key, sent as it is recorded
    watch = function(key)
      assert(type(key) == "string", "watch: a metric name expected, as watch('test_accuracy')")
      node.attach_watches = node.attach_watches or {}
      table.insert(node.attach_watches, { conn = conn, key = key })
      s.out[#s.out + 1] = "watching " .. key .. "\n"   -- a line, as the README shows it (a returned string is quoted)
    end,
    unwatch = function(key)
      local w = node.attach_watches or {}
      for i = #w, 1, -1 do if w[i].conn == conn and (key == nil or w[i].key == key) then table.remove(w, i) end end
    end,
    --- break_on(event, fn): after each `event`, fn(node) -> true pauses the run
    break_on = function(event, fn)
      assert(require("dpy.container").EVENTS[event], "break_on: an event expected (pre_train, post_train, "
             .. "pre_exchange, post_exchange, ...), got " .. tostring(event))
      assert(type(fn) == "function", "break_on: a function(node) expected")
      node.attach_breaks = node.attach_breaks or {}
      node.attach_breaks[event] = node.attach_breaks[event] or {}
      table.insert(node.attach_breaks[event], { conn = conn, fn = fn })
      return "break on " .. event
    end,
    clear_breaks = function()
      for _, list in pairs(node.attach_breaks or {}) do
        for i = #list, 1, -1 do if list[i].conn == conn then table.remove(list, i) end end
      end
    end,
    --- add_action(spec): an action built now, its handlers run from the next event on
    add_action = function(spec)
      return require("dpy.container").add_action(node, spec)
    end,
  }
  s.own = own
  s.env = setmetatable(own, { __index = function(_, k)
    local live = LIVE[k]
    if live then return live(node) end
    return _G[k]
  end })
  node.attach_sessions[conn] = s
  return s
end

-- Writes the chunk in the node's log and in attach/<uid>.jsonl.
local function record(node, code)
  node.log:write("attach: round %d: %s", node.round or 0, (code:gsub("\n", "\\n")))
  local f = io.open(string.format("%s/attach/%d.jsonl", node.dir, node.uid), "a")
  if f then
    node.attach_seq = (node.attach_seq or 0) + 1
    -- t: the machine's monotonic clock, one for every process on it, orders the chunks of all nodes
    f:write(metrics.json.encode { uid = node.uid, round = node.round or 0, code = code, seq = node.attach_seq,
                                  at = os.date("!%Y-%m-%dT%H:%M:%SZ"), t = host.clock() }, "\n")
    f:close()
  end
end

--- Runs a client's chunk of code on node and sends the client what it printed and returned; or,
-- for kind "C", the names Tab may complete code with in the session (looked up, never called,
-- not recorded: it changes nothing).
function M.serve(node, conn, id, code, kind)
  local s = session(node, conn)
  if kind == "C" then   -- a client's table whose __index or __pairs raises (or loops) completes nothing
    local ok, words = node.endpoint:attach_eval(conn, id, require("dpy.help").complete, code, s.env,
                                                { s.own, LIVE, _G })
    return send(node, conn, "C", id, ok and table.concat(words, "\n") or "")
  end
  local fn, err = load("return " .. code, "=attach", "t", s.env)
  if not fn then fn, err = load(code, "=attach", "t", s.env) end
  if not fn then return send(node, conn, "X", id, err) end
  record(node, code)
  s.out = {}
  -- showing what the code returned or raised runs the client's code too (__tostring, __pairs): it
  -- runs under the same interrupt, and one that raises or cannot be shown is the client's error
  local evaluated, ok, shown_text = node.endpoint:attach_eval(conn, id, function()
    local res = table.pack(pcall(fn))
    if not res[1] then return false, shown(res[2]) end
    local fine, line = pcall(pretty.line, table.unpack(res, 2, res.n))
    if fine then return true, line end
    return false, "the result cannot be shown: " .. shown(line)
  end)
  if not evaluated then ok, shown_text = false, shown(ok) end
  send(node, conn, ok and "R" or "X", id, table.concat(s.out) .. shown_text)
end

--- Before round r: serves what is queued (from conn, id, code, kind: the first message, which the
-- node took itself: dpy.node), waits while the run is paused.
function M.boundary(node, r, conn, id, code, kind)
  local ep = node.endpoint
  while conn do
    M.serve(node, conn, id, code, kind)
    conn, id, code, kind = ep:attach_wait(r)
  end
  -- the sessions of clients gone go (with their watches and breakpoints); with a client attached,
  -- the round's received vectors are kept (a copy) for `received`
  for session_conn in pairs(node.attach_sessions or {}) do
    if not ep:attach_alive(session_conn) then drop_session(node, session_conn) end
  end
  node.received = node.attach_sessions and next(node.attach_sessions) and {} or nil
end

--- After event: what is queued (from conn, id, code, kind, as boundary's), then the breakpoints on
-- event.
function M.event(node, event, conn, id, code, kind)
  while conn do
    M.serve(node, conn, id, code, kind)
    conn, id, code, kind = node.endpoint:attach_poll()
  end
  -- a copy: a client found gone by send() leaves the list meanwhile
  local list = node.attach_breaks and node.attach_breaks[event] or {}
  for _, b in ipairs(table.move(list, 1, #list, 1, {})) do
    -- under the interrupt of its client's Ctrl-C (M.BREAK_ID) or going away: one that loops does
    -- not hold the node for ever; interrupted, it failed, and the run pauses as for any failure
    local ok, hit = node.endpoint:attach_eval(b.conn, M.BREAK_ID, b.fn, node)
    if not ok or hit then
      node.endpoint:attach_hold(b.conn)   -- this process stops at its next boundary; the client pauses the rest
      send(node, b.conn, "B", 0, string.format("node %d, round %d, %s: %s", node.uid, node.round or 0, event,
                                               ok and "break" or "break_on failed: " .. shown(hit)))
    end
  end
end

--- After round r is recorded: the watched metrics' values of round r.
function M.after_round(node, r)
  local list = node.attach_watches or {}
  for _, w in ipairs(table.move(list, 1, #list, 1, {})) do   -- a copy: send() drops a client gone
    local at, v = node.metrics:last(w.key)
    if at == r then send(node, w.conn, "W", 0, string.format("node %d round %d %s %s", node.uid, r, w.key,
                                                              pretty.format(v))) end
  end
end

--- The chunks run on the nodes 0 .. nodes - 1 of run dir by attached clients, in time order.
function M.changes(dir, nodes)
  local list = {}
  for uid = 0, nodes - 1 do
    local f = io.open(string.format("%s/attach/%d.jsonl", dir, uid))
    for line in f and f:lines() or function() end do
      local ok, e = pcall(metrics.json.decode, line)
      if ok and type(e) == "table" then
        e.uid, e.round, e.seq = math.tointeger(e.uid), math.tointeger(e.round), math.tointeger(e.seq)
        list[#list + 1] = e
      end
    end
    if f then f:close() end
  end
  table.sort(list, function(a, b)
    if a.t ~= b.t then return (a.t or 0) < (b.t or 0) end
    if a.uid ~= b.uid then return a.uid < b.uid end
    return (a.seq or 0) < (b.seq or 0)
  end)
  return list
end

return M
