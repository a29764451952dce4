/* l_host.c: dpy.host.core, what the Lua framework needs from the host: files, clocks, terminal,
** memory figures and versions. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dpy_core.h"
#include "dpy_lua.h"

/* The integer at arg, within lo..hi: a pid, descriptor or port past an int's range was cut to
** another one (kill(2^32) signalled process group 0, this one) */
static lua_Integer checkrange(lua_State *L, int arg, lua_Integer lo, lua_Integer hi, const char *what) {
    lua_Integer v = luaL_checkinteger(L, arg);
    if (v < lo || v > hi)
        luaL_argerror(L, arg, lua_pushfstring(L, "%s must be %I..%I, got %I", what, lo, hi, v));
    return v;
}

/* host.write_atomic(path, data) -> true | nil, err */
static int h_write_atomic(lua_State *L) {
    size_t len;
    const char *path = luaL_checkstring(L, 1);
    const char *data = luaL_checklstring(L, 2, &len);
    char err[512];
    if (dpy_write_atomic(path, data, len, err, sizeof err) != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* host.mkdir_p(path) -> true | nil, err */
static int h_mkdir_p(lua_State *L) {
    char err[512];
    if (dpy_mkdir_p(luaL_checkstring(L, 1), err, sizeof err) != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* host.cwd() -> the current directory | nil, err */
static int h_cwd(lua_State *L) {
    char buf[PATH_MAX];
    if (getcwd(buf, sizeof buf) == NULL)
        return luaL_fileresult(L, 0, ".");
    lua_pushstring(L, buf);
    return 1;
}

/* host.clock() -> seconds from a monotonic clock */
static int h_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    return 1;
}

/* host.isatty(fd) -> boolean */
static int h_isatty(lua_State *L) {
    lua_pushboolean(L, isatty((int)checkrange(L, 1, 0, INT_MAX, "a descriptor")));
    return 1;
}

/* host.memory() -> { lua_bytes, tensor_live, tensor_peak, rss, static_tls (bytes), keeps_freed, decay_ms } */
static int h_memory(lua_State *L) {
    dpy_state *st = dpy_state_of(L);
    long rss_pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        long size;
        if (fscanf(f, "%ld %ld", &size, &rss_pages) != 2)
            rss_pages = 0;
        fclose(f);
    }
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, (lua_Integer)st->lua_bytes);
    lua_setfield(L, -2, "lua_bytes");
    lua_pushinteger(L, (lua_Integer)st->tensor_live);
    lua_setfield(L, -2, "tensor_live");
    lua_pushinteger(L, (lua_Integer)st->tensor_peak);
    lua_setfield(L, -2, "tensor_peak");
    lua_pushinteger(L, (lua_Integer)rss_pages * sysconf(_SC_PAGESIZE));
    lua_setfield(L, -2, "rss");
    long tls = dpy_heap_static_tls();
    if (tls >= 0) {
        lua_pushinteger(L, tls);
        lua_setfield(L, -2, "static_tls");
    }
    lua_pushboolean(L, dpy_heap_keeps_freed());
    lua_setfield(L, -2, "keeps_freed");
    long decay;
    if (dpy_heap_decay_ms(&decay) == 0) {
        lua_pushinteger(L, decay);
        lua_setfield(L, -2, "decay_ms");
    }
    return 1;
}

/* host.versions() -> { torch, lua, cuda_devices, threads, allocator } */
static int h_versions(lua_State *L) {
    lua_createtable(L, 0, 5);
    lua_pushstring(L, dpy_heap_allocator());
    lua_setfield(L, -2, "allocator");
    lua_pushstring(L, dpy_torch_version());
    lua_setfield(L, -2, "torch");
    lua_pushstring(L, LUA_RELEASE);
    lua_setfield(L, -2, "lua");
    lua_pushinteger(L, dpy_torch_cuda_count());
    lua_setfield(L, -2, "cuda_devices");
    lua_pushinteger(L, dpy_torch_num_threads());
    lua_setfield(L, -2, "threads");
    return 1;
}

/* host.build() -> this build's fingerprint (16 hex digits) | nil, err */
static int h_build(lua_State *L) {
    char err[512];
    const char *id = dpy_build_id(err, sizeof err);
    if (!id) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushstring(L, id);
    return 1;
}

/* host.huge_pages(on) -> true | nil, err: whether this process takes transparent huge pages (once no
** start of its nodes goes on: heap.c) */
static int h_huge_pages(lua_State *L) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    if (dpy_heap_huge_pages(lua_toboolean(L, 1)) != 0)
        return luaL_fileresult(L, 0, "huge_pages");
    lua_pushboolean(L, 1);
    return 1;
}

