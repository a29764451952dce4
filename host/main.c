/*
** main.c: the dpy-lua command. With a script (or -e, -l, -i, -) it behaves like the lua
** interpreter, with the dpy modules and bindings available; the subcommands (run, node,
** dispatch, report) are written in Lua (dpy.cli); repl is repl.c.
** Exit codes: 0 success, 1 runtime error, 2 usage error.
*/
#define _DEFAULT_SOURCE
#include <limits.h>
#include <libgen.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dpy_lua.h"
#include "repl.h"

#define EXIT_USAGE 2

static const char USAGE[] =
    "usage: dpy-lua [options] [SCRIPT.lua [args...]]\n"
    "       dpy-lua COMMAND [args...]\n"
    "\n"
    "commands:\n"
    "  run CONFIG.lua|RUN_DIR [--seed N] [--out DIR] [--force] [--paused] [-q] [KEY=VALUE...]\n"
    "                           run an experiment (or rerun a run directory)\n"
    "  run --resume RUN_DIR       continue a run from its checkpoints (checkpoint_every)\n"
    "  node CONFIG.lua --process P --dir DIR [--run-id N] [--seed N] [KEY=VALUE...]\n"
    "                           host one process's nodes of a run (for launchers)\n"
    "  repl [CONFIG.lua [--uid U] [KEY=VALUE...]]\n"
    "                           interactive prompt with the dpy modules loaded; with a config,\n"
    "                           node U (default 0) built and bound to the global 'node'\n"
    "  attach RUN_DIR [--uid U] [--ssh CMD]\n"
    "                           a prompt on node U of a running experiment: look inside, change\n"
    "                           it, pause and step the run\n"
    "  dispatch CONFIG.lua|RUN_DIR [--remotes remotes.lua] [--jobs N] [--processes N] [--out DIR]\n"
    "           [--force] [--seed N] [--resume] [--accept-new-host-keys] [--paused] [-q] [KEY=VALUE...]\n"
    "                           run an experiment's processes on remote machines over SSH\n"
    "  report RUN_DIR... [--out DIR] [--format svg|png]\n"
    "                           compare runs: accuracy, bytes, epsilon, seconds per round; plots of\n"
    "                           accuracy against round, bytes, time and local steps, and of loss\n"
    "                           (gnuplot), and report.html with all of it\n"
    "  help [COMMAND]           this text, or COMMAND's options (as COMMAND --help)\n"
    "\n"
    "options (as the lua interpreter):\n"
    "  -e STAT    execute string STAT\n"
    "  -l MOD     require library MOD into global MOD (-l G=MOD: into global G)\n"
    "  -i         enter the interactive prompt after running SCRIPT\n"
    "  -v, --version  print the versions of dpy-lua, Lua and libtorch, the build (a hash of its\n"
    "                 C and Lua sources: processes of one run must agree) and the devices\n"
    "  -h, --help     print this text\n"
    "  --         stop handling options\n"
    "  -          execute stdin and stop handling options\n"
    "\n"
    "environment:\n"
    "  DPY_LUA_PATH   directory holding dpy/ (default: lua/ next to the binary's directory)\n"
    "  DPY_THREADS    libtorch intra-op threads (default: the number of cores)\n"
    "  DPY_CACHE_DIR  where gzipped datasets are kept decompressed (default:\n"
    "                 $XDG_CACHE_HOME/dpy-lua, else ~/.cache/dpy-lua; \"\": none)\n"
    "  DPY_PROGRESS_SECONDS  least seconds between two progress lines where stderr is\n"
    "                 not a terminal (default 10)\n"
    "  DPY_HOST       the address this machine's processes advertise under mpirun/Slurm\n"
    "  DPY_RENDEZVOUS_TIMEOUT  seconds the ranks of mpirun/Slurm wait for each other\n"
    "  DPY_LAUNCH_ID  names one launch of mpirun/Slurm for its ranks' rendezvous (default:\n"
    "                 the launcher's job and step ids)\n"
    "  DPY_ATTACH_HOST  the name other hosts reach this machine's processes by, for attach\n"
    "                 (default: its hostname)\n"
    "  DPY_FORK       0: start a run's processes by executing dpy-lua again instead of\n"
    "                 forking them from the launcher (default: forked, 0.6-0.9 s sooner)\n"
    "  DPY_ATTACH_FRAME_SECONDS  the most seconds a reply to an attach client takes to go\n"
    "                 out before its session is closed (default 30)\n"
    "\n"
    "exit status: 0 success, 1 runtime error, 2 usage error\n";

