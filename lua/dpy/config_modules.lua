--- dpy.config_modules: require finds a config's own modules (DIR/?.lua, DIR/?/init.lua) before
-- any other: a searcher ahead of Lua's own, over the directories of the configs loaded so far,
-- that remembers each file it loads (the run directory and dispatch carry them). The launcher
-- adds a config's directories as it loads the config, a node those the launcher hands it. The
-- framework's own modules (dpy, dpy.*) are not looked for there: a config cannot shadow them, and a
-- node's ~30 requires open no files that are not there.
local M = {}

local dirs, required = {}, {}

local function searcher(name)
  if name == "dpy" or name:find("^dpy%.") then return nil end
  for _, dir in ipairs(dirs) do
    local path = package.searchpath(name, dir .. "/?.lua;" .. dir .. "/?/init.lua")
    if path then
      local chunk, err = loadfile(path, "t")
      if not chunk then error(err, 0) end
      required[#required + 1] = path
      return chunk, path
    end
  end
  return "\n\tno file in the config's directory"
end

--- Adds dir (absolute) to the directories searched, once.
function M.add(dir)
  for _, d in ipairs(dirs) do if d == dir then return end end
  if #dirs == 0 then table.insert(package.searchers, 2, searcher) end
  dirs[#dirs + 1] = dir
end

--- The files the searcher loaded so far, in order (absolute paths; the list itself, not a copy).
function M.required() return required end

return M
