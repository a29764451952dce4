/*
** l_nn.c: dpy.Module, libtorch nn modules as Lua userdata, and the loss functions.
** A module is a built-in layer (its forward in C++), a sequential container of such layers
** (forward in C++), or a container whose forward is a Lua function (custom modules). The user
** value holds { children = {name = module}, forward = function }.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dpy_arrays.h"
#include "fabric.h"
#include "dpy_lua.h"

typedef struct { dpy_module *h; } module_box;

static module_box *newbox(lua_State *L) {
    module_box *b = lua_newuserdatauv(L, sizeof *b, 1);
    b->h = NULL;
    luaL_setmetatable(L, DPY_MODULE_MT);
    return b;
}

dpy_module *dpy_checkmodule(lua_State *L, int arg) {
    module_box *b = luaL_checkudata(L, arg, DPY_MODULE_MT);
    if (b->h == NULL)
        luaL_argerror(L, arg, "use of a freed dpy.Module");
    return b->h;
}

/* nn.core.layer(kind, {numbers...} [, generator]) -> dpy.Module */
static int n_layer(lua_State *L) {
    const char *kind = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)luaL_len(L, 2);
    if (n > 16)
        luaL_argerror(L, 2, "too many layer arguments");
    double args[16];
    for (int i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        int ok;
        args[i] = lua_tonumberx(L, -1, &ok);
        if (!ok)
            luaL_argerror(L, 2, "layer arguments must be numbers");
        lua_pop(L, 1);
    }
    dpy_generator *g = dpy_optgenerator(L, 3);
    module_box *b = newbox(L);
    if (dpy_module_new(&b->h, kind, args, n, g) != DPY_OK)
        return luaL_error(L, "nn.%s: %s", kind, dpy_torch_errmsg());
    return 1;
}

