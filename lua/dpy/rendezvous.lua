--- dpy.rendezvous: starting a run's processes with the launchers clusters already have. Under
-- mpirun/mpiexec (Open MPI, or any PMI launcher) or srun (Slurm), `dpy-lua node CONFIG --dir DIR`
-- reads its rank and the world size from the environment. DIR must be one directory that every
-- process sees (a shared file system): rank 0 writes the run's files (config, manifest, graph,
-- partition, the run key), every rank writes its "host:port" into DIR/rendezvous/<launch>/<rank>, and each
-- waits until all have arrived (DPY_RENDEZVOUS_TIMEOUT seconds at most, 120 by default). <launch>
-- is the launcher's id of this launch (its job and step), so a rank never reads the files of an
-- earlier run in DIR. DPY_HOST sets the address this machine's processes advertise (default: its
-- host name when that resolves, else the address of the interface that reaches rank 0, or for
-- rank 0 the default route).
local host = require "dpy.host.core"
local random = require "dpy.random"

local M = {}

-- job: the variables that together name one launch (Open MPI's job id differs per mpirun; a
-- Slurm job runs many steps, one per srun).
M.LAUNCHERS = {
  { rank = "OMPI_COMM_WORLD_RANK", size = "OMPI_COMM_WORLD_SIZE", name = "mpirun (Open MPI)",
    job = { "OMPI_MCA_ess_base_jobid" } },
  { rank = "PMI_RANK", size = "PMI_SIZE", name = "mpiexec (PMI)", job = { "PMI_JOBID" } },
  { rank = "SLURM_PROCID", size = "SLURM_NTASKS", name = "srun (Slurm)", job = { "SLURM_JOB_ID", "SLURM_STEP_ID" } },
}

