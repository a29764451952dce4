/* l_host.c: dpy.host.core, what the Lua framework needs from the host: files, clocks, terminal,
** memory figures and versions. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpy_core.h"
#include "dpy_lua.h"

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

/* host.clock() -> seconds from a monotonic clock */
static int h_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    return 1;
}

/* host.isatty(fd) -> boolean */
static int h_isatty(lua_State *L) {
    lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
    return 1;
}

/* host.memory() -> { lua_bytes, tensor_live, tensor_peak, rss } (bytes) */
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
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)st->lua_bytes);
    lua_setfield(L, -2, "lua_bytes");
    lua_pushinteger(L, (lua_Integer)st->tensor_live);
    lua_setfield(L, -2, "tensor_live");
    lua_pushinteger(L, (lua_Integer)st->tensor_peak);
    lua_setfield(L, -2, "tensor_peak");
    lua_pushinteger(L, (lua_Integer)rss_pages * sysconf(_SC_PAGESIZE));
    lua_setfield(L, -2, "rss");
    return 1;
}

/* host.versions() -> { torch, lua, cuda_devices, threads } */
static int h_versions(lua_State *L) {
    lua_createtable(L, 0, 4);
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

/* host.set_threads(n): libtorch's intra-op threads for this process */
static int h_set_threads(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 1, 1, "threads must be >= 1");
    if (dpy_torch_init((int)n) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

static const luaL_Reg functions[] = {
    {"write_atomic", h_write_atomic}, {"mkdir_p", h_mkdir_p}, {"clock", h_clock},
    {"isatty", h_isatty}, {"memory", h_memory}, {"versions", h_versions},
    {"set_threads", h_set_threads}, {NULL, NULL}};

int luaopen_dpy_host_core(lua_State *L) {
    luaL_newlib(L, functions);
    return 1;
}
