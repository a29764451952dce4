--- dpy.paths: file paths as strings — absolute, normalized (".", ".." and repeated slashes resolved
-- by name; symbolic links are not followed), relative to a directory — and the few file-system
-- questions the framework asks: the current directory, list, exists, is_file, is_dir; and write.
local M = {}

local cwd

--- The current directory (asked once per Lua state; dpy-lua never changes it).
function M.cwd()
  cwd = cwd or assert(require("dpy.host.core").cwd())
  return cwd
end

--- The normalized absolute path of path (relative to base, default the current directory).
function M.absolute(path, base)
  if path:sub(1, 1) ~= "/" then path = (base or M.cwd()) .. "/" .. path end
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return "/" .. table.concat(parts, "/")
end

--- The directory part of path ("." when it has none).
function M.dirname(path)
  local dir = path:match("^(.*)/[^/]*$")
  return dir == "" and "/" or dir or "."
end

--- path relative to the directory dir (both made absolute), or nil when path is not inside dir.
function M.relative(path, dir)
  local p, d = M.absolute(path), M.absolute(dir)
  if d == "/" then return p:sub(2) end
  if p:sub(1, #d + 1) ~= d .. "/" then return nil end
  return p:sub(#d + 2)
end

--- paths.list(dir) -> the names in dir, directories and files, sorted bytewise | nil, err
function M.list(dir)
  local dirs, files = require("dpy.data.core").list_dir(dir)
  if not dirs then return nil, files end
  table.move(files, 1, #files, #dirs + 1, dirs)
  table.sort(dirs)
  return dirs
end

--- Whether path names something that can be opened for reading (a file, or a directory).
function M.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

--- Whether path names a file that can be read (not a directory).
function M.is_file(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local _, err = f:read(0)
  f:close()
  return err == nil
end

--- Whether path names a directory.
function M.is_dir(path) return M.exists(path .. "/.") end

--- paths.write(path, bytes): host.write_atomic (write, fsync, rename), raising its message (the
-- file and why) as it is
function M.write(path, bytes)
  local ok, err = require("dpy.host.core").write_atomic(path, bytes)
  if not ok then error(err, 0) end
end

--- s single-quoted for a POSIX shell.
function M.shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

return M
