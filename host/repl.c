/*
** repl.c: the interactive prompt. Line editing and history through GNU readline when stdin is a
** terminal (plain lines otherwise, so it can be driven through a pipe); multi-line input as
** lua.c does it, an unfinished expression ("1 +") too; expression values printed with
** dpy.pretty; errors printed, the prompt goes on; Ctrl-C interrupts a running computation and
** returns to the prompt; Tab completes names, fields and methods (dpy.help).
*/
#define _DEFAULT_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include <lauxlib.h>

#include "dpy_lua.h"
#include "repl.h"

#define EOF_MARK "<eof>"
#define LINE_BYTES 65536

static lua_State *g_L;
static pthread_t g_runner;   /* the thread that runs g_L */
static atomic_int g_running;   /* read by the handler, which may run on another thread */

static void on_sigint(int sig) {
    if (atomic_load(&g_running))
        dpy_state_interrupt_signal(g_L, g_runner, sig);
}

/* One line without its newline, or NULL at end of input. The caller frees it. */
static char *read_line(int tty, const char *prompt) {
    if (tty) {
        char *line = readline(prompt);
        if (line && *line)
            add_history(line);
        return line;
    }
    char *buf = malloc(LINE_BYTES);
    if (!buf)
        return NULL;
    if (fgets(buf, LINE_BYTES, stdin) == NULL) {
        free(buf);
        return NULL;
    }
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

/* Whether a load's error (at index idx) says its chunk ended before it was complete. */
static int incomplete(lua_State *L, int status, int idx) {
    if (status != LUA_ERRSYNTAX)
        return 0;
    size_t len;
    const char *msg = lua_tolstring(L, idx, &len);
    size_t mark = sizeof(EOF_MARK) - 1;
    return len >= mark && strcmp(msg + len - mark, EOF_MARK) == 0;
}

/* Compiles "return <src>" so that expressions print their values. Leaves the function or the
** error message on the stack. */
static int load_as_expression(lua_State *L, const char *src) {
    const char *ret = lua_pushfstring(L, "return %s", src);
    int status = luaL_loadbuffer(L, ret, strlen(ret), "=stdin");
    lua_remove(L, -2);
    return status;
}

/* Reads a whole chunk and leaves it compiled on the stack: an expression if it compiles as one,
** else a statement. While either form is unfinished ("1 +", "for i = 1, 3 do") it reads more
** lines. Returns -1 at end of input, else the load status (an error message on the stack: the
** expression's when the input began as an unfinished expression, else the statement's). */
static int load_chunk(lua_State *L, int tty) {
    char *line = read_line(tty, "> ");
    if (line == NULL)
        return -1;
    lua_pushstring(L, line[0] == '=' ? line + 1 : line);   /* "=expr" as in Lua 5.1 */
    free(line);
    int began_as_expression = -1;   /* known after the first line */
    for (;;) {
        size_t len;
        const char *src = lua_tolstring(L, -1, &len);
        int expr = load_as_expression(L, src);
        if (expr == LUA_OK) {
            lua_remove(L, -2);   /* the source */
            return LUA_OK;
        }
        int stmt = luaL_loadbuffer(L, src, len, "=stdin");   /* stack: source, expr's error, stmt's result */
        int expr_open = incomplete(L, expr, -2), stmt_open = incomplete(L, stmt, -1);
        if (began_as_expression < 0)
            began_as_expression = expr_open && !stmt_open;
        char *more = NULL;
        if (stmt == LUA_OK || !(expr_open || stmt_open) || (more = read_line(tty, ">> ")) == NULL) {
            int use_expr = stmt != LUA_OK && began_as_expression;
            lua_remove(L, use_expr ? -1 : -2);   /* the other form's result */
            lua_remove(L, -2);                    /* the source */
            return use_expr ? expr : stmt;
        }
        lua_pop(L, 2);
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        lua_pushvalue(L, -2);
        luaL_addvalue(&b);
        luaL_addchar(&b, '\n');
        luaL_addstring(&b, more);
        free(more);
        luaL_pushresult(&b);
        lua_remove(L, -2);
    }
}

/* Prints the values left by a call, through dpy.pretty when available. */
static void print_results(lua_State *L, int base) {
    int n = lua_gettop(L) - base;
    if (n == 0)
        return;
    lua_getglobal(L, "require");
    lua_pushstring(L, "dpy.pretty");
    if (dpy_state_pcall(L, 1, 1) != LUA_OK) {
        lua_pop(L, 1);
        lua_getglobal(L, "print");
    } else {
        lua_getfield(L, -1, "print");
        lua_remove(L, -2);
    }
    lua_insert(L, base + 1);
    if (dpy_state_pcall(L, n, 0) != LUA_OK) {
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
}

int dpy_repl(lua_State *L) {
    int tty = isatty(0);
    g_L = L, g_runner = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    char history[4096] = "";
    if (tty) {
        const char *home = getenv("HOME");
        if (home && snprintf(history, sizeof history, "%s/.dpy_lua_history", home) < (int)sizeof history)
            read_history(history);
        printf("dpy-lua %s, %s. help() says how; Ctrl-D leaves; Ctrl-C interrupts.\n", DPY_VERSION,
               LUA_RELEASE);
        luaL_dostring(L, "return require('dpy.help').complete");   /* Tab: names, fields, methods */
        dpy_readline_complete(L, -1);
        lua_pop(L, 1);
    }
    /* the usual names at hand, and with a config, the node it names (dpy-lua repl CONFIG --uid U) */
    luaL_dostring(L, "dpy = require 'dpy'; tensor = dpy.tensor; nn = dpy.nn; optim = dpy.optim; "
                     "data = dpy.data; help = require('dpy.help').help");
    lua_getglobal(L, "arg");
    int has_config = lua_istable(L, -1) && lua_geti(L, -1, 1) == LUA_TSTRING;
    lua_settop(L, 0);
    if (has_config) {
        luaL_loadstring(L, "local a = {} for i = 1, #arg do a[i] = arg[i] end "
                           "return require('dpy.cli').repl_node(a)");
        if (dpy_state_pcall(L, 0, 1) != LUA_OK) {
            fprintf(stderr, "dpy-lua: %s\n", lua_tostring(L, -1));
            return 1;
        }
        int code = (int)lua_tointeger(L, -1);   /* 2: a usage or config error, already reported */
        lua_settop(L, 0);
        if (code != 0)
            return code;
    }
    for (;;) {
        int base = lua_gettop(L);
        int status = load_chunk(L, tty);
        if (status == -1)
            break;
        if (status == LUA_OK) {
            atomic_store(&g_running, 1);
            status = dpy_state_pcall(L, 0, LUA_MULTRET);
            atomic_store(&g_running, 0);
            lua_sethook(L, NULL, 0, 0);   /* clear an interrupt that came too late */
        }
        if (status == LUA_OK) {
            print_results(L, base);
        } else {
            const char *msg = lua_tostring(L, -1);
            fprintf(stderr, "%s\n", msg ? msg : "(error object is not a string)");
            fflush(stderr);
        }
        lua_settop(L, base);
        fflush(stdout);
    }
    if (tty) {
        printf("\n");
        if (history[0])
            write_history(history);
    }
    dpy_readline_complete(L, 0);
    signal(SIGINT, SIG_DFL);
    return 0;
}