/* host.set_threads(n): libtorch's intra-op threads for this process */
static int h_set_threads(lua_State *L) {
    lua_Integer n = checkrange(L, 1, 1, INT_MAX, "threads");
    if (dpy_torch_thread_room((int)n) != DPY_OK || dpy_torch_set_threads((int)n) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

/* host.spawn(argv, out_path [, {fd =, err =, dir =, input =}]) -> pid | nil, "what: why": runs argv[1]
** with stdout and stderr to out_path (stderr to the path err when given), stdin from the path input
** (else this process's), descriptor fd as its 3 (the others this process holds stay here), in the
** directory dir (out, err and input are named from here); spawn.c */
static int h_spawn(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    dpy_spawn_io io = {.out = luaL_checkstring(L, 2), .fd = -1};
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        for (lua_pushnil(L); lua_next(L, 3); lua_pop(L, 1)) {   /* a misspelt option is named */
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
            if (strcmp(k, "fd") && strcmp(k, "err") && strcmp(k, "dir") && strcmp(k, "input"))
                luaL_argerror(L, 3, lua_pushfstring(L, "unknown option '%s' (fd, err, dir, input)",
                                                    luaL_tolstring(L, -2, NULL)));
        }
        int in = lua_getfield(L, 3, "input");
        luaL_argcheck(L, in == LUA_TNIL || in == LUA_TSTRING, 3, "input must be a path");
        io.in = lua_tostring(L, -1);
        int isnum = 1;
        if (lua_getfield(L, 3, "fd") != LUA_TNIL)
            io.fd = (int)lua_tointegerx(L, -1, &isnum);
        luaL_argcheck(L, isnum, 3, "fd must be an integer");
        int t = lua_getfield(L, 3, "err");   /* the strings stay on the stack until we return */
        luaL_argcheck(L, t == LUA_TNIL || t == LUA_TSTRING, 3, "err must be a path");
        io.err = lua_tostring(L, -1);
        t = lua_getfield(L, 3, "dir");
        luaL_argcheck(L, t == LUA_TNIL || t == LUA_TSTRING, 3, "dir must be a path");
        io.dir = lua_tostring(L, -1);
    }
    int n = (int)luaL_len(L, 1);
    luaL_argcheck(L, n >= 1, 1, "empty argv");
    char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        argv[i] = (char *)luaL_checkstring(L, -1);
        lua_pop(L, 1);   /* the table keeps the string */
    }
    argv[n] = NULL;
    pid_t pid;
    const char *what = NULL;
    int rc = dpy_spawn(argv, &io, &pid, &what);
    if (rc != 0) {
        luaL_pushfail(L);
        if (what)
            lua_pushfstring(L, "%s: %s", what, strerror(rc));
        else
            lua_pushfstring(L, "fd %d: %s", io.fd, strerror(rc));
        return 2;
    }
    lua_pushinteger(L, pid);
    return 1;
}

