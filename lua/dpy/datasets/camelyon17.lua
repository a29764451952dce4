--- The camelyon17 dataset: Camelyon17-WILDS v1.0 (dir = camelyon17_v1.0: metadata.csv and
-- patches/patient_<patient>_node_<node>/patch_patient_<patient>_node_<node>_x_<x>_y_<y>.png,
-- 96 x 96 RGB). The label is the tumor column (1: tumour tissue in the central 32 x 32 region),
-- so classes = 2: the binary task. WILDS's official splits: hospital (center) 1 is "val" (OOD
-- validation), hospital 2 is "test", and the rest (0, 3, 4) are "train" where the split column is
-- 0 and "id_val" where it is 1. The hospital of each patch is its group (groups, int64: the center
-- number itself), the "natural" partitioner's input. mean and std default to the training
-- split's per-channel statistics.
local data = require "dpy.data"
local core = require "dpy.data.core"
local tensor = require "dpy.tensor"
local options = require "dpy.options"

local M = {}

M.options = {
  dir = { type = "path", doc = "camelyon17_v1.0: the folder of metadata.csv and patches/" },
  test_split = { type = "string", one_of = { "test", "val", "id_val" }, default = "test",
                 doc = "the WILDS split used as test data: test (hospital 2), val (hospital 1) or "
                       .. "id_val (held-out patches of the training hospitals)" },
  mean = { type = "list", of = "number", check = data.unit_scale,
           doc = "per-channel mean (default: the training split's)" },
  std = { type = "list", of = "number", above = 0, check = data.unit_scale,
          doc = "per-channel standard deviation (default: the training split's)" },
}

local HOW = "camelyon17_v1.0 from WILDS: wilds.get_dataset('camelyon17', download=True) in Python's "
            .. "wilds package, or the archive linked from wilds.stanford.edu"
local COLUMNS = { "patient", "node", "x_coord", "y_coord", "tumor", "center", "split" }
local SPLITS = { test = true, val = true, id_val = true }

local function fail(fmt, ...) error("camelyon17: " .. string.format(fmt, ...), 0) end

local function fields(line)
  local out = {}
  for v in (line .. ","):gmatch("([^,]*),") do out[#out + 1] = v end
  return out
end

-- The rows of metadata.csv in split want: patch paths, tumor labels and centers.
local function read_split(dir, want)
  local path = dir .. "/metadata.csv"
  local f, err = io.open(path, "rb")
  if not f then fail("%s (option 'dir': %s)", err, HOW) end
  local header = f:read("l")
  local col = {}
  for i, name in ipairs(fields((header or ""):gsub("\r$", ""))) do col[name] = i end
  for _, c in ipairs(COLUMNS) do
    if not col[c] then
      f:close()
      fail("%s:1: no column '%s' (WILDS v1.0's header: ,patient,node,x_coord,y_coord,tumor,slide,center,split)",
           path, c)
    end
  end
  local paths, labels, centers = {}, {}, {}
  local lineno = 1
  for line in f:lines() do
    lineno = lineno + 1
    line = line:gsub("\r$", "")
    if line ~= "" then
      local v = fields(line)
      local function int(c, lo, hi)
        local s = v[col[c]]
        local n = s and s:match("^%d+$") and math.tointeger(tonumber(s))
        if not n or n < lo or n > hi then
          f:close()
          fail("%s:%d: %s must be an integer in %d..%d, got '%s'", path, lineno, c, lo, hi, tostring(s))
        end
        return n, s
      end
      local _, patient = int("patient", 0, math.maxinteger)
      local _, node = int("node", 0, math.maxinteger)
      local _, x = int("x_coord", 0, math.maxinteger)
      local _, y = int("y_coord", 0, math.maxinteger)
      local tumor, center, split = int("tumor", 0, 1), int("center", 0, 4), int("split", 0, 1)
      local name = center == 1 and "val" or center == 2 and "test" or split == 0 and "train" or "id_val"
      if name == want then
        local folder = string.format("patient_%s_node_%s", patient, node)
        paths[#paths + 1] = string.format("%s/patches/%s/patch_%s_x_%s_y_%s.png", dir, folder, folder, x, y)
        labels[#labels + 1] = tumor
        centers[#centers + 1] = center
      end
    end
  end
  f:close()
  if #paths == 0 then fail("%s: no patch in the %s split", path, want) end
  return paths, labels, centers
end

local function split(dir, want)
  return data.shared("camelyon17\0" .. dir .. "\0" .. want, function()
    local paths, labels, centers = read_split(dir, want)
    local images, err = core.read_images(paths, 3, 96, 96)
    if not images then fail("%s (option 'dir': %s)", err, HOW) end
    local info = {}
    if want == "train" then
      info.mean, info.std = core.channel_stats(images)
    else
      local _, tr = split(dir, "train")
      info.mean, info.std = tr.mean, tr.std
    end
    return { images = images, labels = tensor.new(labels, "int64"), groups = tensor.new(centers, "int64") }, info
  end)
end

local ALLOWED = { train = true }
for k in pairs(M.options) do ALLOWED[k] = true end

--- camelyon17.load{dir, test_split = "test", mean, std, train = true} -> dataset with groups
-- (the hospitals)
function M.load(o)
  options.check(o, ALLOWED, "camelyon17", 2)
  if type(o.dir) ~= "string" then fail("option 'dir' is required: %s", HOW) end
  local test_split = o.test_split or "test"
  if not SPLITS[test_split] then
    fail("test_split must be 'test', 'val' or 'id_val', got %s", tostring(test_split))
  end
  local t, info = split(o.dir, o.train ~= false and "train" or test_split)
  return { name = "camelyon17", images = t.images, labels = t.labels, groups = t.groups, classes = 2,
           mean = o.mean or info.mean, std = o.std or info.std, shape = { 3, 96, 96 } }
end

M.spec = data.component { name = "camelyon17", options = M.options, load = M.load,
  doc = "Camelyon17-WILDS tumour patches, grouped by hospital; ctx.train selects the split" }

return M
