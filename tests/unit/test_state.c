/* test_state.c: the run's interrupt of a node's Lua state (host/lua/state.c). It stops the code
** running; one that comes while an error is being handled keeps that error; and once the node's
** last protected call has returned, none raises again, so that what the node writes last (its
** metrics, its log's last line) is written whole. */
#include <lauxlib.h>
#include <lua.h>

#include "check.h"
#include "dpy_lua.h"

/* as the signal handler does, while this function runs: then it fails */
static int interrupted_then_fails(lua_State *L) {
    dpy_state_interrupt(L);
    return luaL_error(L, "boom");
}

static int interrupt_me(lua_State *L) {
    dpy_state_interrupt(L);
    return 0;
}

static int last_again(lua_State *L) {
    lua_pushcfunction(L, interrupt_me);
    return dpy_state_pcall_last(L, 0, 0);
}

/* Runs code (a chunk returning a function) protected by call: its status, the message left in msg */
static int run(lua_State *L, const char *code, int (*call)(lua_State *, int, int), char *msg, size_t len) {
    if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        snprintf(msg, len, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return -1;
    }
    lua_pushcfunction(L, interrupt_me);
    int status = call(L, 1, 0);
    snprintf(msg, len, "%s", status == LUA_OK ? "" : lua_tostring(L, -1));
    if (status != LUA_OK)
        lua_pop(L, 1);
    return status;
}

/* Work after the call: the sum 1..100, or -1 when it was interrupted */
static lua_Integer after(lua_State *L) {
    if (luaL_loadstring(L, "local s = 0 for i = 1, 100 do s = s + i end return s") != LUA_OK ||
        lua_pcall(L, 0, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return -1;
    }
    lua_Integer s = lua_tointeger(L, -1);
    lua_pop(L, 1);
    return s;
}

/* A state with the globals fails (interrupt, then an error "boom") and c_function (interrupt) */
static lua_State *open_state(dpy_state *st) {
    char err[256];
    memset(st, 0, sizeof *st);
    lua_State *L = dpy_state_open(st, NULL, err, sizeof err);
    if (!L) {
        fprintf(stderr, "dpy_state_open: %s\n", err);
        exit(1);
    }
    lua_pushcfunction(L, interrupted_then_fails);
    lua_setglobal(L, "fails");
    lua_pushcfunction(L, interrupt_me);
    lua_setglobal(L, "c_function");
    return L;
}

int main(void) {
    dpy_state st;
    char msg[4096];

    /* it stops the code running */
    lua_State *L = open_state(&st);
    CHECK(run(L, "return function(interrupt) interrupt() while true do end end", dpy_state_pcall_last, msg,
              sizeof msg) == LUA_ERRRUN);
    CHECK_CONTAINS(msg, "interrupted!");
    lua_close(L);

    /* one that comes while the node's error is handled keeps the error; nothing raises after */
    L = open_state(&st);
    CHECK(run(L, "return function() fails() end", dpy_state_pcall_last, msg, sizeof msg) == LUA_ERRRUN);
    CHECK_CONTAINS(msg, "boom");
    CHECK(strstr(msg, "interrupted!") == NULL);
    CHECK(after(L) == 5050);
    lua_close(L);

    /* ... and so does one whose function closes a to-be-closed value (a tensor's __close, in C) as
    ** the error unwinds, and one whose error object's __tostring the handler calls */
    L = open_state(&st);
    CHECK(run(L, "return function() local x <close> = setmetatable({}, { __close = c_function }) fails() end",
              dpy_state_pcall_last, msg, sizeof msg) == LUA_ERRRUN);
    CHECK_CONTAINS(msg, "boom");
    lua_close(L);
    L = open_state(&st);
    CHECK(run(L, "return function() error(setmetatable({}, { __tostring = function() c_function() return 'own' end })) end",
              dpy_state_pcall, msg, sizeof msg) == LUA_ERRRUN);
    CHECK_CONTAINS(msg, "own");
    lua_close(L);

    /* one that comes once the last call returned: nothing raises; and the last call runs once */
    L = open_state(&st);
    CHECK(run(L, "return function() end", dpy_state_pcall_last, msg, sizeof msg) == LUA_OK);
    dpy_state_interrupt(L);
    CHECK(after(L) == 5050);
    lua_pushcfunction(L, last_again);
    CHECK(lua_pcall(L, 0, 0, 0) == LUA_ERRRUN);
    CHECK_CONTAINS(lua_tostring(L, -1), "the node's last work runs once");
    lua_pop(L, 1);
    lua_close(L);

    /* any other protected call keeps its error too, and the interrupt stays for the code after */
    L = open_state(&st);
    CHECK(run(L, "return function() fails() end", dpy_state_pcall, msg, sizeof msg) == LUA_ERRRUN);
    CHECK_CONTAINS(msg, "boom");
    CHECK(after(L) == -1);
    lua_close(L);
    return check_report("state");
}