/* host.wait(pid [, nohang]) -> exit code (128 + signal when killed) | nil when still running */
static int h_wait(lua_State *L) {
    pid_t pid = (pid_t)checkrange(L, 1, 1, INT_MAX, "a process id");   /* not a group, nor -1: any */
    int status;
    pid_t r;
    while ((r = waitpid(pid, &status, lua_toboolean(L, 2) ? WNOHANG : 0)) < 0 && errno == EINTR) {
    }
    if (r == 0) {
        lua_pushnil(L);
        return 1;
    }
    if (r < 0)
        return luaL_error(L, "waitpid(%d): %s", (int)pid, strerror(errno));
    lua_pushinteger(L, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 1;
}

/* host.kill(pid, signal): one process (0 and negative ids, process groups and every process, are
** refused) */
static int h_kill(lua_State *L) {
    pid_t pid = (pid_t)checkrange(L, 1, 1, INT_MAX, "a process id");
    int sig = lua_isnoneornil(L, 2) ? SIGTERM : (int)checkrange(L, 2, 0, SIGRTMAX, "a signal");
    kill(pid, sig);
    return 0;
}

/* host.sleep(seconds): 0 or less is no sleep; NaN or more than 10^9 s raises (a time past what a
** timespec holds was cast to a negative one, and slept not at all) */
static int h_sleep(lua_State *L) {
    double s = luaL_checknumber(L, 1);
    if (!(s <= 1e9))
        return luaL_error(L, "host.sleep: seconds must be a number in 0 .. 1e9, got %f", s);
    if (s <= 0)
        return 0;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return 0;
}

/* host.exe() -> the path of this dpy-lua binary */
static int h_exe(lua_State *L) {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return luaL_error(L, "cannot read /proc/self/exe");
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

/* atomic, not volatile sig_atomic_t: node threads read them while the handler writes them (a
** lock-free atomic is as safe in a handler) */
static atomic_int g_interrupted;
static atomic_int g_caught;   /* a bit per kind of ending signal caught once */

static void on_interrupt(int sig) {
    int bit = sig == SIGINT ? 1 : sig == SIGTERM ? 2 : sig == SIGHUP ? 4 : 0;
    if (bit && (atomic_fetch_or(&g_caught, bit) & bit)) {   /* the second of its kind ends the */
        dpy_write_atomic_drain();   /* process, once the files other threads are writing are whole */
        signal(sig, SIG_DFL);
        raise(sig);   /* delivered as this handler returns */
        return;
    }
    int none = 0;
    atomic_compare_exchange_strong(&g_interrupted, &none, sig);
}

/* sig's handler becomes sa's, unless the process was started ignoring sig (nohup: SIGHUP). */
static void catch_unless_ignored(int sig, const struct sigaction *sa) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
        sigaction(sig, sa, NULL);
}

/* host.catch_interrupt(): from now on the first SIGINT, SIGTERM and SIGHUP (a closed terminal)
** each set a flag instead of ending the process (a second of the same kind ends it, as in lua.c,
** once the files being written (dpy_write_atomic) are in place: no temporary file stays),
** and so does SIGPIPE (the pipe the output went to has closed: every later write fails instead,
** and is no reason to end before the run has stopped cleanly); a SIGHUP or SIGPIPE the process was
** started ignoring stays ignored. host.interrupted() -> the first signal's number, or false (a
** long loop polls it to stop cleanly). */
static int h_catch_interrupt(lua_State *L) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    catch_unless_ignored(SIGHUP, &sa);
    catch_unless_ignored(SIGPIPE, &sa);
    (void)L;
    return 0;
}

const atomic_int *dpy_host_interrupt_flag(void) { return &g_interrupted; }

void dpy_host_forget_interrupt(void) {
    atomic_store(&g_interrupted, 0);
    atomic_store(&g_caught, 0);
}

static int h_interrupted(lua_State *L) {
    int sig = atomic_load(&g_interrupted);
    if (sig)
        lua_pushinteger(L, sig);
    else
        lua_pushboolean(L, 0);
    return 1;
}

