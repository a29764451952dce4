--- dpy.rundir: what a run directory holds, besides the results, to rerun its run bit for bit:
-- config.effective.lua (every key as run, a runnable config), a copy of every file the run used
-- (included configs, component files, ...) at its path relative to the config's directory, and for
-- manifest.json the command, the files and the commit of dpy-lua's own tree. Everything is
-- read and checked first (prepare), and only then written (write).
local serialize = require "dpy.serialize"
local paths = require "dpy.paths"
local metrics = require "dpy.metrics"
local host = require "dpy.host.core"

local M = {}

M.EFFECTIVE = "config.effective.lua"

-- The run directory's own top-level names, which a copied file must not take.
local OWN = { ["config.lua"] = true, [M.EFFECTIVE] = true, ["config.json"] = true, ["manifest.json"] = true,
              ["graph.json"] = true, ["partition.pt"] = true, ["addresses.json"] = true, rendezvous = true,
              _files = true, ckpt = true, attach = true, ["run.key"] = true }
local OWN_PATTERNS = { "^%d+%.log$", "^%d+%.metrics%.json$", "^%d+%.model%.pt$", "^progress%-%d+%.json$",
                       "^process%-%d+%.out$",
                       "^pid%-%d+$" }

local function own(rel)
  rel = rel:gsub("%.tmp%.%d+$", "")   -- a write a crash left unfinished (host.write_atomic)
  if OWN[rel:match("^[^/]+")] then return true end
  if rel:find("/", 1, true) then return false end
  for _, p in ipairs(OWN_PATTERNS) do
    if rel:match(p) then return true end
  end
  return false
end

local quote, exists = paths.shell_quote, paths.exists

--- Whether path names a directory.
M.is_dir = paths.is_dir

