--- dpy.rendezvous: starting a run's processes with the launchers clusters already have. Under
-- mpirun/mpiexec (Open MPI, or any PMI launcher) or srun (Slurm), `dpy-lua node CONFIG --dir DIR`
-- reads its rank and the world size from the environment. DIR must be one directory that every
-- process sees (a shared file system): rank 0 writes the run's files (config, manifest, graph,
-- partition, the run key), every rank writes its "host:port" into DIR/rendezvous/<rank>, and each waits until
-- all have arrived (DPY_RENDEZVOUS_TIMEOUT seconds at most, 120 by default). DPY_HOST sets the
-- address this machine's processes listen on (default: its host name).
local host = require "dpy.host.core"
local random = require "dpy.random"

local M = {}

M.LAUNCHERS = {
  { rank = "OMPI_COMM_WORLD_RANK", size = "OMPI_COMM_WORLD_SIZE", name = "mpirun (Open MPI)",
    job = "OMPI_MCA_ess_base_jobid" },
  { rank = "PMI_RANK", size = "PMI_SIZE", name = "mpiexec (PMI)", job = "PMI_JOBID" },
  { rank = "SLURM_PROCID", size = "SLURM_NTASKS", name = "srun (Slurm)", job = "SLURM_JOB_ID" },
}

--- The launcher that started this process: rank, size, name, job id | nil.
function M.detect(env)
  env = env or os.getenv
  for _, l in ipairs(M.LAUNCHERS) do
    local r, n = math.tointeger(tonumber(env(l.rank))), math.tointeger(tonumber(env(l.size)))
    if r and n then return r, n, l.name, env(l.job) or "" end
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

local function hostname()
  return os.getenv("DPY_HOST") or (read("/etc/hostname") or ""):match("[^%s]+") or "127.0.0.1"
end

--- Joins the run: returns the "host:port" list of every rank. rank 0 prepares the directory
-- first (prepare()); the others wait for it. Raises after timeout seconds, naming who is missing.
function M.join(cfg, dir, rank, size, run_id, prepare, timeout)
  local rdv = dir .. "/rendezvous"
  assert(host.mkdir_p(rdv))
  if rank == 0 then
    prepare()
    require("dpy.launcher").make_key(dir)   -- before "ready": the others read it after
    assert(host.write_atomic(rdv .. "/ready", tostring(run_id)))
  end
  local port = (cfg.port or (30000 + run_id % 25000)) + rank
  assert(host.write_atomic(string.format("%s/%d", rdv, rank), string.format("%s:%d", hostname(), port)))
  timeout = timeout or tonumber(os.getenv("DPY_RENDEZVOUS_TIMEOUT")) or 120
  local deadline = host.clock() + timeout
  while true do
    local addresses, missing = {}, {}
    for r = 0, size - 1 do
      local a = read(string.format("%s/%d", rdv, r))
      if a then addresses[r + 1] = a else missing[#missing + 1] = r end
    end
    local ready = read(rdv .. "/ready") == tostring(run_id)
    if #missing == 0 and ready then return addresses end
    if host.clock() > deadline then
      error(string.format("rendezvous in %s: %s after %d s (is %s one directory that every "
                          .. "process sees?)", rdv, #missing > 0 and ("rank(s) " .. table.concat(missing, ", ")
                          .. " never arrived") or "rank 0 never prepared the run", timeout, dir), 0)
    end
    host.sleep(0.1)
  end
end

return M