/*
** nn.core.container(names, children, sequential [, forward]) -> dpy.Module
** sequential: forward runs the children in order in C++ (each must have a C++ forward).
** Otherwise forward is the Lua function forward(self, x).
*/
static int n_container(lua_State *L) {
    lua_settop(L, 4);
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    int sequential = lua_toboolean(L, 3);
    if (!sequential && !lua_isnoneornil(L, 4))
        luaL_checktype(L, 4, LUA_TFUNCTION);
    size_t n = (size_t)luaL_len(L, 2);
    if ((size_t)luaL_len(L, 1) != n)
        luaL_argerror(L, 1, "one name per child");
    const char **names = lua_newuserdatauv(L, (n ? n : 1) * sizeof *names, 0);
    dpy_module **kids = lua_newuserdatauv(L, (n ? n : 1) * sizeof *kids, 0);
    lua_createtable(L, 0, (int)n);   /* children by name, kept in the user value */
    int children = lua_gettop(L);
    for (size_t i = 0; i < n; i++) {
        lua_geti(L, 1, (lua_Integer)i + 1);
        names[i] = lua_tostring(L, -1);
        if (names[i] == NULL || names[i][0] == '\0' || strchr(names[i], '.'))
            luaL_argerror(L, 1, "child names must be non-empty strings without '.'");
        lua_geti(L, 2, (lua_Integer)i + 1);
        kids[i] = dpy_checkmodule(L, lua_gettop(L));
        lua_setfield(L, children, names[i]);   /* pops the child; names[i] stays in names */
        lua_pop(L, 1);
    }
    module_box *b = newbox(L);
    if (dpy_module_container(&b->h, names, kids, n, sequential) != DPY_OK)
        return luaL_error(L, "nn: %s", dpy_torch_errmsg());
    lua_createtable(L, 0, 2);                  /* stack: ..., box, uservalue */
    lua_pushvalue(L, children);
    lua_setfield(L, -2, "children");
    if (!sequential && lua_isfunction(L, 4)) {
        lua_pushvalue(L, 4);
        lua_setfield(L, -2, "forward");
    }
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* m:forward(x) or m(x) -> dpy.Tensor */
static int m_forward(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    if (!dpy_module_has_forward(m)) {
        lua_settop(L, 2);
        if (lua_getiuservalue(L, 1, 1) != LUA_TTABLE || lua_getfield(L, -1, "forward") != LUA_TFUNCTION)
            return luaL_error(L, "this dpy.Module has no forward");
        lua_pushvalue(L, 1);
        lua_pushvalue(L, 2);
        lua_call(L, 2, 1);   /* errors propagate to our caller's pcall */
        return 1;
    }
    dpy_tensor *x = dpy_checktensor(L, 2);
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_module_forward(&b->h, m, x) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return 1;
}

static int m_call(lua_State *L) { return m_forward(L); }

static void own_buffer(lua_State *L, dpy_module *m);
static int push_params(lua_State *L, dpy_module *m);

/* m:parameters() -> { dpy.Tensor... } sharing the module's storage (the module's alone first: the
** caller may write them) */
static int m_parameters(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    own_buffer(L, m);
    return push_params(L, m);
}

int dpy_push_optimized_params(lua_State *L, int arg) {
    dpy_module *m = dpy_checkmodule(L, arg);
    if (dpy_module_reads_shared(m, dpy_fabric_release, dpy_fabric_buffer_shared, 0))
        own_buffer(L, m);
    return push_params(L, m);
}

static int push_params(lua_State *L, dpy_module *m) {
    size_t n = dpy_module_nparams(m);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        dpy_tensor_box *b = dpy_newtensor(L);
        if (dpy_module_param(&b->h, &name, m, i) != DPY_OK)
            return dpy_torch_error(L);
        dpy_tensor_filled(L, b);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

typedef dpy_err (*named_fn)(dpy_tensor **, const char **, const dpy_module *, size_t);

/* { [name] = dpy.Tensor }, { names in order } of n entries got by get */
static int push_named(lua_State *L, dpy_module *m, size_t n, named_fn get) {
    lua_createtable(L, 0, (int)n);
    lua_createtable(L, (int)n, 0);   /* stack: map, names */
    for (size_t i = 0; i < n; i++) {
        const char *name;
        dpy_tensor_box *b = dpy_newtensor(L);
        if (get(&b->h, &name, m, i) != DPY_OK)
            return dpy_torch_error(L);
        dpy_tensor_filled(L, b);
        lua_pushstring(L, name);     /* stack: map, names, box, name */
        lua_pushvalue(L, -1);
        lua_rawseti(L, -4, (lua_Integer)i + 1);
        lua_insert(L, -2);           /* stack: map, names, name, box */
        lua_rawset(L, -4);
    }
    return 2;
}

/* m:named_parameters() -> { [name] = dpy.Tensor }, { names in order } */
static int m_named_parameters(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    own_buffer(L, m);
    return push_named(L, m, dpy_module_nparams(m), dpy_module_param);
}

/* m:named_buffers() -> { [name] = dpy.Tensor }, { names in order }: batchnorm's running
** statistics (sharing the module's storage) */
static int m_named_buffers(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    return push_named(L, m, dpy_module_nbuffers(m), dpy_module_buffer);
}

/* m:is_native() -> true when forward runs in C++ (a layer or a sequential of them) */
static int m_is_native(lua_State *L) {
    lua_pushboolean(L, dpy_module_has_forward(dpy_checkmodule(L, 1)));
    return 1;
}

static int m_numel(lua_State *L) {
    lua_pushinteger(L, dpy_module_numel(dpy_checkmodule(L, 1)));
    return 1;
}

/* A fabric buffer for m's parameters, or a raised error. */
static void *model_buffer(lua_State *L, dpy_module *m, size_t *bytes) {
    *bytes = (size_t)dpy_module_numel(m) * sizeof(float);
    void *buf = dpy_fabric_buffer(*bytes);
    if (!buf)
        luaL_error(L, "out of memory for a flat copy of the model (%d values)", (int)dpy_module_numel(m));
    return buf;
}

/* m:get_flat() -> float32 1-d dpy.Tensor of every parameter, in parameter order (a copy). The
** copy lies in a fabric buffer: sent whole, local receivers share it rather than a second copy. */
static int m_get_flat(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    int64_t shape[1] = {dpy_module_numel(m)};
    size_t bytes;
    void *buf = model_buffer(L, m, &bytes);
    if (dpy_tensor_wrap(&b->h, buf, bytes, DPY_FLOAT32, shape, 1, dpy_fabric_release) != DPY_OK) {
        dpy_fabric_release(buf);
        return dpy_torch_error(L);
    }
    b->flags = DPY_TF_SENDABLE;
    dpy_tensor_filled(L, b);
    if (dpy_module_flat_into(m, b->h) != DPY_OK)
        return dpy_torch_error(L);
    return 1;
}

/* m:grad_flat() -> the same for the gradients (zeros where none) */
static int m_grad_flat(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_module_get_flat(&b->h, m, 1) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return 1;
}

/* {==== a model that is its own sent copy ====}
** m:share_flat() makes the parameters views of one fabric buffer, which ep:send hands to local
** receivers as it is. Until they give it back, whatever this module writes to its parameters
** (m:mix, m:set_flat, m:own_flat) moves them to a new buffer first: copy on write. */

/* Whether any of m's parameters lies in a buffer that others still read (local receivers of what
** m, or the model m is a child of, sent; the nodes that share the initial model), or in the values
** the process lends to layers drawn alike (initial_layers.cpp). */
static int read_by_others(dpy_module *m) {
    return dpy_module_reads_shared(m, dpy_fabric_release, dpy_fabric_buffer_shared, 1);
}

/* m's parameters in a buffer no one else reads: moved, values and all, when others do. */
static void own_buffer(lua_State *L, dpy_module *m) {
    if (!read_by_others(m))
        return;
    if (!dpy_module_plain(m)) {   /* no flat buffer can hold them all: lent ones get their own */
        if (dpy_module_own_lent(m) != DPY_OK)
            dpy_torch_error(L);
        if (!read_by_others(m))
            return;               /* else a child's sent buffer: the flat copy below refuses them */
    }
    size_t bytes;
    void *fresh = model_buffer(L, m, &bytes);
    if (dpy_module_adopt_flat(m, fresh, bytes, 1, dpy_fabric_release) != DPY_OK)
        dpy_torch_error(L);
}

/* m:share_flat() -> the parameters as one read-only float32 vector, without a copy: ep:send hands
** it to local receivers as it is. A copy (as m:get_flat) when they are not plain float32 cpu
** tensors. */
static int m_share_flat(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    if (!dpy_module_plain(m))
        return m_get_flat(L);
    if (!dpy_module_flat_buffer(m)) {   /* the first call, or the parameters moved since */
        size_t bytes;
        void *buf = model_buffer(L, m, &bytes);
        if (dpy_module_adopt_flat(m, buf, bytes, 1, dpy_fabric_release) != DPY_OK)
            return dpy_torch_error(L);
    }
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_module_flat_view(&b->h, m) != DPY_OK)
        return dpy_torch_error(L);
    b->flags = DPY_TF_SENDABLE | DPY_TF_READONLY;
    dpy_tensor_filled(L, b);
    return 1;
}

/* m:own_flat(): the parameters moved to a buffer of their own if local receivers still read the
** one m:share_flat sent (before writing to them by any other means than m:mix or m:set_flat). */
static int m_own_flat(lua_State *L) {
    own_buffer(L, dpy_checkmodule(L, 1));
    return 0;
}

static int set_flat(lua_State *L, int grads) {
    dpy_module *m = dpy_checkmodule(L, 1);
    dpy_tensor *t = dpy_checktensor(L, 2);
    if (!grads)
        own_buffer(L, m);
    if (dpy_module_set_flat(m, t, grads) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

/* {==== models built alike share their parameters until one is written ====}
** Every node of a run draws the same initial model (container.build seeds them alike), and a
** node's start touching fresh memory for its copy is most of what the start costs at thousands of
** nodes. m:share_initial() makes m's parameters views of the process's one buffer of those values
** (compared byte for byte: a model drawn differently keeps its own), copied on write as the
** buffer share_flat sends is. The process holds the buffers it hands out, the last INITIAL_MAX
** kinds, until its nodes are built (dpy_nn_forget_initial): while it holds one every holder sees it
** shared, and once it lets one go nothing adds a holder. */
#define INITIAL_MAX 4
static struct { void *buf; size_t bytes; } initial[INITIAL_MAX];
static pthread_mutex_t initial_mu = PTHREAD_MUTEX_INITIALIZER;
static int initial_closed;   /* the nodes are built: a late call (a node that gave its slot back
                             ** while it built) keeps its own copy rather than a buffer held for good */

/* m:share_initial() -> whether m's parameters are now views of the process's shared buffer */
static int m_share_initial(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    int shared = 0;
    size_t bytes = (size_t)dpy_module_numel(m) * sizeof(float);
    if (!dpy_module_plain(m) || bytes == 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    pthread_mutex_lock(&initial_mu);
    if (initial_closed) {
        pthread_mutex_unlock(&initial_mu);
        lua_pushboolean(L, 0);
        return 1;
    }
    int k = 0;
    for (; k < INITIAL_MAX && initial[k].buf; k++)
        if (initial[k].bytes == bytes && dpy_module_flat_equals(m, initial[k].buf, bytes))
            break;
    if (k < INITIAL_MAX && initial[k].buf) {   /* the same values: the shared copy instead of m's */
        dpy_fabric_retain(initial[k].buf);
        shared = dpy_module_adopt_flat(m, initial[k].buf, bytes, 0, dpy_fabric_release) == DPY_OK;
    } else {                                   /* the first of its kind: m's values become it */
        if (k == INITIAL_MAX) {                /* the oldest kind makes room */
            dpy_fabric_release(initial[0].buf);
            memmove(initial, initial + 1, (INITIAL_MAX - 1) * sizeof initial[0]);
            initial[--k].buf = NULL;
        }
        void *buf = dpy_fabric_buffer(bytes);
        if (buf && dpy_module_adopt_flat(m, buf, bytes, 1, dpy_fabric_release) == DPY_OK) {
            dpy_fabric_retain(buf);
            initial[k].buf = buf;
            initial[k].bytes = bytes;
            shared = 1;
        }
    }
    pthread_mutex_unlock(&initial_mu);
    lua_pushboolean(L, shared);
    return 1;
}

void dpy_nn_forget_initial(void) {
    dpy_module_forget_initial();
    pthread_mutex_lock(&initial_mu);
    initial_closed = 1;
    for (int k = 0; k < INITIAL_MAX; k++) {
        dpy_fabric_release(initial[k].buf);
        initial[k].buf = NULL;
    }
    pthread_mutex_unlock(&initial_mu);
}

/* m:set_flat(t); raises unless t is 1-d with m:numel() values */
static int m_set_flat(lua_State *L) { return set_flat(L, 0); }
/* m:set_grad_flat(t): the parameters' gradients from one flat vector */
static int m_set_grad_flat(lua_State *L) { return set_flat(L, 1); }

/* m:mix(self_weight, {x1, ...}, {w1, ...}): each parameter p <- self_weight * p + sum w_j x_j
** (x_j flat vectors of m:numel() values), in place (into a new buffer while local receivers
** read the one m:share_flat sent); raises on a size mismatch */
static int m_mix(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    double self_weight = luaL_checknumber(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TTABLE);
    size_t n = (size_t)luaL_len(L, 3);
    luaL_argcheck(L, (size_t)luaL_len(L, 4) == n, 4, "one weight per tensor");
    const dpy_tensor **xs = lua_newuserdatauv(L, (n ? n : 1) * sizeof *xs, 0);
    double *ws = lua_newuserdatauv(L, (n ? n : 1) * sizeof *ws, 0);
    for (size_t i = 0; i < n; i++) {
        lua_geti(L, 3, (lua_Integer)i + 1);
        xs[i] = dpy_checktensor(L, lua_gettop(L));
        lua_pop(L, 1);   /* the list keeps it */
        lua_geti(L, 4, (lua_Integer)i + 1);
        ws[i] = luaL_checknumber(L, -1);
        lua_pop(L, 1);
    }
    if (read_by_others(m) && dpy_module_plain(m)) {   /* the sum into a new buffer: no copy first */
        size_t bytes;
        void *fresh = model_buffer(L, m, &bytes);
        if (dpy_module_mix_into(m, fresh, bytes, dpy_fabric_release, self_weight, xs, ws, n) != DPY_OK)
            return dpy_torch_error(L);
    } else {
        own_buffer(L, m);
        if (dpy_module_mix(m, self_weight, xs, ws, n) != DPY_OK)
            return dpy_torch_error(L);
    }
    return 0;
}

/* m:train([on]) -> m; m:eval() -> m */
static int m_train(lua_State *L) {
    dpy_module_train(dpy_checkmodule(L, 1), lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2));
    lua_settop(L, 1);
    return 1;
}

static int m_eval(lua_State *L) {
    dpy_module_train(dpy_checkmodule(L, 1), 0);
    lua_settop(L, 1);
    return 1;
}

static int m_is_training(lua_State *L) {
    lua_pushboolean(L, dpy_module_is_training(dpy_checkmodule(L, 1)));
    return 1;
}

/* m:to(dtype | device | {dtype=, device=}) -> m (in place, as libtorch's Module::to) */
static int m_to(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    dpy_dtype d = DPY_NDTYPES;
    const char *device = NULL;
    if (lua_type(L, 2) == LUA_TSTRING) {
        const char *s = lua_tostring(L, 2);
        if (strcmp(s, "cpu") == 0 || strncmp(s, "cuda", 4) == 0) {
            lua_createtable(L, 0, 1);
            lua_pushvalue(L, 2);
            lua_setfield(L, -2, "device");
            lua_replace(L, 2);
        }
    }
    dpy_optoptions(L, 2, &d, &device);
    if (dpy_module_to(m, d == DPY_NDTYPES ? -1 : (int)d, device) != DPY_OK)
        return dpy_torch_error(L);
    lua_settop(L, 1);
    return 1;
}

static int m_zero_grad(lua_State *L) {
    if (dpy_module_zero_grad(dpy_checkmodule(L, 1)) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

/* m:save(path), m:load(path) -> true | nil, err (libtorch's archive format) */
static int m_save(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    return dpy_torch_result(L, dpy_module_save(m, luaL_checkstring(L, 2)));
}

static int m_load(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    const char *path = luaL_checkstring(L, 2);
    char err[512];
    if (dpy_zip_check_file(path, err, sizeof err) != 0) {   /* torch reads members without CRCs */
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    return dpy_torch_result(L, dpy_module_load(m, path));
}

static int m_free(lua_State *L) {
    module_box *b = luaL_checkudata(L, 1, DPY_MODULE_MT);
    dpy_module_free(b->h);
    b->h = NULL;
    return 0;
}

static int m_tostring(lua_State *L) {
    module_box *b = luaL_checkudata(L, 1, DPY_MODULE_MT);
    if (b->h == NULL) {
        lua_pushstring(L, "dpy.Module(freed)");
        return 1;
    }
    char *buf = malloc(16384);
    if (buf && dpy_module_format(b->h, buf, 16384) == DPY_OK) {
        lua_pushfstring(L, "dpy.Module(%I parameters) ", (lua_Integer)dpy_module_numel(b->h));
        lua_pushstring(L, buf);   /* may raise on memory; buf would leak only then */
        free(buf);
        lua_concat(L, 2);
        return 1;
    }
    free(buf);
    lua_pushstring(L, "dpy.Module");
    return 1;
}

/* m.name: a method, else a child module by name */
static int m_index(lua_State *L) {
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return 1;
    if (lua_getiuservalue(L, 1, 1) == LUA_TTABLE && lua_getfield(L, -1, "children") == LUA_TTABLE) {
        lua_pushvalue(L, 2);
        lua_rawget(L, -2);
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

static const char *const LOSSES[] = {"cross_entropy", "nll", "mse", "bce_with_logits", NULL};

/* m:per_sample_grads(x, y [, loss = "cross_entropy" [, batched = true]]) -> n x numel
** gradients, n losses: one C call for the batch (DP-SGD) */
static int m_per_sample_grads(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    dpy_tensor *x = dpy_checktensor(L, 2);
    dpy_tensor *y = dpy_checktensor(L, 3);
    int kind = luaL_checkoption(L, 4, "cross_entropy", LOSSES);
    int batched = lua_isnoneornil(L, 5) ? 1 : lua_toboolean(L, 5);
    dpy_tensor_box *g = dpy_newtensor(L);
    dpy_tensor_box *l = dpy_newtensor(L);
    if (dpy_module_per_sample_grads(&g->h, &l->h, m, (dpy_loss_kind)kind, x, y, batched) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, g);
    dpy_tensor_filled(L, l);
    return 2;
}

/* m:private_grad(x, y, clip, sigma [, loss = "cross_entropy" [, generator [, batched = true]]])
** -> DP-SGD's gradient (numel), n losses: clipped per-sample gradients, summed, noised, / n */
static int m_private_grad(lua_State *L) {
    dpy_module *m = dpy_checkmodule(L, 1);
    dpy_tensor *x = dpy_checktensor(L, 2);
    dpy_tensor *y = dpy_checktensor(L, 3);
    double clip = luaL_checknumber(L, 4), sigma = luaL_checknumber(L, 5);
    luaL_argcheck(L, clip > 0, 4, "clip must be > 0");
    luaL_argcheck(L, sigma >= 0, 5, "sigma must be >= 0");
    int kind = luaL_checkoption(L, 6, "cross_entropy", LOSSES);
    dpy_generator *gen = dpy_optgenerator(L, 7);
    int batched = lua_isnoneornil(L, 8) ? 1 : lua_toboolean(L, 8);
    dpy_tensor_box *g = dpy_newtensor(L);
    dpy_tensor_box *l = dpy_newtensor(L);
    if (dpy_module_private_grad(&g->h, &l->h, m, (dpy_loss_kind)kind, x, y, clip, sigma, gen, batched) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, g);
    dpy_tensor_filled(L, l);
    return 2;
}

/* nn.core.loss(kind, input, target [, reduction]) -> dpy.Tensor */
static int n_loss(lua_State *L) {
    static const char *const reductions[] = {"mean", "sum", "none", NULL};
    int kind = luaL_checkoption(L, 1, NULL, LOSSES);
    dpy_tensor *input = dpy_checktensor(L, 2);
    dpy_tensor *target = dpy_checktensor(L, 3);
    int red = luaL_checkoption(L, 4, "mean", reductions);
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_loss(&b->h, (dpy_loss_kind)kind, input, target, (dpy_reduction)red) != DPY_OK)
        return luaL_error(L, "%s: %s", LOSSES[kind], dpy_torch_errmsg());
    dpy_tensor_filled(L, b);
    return 1;
}

static int n_is_module(lua_State *L) {
    lua_pushboolean(L, luaL_testudata(L, 1, DPY_MODULE_MT) != NULL);
    return 1;
}

static const luaL_Reg methods[] = {
    {"forward", m_forward}, {"parameters", m_parameters}, {"is_native", m_is_native},
    {"named_parameters", m_named_parameters}, {"named_buffers", m_named_buffers}, {"numel", m_numel}, {"get_flat", m_get_flat},
    {"share_flat", m_share_flat}, {"own_flat", m_own_flat}, {"share_initial", m_share_initial},
    {"grad_flat", m_grad_flat}, {"set_flat", m_set_flat}, {"set_grad_flat", m_set_grad_flat},
    {"per_sample_grads", m_per_sample_grads}, {"private_grad", m_private_grad}, {"mix", m_mix}, {"train", m_train}, {"eval", m_eval},
    {"is_training", m_is_training}, {"to", m_to}, {"zero_grad", m_zero_grad}, {"save", m_save},
    {"load", m_load}, {"free", m_free}, {NULL, NULL}};

static const luaL_Reg meta[] = {{"__gc", m_free}, {"__close", m_free}, {"__call", m_call},
                                {"__tostring", m_tostring}, {NULL, NULL}};

static const luaL_Reg functions[] = {{"layer", n_layer}, {"container", n_container},
                                     {"loss", n_loss}, {"is_module", n_is_module},
                                     {NULL, NULL}};

int luaopen_dpy_nn_core(lua_State *L) {
    luaL_newmetatable(L, DPY_MODULE_MT);   /* stack: mt */
    luaL_setfuncs(L, meta, 0);
    luaL_newlib(L, methods);               /* stack: mt, methods */
    lua_pushcclosure(L, m_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newlib(L, functions);
    return 1;
}
