--- dpy.data.arrays: datasets from arrays in NumPy (.npz, .npy) and PyTorch (torch.save) files, for
-- data.numpy, data.torch and data.array_options (see dpy.data), which load this module when first
-- called.
local core = require "dpy.data.core"
local options = require "dpy.options"
local data = require "dpy.data"
local exists = require("dpy.paths").exists

local M = {}

local ARRAY_FORMATS = {
  numpy = { core = "npy", ext = ".npz", one = ".npy" },
  torch = { core = "torch", ext = ".pt", one = ".pt" },
}

--- arrays.options(kind) -> the option schema of data.numpy ("numpy") and data.torch ("torch"),
-- which their dataset components declare too (data.array_options)
function M.options(kind)
  local f = ARRAY_FORMATS[kind]
  local split_file = "the %s split's file, holding its images and labels (a name in dir, or an "
                     .. "absolute path)"
  local one = "the %s split's %s alone (a " .. f.one .. " file in dir), with %s; instead of %s_file"
  return {
    dir = { type = "path", doc = "the folder of the files" },
    train_file = { type = "string", default = "train" .. f.ext, doc = split_file:format("training") },
    test_file = { type = "string", default = "test" .. f.ext, doc = split_file:format("test") },
    train_images = { type = "string", doc = one:format("training", "images", "train_labels", "train") },
    train_labels = { type = "string", doc = one:format("training", "labels", "train_images", "train") },
    test_images = { type = "string", doc = one:format("test", "images", "test_labels", "test") },
    test_labels = { type = "string", doc = one:format("test", "labels", "test_images", "test") },
    images = { type = "string", doc = "the images' name in a split's file (" .. (kind == "numpy"
               and "the .npz member, without .npy" or "the dict key") .. "); default: the first "
               .. "there of images, x, data, x_<split>, <split>_images, arr_0"
               .. (kind == "torch" and "; from a tuple or list, its element 0" or "") },
    labels = { type = "string", doc = "the labels' name in a split's file; default: the first "
               .. "there of labels, y, targets, y_<split>, <split>_labels, arr_1"
               .. (kind == "torch" and "; from a tuple or list, its element 1" or "") },
    layout = { type = "string", one_of = { "auto", "nchw", "nhwc" }, default = "auto",
               doc = "4-d images are N x C x H x W (nchw) or N x H x W x C (nhwc); auto: nhwc when "
               .. "the last dim is 1 or 3 and dim 1 is not" },
    classes = { type = "integer", min = 1, doc = "default: the largest training label + 1" },
    mean = { type = "list", of = "number", doc = "per channel (on the [0, 1] scale of uint8 images); default: "
             .. "the training images' mean" },
    std = { type = "list", of = "number", doc = "per channel; default: the training images' standard deviation" },
  }
end

-- The split's file names: an absolute one as it is, else in dir (which must then be given).
local function in_dir(kind, opts, option, file)
  if file:sub(1, 1) == "/" then return file end
  if not opts.dir then
    error(string.format("data.%s: option dir is required (the folder of %s), or give %s as an "
                        .. "absolute path", kind, file, option), 0)
  end
  return opts.dir .. "/" .. file
end

-- The images and labels sources of a split: path, names, and the option each path came from.
local function array_sources(kind, opts, split)
  local f = ARRAY_FORMATS[kind]
  local inames = opts.images and { opts.images }
                 or { "images", "x", "data", "x_" .. split, split .. "_images", "arr_0" }
  local lnames = opts.labels and { opts.labels }
                 or { "labels", "y", "targets", "y_" .. split, split .. "_labels", "arr_1" }
  local ifile, lfile = opts[split .. "_images"], opts[split .. "_labels"]
  if (ifile == nil) ~= (lfile == nil) then
    error(string.format("data.%s: %s_images and %s_labels go together", kind, split, split), 0)
  end
  if ifile then
    return { in_dir(kind, opts, split .. "_images", ifile), inames, split .. "_images" },
           { in_dir(kind, opts, split .. "_labels", lfile), lnames, split .. "_labels" }
  end
  local option = split .. "_file"
  local path = in_dir(kind, opts, option, opts[option] or split .. f.ext)
  return { path, inames, option }, { path, lnames, option }
