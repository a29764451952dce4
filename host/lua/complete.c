/*
** complete.c: Tab completion for GNU readline from Lua: a function fn(text) -> { words } gives
** the candidates for the word before the cursor (dpy-lua repl: dpy.help.complete in its own
** state; dpy-lua attach: the names of the node it is attached to, asked over the socket).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <readline/readline.h>

#include "dpy_lua.h"

static lua_State *g_L;
static int g_ref = LUA_NOREF;
static char **g_words;
static size_t g_nwords, g_next;

static void free_words(void) {
    for (size_t i = 0; i < g_nwords; i++)
        free(g_words[i]);
    free(g_words);
    g_words = NULL;
    g_nwords = g_next = 0;
}

static char *next_word(const char *text, int state) {
    if (state == 0) {
        free_words();
        lua_State *L = g_L;
        int top = lua_gettop(L);
        lua_rawgeti(L, LUA_REGISTRYINDEX, g_ref);
        lua_pushstring(L, text);
        if (dpy_state_pcall(L, 1, 1) == LUA_OK && lua_istable(L, -1)) {
            size_t n = (size_t)luaL_len(L, -1);
            g_words = calloc(n ? n : 1, sizeof *g_words);
            for (size_t i = 0; g_words && i < n; i++) {
                lua_geti(L, -1, (lua_Integer)i + 1);
                const char *w = lua_tostring(L, -1);
                if (w && (g_words[g_nwords] = strdup(w)))
                    g_nwords++;
                lua_pop(L, 1);
            }
        }
        lua_settop(L, top);
    }
    return g_next < g_nwords ? strdup(g_words[g_next++]) : NULL;
}

static char **complete(const char *text, int start, int end) {
    (void)start, (void)end;
    rl_attempted_completion_over = 1;   /* no file names */
    rl_completion_append_character = '\0';
    return rl_completion_matches(text, next_word);
}

void dpy_readline_complete(lua_State *L, int index) {
    if (g_L)
        luaL_unref(g_L, LUA_REGISTRYINDEX, g_ref);
    free_words();
    g_L = NULL, g_ref = LUA_NOREF;
    rl_attempted_completion_function = NULL;
    if (index == 0 || lua_isnoneornil(L, index))
        return;
    lua_pushvalue(L, index);
    g_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    g_L = L;
    rl_attempted_completion_function = complete;
    rl_completer_word_break_characters = " \t\n\"'`@$><=;|&{(,+-*/%^#~[]";   /* not . and : */
}
