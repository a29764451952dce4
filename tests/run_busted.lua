-- Runs busted inside dpy-lua, so specs see the real bindings: dpy-lua tests/run_busted.lua [busted options] DIR
require("busted.runner")({ standalone = false })
