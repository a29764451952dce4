--- dpy.data: datasets read from their real file formats, and batch loaders.
-- A dataset is { images = uint8 N x C x H x W, labels = uint8 N, classes, mean, std, name };
-- its tensors are read-only and shared by every node of the process (loaded once). A dataset with
-- a natural partition (writers, hospitals) also has groups, an int64 N tensor of group ids >= 0
-- (the "natural" partitioner's input), and may name them: group_names[id + 1].
local core = require "dpy.data.core"
local tensor = require "dpy.tensor"
local options = require "dpy.options"
local cjson = require("cjson").new()

local M = {}

M.FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The idx file of base in dir, gzipped or not.
local function idx_path(dir, base)
  for _, p in ipairs { dir .. "/" .. base, dir .. "/" .. base .. ".gz" } do
    if exists(p) then return p end
  end
  return nil, string.format("%s: no %s or %s.gz (is the dataset installed?)", dir, base, base)
end

--- data.cache_dir() -> where gzipped idx files are kept decompressed, to be mapped (nil: read
-- into memory instead): $DPY_CACHE_DIR ("" for none), else $XDG_CACHE_HOME/dpy-lua, else
-- ~/.cache/dpy-lua
function M.cache_dir()
  local dir = os.getenv("DPY_CACHE_DIR")
  if dir then return dir ~= "" and dir or nil end
  local xdg, home = os.getenv("XDG_CACHE_HOME"), os.getenv("HOME")
  if xdg and xdg ~= "" then return xdg .. "/dpy-lua" end
  return home and home ~= "" and home .. "/.cache/dpy-lua" or nil
end

local function read_idx(dir, base)
  local path, err = idx_path(dir, base)
  if not path then error(err, 0) end
  local t, rerr = core.read_idx(path, M.cache_dir())
  if not t then error(rerr, 0) end
  return t
end

-- MNIST and Fashion-MNIST share the idx layout and file names.
local function idx_dataset(name, default_dir, mean, std)
  return function(opts)
    opts = opts or {}
    options.check(opts, { dir = true, train = true }, "data." .. name, 2)
    local dir = opts.dir or default_dir
    local prefix = opts.train == false and "t10k" or "train"
    local images = read_idx(dir, prefix .. "-images-idx3-ubyte")
    local labels = read_idx(dir, prefix .. "-labels-idx1-ubyte")
    if images:dim() ~= 3 or labels:dim() ~= 1 or images:size(0) ~= labels:size(0) then
      error(string.format("%s: images %s and labels %s do not match", dir,
                          table.concat(images:size(), "x"), table.concat(labels:size(), "x")), 0)
    end
    return { name = name, images = images:unsqueeze(1), labels = labels, classes = 10,
             mean = { mean }, std = { std }, shape = { 1, images:size(1), images:size(2) } }
  end
end

--- data.fashion_mnist{dir = "/usr/share/datasets/fashion-mnist", train = true}
M.fashion_mnist = idx_dataset("fashion_mnist", M.FASHION_MNIST_DIR, 0.2860, 0.3530)
--- data.mnist{dir = ..., train = true}
M.mnist = idx_dataset("mnist", "/usr/share/datasets/mnist", 0.1307, 0.3081)

local function read_cifar(files, label_bytes, label_index)
  local images, labels = {}, {}
  for i, path in ipairs(files) do
    local x, y = core.read_cifar(path, label_bytes, label_index)
    if not x then error(y, 0) end
    images[i], labels[i] = x, y
  end
  if #files == 1 then return images[1], labels[1] end
  return tensor.cat(images), tensor.cat(labels)
end

--- data.cifar10{dir = ..., train = true}: the binary version (data_batch_1.bin ... test_batch.bin)
function M.cifar10(opts)
  opts = opts or {}
  options.check(opts, { dir = true, train = true }, "data.cifar10", 2)
  local dir = opts.dir or "/usr/share/datasets/cifar-10-batches-bin"
  local files = {}
  if opts.train == false then
    files[1] = dir .. "/test_batch.bin"
  else
    for i = 1, 5 do files[i] = string.format("%s/data_batch_%d.bin", dir, i) end
  end
  local images, labels = read_cifar(files, 1, 0)
  return { name = "cifar10", images = images, labels = labels, classes = 10,
           mean = { 0.4914, 0.4822, 0.4465 }, std = { 0.2470, 0.2435, 0.2616 }, shape = { 3, 32, 32 } }
end

--- data.cifar100{dir = ..., train = true, label = "fine" | "coarse"}: the binary version
function M.cifar100(opts)
  opts = opts or {}
  options.check(opts, { dir = true, train = true, label = true }, "data.cifar100", 2)
  local dir = opts.dir or "/usr/share/datasets/cifar-100-binary"
  local coarse = opts.label == "coarse"
  if opts.label ~= nil and not coarse and opts.label ~= "fine" then
    error("data.cifar100: label must be 'fine' or 'coarse'", 2)
  end
  local images, labels = read_cifar({ dir .. (opts.train == false and "/test.bin" or "/train.bin") },
                                    2, coarse and 0 or 1)
  return { name = "cifar100", images = images, labels = labels, classes = coarse and 20 or 100,
           mean = { 0.5071, 0.4865, 0.4409 }, std = { 0.2673, 0.2564, 0.2762 }, shape = { 3, 32, 32 } }
end

--- data.shared(key, build) -> tensors, info: the first call for key in the process runs
-- build() -> {name = dpy.Tensor, ...}, info (a table of plain values: strings, numbers, lists) and
-- keeps both; every call gets read-only shares of the tensors and a copy of info. Nodes building
-- the same key meanwhile wait for the first, then share its tensors (lua/dpy/datasets use it).
function M.shared(key, build)
  local tensors, meta = core.shared(key, function()
    local t, info = build()
    return t, cjson.encode(info or {})
  end)
  return tensors, cjson.decode(meta)
end

--- data.size(dataset) -> number of samples
function M.size(ds) return ds.images:size(0) end

--- data.relabel(ds, map) -> a dataset sharing ds's images whose labels are map[label]; map is a
-- Lua list of ds.classes new labels, index 0-based ({[0] = 9, 8, ...}) or an int64 tensor.
function M.relabel(ds, map)
  local t = map
  if not tensor.is_tensor(map) then
    local values = {}
    for c = 0, ds.classes - 1 do
      local v = map[c]
      if math.type(v) ~= "integer" or v < 0 or v >= ds.classes then
        error(string.format("data.relabel: map[%d] must be a class in 0..%d, got %s", c,
                            ds.classes - 1, tostring(v)), 2)
      end
      values[c + 1] = v
    end
    t = tensor.new(values, "int64")
  end
  local labels = ds.labels:to("int64")
  local copy = setmetatable({ labels = t:index_select(0, labels) }, { __index = ds })
  labels:free()
  if t ~= map then t:free() end
  return copy
end

-- {==== loader ====}

local Loader = {}
Loader.__index = Loader

--- data.loader(dataset, {batch_size = 32, indices = int64 tensor (default all), shuffle = true,
-- drop_last = false, normalize = true, generator = dpy.Generator}) -> loader
-- loader:next() -> x, y (float32 normalized images, int64 labels), starting a new epoch (and a
-- new shuffle) when one ends; loader:epoch() iterates one epoch; #loader is batches per epoch.
function M.loader(ds, opts)
  opts = opts or {}
  options.check(opts, { batch_size = true, indices = true, shuffle = true, drop_last = true,
                        normalize = true, generator = true }, "data.loader", 2)
  local self = setmetatable({
    ds = ds,
    batch_size = opts.batch_size or 32,
    indices = opts.indices or tensor.arange(ds.images:size(0)),
    shuffle = opts.shuffle ~= false,
    drop_last = opts.drop_last == true,
    gen = opts.generator or tensor.default_generator(),
    pos = 0,
    epochs = 0,
  }, Loader)
  options.check_type(self.batch_size, "integer", "data.loader: batch_size", 2)
  if self.batch_size < 1 then error("data.loader: batch_size must be >= 1", 2) end
  if opts.normalize ~= false then self.mean, self.std = ds.mean, ds.std end
  self.n = self.indices:numel()
  if self.n == 0 then error("data.loader: no samples (empty indices)", 2) end
  if self.drop_last and self.n < self.batch_size then
    error(string.format("data.loader: %d samples make no full batch of %d", self.n,
                        self.batch_size), 2)
  end
  return self
end

function Loader:__len()
  return self.drop_last and self.n // self.batch_size or (self.n + self.batch_size - 1) // self.batch_size
end

function Loader:_start_epoch()
  if self.order and self.order ~= self.indices then self.order:free() end
  if self.shuffle then
    local perm <close> = tensor.randperm(self.n, { generator = self.gen })
    self.order = self.indices:index_select(0, perm)
  else
    self.order = self.indices
  end
  self.pos = 0
  self.epochs = self.epochs + 1
end

--- loader:next() -> x, y, and true when this batch ends an epoch
function Loader:next()
  if not self.order or self.pos >= #self * self.batch_size or self.pos >= self.n then
    self:_start_epoch()
  end
  local len = math.min(self.batch_size, self.n - self.pos)
  local idx <close> = self.order:narrow(0, self.pos, len)
  self.pos = self.pos + len
  local x, y = core.batch(self.ds.images, self.ds.labels, idx, self.mean, self.std)
  local last = self.pos >= #self * self.batch_size or self.pos >= self.n
  return x, y, last
end

--- for x, y in loader:epoch() do ... end: one full epoch from its start
function Loader:epoch()
  self.order = nil
  local done = false
  return function()
    if done then return nil end
    local x, y, last = self:next()
    done = last
    return x, y
  end
end

return M