/* A socket bound to address:port as a listener binds it (SO_REUSEADDR), listening if asked:
** its descriptor (close-on-exec), or -1 and errno's message pushed */
static int bound_socket(lua_State *L, int listening) {
    const char *address = luaL_checkstring(L, 1);
    char port[16];
    snprintf(port, sizeof port, "%d", (int)checkrange(L, 2, 0, 65535, "a port"));
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int gai = getaddrinfo(address, port, &hints, &res);
    if (gai != 0) {
        lua_pushstring(L, gai_strerror(gai));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    int ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
             bind(fd, res->ai_addr, res->ai_addrlen) == 0 && (!listening || listen(fd, 128) == 0);
    int e = errno;
    freeaddrinfo(res);
    if (ok)
        return fd;
    if (fd >= 0)
        close(fd);
    lua_pushstring(L, strerror(e));
    return -1;
}

/* host.port_free(address, port) -> whether a socket could listen on address:port now (it is
** bound, as a listener binds it, and closed): true, or false and why */
static int h_port_free(lua_State *L) {
    int fd = bound_socket(L, 0);
    if (fd < 0) {
        lua_pushboolean(L, 0);
        lua_insert(L, -2);
        return 2;
    }
    close(fd);
    lua_pushboolean(L, 1);
    return 1;
}

/* host.listen(address, port) -> fd | nil, err: a socket listening on address:port, held for a
** child process (host.spawn's fds) so that no other program takes the port before the child
** starts; host.close(fd) lets it go here */
static int h_listen(lua_State *L) {
    int fd = bound_socket(L, 1);
    if (fd < 0) {
        luaL_pushfail(L);
        lua_insert(L, -2);
        return 2;
    }
    lua_pushinteger(L, fd);
    return 1;
}

static int h_close(lua_State *L) {
    close((int)checkrange(L, 1, 0, INT_MAX, "a descriptor"));
    return 0;
}

/* host.open_files([want]) -> soft, hard: this process's limit on open descriptors (ulimit -n),
** math.maxinteger for none; with want, a soft limit below it is first raised towards it, as far
** as the hard limit lets (an unprivileged process may) */
static int h_open_files(lua_State *L) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return luaL_error(L, "getrlimit: %s", strerror(errno));
    if (!lua_isnoneornil(L, 1)) {
        lua_Integer want = luaL_checkinteger(L, 1);
        if (want > 0 && r.rlim_cur != RLIM_INFINITY && (rlim_t)want > r.rlim_cur) {
            struct rlimit up = r;
            up.rlim_cur = r.rlim_max == RLIM_INFINITY || (rlim_t)want < r.rlim_max ? (rlim_t)want : r.rlim_max;
            if (setrlimit(RLIMIT_NOFILE, &up) == 0)
                r = up;
        }
    }
    lua_pushinteger(L, r.rlim_cur == RLIM_INFINITY ? LUA_MAXINTEGER : (lua_Integer)r.rlim_cur);
    lua_pushinteger(L, r.rlim_max == RLIM_INFINITY ? LUA_MAXINTEGER : (lua_Integer)r.rlim_max);
    return 2;
}

/* host.module_file(name) -> the file require loads the framework module name (dpy.*) from, or nil;
** what a node's registry asks for each of its components: no file opened once found (chunks.c) */
static int h_module_file(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_argcheck(L, strncmp(name, "dpy.", 4) == 0, 1, "not a framework module (dpy.*)");
    dpy_chunks_module_file(L, name);
    return 1;
}

/* host.pid() -> this process's id */
static int h_pid(lua_State *L) {
    lua_pushinteger(L, getpid());
    return 1;
}

static const luaL_Reg functions[] = {
    {"spawn", h_spawn}, {"wait", h_wait}, {"kill", h_kill}, {"sleep", h_sleep}, {"exe", h_exe},
    {"pid", h_pid}, {"open_files", h_open_files}, {"port_free", h_port_free}, {"listen", h_listen}, {"close", h_close}, {"catch_interrupt", h_catch_interrupt},
    {"interrupted", h_interrupted}, {"write_atomic", h_write_atomic}, {"cwd", h_cwd}, {"mkdir_p", h_mkdir_p}, {"clock", h_clock},
    {"isatty", h_isatty}, {"memory", h_memory}, {"versions", h_versions}, {"build", h_build},
    {"set_threads", h_set_threads}, {"huge_pages", h_huge_pages}, {"module_file", h_module_file}, {NULL, NULL}};

int luaopen_dpy_host_core(lua_State *L) {
    luaL_newlib(L, functions);
    return 1;
}
