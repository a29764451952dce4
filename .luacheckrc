std = "lua54"
max_line_length = 120
files["tests"] = { std = "+busted", globals = { "DPY_BIN", "tmpdir", "write_file", "read_file", "sh", "shell_quote",
                                             "TINY_RUN", "run_config", "run_layouts", "node_metrics", "wait_exit", "REPO",
                                             "action_config", "wait_paused", "SSHD", "start_sshd", "stop_sshd" } }
files["tests/helpers/preload.lua"] = { allow_defined_top = true }
files["configs"] = { allow_defined_top = true, ignore = { "131" }, read_globals = { "include" } }   -- its sandbox
files["bench/op_lua.lua"] = { ignore = { "211/c" } }   -- the op's result is the point, not its use