end

-- images, labels, stats of a split (all checked: a missing file names its option), and the labels' file.
local function read_split(kind, opts, split)
  local isrc, lsrc = array_sources(kind, opts, split)
  for _, src in ipairs { isrc, lsrc } do
    if not exists(src[1]) then
      local option = opts[src[3]] and string.format("option %s = %q", src[3], opts[src[3]])
                     or string.format("option %s, default %q", src[3], split .. ARRAY_FORMATS[kind].ext)
      error(string.format("dataset %s: no file %s (%s%s); %s", kind, src[1], option,
                          opts.dir and string.format(", dir = %q", opts.dir) or "", data.SOURCES[kind]), 0)
    end
  end
  local x, y, stats = core.read_arrays(ARRAY_FORMATS[kind].core, isrc[1], isrc[2], lsrc[1], lsrc[2],
                                       opts.layout or "auto")
  if not x then error(y, 0) end
  return x, y, stats, lsrc[1]
end

-- mean and std, when given, have one entry per channel (and std's are > 0; for uint8 images,
-- both are on the [0, 1] scale the loader normalizes them on)
local function check_channels(kind, opts, key, channels, u8)
  local v = opts[key]
  if v == nil then return end
  if #v ~= channels then
    error(string.format("data.%s: %s must be a list of %d numbers (one per channel)", kind, key,
                        channels), 0)
  end
  for i = 1, channels do
    if v[i] ~= v[i] or (key == "std" and v[i] <= 0) then
      error(string.format("data.%s: %s[%d] must be a number%s", kind, key, i,
                          key == "std" and " > 0" or ""), 0)
    end
  end
  local why = u8 and data.unit_scale(v)
  if why then error(string.format("data.%s: %s for uint8 images %s", kind, key, why), 0) end
end

local function arrays_dataset(kind, opts)
  opts = opts or {}
  local schema = M.options(kind)
  schema.train = true
  options.check(opts, schema, "data." .. kind, 2)   -- through the tail calls: the caller's line
  local split = opts.train == false and "test" or "train"
  local images, labels, stats, labels_file = read_split(kind, opts, split)
  local channels = images:size(1)
  local u8 = images:dtype() == "uint8"
  check_channels(kind, opts, "mean", channels, u8)
  check_channels(kind, opts, "std", channels, u8)
  -- classes, mean and std come from the training split, whichever split this is
  local train = stats
  if split == "test" and not (opts.classes and opts.mean and opts.std) then
    local x, y
    x, y, train = read_split(kind, opts, "train")
    x:free()
    y:free()
  end
  local classes = opts.classes or train.max_label + 1
  if stats.max_label >= classes then   -- (the reader refused negative labels)
    data.check_labels(labels, classes, labels_file, opts.classes and "classes = " .. classes
                   or string.format("classes = %d, the largest training label + 1", classes))
  end
  local std = opts.std or {}
  for c = 1, channels do std[c] = std[c] or (train.std[c] > 0 and train.std[c] or 1) end
  return { name = kind, images = images, labels = labels, classes = classes,
           mean = opts.mean or train.mean, std = std,
           shape = { channels, images:size(2), images:size(3) } }
end

--- data.numpy{dir, train = true, train_file = "train.npz", test_file = "test.npz", train_images,
-- train_labels, test_images, test_labels, images, labels, layout = "auto", classes, mean, std}:
-- .npz archives (numpy.savez, savez_compressed) or .npy files (numpy.save); see array_options
function M.numpy(opts) return arrays_dataset("numpy", opts) end

--- data.torch{dir, train = true, train_file = "train.pt", test_file = "test.pt", ...}: files of
-- torch.save (a tensor, a tuple or list (images, labels), or a dict of them), as data.numpy
function M.torch(opts) return arrays_dataset("torch", opts) end

return M
