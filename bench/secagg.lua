-- secagg.lua: the overhead of secure aggregation over plain FedAvg, in one run: fedavg and
-- secure_fedavg with 16 and 64 clients (all sampled each round), an MLP of 50,890 parameters
-- (784-64-10), one process. Reports the server's seconds per round (mean over rounds 2..) and
-- the bytes it sent and received per round, and their ratios secure / plain.
--   dpy-lua bench/secagg.lua [ROUNDS = 5]   (DPY_BIN: the binary, default build/dpy-lua)
local metrics = require "dpy.metrics"
local host = require "dpy.host.core"

local bin = os.getenv("DPY_BIN") or "build/dpy-lua"
local rounds = math.tointeger(tonumber(arg and arg[1]) or 5)
local dir = string.format("/tmp/dpy_bench_secagg_%d", host.pid())
assert(host.mkdir_p(dir))

local function run(algorithm, clients)
  local cfg = string.format([[
seed = 1
nodes = %d
algorithm = %q
model = { "mlp", hidden = { 64 } }
rounds = %d
local_steps = 1
batch_size = 16
train_samples = %d
test_samples = 100
eval_every = %d
peer_timeout = 120
]], clients + 1, algorithm, rounds, 100 * clients, rounds)
  local path = string.format("%s/%s_%d.lua", dir, algorithm, clients)
  local f = assert(io.open(path, "w"))
  f:write(cfg)
  f:close()
  local out = path:gsub("%.lua$", "")
  assert(os.execute(string.format("%s run %s --out %s >/dev/null 2>&1", bin, path, out)), "run failed: " .. path)
  local m = assert(metrics.read(out .. "/0.metrics.json")).metrics
  local secs, bytes, n = 0, 0, 0
  for i = 2, #m.wall_seconds do
    secs, n = secs + m.wall_seconds[i][2], n + 1
    bytes = bytes + m.bytes_sent[i][2] + m.bytes_received[i][2]
  end
  return secs / n, bytes / n
end

print(string.format("%-8s %-14s %12s %14s %10s %10s", "clients", "algorithm", "s/round", "server B/round",
                    "time x", "bytes x"))
for _, clients in ipairs { 16, 64 } do
  local ps, pb = run("fedavg", clients)
  local ss, sb = run("secure_fedavg", clients)
  print(string.format("%-8d %-14s %12.4f %14d", clients, "fedavg", ps, math.floor(pb)))
  print(string.format("%-8d %-14s %12.4f %14d %10.2f %10.2f", clients, "secure_fedavg", ss, math.floor(sb),
                      ss / ps, sb / pb))
end
os.execute("rm -rf " .. dir)
