--- dpy.node: one node of a decentralized run, in its own Lua state on its own thread: the round
-- loop. dpy.container builds the node's components from the config and locks them after init;
-- each round the algorithm (lua/dpy/algorithms/, or a user's file) runs
--   pre_train -> local steps -> post_train -> pre_exchange -> send / receive / combine ->
--   post_exchange
-- and the loop records the round's metrics and evaluates every eval_every rounds, writes a
-- checkpoint every checkpoint_every rounds, and at the end the final model (<uid>.model.pt).
-- A resumed node (args.resume = round) starts from its checkpoint of that round.
-- dpy.checkpoint is required where it is used: a node that writes no checkpoint loads it only to
-- write its final model (28 KiB less in every node's Lua state while the rounds run), and so is
-- dpy.attach.node: once a client has sent code.
local trainer = require "dpy.trainer"
local host = require "dpy.host.core"
local container = require "dpy.container"

local M = {}

--- node = node.build(endpoint, args): the container, unlocked (dpy-lua repl uses it).
M.build = container.build

-- {==== the round loop ====}

-- Before round r: what an attached client queued; a paused run waits here.
local function attach_boundary(node, r)
  local conn, id, code, kind = node.endpoint:attach_wait(r)
  if conn or node.attach_sessions then
    node.model:own_flat()   -- a client's code may write the model
    require("dpy.attach.node").boundary(node, r, conn, id, code, kind)
  end
end

local function evaluate(node, r)
  node.endpoint:acquire(r)
  local loss, acc = trainer.evaluate(node.model, node.test_set, {
    batch_size = node.cfg.eval_batch_size, indices = node.test_indices, loss = node.cfg.loss,
    task = node.task })
  node.endpoint:release()
  node.metrics:add("test_loss", r, loss)
  node.metrics:add("test_accuracy", r, acc)
  node.log:write("round %d: test loss %.4f, test accuracy %.4f", r, loss, acc)
  return acc
end

local function record(node, r, loss, train_secs, round_start, before)
  local m, t = node.metrics, node.endpoint:traffic()
  local clock = node.simclock
  if clock.simulated then   -- the clock messages are not the modelled network's bytes
    local c = node.endpoint:traffic(require("dpy.simclock").CLOCK)
    for _, k in ipairs { "sent_payload", "sent_header", "recv_payload", "recv_header" } do t[k] = t[k] - c[k] end
    m:add("sim_seconds", r, clock:finish())
  end
  if loss then m:add("train_loss", r, loss) end
  if node.trainer then m:add("step", r, node.trainer.steps) end   -- its local steps so far (batches)
  m:add("bytes_sent", r, t.sent_payload + t.sent_header - before.sent)
  m:add("bytes_received", r, t.recv_payload + t.recv_header - before.recv)
  m:add("train_seconds", r, train_secs)
  m:add("exchange_seconds", r, node.exchange_seconds or 0)
  m:add("wall_seconds", r, host.clock() - round_start)
  before.sent, before.recv = t.sent_payload + t.sent_header, t.recv_payload + t.recv_header
  if node.cfg.round_timeout then   -- round r is over: what comes of it (or came unread) is late
    local late = node.endpoint:late(r + 1) + clock.late
    m:add("late_messages", r, late - (before.late or 0))
    before.late = late
  end
  local refused = node.rejected_payloads or 0   -- payloads this node dropped as malformed (exchange.receive)
  if refused > (before.refused or 0) then
    m:add("rejected_payloads", r, refused - (before.refused or 0))
    before.refused = refused
  end
  local rejected, why = node.endpoint:rejected()
  if rejected > (before.rejected or 0) then
    node.log:write("round %d: %d packet(s) rejected by this process so far (last: %s)", r, rejected, why)
    before.rejected = rejected
  end
end

-- What is wrong with what round r of the algorithm returned (nil: nothing); a loss that is not a
-- number would be recorded as it is, and the run's summary and dpy-lua report read it as a divergence.
local function result_problem(loss, secs)
  local function shown(v) return type(v) == "string" and string.format("%q", v) or tostring(v) end
  if loss ~= nil and type(loss) ~= "number" then
    return string.format("train_loss %s (a %s), not a number or nil", shown(loss), type(loss))
  end
  if type(secs) ~= "number" then return string.format("train_seconds %s, not a number", shown(secs)) end
end

-- Raises, naming the algorithm and its file, when round r returned what the metrics cannot take.
local function check_result(node, r, loss, secs)
  local wrong = result_problem(loss, secs)
  if not wrong then return end
  local spec = require("dpy.registry").spec("algorithm", node.cfg.algorithm)
  error(string.format("algorithm '%s'%s: round %d returned %s", spec.name, spec.path and " (" .. spec.path .. ")" or "",
                      r, wrong), 0)
end

-- The end of round r: the checkpoint when one is due, then the pruning of older ones.
local function save_checkpoint(node, r)
  local every = node.cfg.checkpoint_every
  if not every or r % every ~= 0 then return end
  node.endpoint:release()   -- no compute slot held over a file write
  local checkpoint = require "dpy.checkpoint"
  checkpoint.save(node, r)
  checkpoint.prune(node.dir, node.uid, node.cfg.nodes)
end

local function run(node, resume)
  local cfg = node.cfg
  local algorithm = node.algorithm
  local eval_every = cfg.eval_every or 10
  node.log:write("%s: %s, %d nodes, %s, %d rounds of %d local steps%s", cfg.name,
                 type(cfg.algorithm) == "table" and cfg.algorithm[1] or cfg.algorithm,
                 cfg.nodes, node.is_server and "server" or
                 string.format("%d training samples", node.indices:numel()), cfg.rounds,
                 node.local_steps or 0,
                 node.graph and string.format(", %d neighbours", #node.graph.adj[node.uid]) or "")
  if resume then
    local checkpoint = require "dpy.checkpoint"
    checkpoint.restore(node, checkpoint.path(node.dir, node.uid, resume), resume)
    node.restored = true
    checkpoint.drop_after(node.dir, node.uid, resume)
    node.log:write("resumed from the checkpoint of round %d", resume)
  elseif node.t0 then
    node.metrics:add("ready_seconds", 0, host.clock() - node.t0)
  end
  node.endpoint:release()   -- the slot it was built in (l_nodes.c): the others' turn to build
  node:fire("startup")
  local before, last_save = { sent = 0, recv = 0 }, host.clock()
  for r = (resume or 0) + 1, cfg.rounds do
    attach_boundary(node, r)   -- a client's code runs here; a paused run waits here
    node.round = r
    local t0 = host.clock()
    local loss, secs = algorithm(node, r)
    check_result(node, r, loss, secs)
    node.model:own_flat()   -- what runs between rounds (a client's code, a checkpoint) has it alone
    record(node, r, loss, secs, t0, before)
    local acc
    if node.evaluates and (r % eval_every == 0 or r == cfg.rounds) then acc = evaluate(node, r) end
    node.endpoint:report(r, acc)
    if node.attach_watches then require("dpy.attach.node").after_round(node, r) end
    save_checkpoint(node, r)
    if acc or host.clock() - last_save > 5 then
      node.endpoint:release()   -- no compute slot held over a file write
      local ok, err = node.metrics:save()
      if not ok then error("cannot write metrics: " .. err, 0) end
      last_save = host.clock()
    end
  end
  node:fire("shutdown")
  attach_boundary(node, cfg.rounds + 1)   -- the last round done: a paused run lets a client look at the end
  node.endpoint:release()
  local ok, err = node.metrics:save()
  if not ok then error("cannot write metrics: " .. err, 0) end
  require("dpy.checkpoint").save_model(node)
  node.log:write("done: %d rounds", cfg.rounds)
end

--- The entry point of a node thread (see l_nodes.c): args = { config (container.config_text), dir,
-- t0 [, resume = the round to resume from] }.
function M.main(ep, args)
  local node = container.open(ep, args)
  -- the run's interrupt stops run, not the lines below: they write what it finished
  local ok, err = ep:run(run, node, math.tointeger(tonumber(args.resume or "")))
  if not ok then
    -- what was finished stays readable; a node stopped before its checkpoint was restored has none
    -- of its own: the file holds the run it resumes, which a failed or interrupted resume keeps
    if not args.resume or node.restored then node.metrics:save() end
    local sig = host.interrupted()
    if sig and tostring(err):match("^[^\n]*interrupted!") then   -- Ctrl-C or SIGTERM stopped it: no failure
      node.log:write("stopped by signal %d in round %d", sig, node.round)
    else
      node.log:write("failed: %s", err)
    end
    node.log:close()
    error(err, 0)
  end
  node.log:close()
end

return M