--- The files the run uses: what config.load returned (included configs, component files, file
-- options, modules); each { path = as the run names it, source = its absolute path, file = where it
-- goes in the run directory, text }. Raises naming a file it cannot read.
function M.used_files(config_path, included)
  local base = paths.absolute(paths.dirname(config_path))
  local list, seen = {}, {}
  local function add(path, full, what)
    local source = paths.absolute(full)
    if seen[source] then return end
    seen[source] = true
    local f, err = io.open(full, "rb")
    local text = f and f:read("a")
    if f then
      if not text then err = full .. ": not a file" end
      f:close()
    end
    if not text then error(string.format("%s: cannot read %s (%s): %s", config_path, path, what, err), 0) end
    local rel = paths.relative(source, base)
    if not rel or own(rel) then rel = "_files" .. source end   -- outside the config's directory
    list[#list + 1] = { path = path, source = source, file = rel, text = text }
  end
  for _, inc in ipairs(included or {}) do add(inc.path, inc.full, "used by the config") end
  return list
end

--- The text of config.effective.lua for cfg; raises naming a value that is not plain.
function M.effective(cfg)
  local ok, text = pcall(serialize.assignments, cfg, "config")
  if not ok then error("the run directory cannot record the config: " .. text, 0) end
  return "-- The effective config of this run: every key as run (defaults filled in, the command line's\n"
         .. "-- overrides and --seed applied). `dpy-lua run <this directory>` reruns it.\n" .. text
end

-- cfg with every string that names one of files (config.load makes them absolute) replaced by
-- the copy's place in the run directory: relative, as a config's paths are relative to the config,
-- so that config.effective.lua uses the copies wherever the directory goes.
local function relocated(cfg, files)
  local copy_of = {}
  for _, f in ipairs(files) do copy_of[f.source] = f.file end
  local function swap(v)
    if type(v) == "string" then return copy_of[v] or v end
    if type(v) ~= "table" then return v end
    local out = {}
    for k, x in pairs(v) do out[k] = swap(x) end
    return out
  end
  return swap(cfg)
end

--- Reads and checks everything the run directory will hold; opts = { config (path), included }.
function M.prepare(cfg, opts)
  local files = M.used_files(opts.config or "./config.lua", opts.included)
  return { effective = M.effective(relocated(cfg, files)), files = files }
end

-- The names at dir's top that are no run's: not the run directory's own names, nor the copies of
-- files that its manifest lists (sorted; none when dir is not there). A config.lua is a run's
-- beside a manifest, or the files written just after it (a run stopped before its manifest).
local function strays(dir)
  local manifest = metrics.read(dir .. "/manifest.json")
  local made = manifest or exists(dir .. "/" .. M.EFFECTIVE)   -- a run wrote its files here
  local copied = {}
  for _, f in ipairs(manifest and manifest.files or {}) do
    if type(f.file) == "string" then copied[f.file:match("^[^/]+")] = true end
  end
  local found = {}
  for _, name in ipairs(paths.list(dir) or {}) do
    if not (own(name) or copied[name]) or (name == "config.lua" and not made) then found[#found + 1] = name end
  end
  table.sort(found)
  return found
end

--- Raises when dir holds a run already, unless force, and when it holds files that are no run's
-- (a researcher's own: neither written over nor removed, --force or not); returns whether the
-- run must be replaced. option: the command's option that names dir (default --out; `dpy-lua
-- node`: --dir).
function M.claim(dir, force, option)
  local up = dir   -- a file where the directory would be, or on its way there
  while up ~= "" and up ~= "/" and up ~= "." and not paths.exists(up) do up = paths.dirname(up) end
  if paths.exists(up) and not paths.is_dir(up) then
    error(string.format("%s %s: a file, not a directory: choose another %s", option or "--out", up,
                        option or "--out"), 0)
  end
  local others = strays(dir)
  if #others > 0 then
    error(string.format("%s holds files that are no run's (%s%s): choose another %s (--force replaces a run, "
                        .. "not other files)", dir, table.concat(others, ", ", 1, math.min(#others, 5)),
                        #others > 5 and ", ..." or "", option or "--out"), 0)
  end
  if not exists(dir .. "/manifest.json") then return false end
  if not force then
    error(string.format("%s holds a run already: choose another %s, or add --force to replace it", dir,
                        option or "--out"), 0)
  end
  return true
end

--- Writes config.effective.lua and the copies of prepare's files into dir (which exists).
function M.write(dir, prepared)
  paths.write(dir .. "/" .. M.EFFECTIVE, prepared.effective)
  for _, f in ipairs(prepared.files) do
    local sub = f.file:match("^(.*)/[^/]+$")
    if sub then
      local ok, err = host.mkdir_p(dir .. "/" .. sub)
      if not ok then error(err, 0) end
    end
    paths.write(dir .. "/" .. f.file, f.text)
  end
end

--- Removes the run directory dir and all it holds (--force).
function M.remove(dir)
  local ok = os.execute("rm -rf -- " .. quote(dir))
  if not ok then error("cannot remove " .. dir, 0) end
end

--- Removes everything in dir but the paths of keep (under dir) and the directories holding them:
-- a run replaced while other processes already use some of its files (rendezvous).
function M.remove_except(dir, keep)
  local held = {}
  for _, k in ipairs(keep) do
    local rel = k:sub(#dir + 2)
    held[rel] = "keep"
    for i in rel:gmatch("()/") do held[rel:sub(1, i - 1)] = "open" end
  end
  local function sweep(rel)
    local names = assert(paths.list(rel == "" and dir or dir .. "/" .. rel))
    for _, name in ipairs(names) do
      local sub = rel == "" and name or rel .. "/" .. name
      if held[sub] == "open" then sweep(sub)
      elseif not held[sub] then M.remove(dir .. "/" .. sub) end
    end
  end
  sweep("")
end

local function git(dir, args)
  local p = io.popen("git -C " .. quote(dir) .. " " .. args .. " 2>/dev/null")
  if not p then return nil end
  local out = p:read("a")
  return p:close() and out or nil
end

--- The git checkout holding dir: { commit, dirty, dir = its top level }, or nil when none.
function M.git(dir)
  local commit = (git(dir, "rev-parse HEAD") or ""):match("^%x+")
  if not commit then return nil end
  local status = git(dir, "status --porcelain")
  local top = (git(dir, "rev-parse --show-toplevel") or ""):match("[^\n]+")
  return { commit = commit, dirty = status ~= nil and status ~= "", dir = top }
end

-- The directory holding dpy/ (this file is <it>/dpy/rundir.lua).
local function lua_tree()
  local src = debug.getinfo(1, "S").source
  return paths.absolute(src:match("^@(.*)/dpy/[^/]+$") or ".")
end

--- The manifest's record of how the run came about: the command, dpy-lua's own commit (of its
-- Lua tree, and of the binary's tree when that is another checkout), the files, the run it reruns.
function M.manifest(prepared, opts)
  local exe = host.exe()
  local lua_git = M.git(lua_tree())
  local bin_git = exe and M.git(paths.dirname(exe))
  if bin_git and lua_git and bin_git.dir == lua_git.dir then bin_git = nil end
  local files = {}
  for i, f in ipairs(prepared.files) do files[i] = { path = f.path, source = f.source, file = f.file } end
  return {
    command = { argv = opts.argv or {}, cwd = paths.cwd() },
    dpy_lua_git = lua_git, binary = exe, binary_git = bin_git,
    files = #files > 0 and files or nil, rerun_of = opts.rerun_of,
  }
end

--- The run directory dir as a config to rerun: { dir, config = its config.effective.lua, files
-- and cwd (from its manifest) }, or nil and a message.
function M.rerun(dir)
  dir = dir:gsub("(.)/+$", "%1")
  local config = dir .. "/" .. M.EFFECTIVE
  if not exists(config) then return nil, dir .. ": not a run directory (no " .. M.EFFECTIVE .. ")" end
  local manifest = metrics.read(dir .. "/manifest.json") or {}
  return { dir = dir, config = config, files = manifest.files or {}, cwd = (manifest.command or {}).cwd }
end

return M
