/*
** l_aggregate.c: robust aggregation (dpy.aggregate.core), over dpy_aggregate.
**   aggregate(rule, x [, {f, m, max_iter, tol, eps, radius, iterations, bucket, seed, center}])
** x is an n x d tensor; returns a d tensor (aggregators) or rows (pre-aggregations). An (n, f)
** outside what the rule tolerates raises "<rule>: n = .., f = .. is outside ...".
*/
#include "dpy_lua.h"

static lua_Number num_field(lua_State *L, int t, const char *k, lua_Number dflt) {
    lua_getfield(L, t, k);
    lua_Number v = lua_isnil(L, -1) ? dflt : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int a_aggregate(lua_State *L) {
    const char *rule = luaL_checkstring(L, 1);
    dpy_tensor *x = dpy_checktensor(L, 2);
    dpy_agg_opts o = {0, 0, 100, 1e-6, 1e-8, 0, 1, 1, 0, NULL};
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        o.f = (int)num_field(L, 3, "f", 0);
        o.m = (int)num_field(L, 3, "m", 0);
        o.max_iter = (int)num_field(L, 3, "max_iter", 100);
        o.tol = num_field(L, 3, "tol", 1e-6);
        o.eps = num_field(L, 3, "eps", 1e-8);
        o.radius = num_field(L, 3, "radius", 0);
        o.iterations = (int)num_field(L, 3, "iterations", 1);
        o.bucket = (int)num_field(L, 3, "bucket", 1);
        o.seed = (uint64_t)num_field(L, 3, "seed", 0);
        lua_getfield(L, 3, "center");   /* stays on the stack while used */
        o.center = lua_isnil(L, -1) ? NULL : dpy_checktensor(L, -1);
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
