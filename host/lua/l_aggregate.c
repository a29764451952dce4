/*
** l_aggregate.c: robust aggregation (dpy.aggregate.core), over dpy_aggregate.
**   aggregate(rule, x [, {f, m, max_iter, tol, eps, radius, iterations, bucket, seed, center}])
** x is an n x d tensor; returns a d tensor (aggregators) or rows (pre-aggregations). An (n, f)
** outside what the rule tolerates raises "<rule>: n = .., f = .. is outside ...". An option of
** the wrong type or range raises "<rule>: option <key> must be ..., got ..." whichever rule it is
** given to; the shim refuses what only the rule and x can tell (m > n - f, a center of another d).
*/
#include <limits.h>
#include <math.h>

#include "dpy_lua.h"

static int bad_option(lua_State *L, const char *rule, const char *key, const char *what) {
    const char *got = lua_type(L, -1) == LUA_TNUMBER
                          ? luaL_tolstring(L, -1, NULL)
                          : lua_pushfstring(L, "a %s", luaL_typename(L, -1));
    return luaL_error(L, "%s: option %s must be %s, got %s", rule, key, what, got);
}

/* An integer option (an integral float counts, a numeric string does not) >= lo. */
static lua_Integer int_option(lua_State *L, const char *rule, const char *key, lua_Integer lo,
                              lua_Integer max, lua_Integer dflt) {
    lua_getfield(L, 3, key);
    lua_Integer v = dflt;
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || v < lo)
            bad_option(L, rule, key, lo == 0 ? "an integer >= 0" : "an integer >= 1");
        if (v > max)
            luaL_error(L, "%s: option %s must be at most %I, got %I", rule, key, max, v);
    }
    lua_pop(L, 1);
    return v;
}

/* A finite number > 0. */
static double num_option(lua_State *L, const char *rule, const char *key, double dflt) {
    lua_getfield(L, 3, key);
    double v = dflt;
    if (!lua_isnil(L, -1)) {
        v = lua_type(L, -1) == LUA_TNUMBER ? (double)lua_tonumber(L, -1) : 0;
        if (lua_type(L, -1) != LUA_TNUMBER || !(isfinite(v) && v > 0))
            bad_option(L, rule, key, "a finite number > 0");
    }
    lua_pop(L, 1);
    return v;
}

static int a_aggregate(lua_State *L) {
    const char *rule = luaL_checkstring(L, 1);
    dpy_tensor *x = dpy_checktensor(L, 2);
    dpy_agg_opts o = {0, 0, 100, 1e-6, 1e-8, 0, 1, 1, 0, NULL};
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        o.f = (int)int_option(L, rule, "f", 0, INT_MAX, 0);
        o.m = (int)int_option(L, rule, "m", 1, INT_MAX, 0);   /* 0: n - f */
        o.max_iter = (int)int_option(L, rule, "max_iter", 1, INT_MAX, 100);
        o.tol = num_option(L, rule, "tol", 1e-6);
        o.eps = num_option(L, rule, "eps", 1e-8);
        o.radius = num_option(L, rule, "radius", 0);   /* 0: none given, for the rules needing one */
        o.iterations = (int)int_option(L, rule, "iterations", 1, INT_MAX, 1);
        o.bucket = (int)int_option(L, rule, "bucket", 1, INT_MAX, 1);
        o.seed = (uint64_t)int_option(L, rule, "seed", 0, LUA_MAXINTEGER, 0);
        lua_settop(L, 3);
        lua_getfield(L, 3, "center");   /* stays on the stack while used */
        if (!lua_isnil(L, -1)) {
            o.center = dpy_testtensor(L, -1);
            if (o.center == NULL)
                return luaL_testudata(L, -1, DPY_TENSOR_MT)
                           ? luaL_error(L, "%s: option center must be a dpy.Tensor, got a freed dpy.Tensor", rule)
                           : bad_option(L, rule, "center", "a dpy.Tensor");
        }
    }
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_aggregate(&b->h, rule, x, &o) != DPY_OK)
        return luaL_error(L, "%s", dpy_torch_errmsg());
    dpy_tensor_filled(L, b);
    return 1;
}

static const luaL_Reg functions[] = {{"aggregate", a_aggregate}, {NULL, NULL}};

int luaopen_dpy_aggregate_core(lua_State *L) {
    luaL_newlib(L, functions);
    return 1;
}
