-- lua/dpy/datasets: image_folder, femnist and camelyon17 on the fixtures of tests/fixtures/images
-- (made by its gen.py in the real layouts), their errors on broken copies, and the natural
-- partitioner. Reference numbers (means, standard deviations) are Python's statistics module's
-- over the fixtures' expected pixels.
local registry = require "dpy.registry"
local partition = require "dpy.partition"
local layout_files = require "dpy.layout_files"
local data = require "dpy.data"
local data_core = require "dpy.data.core"
local cjson = require "cjson"

local F = REPO .. "/tests/fixtures/images"

local function build(entry, train) return registry.build("dataset", entry, { train = train ~= false }) end

-- A copy of a fixture folder to break (a fresh path: the process-wide cache keys on it).
local function copy(name)
  local dir = tmpdir()
  assert(sh("cp -r " .. shell_quote(F .. "/" .. name) .. " " .. shell_quote(dir)) == 0)
  return dir .. "/" .. name:match("[^/]+$")
end

local function bytes_of(t) return t:contiguous():bytes() end

local function err_of(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  return tostring(err)
end

-- A PNG file of 8-bit RGB rows (strings of 3 * width bytes), its zlib stream in stored blocks.
local function png_rgb(width, rows)
  local function crc32(str)
    local c = 0xffffffff
    for i = 1, #str do
      c = c ~ str:byte(i)
      for _ = 1, 8 do c = (c >> 1) ~ ((c & 1) * 0xedb88320) end
    end
    return c ~ 0xffffffff
  end
  local function chunk(kind, body)
    return string.pack(">I4", #body) .. kind .. body .. string.pack(">I4", crc32(kind .. body))
  end
  local raw = "\0" .. table.concat(rows, "\0")
  local a, b = 1, 0
  for i = 1, #raw do a = (a + raw:byte(i)) % 65521; b = (b + a) % 65521 end
  local z = "\x78\x01\x01" .. string.pack("<I2I2", #raw, ~#raw & 0xffff) .. raw .. string.pack(">I4", (b << 16) | a)
  return "\x89PNG\r\n\x1a\n" .. chunk("IHDR", string.pack(">I4I4BBBBB", width, #rows, 8, 2, 0, 0, 0))
         .. chunk("IDAT", z) .. chunk("IEND", "")
end

describe("image_folder", function()
  local root, test_dir = F .. "/folder/train", F .. "/folder/test"
  -- torchvision's ImageFolder order: classes sorted, each class walked as sorted(os.walk())
  local ORDER = { "train_cat_a.png", "train_cat_b.png", "train_cat_c.jpg", "train_dog_d.png", "train_dog_e.png",
                  "train_dog_f.png", "train_dog_g.png", "train_dog_h.JPG", "train_dog_sub_i.png" }

  it("reads classes, labels and pixels as written (every PNG colour type, JPEG as djpeg decodes it)", function()
    local ds = build { "image_folder", root = root, test_dir = test_dir }
    assert.are.same({ 9, 3, 8, 16 }, ds.images:size())
    assert.are.same({ "cat", "dog" }, ds.class_names)
    assert.are.equal(2, ds.classes)
    assert.are.same({ 0, 0, 0, 1, 1, 1, 1, 1, 1 }, ds.labels:totable())
    assert.are.same({ 3, 8, 16 }, ds.shape)
    for i, name in ipairs(ORDER) do
      local img <close> = ds.images:select(0, i - 1)
      assert.are.equal(read_file(F .. "/folder/expected/" .. name .. ".rgb"), bytes_of(img), name)
    end
    assert.is_true(ds.images:is_readonly())
    assert.is_true(ds.labels:is_readonly())
  end)

  it("converts to grey as PIL's convert('L') does", function()
    local ds = build { "image_folder", root = root, test_dir = test_dir, channels = 1 }
    assert.are.same({ 9, 1, 8, 16 }, ds.images:size())
    for i, name in ipairs(ORDER) do
      local rgb = read_file(F .. "/folder/expected/" .. name .. ".rgb")
      local want = {}
      for q = 1, 128 do
        local r, g, b = rgb:byte(q), rgb:byte(128 + q), rgb:byte(256 + q)
        want[q] = string.char((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16)
      end
      local img <close> = ds.images:select(0, i - 1)
      assert.are.equal(table.concat(want), bytes_of(img), name)
    end
  end)

  it("takes mean and std from the training split, for both splits", function()
    local ds = build { "image_folder", root = root, test_dir = test_dir }
    local mean = { 0.4580610021786492, 0.49302832244008715, 0.44999999999999996 }
    local std = { 0.30632170481035265, 0.3189296185592576, 0.30487008498938023 }
    for k = 1, 3 do
      assert.is_true(math.abs(ds.mean[k] - mean[k]) < 1e-12)
      assert.is_true(math.abs(ds.std[k] - std[k]) < 1e-12)
    end
    local test = build({ "image_folder", root = root, test_dir = test_dir }, false)
    assert.are.same(ds.mean, test.mean)
    assert.are.same({ 2, 3, 8, 16 }, test.images:size())
    assert.are.same({ 0, 1 }, test.labels:totable())
    local img <close> = test.images:select(0, 1)
    assert.are.equal(read_file(F .. "/folder/expected/test_dog_k.png.rgb"), bytes_of(img))
    local given = build { "image_folder", root = root, test_dir = test_dir, mean = { 0.5, 0.5, 0.5 },
                          std = { 0.25, 0.25, 0.25 } }
    assert.are.same({ 0.5, 0.5, 0.5 }, given.mean)
  end)

  it("holds out a seeded fraction of each class when there is no test_dir", function()
    local function split(train, seed)
      return build({ "image_folder", root = root, test_fraction = 0.4, split_seed = seed }, train)
    end
    local train, test = split(true, 0), split(false, 0)
    -- round(0.4 * 3) = 1 cat, round(0.4 * 6) = 2 dogs
    assert.are.same({ 0, 1, 1 }, test.labels:totable())
    assert.are.equal(6, train.images:size(0))
    local seen = {}
    for _, ds in ipairs { train, test } do
      for i = 0, ds.images:size(0) - 1 do
        local img <close> = ds.images:select(0, i)
        local b = bytes_of(img)
        assert.is_nil(seen[b])
        seen[b] = true
      end
    end
    for _, name in ipairs(ORDER) do assert.is_true(seen[read_file(F .. "/folder/expected/" .. name .. ".rgb")]) end
    local again = split(false, 0)
    assert.are.equal(bytes_of(test.images), bytes_of(again.images))
    local other = {}
    for seed = 1, 5 do other[#other + 1] = bytes_of(split(false, seed).images) end
    local differs = false
    for _, b in ipairs(other) do differs = differs or b ~= bytes_of(test.images) end
    assert.is_true(differs)
  end)

  it("gives a channel that no training image varies std 1, so that batches stay finite", function()
    local dir = tmpdir() .. "/rg"
    for i, cls in ipairs { "a", "b" } do
      assert(sh("mkdir -p " .. shell_quote(dir .. "/" .. cls)) == 0)
      local rows = {}
      for y = 0, 3 do
        local row = {}
        for x = 0, 3 do row[#row + 1] = string.char((x * 60 + i) % 256, (y * 50 + x) % 256, 0) end
        rows[#rows + 1] = table.concat(row)
      end
      write_file(dir .. "/" .. cls .. "/x.png", png_rgb(4, rows))
    end
    local ds = build { "image_folder", root = dir, test_dir = dir }
    assert.are.equal(0, ds.mean[3])
    assert.are.equal(1, ds.std[3])
    assert.is_true(ds.std[1] > 0 and ds.std[1] ~= 1)
    local x = data.loader(ds, { batch_size = 2, shuffle = false }):next()
    assert.is_false(x:isnan():any():item())
    assert.are.equal(0, x:select(1, 2):abs():max():item())
  end)

  it("reads a folder once per process (the nodes share it)", function()
    local dir = copy("folder/train")
    local a = build { "image_folder", root = dir, test_fraction = 0.5 }
    assert(sh("rm -rf " .. shell_quote(dir)) == 0)
    local b = build { "image_folder", root = dir, test_fraction = 0.5 }
    assert.are.equal(bytes_of(a.images), bytes_of(b.images))
  end)

  it("names the file, the option and the problem", function()
    assert.matches("image_folder: cannot open the directory /nowhere: .*option 'root'",
                   err_of(function() build { "image_folder", root = "/nowhere" } end))
    assert.matches("option 'root' .* is required", err_of(function() build { "image_folder" } end))
    assert.matches("test_dir or test_fraction, not both", err_of(function()
      build { "image_folder", root = root, test_dir = test_dir, test_fraction = 0.2 }
    end))
    assert.matches("dataset 'image_folder': option 'channels' must be one of 1, 3, got 2",
                   err_of(function() build { "image_folder", root = root, channels = 2 } end))
    assert.matches("dataset 'image_folder': option 'mean' must be on the %[0, 1%] scale that uint8 pixels are "
                   .. "normalized on, got 125%.3 at %[1%] %(125%.3 / 255 = 0%.4914%)",
                   err_of(function() build { "image_folder", root = root, mean = { 125.3, 123, 113.9 } } end))
    assert.matches("dataset 'femnist': option 'std' must be on the %[0, 1%] scale",
                   err_of(function() build { "femnist", dir = F .. "/femnist", std = { 63 } } end))
    assert.matches("dataset 'camelyon17': option 'mean' must be on the %[0, 1%] scale",
                   err_of(function() build { "camelyon17", dir = F .. "/camelyon17", mean = { 0.5, 0.5, 200 } } end))
    assert.matches("size must be {height, width}", err_of(function()
      build { "image_folder", root = root, size = { 8 } }
    end))
    assert.matches("image_folder: .*/cat/a%.png: the image is 16x8 %(width x height%), expected 8x8",
                   err_of(function() build { "image_folder", root = root, size = { 8, 8 } } end))
    local empty = tmpdir()
    assert.matches("no class folders", err_of(function() build { "image_folder", root = empty } end))
    local dir = copy("folder/train")
    assert(sh("mkdir " .. shell_quote(dir .. "/zebra") .. " && echo hi > " .. shell_quote(dir .. "/zebra/x.txt")) == 0)
    assert.matches("/zebra: no %.png, %.jpg or %.jpeg file for class 'zebra'",
                   err_of(function() build { "image_folder", root = dir } end))
    dir = copy("folder/train")
    local big = copy("folder/train")
    local patch = "/camelyon17/patches/patient_004_node_4/patch_patient_004_node_4_x_3328_y_21792.png"
    assert(sh("cp " .. shell_quote(F .. patch) .. " " .. shell_quote(big .. "/dog/z.png")) == 0)
    assert.matches("/dog/z%.png: the image is 96x96 %(width x height%), expected 16x8 %(the size of the first "
                   .. "image, .*/cat/a%.png; the option 'size' sets one%)",
                   err_of(function() build { "image_folder", root = big } end))
    local png = read_file(dir .. "/dog/d.png")
    write_file(dir .. "/dog/d.png", png:sub(1, #png - 30))
    assert.matches("image_folder: .*/dog/d%.png: not a valid PNG file %(",
                   err_of(function() build { "image_folder", root = dir } end))
    dir = copy("folder/train")
    local jpg = read_file(dir .. "/cat/c.jpg")
    write_file(dir .. "/cat/c.jpg", jpg:sub(1, #jpg // 2))
    assert.matches("/cat/c%.jpg: not a valid JPEG file %(", err_of(function() build { "image_folder", root = dir } end))
    dir = copy("folder/train")
    -- a dangling link is a file that cannot be read (torchvision's ImageFolder fails on it too),
    -- not one to leave out without a word
    assert(sh("ln -s /nowhere/gone.png " .. shell_quote(dir .. "/cat/zz.png")) == 0)
    assert.matches("image_folder: cannot open .*/cat/zz%.png: No such file or directory",
                   err_of(function() build { "image_folder", root = dir } end))
    dir = copy("folder/train")
    write_file(dir .. "/cat/a.png", "")
    assert.matches("/cat/a%.png: empty file, not an image", err_of(function() build { "image_folder", root = dir } end))
    local tdir = copy("folder/test")
    assert(sh("mkdir " .. shell_quote(tdir .. "/emu")) == 0)
    assert.matches("class folder 'emu' is not among root's classes %(cat, dog%)", err_of(function()
      build({ "image_folder", root = root, test_dir = tdir }, false)
    end))
  end)

  it("checks read_images's arguments", function()
    assert.error_matches(function() data_core.read_images({ "a\0b" }, 3, 8, 16) end, "paths%[1%] holds a NUL byte")
    assert.error_matches(function() data_core.read_images({ 1 }, 3, 8, 16) end, "paths%[1%] is a number")
    assert.error_matches(function() data_core.read_images({}, 3, 8, 16) end, "no image paths")
    assert.error_matches(function() data_core.read_images({ "x" }, 2, 8, 16) end, "channels must be 1 or 3")
    local t, err = data_core.read_images({ F .. "/folder/train/cat/a.png", "/nowhere.png" }, 3, 8, 16)
    assert.is_nil(t)
    assert.matches("cannot open /nowhere%.png", err)
  end)

  it("declares its options for the schema (paths as paths)", function()
    local spec = registry.spec("dataset", "image_folder")
    assert.are.equal("path", spec.options.root.type)
    assert.are.equal("path", spec.options.test_dir.type)
    assert.is_nil(registry.check("dataset", { "image_folder", roots = "x" }))
  end)
end)

describe("data.core.shared", function()
  it("builds once per key and hands out read-only shares", function()
    local calls = 0
    local key = "spec\0" .. tostring(os.time()) .. math.random()
    local function make()
      calls = calls + 1
      return { t = require("dpy.tensor").ones(3) }, { n = 3 }
    end
    local a, info = data.shared(key, make)
    local b = data.shared(key, make)
    assert.are.equal(1, calls)
    assert.are.equal(3, info.n)
    assert.is_true(a.t:is_readonly() and b.t:is_readonly())
    assert.error_matches(function() a.t:add_(1) end, "read%-only")
    assert.error_matches(function() data.shared(key .. "x", function() error("boom", 0) end) end, "boom")
    assert.error_matches(function() data_core.shared(key .. "y", function() return { t = 1 } end) end,
                         "a table of tensors by name")
    -- a key differing after a NUL byte is another key
    local c = data.shared(key .. "\0other", function() return { t = require("dpy.tensor").zeros(1) } end)
    assert.are.same({ 0 }, c.t:totable())
  end)
end)

describe("femnist", function()
  local dir = F .. "/femnist"

  it("reads LEAF's JSON: pixels, labels, writers as groups", function()
    local ds = build { "femnist", dir = dir }
    assert.are.same({ 9, 1, 28, 28 }, ds.images:size())
    assert.are.equal(62, ds.classes)
    -- file 0 lists f0001_12 then f0000_07; file 1 holds f0002_33
    local w_of = { 1, 1, 0, 0, 0, 2, 2, 2, 2 }
    local j_of = { 0, 1, 0, 1, 2, 0, 1, 2, 3 }
    assert.are.same(w_of, ds.groups:totable())
    assert.are.same({ "f0000_07", "f0001_12", "f0002_33" }, ds.group_names)
    local labels = {}
    for i = 1, 9 do labels[i] = (10 * w_of[i] + j_of[i]) % 62 end
    assert.are.same(labels, ds.labels:totable())
    for i = 1, 9 do
      local want = {}
      for p = 0, 783 do want[p + 1] = string.char((50 * w_of[i] + 17 * j_of[i] + 3 * p) % 256) end
      local img <close> = ds.images:select(0, i - 1)
      assert.are.equal(table.concat(want), bytes_of(img))
    end
    assert.is_true(math.abs(ds.mean[1] - 0.49755457738651016) < 1e-12)
    assert.is_true(math.abs(ds.std[1] - 0.2888288746241451) < 1e-12)
    local test = build({ "femnist", dir = dir }, false)
    assert.are.same({ 3, 1, 28, 28 }, test.images:size())
    assert.are.same({ 0, 1, 2 }, test.groups:totable())
    assert.are.same(ds.mean, test.mean)
  end)

  it("gives each node its writers through the natural partitioner", function()
    local ds = build { "femnist", dir = dir }
    local parts = registry.build("partitioner", "natural", { labels = ds.labels, groups = ds.groups, nodes = 3 })
    assert.are.same({ 2, 3, 4 }, parts[1]:totable())   -- writer 0
    assert.are.same({ 0, 1 }, parts[2]:totable())      -- writer 1
    assert.are.same({ 5, 6, 7, 8 }, parts[3]:totable())
  end)

  it("names the file, the user and the problem", function()
    assert.matches("femnist: cannot open the directory /nowhere/train: .*option 'dir': LEAF's data/femnist/data",
                   err_of(function() build { "femnist", dir = "/nowhere" } end))
    local function broken(edit)
      local d = copy("femnist")
      local path = d .. "/train/all_data_1_niid_0_keep_0_train_9.json"
      local t = cjson.decode(read_file(path))
      local text = edit(t)
      write_file(path, text or cjson.encode(t))
      return function() build { "femnist", dir = d } end
    end
    assert.matches("all_data_1_niid_0_keep_0_train_9%.json: not valid JSON %(", err_of(broken(function()
      return '{"users": ["a"], "num_samples": [1'
    end)))
    assert.matches("user f0002_33: num_samples says 5, but x has 4 and y 4", err_of(broken(function(t)
      t.num_samples[1] = 5
    end)))
    assert.matches("user f0002_33: pixels must lie in 0%.%.1, found 0%.%.2", err_of(broken(function(t)
      t.user_data.f0002_33.x[2][7] = 2
    end)))
    assert.matches("user f0002_33: pixels must lie in 0%.%.1, found %-?nan%.%.%-?nan", err_of(broken(function(t)
      t.user_data.f0002_33.x[2][7] = 0.3125   -- Python's json.dump writes NaN so, and cjson reads it
      return (cjson.encode(t):gsub("0%.3125", "NaN"))
    end)))
    assert.matches("user f0002_33: y%[3%] = 62 is not a class in 0%.%.61", err_of(broken(function(t)
      t.user_data.f0002_33.y[3] = 62
    end)))
    assert.matches("user f0002_33: x: ragged table", err_of(broken(function(t)
      table.remove(t.user_data.f0002_33.x[1])
    end)))
    assert.matches("x must hold rows of 784 pixels, got 4x783", err_of(broken(function(t)
      for _, row in ipairs(t.user_data.f0002_33.x) do table.remove(row) end
    end)))
    assert.matches("not LEAF's layout", err_of(broken(function() return "[1, 2]" end)))
  end)
end)

describe("data.core.unit_bytes (femnist's pixels to bytes)", function()
  local tensor = require "dpy.tensor"

  it("makes the bytes of tensor.new(rows, 'float32'):mul(255):round():to('uint8'), or says nil", function()
    local rows, row = {}, {}
    for k = 0, 255 do
      row[#row + 1] = k / 255
      row[#row + 1] = math.min(1, (k + 0.5) / 255)   -- halfway: float32's rounding, then half to even
      row[#row + 1] = math.max(0, (k - 0.5) / 255)
    end
    row[#row + 1], row[#row + 1] = -0.0, 1   -- an integer 1 too
    rows[1], rows[2] = row, { table.unpack(row) }
    table.sort(rows[2])
    local want <close> = tensor.new(rows, "float32"):mul(255):round():to("uint8")
    local got <close> = data_core.unit_bytes(rows, 2, #row)
    assert.are.same({ 2, #row }, got:size())
    assert.are.equal(bytes_of(want), bytes_of(got))
    for _, bad in ipairs { { 0.5, 0.5 / 0 }, { 0.5, -1e-9 }, { 0.5, 1 + 1e-7 }, { 0.5, 0 / 0 }, { 0.5, "0.5" },
                           { 0.5, { 0.5 } }, { 0.5 }, { 0.5, 0.5, 0.5 } } do
      assert.is_nil(data_core.unit_bytes({ { 0.5, 0.5 }, bad }, 2, 2))
    end
    assert.is_nil(data_core.unit_bytes({ { 0.5, 0.5 }, 7 }, 2, 2))
  end)
end)

-- each load in a process of its own (the cache is for the next process): multi-process scenarios,
-- left out of the sanitizer run, whose C (data_cache.c) test_dataset runs there byte by byte
describe("femnist's decoded splits in the dataset cache, process after process #e2e", function()
  -- A script printing a split's shape, a hash of each tensor's bytes and of the writers, and the
  -- default mean and std, as a new process loads it.
  local DIGEST = [[
local femnist = require "dpy.datasets.femnist"
local core = require "dpy.data.core"
local ds = femnist.load { dir = arg[1], train = arg[2] ~= "test" }
local function h(t) return core.hash(t:contiguous():bytes()) end
print(table.concat(ds.images:size(), "x"), ds.images:dtype(), h(ds.images), ds.labels:dtype(), h(ds.labels),
      ds.groups:dtype(), h(ds.groups), core.hash(table.concat(ds.group_names, "\0")),
      string.format("%.17g %.17g", ds.mean[1], ds.std[1]))
]]
  local script
  -- code, stdout, stderr of the digest of dir's split, in a new process with DPY_CACHE_DIR = cache
  local function load(dir, cache, split)
    if not script then
      script = tmpdir() .. "/digest.lua"
      write_file(script, DIGEST)
    end
    return sh(string.format("DPY_CACHE_DIR=%s %s %s %s %s", shell_quote(cache), shell_quote(DPY_BIN), script,
                            shell_quote(dir), split or "train"))
  end
  local function ok_load(dir, cache, split)
    local code, out, err = load(dir, cache, split)
    assert.are.equal(0, code, err)
    return out, err
  end
  local function cache_files(cache)
    local _, out = sh("ls " .. shell_quote(cache))
    local files = {}
    for f in out:gmatch("[^\n]+") do files[#files + 1] = f end
    return files
  end
  local function count(s, pattern) return select(2, s:gsub(pattern, "")) end
  local TRAIN = "/train/all_data_0_niid_0_keep_0_train_9.json"

  it("is made by the first process and read by the next, bit for bit what the JSON gives, unparsed", function()
    local d, cache = copy("femnist"), tmpdir() .. "/cache"
    local plain = ok_load(d, "")
    local plain_test = ok_load(d, "", "test")
    assert.matches("^9x1x28x28\tuint8\t", plain)
    assert.are.equal(plain, (ok_load(d, cache)))
    assert.are.equal(1, #cache_files(cache))
    assert.matches("^femnist%-train%-%x+$", cache_files(cache)[1])
    -- every JSON file of the split replaced by garbage of its size and mtime: only the cache can answer
    for _, f in ipairs { TRAIN, "/train/all_data_1_niid_0_keep_0_train_9.json" } do
      local size = #read_file(d .. f)
      write_file(d .. f .. ".new", string.rep("x", size))
      assert(sh(string.format("touch -r %s %s.new && mv %s.new %s", d .. f, d .. f, d .. f, d .. f)) == 0)
    end
    local out, err = ok_load(d, cache)
    assert.are.equal(plain, out)
    assert.are.equal("", err)
    -- the test split: its own file, and the training split's statistics from the cache
    assert.are.equal(plain_test, (ok_load(d, cache, "test")))
    assert.are.equal(2, #cache_files(cache))
    -- DPY_CACHE_DIR="" turns it off: the garbage is parsed
    local code, _, e = load(d, "")
    assert.are_not.equal(0, code)
    assert.matches("all_data_0_niid_0_keep_0_train_9%.json: not valid JSON", e)
  end)

  it("is made again when a JSON file of the split changes, is added or is removed", function()
    local d, cache = copy("femnist"), tmpdir() .. "/cache"
    local first = ok_load(d, cache)
    -- a label changed (the file's mtime with it)
    local t = cjson.decode(read_file(d .. TRAIN))
    t.user_data.f0000_07.y[1] = 61
    write_file(d .. TRAIN, cjson.encode(t))
    local changed = ok_load(d, cache)
    assert.are_not.equal(first, changed)
    assert.are.equal(ok_load(d, ""), changed)
    -- a file added: its writers' samples join the split
    write_file(d .. "/train/extra.json", cjson.encode {
      users = { "f0009_99" }, num_samples = { 1 }, user_data = { f0009_99 = { x = { (function()
        local row = {}
        for p = 1, 784 do row[p] = p % 2 end
        return row
      end)() }, y = { 5 } } } })
    local added = ok_load(d, cache)
    assert.matches("^10x1x28x28", added)
    assert.are.equal(ok_load(d, ""), added)
    -- and removed again
    os.remove(d .. "/train/extra.json")
    assert.are.equal(changed, (ok_load(d, cache)))
    assert.are.equal(1, #cache_files(cache))   -- one file per split: rewritten, not piled up
  end)

  it("says once that a truncated or corrupt cache is ignored, parses the JSON and writes it anew", function()
    local d, cache = copy("femnist"), tmpdir() .. "/cache"
    local plain = ok_load(d, "")
    ok_load(d, cache)
    local file = cache .. "/" .. cache_files(cache)[1]
    local bytes = read_file(file)
    local flipped = #bytes - 8   -- the last label's last byte, before the checksum
    write_file(file, bytes:sub(1, flipped - 1) .. string.char(bytes:byte(flipped) ~ 1) .. bytes:sub(flipped + 1))
    local out, err = ok_load(d, cache)
    assert.are.equal(plain, out)
    assert.are.equal(1, count(err, "warning"), err)
    assert.matches("warning: femnist: ignoring the cache: " .. file:gsub("%p", "%%%0")
                   .. ": corrupt %(checksum mismatch%); parsing .*/train", err)
    assert.are.equal(bytes, read_file(file))   -- made anew
    assert.are.equal("", select(2, ok_load(d, cache)))
    write_file(file, bytes:sub(1, #bytes - 100))
    out, err = ok_load(d, cache)
    assert.are.equal(plain, out)
    assert.matches("ignoring the cache: .*: truncated or corrupt", err)
    assert.are.equal(bytes, read_file(file))
    write_file(file, "")
    out, err = ok_load(d, cache)
    assert.are.equal(plain, out)
    assert.matches("ignoring the cache: .*: not a dataset cache file of this version", err)
  end)

  it("leaves the load working when the cache cannot be written, said once", function()
    local d, blocked = copy("femnist"), tmpdir() .. "/file"
    write_file(blocked, "not a folder")
    local plain_test = ok_load(d, "", "test")
    local out, err = ok_load(d, blocked .. "/cache", "test")   -- the training split too, for its statistics
    assert.are.equal(plain_test, out)
    assert.are.equal(1, count(err, "warning"), err)
    assert.matches("warning: femnist: not cached %(cannot create directory .*/file/cache: Not a directory%): "
                   .. "every process parses the JSON files again", err)
  end)

  it("removes the temporary files a killed process's write left, once an hour old", function()
    local d, cache = copy("femnist"), tmpdir() .. "/cache"
    assert(require("dpy.host.core").mkdir_p(cache))
    local name = "femnist-train-" .. data_core.hash(require("dpy.paths").absolute(d .. "/train"))
    write_file(cache .. "/" .. name .. ".tmp.old123", "half")
    write_file(cache .. "/" .. name .. ".tmp.new456", "half")   -- a write in progress, maybe
    write_file(cache .. "/other.tmp.old789", "not ours")
    assert(sh(string.format("touch -d '2 hours ago' %s/%s.tmp.old123 %s/other.tmp.old789", cache, name, cache)) == 0)
    ok_load(d, cache)
    local files = cache_files(cache)
    table.sort(files)
    assert.are.same({ name, name .. ".tmp.new456", "other.tmp.old789" }, files)
  end)

  it("serves processes that start together from one whole file", function()
    local d, cache = copy("femnist"), tmpdir() .. "/cache"
    local plain, outs = ok_load(d, ""), tmpdir()
    local cmd = {}
    for i = 1, 3 do
      cmd[i] = string.format("DPY_CACHE_DIR=%s %s %s %s train > %s/%d 2>&1 &", shell_quote(cache),
                             shell_quote(DPY_BIN), script, shell_quote(d), outs, i)
    end
    assert.are.equal(0, (sh(table.concat(cmd, " ") .. " wait")))
    for i = 1, 3 do assert.are.equal(plain, read_file(outs .. "/" .. i)) end
    assert.are.same({ cache_files(cache)[1] }, cache_files(cache))   -- no temporary file left
  end)
end)

describe("camelyon17", function()
  local dir = F .. "/camelyon17"

  it("reads WILDS's official splits, labels and pixels, hospitals as groups", function()
    local train = build { "camelyon17", dir = dir }
    assert.are.same({ 4, 3, 96, 96 }, train.images:size())   -- metadata rows 0, 1, 4 and 6
    assert.are.same({ 1, 0, 1, 0 }, train.labels:totable())
    assert.are.same({ 0, 0, 3, 4 }, train.groups:totable())
    assert.are.equal(2, train.classes)
    for n, row in ipairs { 0, 1, 4, 6 } do
      local img <close> = train.images:select(0, n - 1)
      for _, at in ipairs { { 0, 0, 0 }, { 2, 95, 3 }, { 1, 40, 77 } } do
        local k, y, x = table.unpack(at)
        local px <close> = img[k][y][x]
        assert.are.equal((x + 2 * y + 50 * k + 13 * row) % 256, px:item())
      end
    end
    local test = build({ "camelyon17", dir = dir }, false)
    assert.are.same({ 2 }, test.groups:totable())
    assert.are.same({ 1 }, test.labels:totable())
    assert.are.same(train.mean, test.mean)
    assert.are.same({ 1 }, build({ "camelyon17", dir = dir, test_split = "val" }, false).groups:totable())
    local id_val = build({ "camelyon17", dir = dir, test_split = "id_val" }, false)
    assert.are.same({ 3 }, id_val.groups:totable())
    assert.are.same({ 0 }, id_val.labels:totable())
    local parts = registry.build("partitioner", "natural", { labels = train.labels, groups = train.groups, nodes = 3 })
    assert.are.same({ { 0, 1 }, { 2 }, { 3 } }, { parts[1]:totable(), parts[2]:totable(), parts[3]:totable() })
  end)

  it("names the file, the line and the problem", function()
    assert.matches("camelyon17: /nowhere/metadata%.csv: No such file or directory %(option 'dir': "
                   .. "camelyon17_v1%.0 from WILDS", err_of(function() build { "camelyon17", dir = "/nowhere" } end))
    assert.matches("option 'dir' is required", err_of(function() build { "camelyon17" } end))
    local d = copy("camelyon17")
    local csv = read_file(d .. "/metadata.csv")
    write_file(d .. "/metadata.csv", (csv:gsub("tumor", "tumour", 1)))
    assert.matches("metadata%.csv:1: no column 'tumor'", err_of(function() build { "camelyon17", dir = d } end))
    d = copy("camelyon17")
    write_file(d .. "/metadata.csv", (csv:gsub("\n4,061,0,96,192,1,35,3,0\n", "\n4,061,0,96,192,yes,35,3,0\n")))
    assert.matches("metadata%.csv:6: tumor must be an integer in 0%.%.1, got 'yes'",
                   err_of(function() build { "camelyon17", dir = d } end))
    d = copy("camelyon17")
    os.remove(d .. "/patches/patient_099_node_4/patch_patient_099_node_4_x_500_y_600.png")
    assert.matches("cannot open .*/patches/patient_099_node_4/patch_patient_099_node_4_x_500_y_600%.png",
                   err_of(function() build { "camelyon17", dir = d } end))
    assert.matches("option 'test_split' must be one of \"test\", \"val\", \"id_val\", got \"ood\"", err_of(function()
      build({ "camelyon17", dir = dir, test_split = "ood" }, false)
    end))
  end)
end)

describe("partition.natural", function()
  local groups = { 4, 4, 0, 7, 7, 7, 2, 9, 0, 2, 2, 2 }   -- 5 groups: 0 (2), 2 (4), 4 (2), 7 (3), 9 (1)

  it("cuts the groups, in id order, into runs of near-equal count", function()
    local parts = partition.natural(groups, 2)
    -- groups 0, 2, 4 to node 0; 7, 9 to node 1
    assert.are.same({ 0, 1, 2, 6, 8, 9, 10, 11 }, parts[1]:totable())
    assert.are.same({ 3, 4, 5, 7 }, parts[2]:totable())
    local three = partition.natural(groups, 3)   -- 2, 2, 1 groups
    assert.are.same({ 2, 6, 8, 9, 10, 11 }, three[1]:totable())
    assert.are.same({ 0, 1, 3, 4, 5 }, three[2]:totable())
    assert.are.same({ 7 }, three[3]:totable())
  end)

  it("balances samples when asked", function()
    -- largest first, each to the node with fewer samples: 2 (4) -> node 0 (4), 7 (3) -> node 1 (3),
    -- 0 (2) -> node 1 (5), 4 (2) -> node 0 (6), 9 (1) -> node 1 (6)
    local parts = partition.natural(groups, 2, { assign = "balanced" })
    assert.are.same({ 0, 1, 6, 9, 10, 11 }, parts[1]:totable())
    assert.are.same({ 2, 3, 4, 5, 7, 8 }, parts[2]:totable())
  end)

  it("refuses too many nodes, a dataset without groups and a bad option", function()
    assert.error_matches(function() partition.natural(groups, 6) end,
                         "5 groups cannot give each of 6 nodes one %(a group is never split%): use at most 5")
    assert.error_matches(function() partition.natural(groups, 2, { assign = "random" }) end, "assign must be")
    assert.error_matches(function()
      registry.build("partitioner", "natural", { labels = { 0, 1 }, nodes = 2, dataset = "fashion_mnist" })
    end, "partition 'natural' needs a dataset with natural groups .*; fashion_mnist has none")
  end)
end)

describe("a decentralized run on femnist, one writer per node #e2e", function()
  it("trains with the natural partition written by the launcher", function()
    local code, out, err, run = run_config(table.concat({
      "seed = 1", "nodes = 3", "graph = 'ring'", "rounds = 1", "local_steps = 1", "batch_size = 2",
      "dataset = { 'femnist', dir = " .. string.format("%q", F .. "/femnist") .. " }",
      "partition = 'natural'", "model = 'mlp'", "eval_every = 1", "peer_timeout = 20" }, "\n"))
    assert.are.equal(0, code, (out or "") .. (err or ""))
    assert.are.same({ 2, 3, 4 }, layout_files.load_part(run, 1, 3):totable())
    assert.are.same({ 0, 1 }, layout_files.load_part(run, 2, 3):totable())
    assert.are.same({ 5, 6, 7, 8 }, layout_files.load_part(run, 3, 3):totable())
    assert.is_not_nil(node_metrics(run, 2).test_accuracy)
  end)
end)
