-- The README's examples run as written: every ```lua block whose first line is "-- file: PATH" is
-- written to PATH under a fresh directory, and the experiments among them are run.
local function readme_files()
  local text = assert(read_file(REPO .. "/README.md"))
  local files = {}
  for body in text:gmatch("```lua\n(.-)```") do
    local path = body:match("^%-%- file: (%S+)\n")
    if path then files[path] = body end
  end
  return files
end

describe("the README's examples", function()
  it("of your own components run as an experiment", function()
    local files = readme_files()
    assert.truthy(files["study/experiment.lua"], "the README shows study/experiment.lua")
    local dir = tmpdir()
    for path, body in pairs(files) do
      local sub = path:match("^(.*)/[^/]*$")
      if sub then assert(require("dpy.host.core").mkdir_p(dir .. "/" .. sub)) end
      write_file(dir .. "/" .. path, body)
    end
    local code, out, err = sh("cd " .. dir .. " && " .. shell_quote(DPY_BIN) .. " run study/experiment.lua --out out")
    assert.are.equal(0, code, err)
    assert.matches("final test accuracy", out)
    local m0, m1 = node_metrics(dir .. "/out", 0), node_metrics(dir .. "/out", 1)
    assert.are.equal(3, #m1.sent_norm)
    assert.is_true(m1.test_accuracy[1][2] > 0.9, "the stripes are learnt")
    assert.are.equal(m0.bytes_sent[1][2], m1.bytes_sent[1][2])
  end)
end)