static const char *const COMMANDS[] = {"run", "node", "repl", "attach", "dispatch", "report", "help", NULL};

static int is_command(const char *s) {
    for (int i = 0; COMMANDS[i]; i++)
        if (strcmp(s, COMMANDS[i]) == 0)
            return 1;
    return 0;
}

/* Levenshtein distance of two short strings (at most 63 bytes considered). */
static int distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return 99;
    int d[64][64];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* The command within two edits of s, if any. */
static const char *nearest_command(const char *s) {
    const char *best = NULL;
    int bd = 3;
    for (int i = 0; COMMANDS[i]; i++) {
        int d = distance(s, COMMANDS[i]);
        if (d < bd)
            bd = d, best = COMMANDS[i];
    }
    return best;
}

static lua_State *g_L;   /* for the SIGINT handler, and the thread that runs it */
static pthread_t g_runner;
static const char *g_lua_dir;

static void on_sigint(int sig) {
    if (dpy_state_interrupt_signal(g_L, g_runner, sig))
        signal(sig, SIG_DFL);   /* a second Ctrl-C kills, as in lua.c */
}

/* Runs the function on the stack (with nargs) under a traceback, Ctrl-C interrupting it; an error
** stays on the stack. */
static int interruptible_call(lua_State *L, int nargs, int nres) {
    g_L = L, g_runner = pthread_self();
    signal(SIGINT, on_sigint);
    int status = dpy_state_pcall(L, nargs, nres);
    signal(SIGINT, SIG_DFL);
    lua_sethook(L, NULL, 0, 0);   /* a Ctrl-C held back while its error was handled was for this call */
    return status;
}

/* Prints and pops the error a call left, if it failed. */
static int report(lua_State *L, int status) {
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "dpy-lua: %s\n", msg ? msg : "(error object is not a string)");
        fflush(stderr);
        lua_pop(L, 1);
    }
    return status;
}

/* Runs the function on the stack (with nargs) under a traceback; reports errors on stderr. */
static int docall(lua_State *L, int nargs, int nres) {
    return report(L, interruptible_call(L, nargs, nres));
}

