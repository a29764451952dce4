-- Writes a slice of Fashion-MNIST as CSV files (label, then 784 pixel values 0-255), the kind of
-- file a researcher's own data often comes as: data/train.csv (6,000 rows), data/test.csv (1,000).
--   scripts/dpy configs/examples/custom/make_data.lua [DIR [TRAIN_ROWS]]
local data = require "dpy.data"
local host = require "dpy.host.core"

local dir = arg[1] or (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/data"
assert(host.mkdir_p(dir))
local train_rows = math.tointeger(tonumber(arg[2] or "6000"))
for _, split in ipairs { { "train", true, train_rows }, { "test", false, 1000 } } do
  local name, train, rows = table.unpack(split)
  local ds = data.fashion_mnist { train = train }
  local images = ds.images:narrow(0, 0, rows):reshape(rows, 784):totable()
  local labels = ds.labels:narrow(0, 0, rows):totable()
  local lines = {}
  for i = 1, rows do lines[i] = labels[i] .. "," .. table.concat(images[i], ",") end
  assert(host.write_atomic(dir .. "/" .. name .. ".csv", table.concat(lines, "\n") .. "\n"))
  print(string.format("%s/%s.csv: %d rows", dir, name, rows))
end