--- The launcher that started this process: rank, size, name, launch id ("" when the launcher
-- names none; DPY_LAUNCH_ID, when set, is used instead) | nil.
function M.detect(env)
  env = env or os.getenv
  for _, l in ipairs(M.LAUNCHERS) do
    local r, n = math.tointeger(tonumber(env(l.rank))), math.tointeger(tonumber(env(l.size)))
    if r and n then
      local parts = {}
      for _, k in ipairs(l.job) do parts[#parts + 1] = env(k) end
      return r, n, l.name, env("DPY_LAUNCH_ID") or table.concat(parts, ".")
    end
  end
end

--- The run id every rank derives alike: from the directory and the launcher's job id.
function M.run_id(dir, job) return random.hash32(dir .. "\0" .. job) + 1 end

local function read(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- The local address of the interface a packet to peer would leave by (a UDP connect sends
-- nothing), or nil.
local function interface_to(peer)
  local socket = require "socket"
  local ip = peer and (peer:match("^%d+%.%d+%.%d+%.%d+$") or socket.dns.toip(peer))
  if not ip then return nil end
  local u = socket.udp()
  local ok = u:setpeername(ip, 9)
  local addr = ok and u:getsockname()
  u:close()
  return addr ~= "0.0.0.0" and addr or nil
end

-- TEST-NET-1 (RFC 5737): an address no network has, whose route is the default one.
local DEFAULT_ROUTE = "192.0.2.1"

--- The address this rank advertises: DPY_HOST; else the machine's name if it resolves; else the
-- address of the interface that reaches rank 0 (rank0: its host, or nil for rank 0 itself: the
-- default route's). Raises when none works, saying what to set.
function M.advertise(rank0, env, name)
  env = env or os.getenv
  if env("DPY_HOST") then return env("DPY_HOST") end
  name = name or (read("/etc/hostname") or ""):match("[^%s]+")
  if name and require("socket").dns.toip(name) then return name end
  local addr = interface_to(rank0 or DEFAULT_ROUTE)
  if addr then return addr end
  error(string.format("rendezvous: this machine's name %s does not resolve, and no interface reaches %s: "
                      .. "set DPY_HOST to an address of this machine that the other ranks reach",
                      name and ("'" .. name .. "'") or "(none in /etc/hostname)",
                      rank0 and ("rank 0 (" .. rank0 .. ")") or "a default route"), 0)
end

--- This launch's rendezvous directory in dir.
function M.path(dir, run_id) return string.format("%s/rendezvous/%d", dir, run_id) end

local function never_arrived(rdv, dir, missing, timeout)
  error(string.format("rendezvous in %s: %s after %d s (is %s one directory that every "
                      .. "process sees?)", rdv, #missing > 0 and ("rank(s) " .. table.concat(missing, ", ")
                      .. " never arrived") or "rank 0 never prepared the run", timeout, dir), 0)
end

-- Rank 0, before it prepares anything: waits for every rank's config text (config-<rank>.txt) and
-- raises (a usage error) naming the ranks whose text differs from its own, and the first line
-- that differs. A rank started with other overrides, --seed or files would run its nodes with them
-- while the run directory records rank 0's; one of another build (the text's first line) would
-- compute differently.
local function same_configs(rdv, dir, size, text, deadline, timeout)
  local texts, missing
  repeat
    texts, missing = {}, {}
    for r = 1, size - 1 do
      texts[r] = read(string.format("%s/config-%d.txt", rdv, r))
      if not texts[r] then missing[#missing + 1] = r end
    end
    if #missing > 0 then
      if host.clock() > deadline then never_arrived(rdv, dir, missing, timeout) end
      host.sleep(0.1)
    end
  until #missing == 0
  local differ, first = {}, nil
  for r = 1, size - 1 do
    if texts[r] ~= text then
      differ[#differ + 1] = r
      if not first then
        local mine = {}
        for line in text:gmatch("[^\n]*") do mine[#mine + 1] = line end
        local i = 0
        for line in texts[r]:gmatch("[^\n]*") do
          i = i + 1
          if line ~= mine[i] then first = { line, mine[i] or "nothing" } break end
        end
        first = first or { "nothing", mine[i + 1] }
      end
    end
  end
  if #differ > 0 and first[1]:match("^build ") then   -- the texts begin with the build
    error({ usage = string.format("rank%s %s run%s another build of dpy-lua than rank 0: %s where rank 0 has %s "
                                  .. "(the ranks would compute differently: every rank runs the same build, "
                                  .. "installed alike on every machine)", #differ > 1 and "s" or "",
                                  table.concat(differ, ", "), #differ > 1 and "" or "s", first[1], first[2]) }, 0)
  end
  if #differ > 0 then
    error({ usage = string.format("rank%s %s run%s another config than rank 0: %s where rank 0 has %s (every "
                                  .. "rank runs the same config, files, KEY=VALUE overrides and --seed)",
                                  #differ > 1 and "s" or "", table.concat(differ, ", "), #differ > 1 and "" or "s",
                                  first[1], first[2]) }, 0)
  end
end

--- Joins the run: returns the "host:port" list of every rank. rank 0 prepares the directory
-- first (prepare(rdv): it must keep rdv, the rendezvous directory of this launch); the others
-- wait for it. A prepare that raises is told to the others (they raise "rank 0: ..." at once).
-- Raises after timeout seconds, naming who is missing. text (the config as this rank runs it:
-- its effective config and the files it uses), when given, must be every rank's alike: rank 0
-- compares them before it prepares anything.
function M.join(cfg, dir, rank, size, run_id, prepare, timeout, text)
  local rdv = M.path(dir, run_id)
  assert(host.mkdir_p(rdv))
  timeout = timeout or tonumber(os.getenv("DPY_RENDEZVOUS_TIMEOUT")) or 120
  if text and rank > 0 then assert(host.write_atomic(string.format("%s/config-%d.txt", rdv, rank), text)) end
  if rank == 0 then
    local ok, err = pcall(function()
      if text then same_configs(rdv, dir, size, text, host.clock() + timeout, timeout) end
      prepare(rdv)
    end)
    if not ok then
      host.write_atomic(rdv .. "/failed", type(err) == "table" and tostring(err.usage) or tostring(err))
      error(err, 0)
    end
    require("dpy.launcher").make_key(dir)   -- before "ready": the others read it after
    assert(host.write_atomic(rdv .. "/ready", tostring(run_id)))
  end
  local port = require("dpy.layout").base_port(cfg, run_id) + rank
  local deadline = host.clock() + timeout
  local mine   -- this rank's address, once written
  while true do
    -- rank 0 first: the others may need its host to find their own address
    local rank0 = rank > 0 and (read(rdv .. "/0") or ""):match("^(.*):%d+$")
    if not mine and (rank == 0 or rank0) then
      mine = string.format("%s:%d", M.advertise(rank0 or nil), port)
      assert(host.write_atomic(string.format("%s/%d", rdv, rank), mine))
    end
    local addresses, missing = {}, {}
    for r = 0, size - 1 do
      local a = r == rank and mine or read(string.format("%s/%d", rdv, r))
      if a then addresses[r + 1] = a elseif r ~= rank then missing[#missing + 1] = r end   -- we wait for 0
    end
    local failed = read(rdv .. "/failed")
    if failed then error("rank 0: " .. failed, 0) end
    local ready = read(rdv .. "/ready") == tostring(run_id)
    -- not before its own is written: rank 0's may come after this pass looked for it above
    if mine and #missing == 0 and ready then return addresses end
    if host.clock() > deadline then never_arrived(rdv, dir, missing, timeout) end
    local sig = host.interrupted()   -- (the caller caught the signals)
    if sig then error({ interrupted = sig }, 0) end
    host.sleep(0.1)
  end
end

return M