/* The directory holding dpy/init.lua: $DPY_LUA_PATH, else lua/ beside the binary's dir. */
static const char *find_lua_dir(char *buf, size_t len) {
    const char *env = getenv("DPY_LUA_PATH");
    if (env && *env) {   /* a copy: a forked child's title overwrites the environment (spawn.c) */
        snprintf(buf, len, "%s", env);
        return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    const char *dir = dirname(exe);
    static const char *const candidates[] = {"/../lua", "/lua", "/../share/dpy-lua/lua"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        char probe[PATH_MAX + 64];
        snprintf(buf, len, "%s%s", dir, candidates[i]);
        snprintf(probe, sizeof probe, "%s/dpy/init.lua", buf);
        struct stat st;
        if (stat(probe, &st) == 0) {
            char *real = realpath(buf, NULL);
            if (real) {
                snprintf(buf, len, "%s", real);
                free(real);
            }
            return buf;
        }
    }
#ifdef DPY_SOURCE_LUA_DIR
    struct stat st;
    if (stat(DPY_SOURCE_LUA_DIR "/dpy/init.lua", &st) == 0) {   /* the source tree it was built from */
        snprintf(buf, len, "%s", DPY_SOURCE_LUA_DIR);
        return buf;
    }
#endif
    return NULL;
}

static void print_version(void) {
    int devices = dpy_torch_cuda_count();
    char err[512];
    const char *build = dpy_build_id(err, sizeof err);
    printf("dpy-lua %s\nbuild %s%s%s\n%s\nlibtorch %s\ndevices: cpu (%d threads)", DPY_VERSION,
           build ? build : "unknown (", build ? "" : err, build ? "" : ")", LUA_RELEASE,
           dpy_torch_version(), dpy_torch_num_threads());
    for (int i = 0; i < devices; i++)
        printf(", cuda:%d", i);
    printf("\n");
}

/* arg table as lua.c's createargtable: script at 0, its arguments 1.., options below 0. */
static void create_arg_table(lua_State *L, char **argv, int argc, int script) {
    if (script == argc)
        script = 0;
    lua_createtable(L, argc - script - 1, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

/* Runs a chunk that luaL_load* left on the stack, or reports why it did not load. */
static int run_chunk(lua_State *L, int status) {
    if (status == LUA_OK)
        return docall(L, 0, 0);
    fprintf(stderr, "dpy-lua: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    return status;
}

/* Calls require("dpy.cli")[fn] with the values on the stack (nargs); leaves nres results. */
/* Pushes dpy.cli's function fn: LUA_OK, or an error said and nothing pushed. A Lua tree whose
** dpy.cli returns no module (one broken midway through an edit) is said so, not indexed blindly
** (outside any pcall: a panic). */
static int push_cli(lua_State *L, const char *fn) {
    lua_getglobal(L, "require");
    lua_pushstring(L, "dpy.cli");
    if (docall(L, 1, 1) != LUA_OK)
        return LUA_ERRRUN;
    if (!lua_istable(L, -1)) {
        const char *dir = dpy_lua_dir();
        fprintf(stderr, "dpy-lua: dpy.cli (%s/dpy/cli.lua) gave no module table (a %s): is the Lua tree whole?\n",
                dir ? dir : "?", luaL_typename(L, -1));
        lua_pop(L, 1);
        return LUA_ERRRUN;
    }
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    return LUA_OK;
}

static int call_cli(lua_State *L, const char *fn, int nargs, int nres) {
    if (push_cli(L, fn) != LUA_OK) {
        lua_pop(L, nargs);
        return -1;
    }
    lua_insert(L, -1 - nargs);
    return docall(L, nargs, nres);
}

/* Runs the script; a file that only assigns config keys, or calls a config's include, is a
** config run by mistake: it says so (exit 2 as a usage error) instead of ending silently or with
** the error. */
static int run_script(lua_State *L, char **argv, int argc, int script, int *usage) {
    const char *fname = argv[script];
    if (strcmp(fname, "-") == 0 && strcmp(argv[script - 1], "--") != 0)
        fname = NULL;   /* stdin */
    int status = luaL_loadfile(L, fname);
    if (status != LUA_OK)
        return run_chunk(L, status);
    int before = 0;
    if (fname && call_cli(L, "globals", 0, 1) == LUA_OK)   /* the globals the script may add to */
        before = luaL_ref(L, LUA_REGISTRYINDEX);
    int n = argc - script - 1;
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (int i = 1; i <= n; i++)
        lua_pushstring(L, argv[script + i]);
    status = interruptible_call(L, n, 0);
    if (before) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, before);
        lua_pushstring(L, fname);
        if (status != LUA_OK)
            lua_pushvalue(L, -3);   /* the error */
        if (call_cli(L, "config_hint", status == LUA_OK ? 2 : 3, 1) == LUA_OK) {   /* else nothing pushed */
            if (lua_isstring(L, -1)) {
                fprintf(stderr, "dpy-lua: %s\n", lua_tostring(L, -1));
                *usage = 1;
                if (status != LUA_OK) {   /* said instead of the error */
                    lua_remove(L, -2);
                    status = LUA_OK;
                }
            }
            lua_pop(L, 1);
        }
        luaL_unref(L, LUA_REGISTRYINDEX, before);
    }
    return report(L, status);
}

/* Calls require("dpy.cli").main(command, args...) and returns its exit code. */
static int run_cli(lua_State *L, char **argv, int argc, int first) {
    if (push_cli(L, "main") != LUA_OK)
        return 1;
    int n = argc - first;
    luaL_checkstack(L, n + 3, "too many arguments");
    for (int i = first; i < argc; i++)
        lua_pushstring(L, argv[i]);
    if (docall(L, n, 1) != LUA_OK)
        return 1;
    int code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
    return code;
}

/* Handles the lua-like options; returns the exit code. */
static int run_interpreter(lua_State *L, char **argv, int argc) {
    int script = 0, interactive = 0, has_e = 0, version = 0, stdin_script = 0;
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-')
            break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-") == 0) {
            stdin_script = 1;
            break;
        }
        if (strcmp(a, "-i") == 0) {
            interactive = 1;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            version = 1;
        } else if (strcmp(a, "-e") == 0 || strcmp(a, "-l") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dpy-lua: '%s' needs an argument\n%s", a, USAGE);
                return EXIT_USAGE;
            }
            has_e |= a[1] == 'e';
            i++;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else {
            fprintf(stderr, "dpy-lua: unknown option '%s'\n%s", a, USAGE);
            return EXIT_USAGE;
        }
    }
    script = i < argc ? i : 0;
    create_arg_table(L, argv, argc, script ? script : argc);
    if (version)
        print_version();
    /* -e and -l, in order */
    for (int j = 1; j < (script ? script : argc); j++) {
        if (strcmp(argv[j], "-e") == 0) {
            if (run_chunk(L, luaL_loadbuffer(L, argv[j + 1], strlen(argv[j + 1]), "=(command line)")) != LUA_OK)
                return 1;
            j++;
        } else if (strcmp(argv[j], "-l") == 0) {
            /* -l mod, or -l g=mod as lua 5.4 has it: the module into global g */
            const char *arg = argv[j + 1], *eq = strchr(arg, '=');
            const char *mod = eq ? eq + 1 : arg;
            lua_getglobal(L, "require");
            lua_pushstring(L, mod);
            if (docall(L, 1, 1) != LUA_OK)
                return 1;
            lua_pushlstring(L, arg, eq ? (size_t)(eq - arg) : strlen(arg));
            lua_insert(L, -2);
            lua_setglobal(L, lua_tostring(L, -2));
            lua_pop(L, 1);
            j++;
        } else if (strcmp(argv[j], "--") == 0 || strcmp(argv[j], "-") == 0) {
            break;
        }
    }
    int usage = 0;
    if (script && run_script(L, argv, argc, script, &usage) != LUA_OK)
        return 1;
    if (usage)
        return EXIT_USAGE;
    if (interactive)
        return dpy_repl(L);
    if (!script && !has_e && !version) {
        if (stdin_script || !isatty(0)) {
            if (run_chunk(L, luaL_loadfile(L, NULL)) != LUA_OK)
                return 1;
        } else {
            return dpy_repl(L);
        }
    }
    return 0;
}

