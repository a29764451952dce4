-- Runs busted inside dpy-lua, so specs see the real bindings:
--   dpy-lua tests/run_busted.lua [busted options] DIR
-- Specs tagged #gpu are excluded by the ctest command line; DPY_TEST_GPU=1 brings them back.
-- luacheck: globals arg
if os.getenv("DPY_TEST_GPU") == "1" then
  for i, a in ipairs(arg) do
    arg[i] = a:gsub("^(%-%-exclude%-tags=.*)gpu,?", "%1")
  end
end
require("busted.runner")({ standalone = false })
-- reached only when every test passed (a failure exits inside the runner)
if remove_tmpdirs then remove_tmpdirs() end
