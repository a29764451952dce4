/*
** l_generator.c: dpy.Generator, a seeded random generator. Each Lua state (each node) has a
** default one, so nodes on threads of one process draw independent, reproducible numbers.
*/
#include "dpy_lua.h"

typedef struct { dpy_generator *h; } gen_box;

static const char KEY_DEFAULT = 0;   /* registry[&KEY_DEFAULT] = the state's default generator */

#define DEFAULT_SEED 67280421310721ULL   /* libtorch's own default seed */

static gen_box *newbox(lua_State *L) {
    gen_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->h = NULL;
    luaL_setmetatable(L, DPY_GENERATOR_MT);
    return b;
}

dpy_generator *dpy_checkgenerator(lua_State *L, int arg) {
    gen_box *b = luaL_checkudata(L, arg, DPY_GENERATOR_MT);
    if (b->h == NULL)
        luaL_argerror(L, arg, "use of a freed dpy.Generator");
    return b->h;
}

static uint64_t checkseed(lua_State *L, int arg) {
    return (uint64_t)luaL_checkinteger(L, arg);
}

/* generator.new(seed) -> dpy.Generator */
static int g_new(lua_State *L) {
    uint64_t seed = checkseed(L, 1);
    gen_box *b = newbox(L);
    if (dpy_generator_new(&b->h, seed) != DPY_OK)
        return dpy_torch_error(L);
    return 1;
}

/* Pushes the state's default generator, creating it on first use. */
static void push_default(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &KEY_DEFAULT) != LUA_TNIL)
        return;
    lua_pop(L, 1);
    gen_box *b = newbox(L);
    if (dpy_generator_new(&b->h, DEFAULT_SEED) != DPY_OK)
        dpy_torch_error(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &KEY_DEFAULT);
}

dpy_generator *dpy_optgenerator(lua_State *L, int arg) {
    if (arg > 0 && !lua_isnoneornil(L, arg))
        return dpy_checkgenerator(L, arg);
    push_default(L);
    dpy_generator *g = ((gen_box *)lua_touserdata(L, -1))->h;
    lua_pop(L, 1);   /* the registry keeps it alive */
    return g;
}

/* generator.default() -> the state's default dpy.Generator */
static int g_default(lua_State *L) {
    push_default(L);
    return 1;
}

/* g:seed(n) -> g */
static int g_seed(lua_State *L) {
    dpy_generator *g = dpy_checkgenerator(L, 1);
    dpy_generator_seed(g, checkseed(L, 2));
    lua_settop(L, 1);
    return 1;
}

/* g:draw() -> integer: 64 random bits (to derive seeds) */
static int g_draw(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dpy_generator_draw(dpy_checkgenerator(L, 1)));
    return 1;
}

/* g:state() -> uint8 dpy.Tensor: the whole state (to checkpoint) */
static int g_state(lua_State *L) {
    dpy_generator *g = dpy_checkgenerator(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_generator_get_state(&b->h, g) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return 1;
}

/* g:set_state(t) -> g; raises when t is not a state of g:state() */
static int g_set_state(lua_State *L) {
    dpy_generator *g = dpy_checkgenerator(L, 1);
    if (dpy_generator_set_state(g, dpy_checktensor(L, 2)) != DPY_OK)
        return luaL_error(L, "generator:set_state: %s", dpy_torch_errmsg());
    lua_settop(L, 1);
    return 1;
}

static int g_free(lua_State *L) {
    gen_box *b = luaL_checkudata(L, 1, DPY_GENERATOR_MT);
    dpy_generator_free(b->h);
    b->h = NULL;
    return 0;
}

static int g_tostring(lua_State *L) {
    gen_box *b = luaL_checkudata(L, 1, DPY_GENERATOR_MT);
    lua_pushfstring(L, b->h ? "dpy.Generator(%p)" : "dpy.Generator(freed)", (void *)b->h);
    return 1;
}

static const luaL_Reg methods[] = {{"seed", g_seed}, {"draw", g_draw}, {"state", g_state},
                                   {"set_state", g_set_state}, {"free", g_free},
                                   {NULL, NULL}};
static const luaL_Reg meta[] = {{"__gc", g_free}, {"__close", g_free},
                                {"__tostring", g_tostring}, {NULL, NULL}};
static const luaL_Reg functions[] = {{"new", g_new}, {"default", g_default}, {NULL, NULL}};

int luaopen_dpy_generator_core(lua_State *L) {
    luaL_newmetatable(L, DPY_GENERATOR_MT);   /* stack: mt */
    luaL_setfuncs(L, meta, 0);
    luaL_newlib(L, methods);                  /* stack: mt, methods */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newlib(L, functions);
    return 1;
}