/*
** libtorch allocates and frees the same large buffers every training step (im2col, activations,
** gradients). With glibc's defaults those above the mmap threshold are mapped and unmapped each
** time, and the page faults cost more than the arithmetic (3x slower steps, measured in bench/).
** Keep them in the heap instead, and give memory back to the system only past 256 MiB free.
** (For glibc, in sanitizer builds; the normal build runs on jemalloc, configured in launch.c.)
*/
static void tune_malloc(void) {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

/* Runs the command line on a fresh Lua state (main's, and a forked child's: spawn.c). */
static int run_command(int argc, char **argv) {
    static dpy_state st;
    st = (dpy_state){.uid = -1};
    char err[1024];
    lua_State *L = dpy_state_open(&st, g_lua_dir, err, sizeof err);
    if (L == NULL) {
        fprintf(stderr, "dpy-lua: %s\n", err);
        return 1;
    }
    int code;
    const char *cmd = argc > 1 ? argv[1] : "";
    /* A run's processes give back what their nodes' start freed (the decay of malloc_conf); a
    ** script or the REPL keeps what it frees for its next steps, as a run's rounds do: under the
    ** decay a DP-SGD step took 1.1x and per-sample gradients 1.17x (bench/dpsgd.lua). Set here, not
    ** inherited: a child forked from a script (spawn.c) may run a run's command. */
    dpy_heap_decay_by_default(is_command(cmd) && strcmp(cmd, "repl") != 0);
    if (strcmp(cmd, "help") == 0 && argc > 2 && is_command(argv[2])) {
        char *help_argv[] = {argv[0], argv[2], "--help"};   /* help COMMAND: COMMAND --help */
        if (strcmp(argv[2], "repl") == 0) {
            create_arg_table(L, help_argv, 3, 1);
            code = dpy_repl(L);
        } else {
            code = run_cli(L, help_argv, 3, 1);
        }
    } else if (strcmp(cmd, "help") == 0) {
        if (argc > 2)
            fprintf(stderr, "dpy-lua help: no command '%s'\n", argv[2]);
        fputs(USAGE, argc > 2 ? stderr : stdout);
        code = argc > 2 ? EXIT_USAGE : 0;
    } else if (strcmp(cmd, "repl") == 0) {
        create_arg_table(L, argv, argc, 1);   /* arg[1..] = what follows "repl" */
        code = dpy_repl(L);
    } else if (strcmp(cmd, "run") == 0 || strcmp(cmd, "node") == 0 ||
               strcmp(cmd, "report") == 0 || strcmp(cmd, "dispatch") == 0 || strcmp(cmd, "attach") == 0) {
        code = run_cli(L, argv, argc, 1);
    } else if (cmd[0] && cmd[0] != '-' && !strchr(cmd, '.') && !strchr(cmd, '/') &&
               access(cmd, F_OK) != 0) {   /* neither a command nor a script */
        const char *near = nearest_command(cmd);
        fprintf(stderr, "dpy-lua: no command or file '%s'%s%s%s (dpy-lua help lists the commands)\n",
                cmd, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        code = EXIT_USAGE;
    } else {
        code = run_interpreter(L, argv, argc);
    }
    lua_close(L);   /* every __gc runs while libtorch is alive; dpy_exit flushes stdio */
    return code;
}

/* Under an address-space limit (ulimit -v; a batch system's h_vmem) a library may crash where an
** allocation was refused (oneDNN, building a convolution, dereferences it): the crash then names
** the limit, before the signal ends the process as it would have. */
static char g_crash_note[256];
static size_t g_crash_note_len;

static void on_crash(int sig) {
    ssize_t w = write(STDERR_FILENO, g_crash_note, g_crash_note_len);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void note_crashes_under_a_memory_limit(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY)
        return;
    int n = snprintf(g_crash_note, sizeof g_crash_note,
                     "dpy-lua: crashed under an address-space limit of %llu MiB (ulimit -v): libtorch's "
                     "libraries may crash when an allocation is refused; raise the limit, or run fewer nodes "
                     "a process\n",
                     (unsigned long long)(r.rlim_cur >> 20));
    if (n <= 0 || (size_t)n >= sizeof g_crash_note)
        return;
    g_crash_note_len = (size_t)n;
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
}

/* The environment's numeric settings, checked once at start: a value that was no such number fell
** back to its default without a word (DPY_THREADS=abc ran on every core, a rendezvous timeout of -1
** gave up at once). Empty is unset. The Lua modules and attach.c read them after this. */
static const struct {
    const char *name;
    double lo, hi;
    int lo_open, whole;
    const char *what;
} ENV_NUMBERS[] = {
    {"DPY_THREADS", 1, 4096, 0, 1, "a whole number from 1 to 4096 (unset: one per core)"},
    {"DPY_PROGRESS_SECONDS", 0, 1e9, 0, 0, "a number of seconds >= 0 and <= 1e9 (unset: 10)"},
    {"DPY_RENDEZVOUS_TIMEOUT", 0, 1e9, 1, 0, "a number of seconds > 0 and <= 1e9 (unset: 120)"},
    {"DPY_ATTACH_FRAME_SECONDS", 0, 1e9, 1, 0, "a number of seconds > 0 and <= 1e9 (unset: 30)"},
    {"DPY_FORK", 0, 1, 0, 1, "0 or 1 (unset: 1)"},
};

static int env_numbers_ok(void) {
    for (size_t i = 0; i < sizeof ENV_NUMBERS / sizeof ENV_NUMBERS[0]; i++) {
        const char *v = getenv(ENV_NUMBERS[i].name);
        if (!v || !v[0])
            continue;
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || !(ENV_NUMBERS[i].lo_open ? x > ENV_NUMBERS[i].lo : x >= ENV_NUMBERS[i].lo) ||
            !(x <= ENV_NUMBERS[i].hi) || (ENV_NUMBERS[i].whole && x != (double)(long)x)) {
            fprintf(stderr, "dpy-lua: %s=%s: not %s\n", ENV_NUMBERS[i].name, v, ENV_NUMBERS[i].what);
            return 0;
        }
    }
    return 1;
}

/* The program: launch.c loads this library and calls it. */
int dpy_main(int argc, char **argv) {
    tune_malloc();
    note_crashes_under_a_memory_limit();
    static char dirbuf[PATH_MAX];
    g_lua_dir = find_lua_dir(dirbuf, sizeof dirbuf);
    if (g_lua_dir == NULL) {
        fprintf(stderr, "dpy-lua: cannot find the dpy Lua modules (lua/dpy/init.lua next to the "
                        "binary's directory); set DPY_LUA_PATH\n");
        return 1;
    }
    if (!env_numbers_ok())
        return 2;
    /* one intra-op thread per core unless told otherwise; set once, before any work */
    const char *threads = getenv("DPY_THREADS");
    int nthreads = threads && threads[0] ? atoi(threads) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (dpy_torch_init(nthreads) != DPY_OK) {
        fprintf(stderr, "dpy-lua: %s\n", dpy_torch_errmsg());
        return 1;
    }
    dpy_set_lua_dir(g_lua_dir);
    dpy_spawn_init(argc, argv, run_command);
    int code = run_command(argc, argv);
    /* Without the libraries' exit handlers: once the Lua state is closed nothing of ours is left
    ** to clean up, and libtorch's static destructors unregister its thousands of operators one
    ** by one (0.1 s of CPU a process; in a forked child, whose registry is the parent's pages
    ** copied on write, several times that). */
    dpy_exit(code);
}
