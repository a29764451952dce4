--- A dataset read from CSV files: DIR/train.csv and DIR/test.csv, one sample per line, the label
-- first, then the pixels of a 28 x 28 grey image (0-255). The contract of a dataset: new(cfg, ctx)
-- returns { images = uint8 N x C x H x W, labels = int64 N, classes, mean = { per channel },
-- std = { per channel }, shape = { C, H, W }, name }; ctx.train picks the split.
local registry = require "dpy.registry"
local tensor = require "dpy.tensor"

local function read(path)
  local f, err = io.open(path, "r")
  if not f then error(string.format("csv dataset: %s (run make_data.lua first)", err), 0) end
  local labels, pixels, n = {}, {}, 0
  for line in f:lines() do
    n = n + 1
    local values = {}
    for v in line:gmatch("[^,]+") do values[#values + 1] = math.tointeger(tonumber(v)) end
    if #values ~= 785 then
      f:close()
      error(string.format("%s:%d: %d values, expected a label and 784 pixels", path, n, #values), 0)
    end
    labels[n] = table.remove(values, 1)
    pixels[n] = string.char(table.unpack(values))   -- 0-255 each, or string.char raises
  end
  f:close()
  return tensor.from_bytes(table.concat(pixels), "uint8", n, 1, 28, 28), tensor.new(labels, "int64")
end

return registry.register {
  kind = "dataset", name = "csv",
  doc = "28 x 28 grey images from CSV files (label, then 784 pixels)",
  options = { dir = { type = "path", required = true, doc = "the directory of train.csv and test.csv" } },
  new = function(cfg, ctx)
    local images, labels = read(cfg.dir .. (ctx.train == false and "/test.csv" or "/train.csv"))
    return { name = "csv", images = images, labels = labels, classes = labels:max():item() + 1,
             mean = { 0.2860 }, std = { 0.3530 }, shape = { 1, 28, 28 } }
  end,
}
