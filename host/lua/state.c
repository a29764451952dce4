/*
** state.c: a Lua state as dpy-lua makes it (STYLE.md 4.6): a counting allocator with an optional
** cap, the dpy_state record in the extra space, the bindings preloaded, boot under pcall with a
** traceback, and an interrupt that a signal handler may raise.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "dpy_lua.h"

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    dpy_state *st = ud;
    size_t old = ptr ? osize : 0;   /* osize is a type tag when ptr == NULL */
    if (nsize == 0) {
        free(ptr);
        st->lua_bytes -= old;
        return NULL;
    }
    if (st->lua_cap && st->lua_bytes - old + nsize > st->lua_cap)
        return NULL;                /* Lua turns this into LUA_ERRMEM */
    void *p = realloc(ptr, nsize);
    if (p)
        st->lua_bytes = st->lua_bytes - old + nsize;
    return p;
}

static char g_lua_dir[4096];

void dpy_set_lua_dir(const char *dir) { snprintf(g_lua_dir, sizeof g_lua_dir, "%s", dir); }
const char *dpy_lua_dir(void) { return g_lua_dir[0] ? g_lua_dir : NULL; }

dpy_state *dpy_state_of(lua_State *L) { return *(dpy_state **)lua_getextraspace(L); }

/* The message handler of dpy_state_pcall: from here until that call returns, an error is under way
** (the handler, then the unwinding's __close calls), and an interrupt waits (stop_hook). */
static int traceback(lua_State *L) {
    dpy_state *st = dpy_state_of(L);
    if (st)
        st->unwinding = 1;
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int dpy_state_pcall(lua_State *L, int nargs, int nres) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    dpy_state *st = dpy_state_of(L);
    int unwinding = st ? st->unwinding : 0;   /* an outer call's, when this one runs in its __close */
    int status = lua_pcall(L, nargs, nres, base);
    if (st)
        st->unwinding = unwinding;
    lua_remove(L, base);
    return status;
}

int dpy_state_pcall_last(lua_State *L, int nargs, int nres) {
    dpy_state *st = dpy_state_of(L);
    if (st->last)
        return luaL_error(L, "the node's last work runs once (it has begun)");
    st->last = 1;
    int status = dpy_state_pcall(L, nargs, nres);
    st->last = 2;
    lua_sethook(L, NULL, 0, 0);   /* one that came meanwhile; one still to come finds last == 2 */
    return status;
}

/* The interrupt raises at L's next call, return or instruction; not while an error is under way
** (it would replace the error: the error stays, and the interrupt waits for the code that runs
** after), nor after the last protected call. */
static void stop_hook(lua_State *L, lua_Debug *ar) {
    dpy_state *st = dpy_state_of(L);
    if (st && st->last == 2) {
        lua_sethook(L, NULL, 0, 0);
        return;
    }
    if (st && st->unwinding)
        return;
    if (ar->event == LUA_HOOKCALL && lua_getinfo(L, "f", ar)) {   /* the handler's call: before it marks */
        int handling = lua_tocfunction(L, -1) == traceback;
        lua_pop(L, 1);
        if (handling)
            return;
    }
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

void dpy_state_interrupt(lua_State *L) {
    /* as lua.c's laction: setting a hook is the one thing safe to do from a signal handler */
    lua_sethook(L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

int dpy_state_interrupt_signal(lua_State *L, pthread_t runner, int sig) {
    if (!pthread_equal(pthread_self(), runner)) {
        pthread_kill(runner, sig);   /* async-signal-safe, as pthread_self */
        return 0;
    }
    dpy_state_interrupt(L);
    return 1;
}

static int panic(lua_State *L) {
    dpy_state *st = dpy_state_of(L);
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "dpy-lua: node %d: PANIC: %s\n", st ? st->uid : -1, msg ? msg : "?");
    return 0;   /* then abort, as Lua does */
}

static int boot(lua_State *L) {
    const char *lua_dir = lua_touserdata(L, 1);
    luaL_openlibs(L);
    dpy_preload_bindings(L);
    dpy_chunks_install(L);
    if (lua_dir) {   /* package.path = <lua_dir>/?.lua;<lua_dir>/?/init.lua;<default> */
        lua_getglobal(L, "package");
        lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", lua_dir, lua_dir);
        lua_getfield(L, -2, "path");
        lua_concat(L, 2);
        lua_setfield(L, -2, "path");
        lua_pop(L, 1);
    }
    return 0;
}

lua_State *dpy_state_open(dpy_state *st, const char *lua_dir, char *err, size_t errlen) {
    lua_State *L = lua_newstate(counting_alloc, st);
    if (L == NULL) {
        snprintf(err, errlen, "cannot create a Lua state");
        return NULL;
    }
    *(dpy_state **)lua_getextraspace(L) = st;
    lua_atpanic(L, panic);
    lua_pushcfunction(L, boot);
    lua_pushlightuserdata(L, (void *)lua_dir);
    if (dpy_state_pcall(L, 1, 0) != LUA_OK) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        lua_close(L);
        return NULL;
    }
    return L;
}
