--- dpy.cli: the dpy-lua subcommands written in Lua (run). main returns the exit code:
-- 0 success, 1 runtime error, 2 usage error.
local argparse = require "argparse"

local M = {}

local function run_parser()
  local p = argparse("dpy-lua run", "Run an experiment config on this machine.")
  p:argument("config", "The experiment config (a Lua file).")
  p:argument("overrides", "Config overrides, KEY=VALUE (VALUE read as a Lua value).")
   :args("*")
  p:option("--seed", "Seed (overrides the config's seed)."):convert(math.tointeger)
  p:option("--out", "Run directory (default: out/<UTC timestamp>).")
  p:flag("-q --quiet", "Print only the summary.")
  return p
end

local function summary_text(dir, s)
  return table.concat({
    string.format("results in %s", dir),
    string.format("  %d steps (%d samples) in %.1f s: %.0f samples/s", s.steps, s.samples,
                  s.train_seconds, s.samples_per_second),
    string.format("  final test accuracy %.4f, test loss %.4f (%d evaluation rounds)",
                  s.test_accuracy, s.test_loss, s.rounds),
    string.format("  memory: %.0f MiB resident, %.1f MiB peak in tensors",
                  s.rss_bytes / 2 ^ 20, s.peak_tensor_bytes / 2 ^ 20),
  }, "\n")
end

function M.run(args)
  local parser = run_parser()
  local ok, a = parser:pparse(args)
  if not ok then
    io.stderr:write(parser:get_usage(), "\n", "dpy-lua run: ", a, "\n")
    return 2
  end
  local config = require "dpy.config"
  local experiment = require "dpy.experiment"
  local loaded, cfg, source = pcall(config.load, a.config, a.overrides)
  if not loaded then
    io.stderr:write("dpy-lua: ", tostring(cfg), "\n")
    return 1
  end
  if a.seed then cfg.seed = a.seed end
  local dir = a.out or experiment.run_dir("out")
  local ran, summary = pcall(experiment.run, cfg, { dir = dir, source = source, argv = arg,
                                                    quiet = a.quiet })
  if not ran then
    io.stderr:write("dpy-lua: run failed: ", tostring(summary), "\n",
                    "(results written so far are in ", dir, ")\n")
    return 1
  end
  print(summary_text(dir, summary))
  return 0
end

--- main(command, args...) -> exit code
function M.main(command, ...)
  local f = M[command]
  if type(f) ~= "function" or command == "main" then
    io.stderr:write("dpy-lua: unknown command '", tostring(command), "'\n")
    return 2
  end
  return f({ ... })
end

return M
