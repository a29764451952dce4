/* repl.h: the interactive prompt. */
#ifndef DPY_REPL_H
#define DPY_REPL_H

#include <lua.h>

/* Reads, evaluates and prints until end of input; returns the exit code (0). */
int dpy_repl(lua_State *L);

#endif
