/* test_chunks.c: require's cache of compiled modules (host/lua/chunks.c). Outside a start a module
** rewritten loads as it is now; while a start holds the checks (dpy_chunks_hold), a framework
** module found unchanged once loads as it was, its file not checked again, so that the nodes of one
** start run the same code; once the start is over, as the file is now again. Where a framework
** module lies (dpy_chunks_module_file) is likewise looked at once a start: a file seen there in
** it is not looked at again, one remembered before it is. */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "dpy_lua.h"

static char dir[] = "/tmp/dpy_test_chunks_XXXXXX";
static char file[256];

/* the module returns v; each version is a size of its own, as a rewrite that a check sees */
static void write_module(int v) {
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f) {
        fprintf(f, "return %d%*s\n", v, v, "");
        fclose(f);
    }
}

/* a fresh state that finds the module in dir; the caller closes it */
static lua_State *state(void) {
    static dpy_state st;   /* the state keeps a pointer to it: one state at a time */
    memset(&st, 0, sizeof st);
    st.uid = -1;
    char err[256];
    lua_State *L = dpy_state_open(&st, NULL, err, sizeof err);
    if (!L) {
        fprintf(stderr, "dpy_state_open: %s\n", err);
        exit(1);
    }
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;", dir);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    return L;
}

/* what require("dpy.chunks_held") returns in a fresh state */
static long required(void) {
    lua_State *L = state();
    long v = -1;
    if (luaL_dostring(L, "return (require('dpy.chunks_held'))") == LUA_OK)
        v = (long)lua_tointeger(L, -1);
    else
        fprintf(stderr, "require: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return v;
}

/* whether a fresh state is told that the module has a file (dpy_chunks_module_file) */
static int has_file(void) {
    lua_State *L = state();
    dpy_chunks_module_file(L, "dpy.chunks_held");
    int found = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), file) == 0;
    lua_close(L);
    return found;
}

static void test_module_file(void) {
    write_module(1);
    CHECK(has_file());
    unlink(file);
    CHECK(!has_file());       /* no start: looked at each time */
    write_module(1);
    CHECK(has_file());
    dpy_chunks_hold(1);
    CHECK(has_file());        /* seen there in this start */
    unlink(file);
    CHECK(has_file());        /* not looked at again */
    dpy_chunks_hold(0);
    CHECK(!has_file());
    write_module(1);
    CHECK(has_file());        /* remembered outside a start */
    unlink(file);
    dpy_chunks_hold(1);
    CHECK(!has_file());       /* gone before the start: looked at in it */
    dpy_chunks_hold(0);
}

int main(void) {
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char sub[160];
    snprintf(sub, sizeof sub, "%s/dpy", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(file, sizeof file, "%s/chunks_held.lua", sub);

    write_module(1);
    CHECK(required() == 1);
    write_module(2);
    CHECK(required() == 2);   /* no start: checked at each load */

    dpy_chunks_hold(1);
    CHECK(required() == 2);   /* found unchanged in this start */
    write_module(3);
    CHECK(required() == 2);   /* as the start's first nodes loaded it */
    dpy_chunks_hold(1);       /* a second start beside it */
    dpy_chunks_hold(0);
    CHECK(required() == 2);   /* the first still holds */
    dpy_chunks_hold(0);
    CHECK(required() == 3);   /* over: the file as it is */
    dpy_chunks_hold(0);       /* one too many: nothing changes */
    write_module(4);
    CHECK(required() == 4);

    dpy_chunks_hold(1);       /* a new start checks once, then holds */
    CHECK(required() == 4);
    write_module(5);
    CHECK(required() == 4);
    dpy_chunks_hold(0);
    CHECK(required() == 5);
    test_module_file();

    unlink(file);
    rmdir(sub);
    rmdir(dir);
    return check_report("chunks");
}
