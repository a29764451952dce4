/* l_optim.c: dpy.Optimizer, libtorch's SGD, Adam and AdamW over a list of parameter tensors. */
#include <math.h>
#include <string.h>

#include "dpy_arrays.h"
#include "fabric.h"
#include "dpy_lua.h"

typedef struct { dpy_optim *h; } optim_box;

static optim_box *newbox(lua_State *L) {
    optim_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->h = NULL;
    luaL_setmetatable(L, DPY_OPTIM_MT);
    return b;
}

static dpy_optim *checkoptim(lua_State *L, int arg) {
    optim_box *b = luaL_checkudata(L, arg, DPY_OPTIM_MT);
    if (b->h == NULL)
        luaL_argerror(L, arg, "use of a freed dpy.Optimizer");
    return b->h;
}

static double optfield(lua_State *L, int t, const char *k, double dflt) {
    lua_getfield(L, t, k);
    double v = lua_isnil(L, -1) ? dflt : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int optbool(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/*
** optim.core.new(kind, params, opts) -> dpy.Optimizer
** kind: "sgd" | "adam" | "adamw"; params: a dpy.Module or a list of dpy.Tensor; opts: lr, momentum,
** dampening, weight_decay, nesterov, betas = {b1, b2}, eps, amsgrad (the Lua side checks the key
** names). A module's parameters are taken as m:parameters() gives them, but left on the values
** the process lends (dpy_push_optimized_params).
*/
static int o_new(lua_State *L) {
    static const char *const kinds[] = {"sgd", "adam", "adamw", NULL};
    int kind = luaL_checkoption(L, 1, NULL, kinds);
    if (luaL_testudata(L, 2, DPY_MODULE_MT)) {
        dpy_push_optimized_params(L, 2);
        lua_replace(L, 2);
    }
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    size_t n = (size_t)luaL_len(L, 2);
    const dpy_tensor **ps = lua_newuserdatauv(L, (n ? n : 1) * sizeof *ps, 0);
    for (size_t i = 0; i < n; i++) {
        lua_geti(L, 2, (lua_Integer)i + 1);
        ps[i] = dpy_checktensor(L, lua_gettop(L));
        lua_pop(L, 1);
    }
    dpy_optim_opts o;
    memset(&o, 0, sizeof o);
    o.lr = optfield(L, 3, "lr", kind == 0 ? 0.01 : 1e-3);
    o.momentum = optfield(L, 3, "momentum", 0);
    o.dampening = optfield(L, 3, "dampening", 0);
    o.weight_decay = optfield(L, 3, "weight_decay", kind == 2 ? 1e-2 : 0);
    o.eps = optfield(L, 3, "eps", 1e-8);
    o.nesterov = optbool(L, 3, "nesterov");
    o.amsgrad = optbool(L, 3, "amsgrad");
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    if (lua_getfield(L, 3, "betas") == LUA_TTABLE) {
        lua_geti(L, -1, 1);
        o.beta1 = luaL_optnumber(L, -1, 0.9);
        lua_geti(L, -2, 2);
        o.beta2 = luaL_optnumber(L, -1, 0.999);
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    optim_box *b = newbox(L);
    if (dpy_optim_new(&b->h, (dpy_optim_kind)kind, ps, n, &o) != DPY_OK)
        return luaL_error(L, "optim.%s: %s", kinds[kind], dpy_torch_errmsg());
    return 1;
}

static int o_step(lua_State *L) {
    dpy_optim *o = checkoptim(L, 1);
    if (dpy_optim_reads_shared(o, dpy_fabric_release, dpy_fabric_buffer_shared))
        return luaL_error(L, "optimizer step: other nodes still read its parameters (the model this node "
                             "sent, or the initial model nodes share): call model:own_flat() first");
    if (dpy_optim_step(o) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

static int o_zero_grad(lua_State *L) {
    if (dpy_optim_zero_grad(checkoptim(L, 1)) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

/* o:lr() -> number; o:set_lr(lr) */
static int o_lr(lua_State *L) {
    lua_pushnumber(L, dpy_optim_lr(checkoptim(L, 1)));
    return 1;
}

static int o_set_lr(lua_State *L) {
    dpy_optim *o = checkoptim(L, 1);
    double lr = luaL_checknumber(L, 2);
    /* an infinite one made every parameter -inf at the next step, silently */
    luaL_argcheck(L, lr >= 0 && isfinite(lr), 2, "learning rate must be a finite number >= 0");
    dpy_optim_set_lr(o, lr);
    return 0;
}

static int o_kind(lua_State *L) {
    lua_pushstring(L, dpy_optim_kind_name(checkoptim(L, 1)));
    return 1;
}

/* o:reset(): drops the momentum buffers, moments and step counts (the learning rate stays) */
static int o_reset(lua_State *L) {
    dpy_optim_reset(checkoptim(L, 1));
    return 0;
}

/* o:state() -> string: momentum buffers, moments and step counts (libtorch archive bytes) */
static int o_state(lua_State *L) {
    dpy_optim *o = checkoptim(L, 1);
    char *buf;
    size_t len;
    if (dpy_optim_state_save(o, &buf, &len) != DPY_OK)
        return dpy_torch_error(L);
    lua_pushlstring(L, buf, len);   /* raises only when Lua is out of memory (buf leaks then) */
    dpy_torch_free(buf);
    return 1;
}

/* o:set_state(s); raises when s is not a state of this kind of optimizer */
static int o_set_state(lua_State *L) {
    dpy_optim *o = checkoptim(L, 1);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    char err[256];
    if (dpy_zip_check(s, len, err, sizeof err) != 0)   /* torch reads members without CRCs */
        return luaL_error(L, "optimizer state: %s", err);
    if (dpy_optim_state_load(o, s, len) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

static int o_free(lua_State *L) {
    optim_box *b = luaL_checkudata(L, 1, DPY_OPTIM_MT);
    dpy_optim_free(b->h);
    b->h = NULL;
    return 0;
}

static int o_tostring(lua_State *L) {
    optim_box *b = luaL_checkudata(L, 1, DPY_OPTIM_MT);
    if (b->h == NULL)
        lua_pushstring(L, "dpy.Optimizer(freed)");
    else
        lua_pushfstring(L, "dpy.Optimizer(%s, lr=%f)", dpy_optim_kind_name(b->h),
                        dpy_optim_lr(b->h));
    return 1;
}

static const luaL_Reg methods[] = {
    {"step", o_step}, {"zero_grad", o_zero_grad}, {"lr", o_lr}, {"set_lr", o_set_lr},
    {"kind", o_kind}, {"reset", o_reset}, {"state", o_state}, {"set_state", o_set_state}, {"free", o_free},
    {NULL, NULL}};
static const luaL_Reg meta[] = {{"__gc", o_free}, {"__close", o_free},
                                {"__tostring", o_tostring}, {NULL, NULL}};
static const luaL_Reg functions[] = {{"new", o_new}, {NULL, NULL}};

int luaopen_dpy_optim_core(lua_State *L) {
    luaL_newmetatable(L, DPY_OPTIM_MT);   /* stack: mt */
    luaL_setfuncs(L, meta, 0);
    luaL_newlib(L, methods);              /* stack: mt, methods */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newlib(L, functions);
    return 1;
}
