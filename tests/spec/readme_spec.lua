-- The README's examples are executed, so the documentation cannot drift from the code.
--
-- Every fenced block of README.md and of the docs/ pages it links is one of these, and each kind
-- is checked as follows:
-- - ```lua whose first line is "-- file: PATH": a file of an example experiment; all such files are
--   written under a fresh directory at their paths and study/experiment.lua is run.
-- - any other ```lua: a snippet of the Lua API, run as written (a script under dpy-lua; a snippet
--   must therefore be self-contained and small enough to run in seconds: the README's snippets are
--   written so, and there is no override mechanism to keep in step with them).
-- - ``` (no language) starting with "> ": a REPL transcript; its input lines are piped into
--   `dpy-lua repl` and the output must equal what the README shows, every decimal number (random
--   values) standing for any number.
-- - ``` starting with "$ dpy-lua run … --paused &" and then "$ dpy-lua attach …": a session of
--   dpy-lua attach; the run is started paused (tiny overrides: rounds=4 local_steps=1
--   test_samples=200 eval_every=1), the lines typed ("node U> …") are piped into the attach
--   command, and the other lines must appear in its output in order, every decimal number
--   standing for any number; the run then finishes with exit 0.
-- - ``` showing a run's summary ("honest nodes: …"): the run it quotes is made (tiny overrides) and
--   each line must appear in its output, "…" standing for any number.
-- - ``` of the source layout: every file name in it (*.c, *.h, *.cpp, *.py) exists in the repository.
-- - ```json: parses, and has the shape of a metrics file.
-- - ```sh: every command (`scripts/dpy`, `dpy-lua`, `build/dpy-lua`, also after mpirun/srun/env
--   assignments) parses: its subcommand or script exists, and each option it uses is in
--   `dpy-lua <command> --help` (the top-level help for interpreter options).
-- The same parse check applies to every backticked `dpy-lua …` / `scripts/dpy …` in the prose and
-- the Commands table, where each row's option spans (`--uid U`, `-q`) are checked against its
-- command's help. Every backticked repository path (configs/…, scripts/…, bench/…, tests/…, lua/…,
-- host/…) exists. A script shown with arguments (`sweep.lua [ROUNDS …]`) shows the usage line its
-- own header gives.
--
-- Run for real, with small overrides where the README's run takes minutes (each named below):
-- the Quick start's `run configs/0_baseline.lua` (rounds=1 local_steps=1 test_samples=200: the
-- README's 100 rounds take minutes), the summary quoted under Results (configs/3_robust_poisoned.lua,
-- same overrides) and `dpy-lua report` on it, the custom example's two commands (make_data's
-- documented row-count argument, 600 rows; the experiment with nodes=4 rounds=1 local_steps=1),
-- and the help and version commands. Not run: `scripts/dpy test` (this suite; the spec checks it
-- runs ctest and that .ci/run calls it), the Byzantine scripts (minutes; byzantine_spec runs a
-- reduced sweep), mpirun/srun/dispatch (launchers_spec and dispatch_spec), the GPU build.
--
-- Config tables (`| key | default | meaning |`): each key is a config key of dpy.config.SCHEMA and
-- every default shown as a Lua value equals the schema's default (or, for the few the code applies
-- per mode, CODE_DEFAULTS below, found in the named source); a default in words ("all", "the core
-- count") is one the schema leaves unset; "`key` (default X)" in the text is checked alike. Component
-- entries shown in the meaning column (`{ "trimmed_mean", f = 1 }`), `key = value` examples of the
-- section and the Commands table's `KEY=VALUE` ones pass dpy.config's check; the error messages the
-- README quotes are the ones the code gives. Every schema key is documented. Nothing is tagged #e2e:
-- the whole spec takes about 25 s of CPU (the runs and the simulation snippet most of it).
local config = require "dpy.config"

local BIN = shell_quote(DPY_BIN)
-- The README and the pages it links in docs/, read as one text; place(n) names a line of it as
-- file:line.
local PAGES = { "README.md", "docs/wire.md", "docs/performance.md", "docs/architecture.md" }
local README, place
do
  local texts, starts, line = {}, {}, 1
  for i, page in ipairs(PAGES) do
    local text = assert(read_file(REPO .. "/" .. page))
    if not text:match("\n$") then text = text .. "\n" end
    texts[i], starts[i] = text, { page = page, first = line }
    line = line + select(2, text:gsub("\n", ""))
  end
  README = table.concat(texts)
  function place(n)
    for i = #starts, 1, -1 do
      if n >= starts[i].first then return starts[i].page .. ":" .. (n - starts[i].first + 1) end
    end
  end
end

-- {==== reading the README ====}

--- Fenced blocks: { lang, line (of the opening fence), body (indent stripped), heading }.
local function blocks()
  local list, cur, heading, n = {}, nil, nil, 0
  for line in (README .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    local indent, lang = line:match("^(%s*)```(%w*)%s*$")
    if cur then
      if indent and lang == "" then
        list[#list + 1], cur = cur, nil
      else
        cur.lines[#cur.lines + 1] = line:sub(#cur.indent + 1)
      end
    elseif indent then
      cur = { lang = lang, line = n, indent = indent, lines = {}, heading = heading }
    else
      heading = line:match("^#+%s+(.*)") or heading
    end
  end
  for _, b in ipairs(list) do b.body = table.concat(b.lines, "\n") .. "\n" end
  return list
end

--- The text of the section whose heading is title, up to the next heading of its level or above.
local function section(title)
  local level, start = README:match("\n(#+) " .. title:gsub("%p", "%%%0") .. "\n()")
  assert(level, "README has a section '" .. title .. "'")
  local stop = README:find("\n" .. ("#"):rep(#level) .. "[^#]", start) or #README
  return README:sub(start, stop)
end

--- Backticked spans of text, whitespace collapsed (a span may cross a line break).
local function spans(text)
  local list = {}
  for s in text:gsub("``", ""):gmatch("`([^`]+)`") do list[#list + 1] = s:gsub("%s+", " ") end
  return list
end

--- Table rows of text: a list of cell lists (header and separator rows left out).
local function rows(text, header)
  local list, inside = {}, false
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if line:match("^|") then
      local cells = {}
      for c in line:gsub("\\|", "\1"):sub(2):gmatch("%s*(.-)%s*|") do cells[#cells + 1] = c:gsub("\1", "|") end
      if line:match("^| " .. header .. " |") then inside = true
      elseif inside and not line:match("^| %-%-%-") then list[#list + 1] = cells end
    else
      inside = false
    end
  end
  return list
end

--- A Lua value from text (nil when it is not one). Undefined names raise, so prose is no value;
-- env supplies the names that an example uses as placeholders.
local function lua_value(text, env)
  local chunk = load("return " .. text, "=readme", "t", setmetatable({}, {
    __index = function(_, k)
      if env and env[k] ~= nil then return env[k] end
      error("undefined " .. k)
    end,
  }))
  if not chunk then return nil end
  local ok, v = pcall(chunk)
  if ok then return v, true end
end

local function deep_equal(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not deep_equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- {==== commands ====}

local help_cache = {}
--- The words of `dpy-lua [cmd] --help` (brackets, commas and parentheses taken as spaces).
local function help_words(cmd)
  if not help_cache[cmd or ""] then
    local code, out = sh(BIN .. (cmd and " " .. cmd or "") .. " --help")
    assert.are.equal(0, code, "dpy-lua " .. (cmd or "") .. " --help")
    local words = {}
    for w in out:gsub("[%[%]%(%),|{}]", " "):gmatch("%S+") do words[w] = true end
    help_cache[cmd or ""] = words
  end
  return help_cache[cmd or ""]
end

local SUBCOMMANDS = { run = true, node = true, dispatch = true, report = true, repl = true, attach = true }
-- build/dpy-lua is the binary that scripts/setup builds (DPY_BIN here): no repository file.
local PROGRAMS = { ["dpy-lua"] = true, ["build/dpy-lua"] = true, ["scripts/dpy"] = true }

local function repo_has(path) return os.rename(REPO .. "/" .. path, REPO .. "/" .. path) ~= nil end

--- Checks one command line given as words (from a sh block or a span); where names it in messages.
local function check_command(words, where)
  local i = 1
  while words[i] and not PROGRAMS[words[i]] do i = i + 1 end
  local program = assert(words[i], where .. ": no dpy-lua command in it")
  if program == "scripts/dpy" then assert.is_true(repo_has(program), where .. ": " .. program .. " exists") end
  local first = words[i + 1]
  local cmd
  if first == "test" then
    assert.are.equal("scripts/dpy", program, where .. ": only scripts/dpy has 'test'")
    assert.matches('"test" %]; then.-exec ctest', read_file(REPO .. "/scripts/dpy"), nil, where)
    return
  elseif first and SUBCOMMANDS[first] then
    cmd = first
    i = i + 1
  elseif first == "help" then
    return
  elseif first and not first:match("^%-") and first:match("%.lua$") then
    if first:match("^[%w_]+/") and not first:match("[A-Z]") then
      assert.is_true(repo_has(first), where .. ": the script " .. first .. " exists")
      -- a script shown with its arguments shows the usage its header documents
      local rest = table.concat(words, " ", i + 2)
      if rest:match("^%[") then
        local usage = (read_file(REPO .. "/" .. first) or ""):gsub("%s+", " ")
        assert.truthy(usage:find(first .. " " .. rest, 1, true),
                      where .. ": " .. first .. "'s header shows the usage '" .. first .. " " .. rest .. "'")
      end
    end
    return
  end
  local help = help_words(cmd)
  for j = i + 1, #words do
    local w = words[j]:gsub("=.*", "")
    if w:match("^%-") and w ~= "-" and w ~= "--" or (not cmd and (w == "-" or w == "--")) then
      assert.is_true(help[w] == true, string.format("%s: dpy-lua %s --help lists %s", where, cmd or "", w))
    end
  end
end

--- Words of one shell command line (quotes kept as content; comments dropped).
local function shell_words(line)
  local words, i = {}, 1
  while i <= #line do
    local c = line:sub(i, i)
    if c:match("%s") then
      i = i + 1
    elseif c == "#" then
      break
    else
      local w = ""
      while i <= #line and not line:sub(i, i):match("%s") do
        local q = line:sub(i, i)
        if q == "'" or q == '"' then
          local close = assert(line:find(q, i + 1, true), "unbalanced quote in: " .. line)
          w, i = w .. line:sub(i + 1, close - 1), close + 1
        else
          w, i = w .. q, i + 1
        end
      end
      words[#words + 1] = w
    end
  end
  return words
end

--- The command lines of a sh block (continuations joined, comment-only lines dropped).
local function sh_commands(body)
  local list = {}
  for line in body:gsub("\\\n", " "):gmatch("[^\n]+") do
    local words = shell_words(line)
    if #words > 0 then list[#list + 1] = words end
  end
  return list
end

local function span_words(s) return shell_words((s:gsub("[%[%]]", " "):gsub("\\|", "|"))) end

-- {==== the specs ====}

describe("the README's examples", function()
  local all = blocks()

  it("are each of a kind this spec checks", function()
    for _, b in ipairs(all) do
      local known = b.lang == "lua" or b.lang == "sh" or b.lang == "json" or b.body:match("^> ")
                    or b.body:match("^%$ dpy%-lua run ")
                    or b.body:match("honest nodes:") or (b.heading or ""):lower():find("source layout")
      assert.truthy(known, place(b.line) .. ": a block this spec does not know how to check")
    end
  end)

  it("of your own components run as an experiment", function()
    local dir, seen = tmpdir(), false
    for _, b in ipairs(all) do
      local path = b.lang == "lua" and b.body:match("^%-%- file: (%S+)\n")
      if path then
        seen = seen or path == "study/experiment.lua"
        local sub = path:match("^(.*)/[^/]*$")
        if sub then assert(require("dpy.host.core").mkdir_p(dir .. "/" .. sub)) end
        write_file(dir .. "/" .. path, b.body)
      end
    end
    assert.is_true(seen, "the README shows study/experiment.lua")
    local code, out, err = sh("cd " .. dir .. " && " .. BIN .. " run study/experiment.lua --out out")
    assert.are.equal(0, code, err)
    assert.matches("final test accuracy", out)
    local m0, m1 = node_metrics(dir .. "/out", 0), node_metrics(dir .. "/out", 1)
    assert.are.equal(3, #m1.sent_norm)
    assert.is_true(m1.test_accuracy[1][2] > 0.9, "the stripes are learnt")
    assert.are.equal(m0.bytes_sent[1][2], m1.bytes_sent[1][2])
  end)

  -- What the simulation snippet's comments and the text after it promise of snap and e.
  local SIMULATION_CHECK = [[
for _, k in ipairs { "step", "parameters", "momentum", "honest_gradients", "local_parameters",
                     "byzantine_parameters", "mixed_parameters", "byzantine_received", "losses" } do
  assert(snap[k] ~= nil, "the snapshot has no " .. k)
end
for _, k in ipairs { "losses", "accuracies", "loss", "accuracy" } do assert(e[k] ~= nil, "e has no " .. k) end
print("checked")
]]

  it("of the Lua API run as written", function()
    local dir, count = tmpdir(), 0
    for _, b in ipairs(all) do
      if b.lang == "lua" and not b.body:match("^%-%- file: ") then
        count = count + 1
        local trailer = b.body:match("byzantine%.simulation") and SIMULATION_CHECK or "print('checked')\n"
        local path = string.format("%s/snippet_%d.lua", dir, b.line)
        write_file(path, b.body .. trailer)
        local code, out, err = sh(BIN .. " " .. path)
        assert.are.equal(0, code, place(b.line) .. ": " .. tostring(err))
        assert.matches("checked\n$", out)
      end
    end
    assert.is_true(count >= 1)
  end)

  it("of the REPL print what the transcript shows", function()
    local seen = false
    for _, b in ipairs(all) do
      if b.lang == "" and b.body:match("^> ") then
        seen = true
        local input, expected = {}, {}
        for line in b.body:gmatch("[^\n]+") do
          local stat = line:match("^> (.*)")
          if stat then input[#input + 1] = stat else expected[#expected + 1] = line end
        end
        local dir = tmpdir()
        write_file(dir .. "/in", table.concat(input, "\n") .. "\n")
        local code, out, err = sh(BIN .. " repl < " .. dir .. "/in")
        assert.are.equal(0, code, err)
        local function shape(s) return (s:gsub("%-?%d+%.%d+", "#"):gsub("%s+", "")) end
        assert.are.equal(shape(table.concat(expected, "\n")), shape(out), place(b.line))
      end
    end
    assert.is_true(seen)
  end)

  it("of dpy-lua attach show what a session on a paused run prints #e2e", function()
    local seen = false
    for _, b in ipairs(all) do
      if b.lang == "" and b.body:match("^%$ dpy%-lua run ") then
        seen = true
        local run = b.body:match("^%$ (dpy%-lua run [^\n]-) &\n")
        local attach = b.body:match("\n%$ (dpy%-lua attach [^\n]+)")
        assert.truthy(run and attach, place(b.line) .. ": a run started with & and an attach command")
        check_command(shell_words(run), place(b.line))
        check_command(shell_words(attach), place(b.line))
        local out_dir = run:match("%-%-out (%S+)")
        local dir = tmpdir()
        local input, expected = {}, {}
        for line in b.body:gmatch("[^\n]+") do
          local typed = line:match("^node %d+> (.*)")
          if typed then input[#input + 1] = typed
          elseif not line:match("^%$ ") then expected[#expected + 1] = line end
        end
        write_file(dir .. "/in", table.concat(input, "\n") .. "\n")
        local function words(cmd) return (cmd:gsub("^dpy%-lua", BIN):gsub(out_dir, dir .. "/out", 1)) end
        local host = require "dpy.host.core"
        local pid = assert(host.spawn({ "/bin/sh", "-c", "cd " .. shell_quote(REPO) .. " && exec " .. words(run)
                                          .. " -q rounds=4 local_steps=1 test_samples=200 eval_every=1" },
                                      dir .. "/run.out"))
        local client
        for _ = 1, 600 do
          client = require("dpy.attach.client").open(dir .. "/out")
          if client then break end
          host.sleep(0.1)
        end
        assert(client, place(b.line) .. ": the run never listened: " .. tostring(read_file(dir .. "/run.out")))
        -- attached as a person would be, once its nodes are built and paused (a forked attach is
        -- quicker than that: it found them "starting")
        wait_paused(client)
        for _, c in ipairs(client.conns) do c:close() end
        local code, out, err = sh(words(attach) .. " < " .. dir .. "/in")
        assert.are.equal(0, code, err)
        local function shape(s) return (s:gsub("%-?%d+%.%d+", "#")) end
        local at = 1
        out = shape(out:gsub(dir .. "/out", out_dir))
        for _, line in ipairs(expected) do
          local found = out:find(shape(line), at, true)
          assert.truthy(found, place(b.line) .. ": the session prints '" .. line .. "' (in order), got:\n" .. out)
          at = found + 1
        end
        assert.are.equal(0, wait_exit(pid), read_file(dir .. "/run.out"))
      end
    end
    assert.is_true(seen)
  end)

  it("of the source layout name files that exist", function()
    local code, out = sh("cd " .. shell_quote(REPO) .. " && git ls-files")
    assert.are.equal(0, code)
    local have = {}
    for p in out:gmatch("[^\n]+") do have[p:match("[^/]+$")] = true end
    for _, b in ipairs(all) do
      if (b.heading or ""):lower():find("source layout") then
        for name in b.body:gmatch("[%w_]+%.[%a]+") do
          if name:match("%.[ch]$") or name:match("%.cpp$") or name:match("%.py$") then
            assert.is_true(have[name] == true, place(b.line) .. ": " .. name .. " exists")
          end
        end
      end
    end
  end)

  it("of a metrics file have its shape", function()
    local cjson = require("cjson").new()
    for _, b in ipairs(all) do
      if b.lang == "json" then
        local ok, t = pcall(cjson.decode, b.body)
        assert.is_true(ok, place(b.line) .. ": " .. tostring(t))
        assert.are.equal("number", type(t.uid))
        for name, series in pairs(t.metrics) do
          for _, point in ipairs(series) do
            assert.are.equal(2, #point, name)
            assert.are.equal(point[1], math.floor(point[1]), name .. ": a round number first")
          end
        end
      end
    end
  end)

  it("of shell commands use commands, scripts and options that exist", function()
    for _, b in ipairs(all) do
      if b.lang == "sh" then
        for _, words in ipairs(sh_commands(b.body)) do
          check_command(words, place(b.line))
        end
      end
    end
  end)

  it("of commands in the prose and the Commands table use options their help lists", function()
    for _, s in ipairs(spans(README)) do
      if PROGRAMS[s:match("^%S+")] then check_command(span_words(s), "`" .. s .. "`") end
    end
    for _, row in ipairs(rows(section("Commands"), "command")) do
      local cmd = row[1]:match("^`dpy%-lua (%l+)")
      cmd = SUBCOMMANDS[cmd] and cmd or nil
      local help = help_words(cmd)
      for _, s in ipairs(spans(table.concat(row, " "))) do
        for _, w in ipairs(span_words(s)) do
          if w:match("^%-") and (w:match("^%-%-%w") or w:match("^%-%a$") or not cmd) then
            assert.is_true(help[w] == true, string.format("`%s`: dpy-lua %s --help lists %s", s, cmd or "", w))
          end
        end
      end
    end
  end)

  it("name repository paths that exist", function()
    local texts = spans(README)
    for _, b in ipairs(all) do
      if b.lang == "sh" then texts[#texts + 1] = b.body end
    end
    for _, t in ipairs(texts) do
      for w in t:gsub("[%[%]'\"]", " "):gmatch("%S+") do
        local p = w:match("^(%l+/[%w_%./%-]*)$")
        if p and p:match("^configs/") or p and p:match("^scripts/") or p and p:match("^bench/")
           or p and p:match("^tests/") or p and p:match("^lua/") or p and p:match("^host/") then
          assert.is_true(repo_has(p), "README names " .. p)
        end
      end
    end
  end)

  it("and dpy-lua help name every environment variable the code reads", function()
    local code, help = sh(shell_quote(DPY_BIN) .. " help")
    assert.are.equal(0, code)
    local _, found = sh("grep -rhoE '(getenv|env)\\(?\"DPY_[A-Z_]+\"' " .. shell_quote(REPO .. "/lua") .. " "
                        .. shell_quote(REPO .. "/host"))
    local vars = {}
    for v in found:gmatch("DPY_[A-Z_]+") do vars[v] = true end
    assert.is_truthy(vars.DPY_THREADS, found)
    for v in pairs(vars) do
      assert.is_truthy(help:find(v, 1, true), "dpy-lua help names " .. v)
      assert.is_truthy(README:find(v, 1, true), "the README names " .. v)
    end
  end)

  it("of the entry commands exist as written, and CI runs the tests the README's way", function()
    local quick = section("Quick start (Debian 12, from the repository root)")
    assert.truthy(quick:find("scripts/dpy run configs/0_baseline.lua", 1, true))
    assert.truthy(quick:find("scripts/dpy test", 1, true))
    assert.is_true(repo_has("configs/0_baseline.lua"))
    assert.is_true(sh("test -x " .. shell_quote(REPO .. "/scripts/dpy")) == 0, "scripts/dpy is executable")
    assert.matches("\nscripts/dpy test\n", read_file(REPO .. "/.ci/run"))
  end)

  it("of the help and version commands run", function()
    local code, top = sh(BIN .. " --help")
    assert.are.equal(0, code)
    for _, h in ipairs { "-h", "help" } do
      local c, out = sh(BIN .. " " .. h)
      assert.are.equal(0, c, h)
      assert.are.equal(top, out, h)
    end
    for _, v in ipairs { "-v", "--version" } do
      local c, out = sh(BIN .. " " .. v)
      assert.are.equal(0, c, v)
      assert.matches("^dpy%-lua %d", out)
    end
    assert.are.equal(2, (sh(BIN .. " run")), "a usage error exits 2")
    -- report's line names what it writes, as the Commands table does: every plot and the page
    local report = assert(top:match("\n  report [^\n]*\n[^\n]*\n[^\n]*\n[^\n]*"), top)
    for _, what in ipairs { "round", "bytes", "time", "local steps", "loss", "report.html" } do
      assert.truthy(report:find(what, 1, true), what .. ": " .. report)
    end
  end)
end)

describe("the README's runs #e2e", function()
  local TINY = " rounds=1 local_steps=1 test_samples=200"   -- the README's runs take minutes

  it("of the Quick start runs (one round)", function()
    local dir = tmpdir()
    local code, out, err = sh("cd " .. shell_quote(REPO) .. " && " .. BIN .. " run configs/0_baseline.lua -q --out "
                              .. dir .. "/out" .. TINY)
    assert.are.equal(0, code, err)
    assert.matches("16 nodes", out)
    assert.matches("final test accuracy over 16 evaluated honest nodes: mean", out)
  end)

  it("quoted under Results prints what the README shows, and report says it too", function()
    local quoted
    for _, b in ipairs(blocks()) do
      if b.lang == "" and b.body:match("honest nodes:") then quoted = b end
    end
    local quoted_config = assert(section("Results"):match("e%.g%. for `(configs/[%w_]+%.lua)`"),
                          "Results names the config it quotes")
    local dir = tmpdir()
    local code, out, err = sh("cd " .. shell_quote(REPO) .. " && " .. BIN .. " run " .. quoted_config .. " -q --out "
                              .. dir .. "/out" .. TINY)
    assert.are.equal(0, code, err)
    for line in quoted.body:gmatch("[^\n]+") do
      local pattern = line:gsub("^%s+", ""):gsub("%p", "%%%0"):gsub("…", "[%%d.]+")
      assert.matches(pattern, out, nil, place(quoted.line))
    end
    local row = rows(section("Commands"), "command")
    local example
    for _, r in ipairs(row) do example = example or r[2]:match("`A: (honest nodes: [^`]+)`") end
    code, out, err = sh(BIN .. " report " .. dir .. "/out --out " .. dir .. "/plots")
    assert.are.equal(0, code, err)
    assert.truthy(out:find(assert(example), 1, true), out)
    assert.truthy(read_file(dir .. "/plots/report_accuracy_round.svg"))
    assert.truthy(read_file(dir .. "/plots/report_accuracy_bytes.svg"))
  end)

  it("of the custom example run as its two commands say (600 rows, 4 nodes, one round)", function()
    local dir = tmpdir()
    assert.are.equal(0, (sh("mkdir -p " .. dir .. "/configs/examples && cp -r "
                            .. shell_quote(REPO .. "/configs/examples/custom") .. " " .. dir .. "/configs/examples/"
                            .. " && rm -f " .. dir .. "/configs/examples/custom/data/*.csv")))
    local cmds
    for _, b in ipairs(blocks()) do
      if b.lang == "sh" and b.body:match("make_data") then cmds = sh_commands(b.body) end
    end
    assert.are.equal(2, #cmds)
    local extra = { " configs/examples/custom/data 600", " -q --out out nodes=4 rounds=1 local_steps=1" }
    for k, words in ipairs(cmds) do
      assert.are.equal("scripts/dpy", words[1])
      local line = table.concat(words, " ", 2) .. extra[k]
      local code, _, err = sh("cd " .. dir .. " && " .. BIN .. " " .. line)
      assert.are.equal(0, code, line .. ": " .. tostring(err))
    end
    assert.truthy(node_metrics(dir .. "/out", 0).test_accuracy)
  end)
end)

describe("the README's config tables", function()
  local text = section("Experiment configs")
  local table_rows = rows(text, "key")
  -- Defaults the code applies per mode rather than the schema: where, and as what text.
  local CODE_DEFAULTS = { eval_every = { value = 10, file = "lua/dpy/node.lua", text = "cfg.eval_every or 10" } }

  it("name config keys, with the schema's defaults", function()
    assert.is_true(#table_rows > 20)
    for _, row in ipairs(table_rows) do
      local keys = {}
      for k in row[1]:gmatch("`([%w_]+)`") do keys[#keys + 1] = k end
      local defaults = { row[2] }
      if #keys > 1 and row[2]:find(",") then
        defaults = {}
        for d in (row[2] .. ","):gmatch("%s*(.-)%s*,") do defaults[#defaults + 1] = d end
        assert.are.equal(#keys, #defaults, "row " .. row[1] .. ": one default per key")
      end
      for i, key in ipairs(keys) do
        local s = config.SCHEMA[key]
        assert.truthy(s, "README documents config key '" .. key .. "', which dpy.config.SCHEMA lacks")
        local shown = defaults[i] or defaults[1]
        local value, is_value = lua_value(shown:match("^`(.*)`$") or shown)
        if is_value and s.default == nil then
          local c = assert(CODE_DEFAULTS[key], "README shows a default for '" .. key .. "'; the schema has none")
          assert.are.equal(c.value, value)
          assert.truthy(read_file(REPO .. "/" .. c.file):find(c.text, 1, true), c.file .. " applies it")
        elseif is_value then
          assert.is_true(deep_equal(value, s.default),
                         string.format("'%s': README shows %s, the schema's default is %s", key, shown,
                                       require("dpy.options").show(s.default)))
          assert.is_nil(config.check(key, value))
        else
          assert.is_nil(s.default, string.format("'%s': README says '%s', the schema's default is %s", key,
                                                 shown, require("dpy.options").show(s.default)))
        end
      end
    end
  end)

  it("give the schema's defaults where the text says `key` (default X)", function()
    local count = 0
    for key, shown in text:gmatch("`([%w_]+)`[^`(|]-%(default `?([^`)]-)`?%)") do
      local s = config.SCHEMA[key]
      if s then
        count = count + 1
        assert.is_true(deep_equal(lua_value(shown), s.default), string.format("'%s' (default %s)", key, shown))
      end
    end
    assert.is_true(count >= 2, "found positive_classes' and peer_timeout's")
  end)

  it("document every config key", function()
    for key in pairs(config.SCHEMA) do
      assert.truthy(text:find("`" .. key .. "`", 1, true), "README's Experiment configs documents '" .. key .. "'")
    end
  end)

  it("show component entries and assignments that pass the config check", function()
    local count = 0
    for _, row in ipairs(table_rows) do
      local key = row[1]:match("^`([%w_]+)`$")
      local s = key and config.SCHEMA[key]
      if s and (s.kind or s.list_of) then
        for _, sp in ipairs(spans(row[3])) do
          if sp:match('^{ "') then
            local v = assert(lua_value(sp), sp)
            count = count + 1
            assert.is_nil(config.check(key, s.list_of and { v } or v, REPO), sp)
          end
        end
      end
    end
    for _, sp in ipairs(spans(text)) do
      local key, v = sp:match("^([%w_]+) = (.+)$")
      if key and config.SCHEMA[key] then
        count = count + 1
        local value, ok = lua_value(v)   -- a value that reads as false is still one
        assert(ok, sp)
        assert.is_nil(config.check(key, value), sp)
      end
    end
    for _, sp in ipairs(spans(section("Commands"))) do
      local o = sp:match("^'?(%l[%w_]*=[^']+)'?$")
      if o then
        count = count + 1
        local key, v = config.parse_override(o)
        assert.is_nil(config.check(key, v), sp)
      end
    end
    assert.is_true(count >= 10, "found the examples")
  end)

  it("quote the messages the checks give", function()
    local dir = tmpdir()
    local quoted = text:match("e%.g%. `(configs/x%.lua:%d+: [^`]+)`")
    local line, key = quoted:match(":(%d+): unknown config key '(%w+)'")
    write_file(dir .. "/x.lua", ("seed = 1\n"):rep(line - 1) .. key .. " = 2\n")
    local ok, err = pcall(config.load, dir .. "/x.lua")
    assert.is_false(ok)
    assert.are.equal(quoted:gsub("^configs/", ""), err:gsub("^.*/", ""))
    for _, sp in ipairs(spans(text)) do
      if sp:match("^sharing 'trimmed_mean': ") then
        assert.truthy(config.check("sharing", { "trimmed_mean", F = 1 }):find(sp, 1, true), sp)
      elseif sp:match("^option 'f' must be") then
        assert.truthy(config.check("sharing", { "trimmed_mean", f = 1.5 }):find(sp, 1, true), sp)
      end
    end
  end)
end)

describe("the README's Byzantine robustness section", function()
  it("quotes the messages the aggregators give", function()
    local aggregators, tensor = require "dpy.aggregators", require "dpy.tensor"
    local count = 0
    for _, sp in ipairs(spans(section("Byzantine robustness"))) do
      local rule, n, f = sp:match("^(%w+): n = (%d+), f = (%d+) is outside what it tolerates")
      local orule, opt, got = sp:match("^[%w.]-(%w+): option '?(%w+)'? must be .-, got (%S+)$")
      local ok, err
      if rule then
        ok, err = pcall(aggregators[rule], tensor.randn(tonumber(n), 3), { f = tonumber(f) })
      elseif orule then
        ok, err = pcall(aggregators[orule], tensor.randn(5, 3), { [opt] = tonumber(got) })
      end
      if rule or orule then
        count = count + 1
        assert.is_false(ok, sp)
        assert.are.equal(sp, err:gsub("^.-:%d+: ", ""), "the README quotes")
      end
    end
    assert.are.equal(2, count)
  end)
end)
