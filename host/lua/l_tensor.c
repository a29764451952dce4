/*
** l_tensor.c: dpy.Tensor, libtorch tensors as Lua userdata (STYLE.md 4.3 and 4.5).
** Positions (dims, indices, narrow starts) are 0-based as in libtorch; negative dims count
** from the end. Misuse and libtorch errors raise; nothing C++ crosses into Lua.
*/
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dpy_arrays.h"
#include "dpy_lua.h"

#define GC_NUDGE_BYTES ((size_t)64 << 20)

/* {==== boxes ====} */

dpy_tensor_box *dpy_newtensor(lua_State *L) {
    dpy_tensor_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->h = NULL;
    b->flags = 0;
    b->counted = 0;
    luaL_setmetatable(L, DPY_TENSOR_MT);
    return b;
}

void *dpy_push_empty(lua_State *L, size_t n, dpy_dtype dtype) {
    dpy_tensor_box *b = dpy_newtensor(L);
    int64_t shape[1] = {(int64_t)n};
    if (dpy_tensor_empty(&b->h, shape, 1, dtype, NULL) != DPY_OK)
        dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return (void *)dpy_tensor_data(b->h);
}

/*
** Lua's GC cannot see tensor memory: count the bytes each tensor handed to Lua alone holds, and
** collect once 64 MiB more are live than after the last collection, so loops that forget :free()
** stay bounded. Tensors freed by hand never trigger it: a full collection costs milliseconds, and
** in a run every node would pay it in the same round. Views, and the data the process shares,
** count nothing: collecting their boxes frees no memory (a view of a base freed before it goes
** uncounted).
*/
void dpy_tensor_filled(lua_State *L, dpy_tensor_box *b) {
    dpy_state *st = dpy_state_of(L);
    b->counted = dpy_tensor_own_bytes(b->h);
    st->tensor_live += b->counted;
    if (st->tensor_live > st->tensor_peak)
        st->tensor_peak = st->tensor_live;
    if (st->tensor_live > st->tensor_floor + GC_NUDGE_BYTES) {
        lua_gc(L, LUA_GCCOLLECT);
        st->tensor_floor = st->tensor_live;
    }
}

void dpy_tensor_drop(dpy_tensor_box *b) {
    dpy_tensor_free(b->h);
    b->h = NULL;
}

static dpy_tensor_box *checkbox(lua_State *L, int arg) {
    dpy_tensor_box *b = luaL_checkudata(L, arg, DPY_TENSOR_MT);
    if (b->h == NULL)
        luaL_argerror(L, arg, "use of a freed dpy.Tensor");
    return b;
}

dpy_tensor *dpy_checktensor(lua_State *L, int arg) { return checkbox(L, arg)->h; }

dpy_tensor *dpy_testtensor(lua_State *L, int arg) {
    dpy_tensor_box *b = luaL_testudata(L, arg, DPY_TENSOR_MT);
    return b ? b->h : NULL;
}

static dpy_tensor *checkwritable(lua_State *L, int arg) {
    dpy_tensor_box *b = checkbox(L, arg);
    if (b->flags & DPY_TF_READONLY)
        luaL_argerror(L, arg, "read-only dpy.Tensor (shared: the dataset, or a model sent or "
                              "received); clone it first");
    return b->h;
}

int dpy_torch_error(lua_State *L) { return luaL_error(L, "torch: %s", dpy_torch_errmsg()); }

int dpy_torch_result(lua_State *L, dpy_err e) {
    if (e == DPY_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    luaL_pushfail(L);
    lua_pushstring(L, dpy_torch_errmsg());
    return 2;
}

/* Finishes an op that filled box b (on top of the stack): raises on failure, else returns 1. */
static int done(lua_State *L, dpy_tensor_box *b, dpy_err e) {
    if (e != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return 1;
}

/* __gc, __close and t:free(): idempotent, never raises */
static int t_free(lua_State *L) {
    dpy_tensor_box *b = luaL_checkudata(L, 1, DPY_TENSOR_MT);
    if (b->h) {
        dpy_state *st = dpy_state_of(L);
        size_t n = b->counted;
        st->tensor_live = st->tensor_live > n ? st->tensor_live - n : 0;
        if (st->tensor_live < st->tensor_floor)
            st->tensor_floor = st->tensor_live;
        dpy_tensor_free(b->h);
        b->h = NULL;
    }
    return 0;
}

/* {==== argument helpers ====} */

static const char *const DTYPE_NAMES[] = {"float32", "float64", "float16", "bfloat16", "int64",
                                          "int32", "int8", "uint8", "bool", NULL};

dpy_dtype dpy_checkdtype(lua_State *L, int arg) {
    static const char *const aliases[] = {"float", "double", "half", "long", "int", NULL};
    static const dpy_dtype alias_types[] = {DPY_FLOAT32, DPY_FLOAT64, DPY_FLOAT16, DPY_INT64,
                                            DPY_INT32};
    const char *name = luaL_checkstring(L, arg);
    for (int i = 0; DTYPE_NAMES[i]; i++)
        if (strcmp(name, DTYPE_NAMES[i]) == 0)
            return (dpy_dtype)i;
    for (int i = 0; aliases[i]; i++)
        if (strcmp(name, aliases[i]) == 0)
            return alias_types[i];
    return (dpy_dtype)luaL_argerror(
        L, arg, lua_pushfstring(L, "unknown dtype '%s' (float32, float64, float16, bfloat16, "
                                   "int64, int32, int8, uint8 or bool)", name));
}

/* Checks a device string before libtorch sees it, for a clearer message. */
static const char *checkdevice(lua_State *L, int arg) {
    const char *d = luaL_checkstring(L, arg);
    if (strcmp(d, "cpu") == 0)
        return d;
    if (strncmp(d, "cuda", 4) == 0) {
        if (dpy_torch_cuda_count() == 0)
            luaL_argerror(L, arg, "device 'cuda' requested, but this libtorch build sees no "
                                  "CUDA or ROCm device");
        return d;
    }
    return (const char *)(intptr_t)luaL_argerror(
        L, arg, lua_pushfstring(L, "unknown device '%s' (cpu or cuda[:N])", d));
}

void dpy_optoptions(lua_State *L, int arg, dpy_dtype *dtype, const char **device) {
    if (lua_isnoneornil(L, arg))
        return;
    if (lua_type(L, arg) == LUA_TSTRING) {
        *dtype = dpy_checkdtype(L, arg);
        return;
    }
    luaL_checktype(L, arg, LUA_TTABLE);
    lua_getfield(L, arg, "dtype");
    if (!lua_isnil(L, -1))
        *dtype = dpy_checkdtype(L, lua_gettop(L));
    lua_getfield(L, arg, "device");
    if (!lua_isnil(L, -1))
        *device = checkdevice(L, lua_gettop(L));   /* the string stays on the stack */
}

static int64_t checkdim_value(lua_State *L, int arg, lua_Integer v) {
    if (v < 0)
        luaL_argerror(L, arg, "sizes must be >= 0");
    return (int64_t)v;
}

/* The size at stack index idx (argument arg): an integer, or a float with an integer value (2.0,
** as 4 / 2 gives); any other number is refused naming it. */
static int64_t checkdim(lua_State *L, int idx, int arg) {
    int exact;
    lua_Integer v = lua_tointegerx(L, idx, &exact);
    if (!exact)
        luaL_argerror(L, arg, lua_pushfstring(L, "sizes must be integers, got %s", luaL_tolstring(L, idx, NULL)));
    return checkdim_value(L, arg, v);
}

int dpy_checkshape(lua_State *L, int arg, int64_t *shape, int *next) {
    int n = 0;
    if (lua_istable(L, arg) && luaL_getmetafield(L, arg, "__name") == LUA_TNIL) {
        n = (int)luaL_len(L, arg);
        if (n > DPY_MAXDIM)
            luaL_argerror(L, arg, "too many dimensions");
        for (int i = 0; i < n; i++) {
            lua_geti(L, arg, i + 1);
            shape[i] = checkdim(L, -1, arg);
            lua_pop(L, 1);
        }
        *next = arg + 1;
        return n;
    }
    while (lua_type(L, arg + n) == LUA_TNUMBER) {   /* what follows the sizes is an options table */
        if (n == DPY_MAXDIM)
            luaL_argerror(L, arg + n, "too many dimensions");
        shape[n] = checkdim(L, arg + n, arg + n);
        n++;
    }
    *next = arg + n;
    return n;
}

/* {==== creation ====} */

/* The integer at idx in *slot, or NULL for a float: an int64 past 2^53 stays exact (it went
** through a double, and math.maxinteger became math.mininteger). */
static const int64_t *integer_at(lua_State *L, int idx, int64_t *slot) {
    if (!lua_isinteger(L, idx))
        return NULL;
    *slot = (int64_t)lua_tointeger(L, idx);
    return slot;
}


/* tensor.full(shape..., value [, options]) and friends; value is upvalue-free. */
static int creation(lua_State *L, double value, int has_value_arg, int empty) {
    int64_t shape[DPY_MAXDIM];
    int next, ndim, vidx = 0;
    if (has_value_arg && !lua_istable(L, 1)) {
        /* full(2, 3, 7): the numbers are the shape's, then the value, integer or not */
        int k = 0;
        while (lua_type(L, k + 1) == LUA_TNUMBER)
            k++;
        if (k == 0)
            luaL_checknumber(L, 1);
        if (k - 1 > DPY_MAXDIM)
            luaL_argerror(L, DPY_MAXDIM + 1, "too many dimensions");
        for (ndim = 0; ndim < k - 1; ndim++)
            shape[ndim] = checkdim(L, ndim + 1, ndim + 1);
        value = lua_tonumber(L, k);
        vidx = k;
        next = k + 1;
    } else {
        ndim = dpy_checkshape(L, 1, shape, &next);
        if (has_value_arg) {
            vidx = next;
            value = luaL_checknumber(L, next++);
        }
    }
    /* an integer a double does not hold exactly (past 2^53) is filled in as itself */
    int64_t iv;
    const int64_t *exact = vidx ? integer_at(L, vidx, &iv) : NULL;
    if (exact && iv >= -((int64_t)1 << 53) && iv <= ((int64_t)1 << 53))
        exact = NULL;
    dpy_dtype dtype = DPY_FLOAT32;
    const char *device = NULL;
    dpy_optoptions(L, next, &dtype, &device);
    dpy_tensor_box *b = dpy_newtensor(L);
    dpy_err e = empty ? dpy_tensor_empty(&b->h, shape, ndim, dtype, device)
                      : dpy_tensor_full(&b->h, shape, ndim, exact ? 0 : value, dtype, device);
    if (e == DPY_OK && exact)
        e = dpy_tensor_scalar(NULL, DPY_COPY, b->h, value, exact, 0);
    return done(L, b, e);
}

/* tensor.zeros(2, 3 [, options]) or tensor.zeros({2, 3} [, options]) -> dpy.Tensor */
static int f_zeros(lua_State *L) { return creation(L, 0, 0, 0); }
static int f_ones(lua_State *L) { return creation(L, 1, 0, 0); }
static int f_full(lua_State *L) { return creation(L, 0, 1, 0); }
static int f_empty(lua_State *L) { return creation(L, 0, 0, 1); }

/* tensor.max_bytes() -> the cap on a new tensor's bytes; tensor.set_max_bytes(n) */
static int f_max_bytes(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dpy_tensor_max_bytes());
    return 1;
}

static int f_set_max_bytes(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n > 0, 1, "the cap must be > 0 bytes");
    dpy_tensor_set_max_bytes((uint64_t)n);
    return 0;
}

/* tensor.eye(n [, m] [, options]) */
static int f_eye(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    int opt = 2;
    lua_Integer m = n;
    if (lua_isinteger(L, 2))
        m = lua_tointeger(L, opt++);
    dpy_dtype dtype = DPY_FLOAT32;
    const char *device = NULL;
    dpy_optoptions(L, opt, &dtype, &device);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_eye(&b->h, n, m, dtype, device));
}

/* tensor.arange([start,] end [, step] [, options]): int64 when all bounds are integers */
static int f_arange(lua_State *L) {
    int nnum = 0;
    while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER)
        nnum++;
    if (nnum == 0)
        luaL_argerror(L, 1, "number expected");
    double start = 0, end, step = 1;
    int all_int = 1;
    for (int i = 1; i <= nnum; i++)
        all_int = all_int && lua_isinteger(L, i);
    if (nnum == 1) {
        end = lua_tonumber(L, 1);
    } else {
        start = lua_tonumber(L, 1);
        end = lua_tonumber(L, 2);
        if (nnum == 3)
            step = lua_tonumber(L, 3);
    }
    dpy_dtype dtype = all_int ? DPY_INT64 : DPY_FLOAT32;
    const char *device = NULL;
    dpy_optoptions(L, nnum + 1, &dtype, &device);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_arange(&b->h, start, end, step, dtype, device));
}

/* tensor.linspace(start, end, steps [, options]) */
static int f_linspace(lua_State *L) {
    double start = luaL_checknumber(L, 1), end = luaL_checknumber(L, 2);
    lua_Integer steps = luaL_checkinteger(L, 3);
    dpy_dtype dtype = DPY_FLOAT32;
    const char *device = NULL;
    dpy_optoptions(L, 4, &dtype, &device);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_linspace(&b->h, start, end, steps, dtype, device));
}

/*
** tensor.rand(shape... [, options]), randn, randint(low, high, shape... [, options]),
** randperm(n [, options]), bernoulli(p, shape... [, options]). options may carry a generator
** ({generator = g}); without one the state's default generator is used.
*/
static int random_op(lua_State *L, dpy_random_kind kind) {
    int arg = 1;
    double low = 0, high = 0;
    if (kind == DPY_RANDINT) {
        low = (double)luaL_checkinteger(L, 1);
        high = (double)luaL_checkinteger(L, 2);
        if (high <= low)
            luaL_argerror(L, 2, "high must be greater than low");
        arg = 3;
    } else if (kind == DPY_BERNOULLI) {
        low = luaL_checknumber(L, 1);
        arg = 2;
    }
    int64_t shape[DPY_MAXDIM];
    int next;
    int ndim = dpy_checkshape(L, arg, shape, &next);
    if (kind == DPY_RANDPERM && ndim != 1)
        luaL_argerror(L, 1, "randperm takes one size");
    dpy_dtype dtype = (kind == DPY_RANDINT || kind == DPY_RANDPERM) ? DPY_INT64 : DPY_FLOAT32;
    const char *device = NULL;
    dpy_optoptions(L, next, &dtype, &device);
    int gen_arg = 0;
    if (lua_istable(L, next)) {
        lua_getfield(L, next, "generator");
        gen_arg = lua_isnil(L, -1) ? 0 : lua_gettop(L);
    }
    dpy_generator *g = gen_arg ? dpy_checkgenerator(L, gen_arg) : dpy_optgenerator(L, 0);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_random(&b->h, kind, shape, ndim, low, high, dtype, device, g));
}

static int f_rand(lua_State *L) { return random_op(L, DPY_RAND); }
static int f_randn(lua_State *L) { return random_op(L, DPY_RANDN); }
static int f_randint(lua_State *L) { return random_op(L, DPY_RANDINT); }
static int f_randperm(lua_State *L) { return random_op(L, DPY_RANDPERM); }
static int f_bernoulli(lua_State *L) { return random_op(L, DPY_BERNOULLI); }

/* {==== tables in and out ====} */

typedef struct {
    int64_t shape[DPY_MAXDIM];
    int ndim;
    int has_float, has_bool, has_int;
    size_t count;
    double *vals;
    int64_t *ivals;   /* the same values as integers: an int64 past 2^53 stays exact */
} table_walk;

/* Pass 1 (fill = 0) follows the first element down to find the shape; pass 2 checks every row
** against it and collects the values. */
static void walk_table(lua_State *L, int idx, int depth, table_walk *w, int fill) {
    lua_Integer n = luaL_len(L, idx);
    if (n < 0)   /* a __len metamethod's */
        luaL_error(L, "tensor.new: a table of length %I", n);
    if (!fill) {
        if (depth == DPY_MAXDIM)
            luaL_error(L, "tensor.new: nested deeper than %d levels", DPY_MAXDIM);
        w->shape[depth] = n;
        w->ndim = depth + 1;
        if (n > 0) {
            lua_geti(L, idx, 1);
            int t = lua_type(L, -1);
            if (t == LUA_TTABLE)
                walk_table(L, lua_gettop(L), depth + 1, w, 0);
            else if (t != LUA_TNUMBER && t != LUA_TBOOLEAN)
                luaL_error(L, "tensor.new: elements must be numbers or booleans, got %s",
                           luaL_typename(L, -1));
            lua_pop(L, 1);
        }
        return;
    }
    if (n != w->shape[depth])
        luaL_error(L, "tensor.new: ragged table (a row of %d where %d were expected)", (int)n,
                   (int)w->shape[depth]);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        int t = lua_type(L, -1);
        if (t == LUA_TTABLE) {
            if (depth + 1 >= w->ndim)
                luaL_error(L, "tensor.new: ragged table (unexpected nesting)");
            walk_table(L, lua_gettop(L), depth + 1, w, 1);
        } else if (depth + 1 != w->ndim) {
            luaL_error(L, "tensor.new: ragged table (a %s where a table was expected)",
                       luaL_typename(L, -1));
        } else if (t == LUA_TBOOLEAN) {
            w->ivals[w->count] = lua_toboolean(L, -1);
            w->vals[w->count++] = lua_toboolean(L, -1);
            w->has_bool = 1;
        } else if (t == LUA_TNUMBER) {
            w->ivals[w->count] = lua_isinteger(L, -1) ? (int64_t)lua_tointeger(L, -1) : 0;
            w->vals[w->count++] = lua_tonumber(L, -1);
            if (lua_isinteger(L, -1))
                w->has_int = 1;
            else
                w->has_float = 1;
        } else {
            luaL_error(L, "tensor.new: elements must be numbers or booleans, got %s",
                       luaL_typename(L, -1));
        }
        lua_pop(L, 1);
    }
}

/* tensor.new(value_or_nested_table [, options]) -> dpy.Tensor: float32 if any value is a float,
** int64 if all are integers, bool if all are booleans (as PyTorch infers) */
static int f_new(lua_State *L) {
    lua_settop(L, 2);
    if (lua_type(L, 1) == LUA_TNUMBER || lua_type(L, 1) == LUA_TBOOLEAN) {
        lua_createtable(L, 1, 0);
        lua_pushvalue(L, 1);
        lua_rawseti(L, -2, 1);
        lua_replace(L, 1);
        lua_pushboolean(L, 1);   /* marks "scalar": reshape to 0-dim below */
    } else {
        luaL_checktype(L, 1, LUA_TTABLE);
        lua_pushboolean(L, 0);
    }
    int scalar = lua_toboolean(L, -1);
    lua_pop(L, 1);
    table_walk w;
    memset(&w, 0, sizeof w);
    walk_table(L, 1, 0, &w, 0);
    size_t total = 1;
    for (int i = 0; i < w.ndim; i++)   /* lengths from __len metamethods may be anything */
        if (__builtin_mul_overflow(total, (size_t)w.shape[i], &total) || total > SIZE_MAX / 16)
            return luaL_error(L, "tensor.new: a table of more values than memory holds");
    /* the value buffer is a userdata, so an error below frees it with the GC */
    w.vals = lua_newuserdatauv(L, (total ? total : 1) * sizeof(double), 0);
    w.ivals = lua_newuserdatauv(L, (total ? total : 1) * sizeof(int64_t), 0);
    walk_table(L, 1, 0, &w, 1);
    dpy_dtype dtype = w.has_float ? DPY_FLOAT32 : w.has_int ? DPY_INT64
                      : w.has_bool ? DPY_BOOL : DPY_FLOAT32;
    const char *device = NULL;
    dpy_optoptions(L, 2, &dtype, &device);
    if (scalar)
        w.ndim = 0;
    dpy_tensor_box *tmp = dpy_newtensor(L);
    int exact = !w.has_float;   /* integers (and booleans) as int64, not through a double */
    if (dpy_tensor_from_data(&tmp->h, exact ? (const void *)w.ivals : (const void *)w.vals,
                             total * 8, exact ? DPY_INT64 : DPY_FLOAT64, w.shape, w.ndim) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_box *b = dpy_newtensor(L);
    dpy_err e = dpy_tensor_to(&b->h, tmp->h, dtype, device);
    dpy_tensor_drop(tmp);
    return done(L, b, e);
}

/* tensor.from_bytes(s, dtype, shape...) -> dpy.Tensor (a copy; native byte order) */
static int f_from_bytes(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    dpy_dtype dtype = dpy_checkdtype(L, 2);
    int64_t shape[DPY_MAXDIM];
    int next;
    int ndim = dpy_checkshape(L, 3, shape, &next);
    if (ndim == 0 && lua_isnoneornil(L, 3)) {   /* no shape: 1-d */
        size_t es = dpy_dtype_size(dtype);
        if (len % es != 0)
            luaL_argerror(L, 1, "length is not a multiple of the dtype's size");
        shape[0] = (int64_t)(len / es);
        ndim = 1;
    }
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_from_data(&b->h, s, len, dtype, shape, ndim));
}

/* t:bytes() -> string: the raw contiguous values (native byte order) */
static int t_bytes(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    dpy_tensor_box *c = dpy_newtensor(L);
    if (dpy_tensor_cpu_contiguous(&c->h, t, 0, DPY_FLOAT32) != DPY_OK)
        return dpy_torch_error(L);
    lua_pushlstring(L, dpy_tensor_data(c->h), dpy_tensor_nbytes(c->h));
    dpy_tensor_drop(c);
    return 1;
}

static void push_values(lua_State *L, const dpy_tensor *c, int depth, size_t *pos,
                        int as_int, int as_bool) {
    if (depth == dpy_tensor_dim(c)) {
        const void *d = dpy_tensor_data(c);
        if (as_bool)
            lua_pushboolean(L, ((const int64_t *)d)[*pos] != 0);
        else if (as_int)
            lua_pushinteger(L, ((const int64_t *)d)[*pos]);
        else
            lua_pushnumber(L, ((const double *)d)[*pos]);
        (*pos)++;
        return;
    }
    int64_t n = dpy_tensor_size(c, depth);
    luaL_checkstack(L, 3, "tensor too deep");
    lua_createtable(L, (int)n, 0);
    for (int64_t i = 0; i < n; i++) {
        push_values(L, c, depth + 1, pos, as_int, as_bool);
        lua_rawseti(L, -2, i + 1);
    }
}

/* t:totable() -> nested Lua tables (a number for a 0-dim tensor); integers stay integers */
static int t_totable(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    dpy_dtype dt = dpy_tensor_dtype(t);
    int as_bool = dt == DPY_BOOL;
    int as_int = as_bool || dt == DPY_INT64 || dt == DPY_INT32 || dt == DPY_INT8 ||
                 dt == DPY_UINT8;
    dpy_tensor_box *c = dpy_newtensor(L);
    if (dpy_tensor_cpu_contiguous(&c->h, t, 1, as_int ? DPY_INT64 : DPY_FLOAT64) != DPY_OK)
        return dpy_torch_error(L);
    size_t pos = 0;
    push_values(L, c->h, 0, &pos, as_int, as_bool);
    dpy_tensor_drop(c);
    return 1;
}

/* t:item() -> number (an integer for integer dtypes, a boolean for bool) */
static int t_item(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    double d;
    int64_t i;
    if (dpy_tensor_item(t, &d, &i) != DPY_OK)
        return dpy_torch_error(L);
    dpy_dtype dt = dpy_tensor_dtype(t);
    if (dt == DPY_BOOL)
        lua_pushboolean(L, i != 0);
    else if (dt == DPY_INT64 || dt == DPY_INT32 || dt == DPY_INT8 || dt == DPY_UINT8)
        lua_pushinteger(L, i);
    else
        lua_pushnumber(L, d);
    return 1;
}

/* {==== facts ====} */

static int t_dim(lua_State *L) {
    lua_pushinteger(L, dpy_tensor_dim(dpy_checktensor(L, 1)));
    return 1;
}

static int t_numel(lua_State *L) {
    lua_pushinteger(L, dpy_tensor_numel(dpy_checktensor(L, 1)));
    return 1;
}

static int normdim(lua_State *L, int arg, lua_Integer d, int ndim) {
    lua_Integer r = d < 0 ? d + ndim : d;
    if (r < 0 || r >= ndim)
        luaL_argerror(L, arg, lua_pushfstring(L, "dim %d out of range for a %d-d tensor",
                                              (int)d, ndim));
    return (int)r;
}

/* t:size() -> {sizes...}; t:size(dim) -> integer */
static int t_size(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    int nd = dpy_tensor_dim(t);
    if (!lua_isnoneornil(L, 2)) {
        int d = normdim(L, 2, luaL_checkinteger(L, 2), nd);
        lua_pushinteger(L, dpy_tensor_size(t, d));
        return 1;
    }
    lua_createtable(L, nd, 0);
    for (int i = 0; i < nd; i++) {
        lua_pushinteger(L, dpy_tensor_size(t, i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int t_len(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    if (dpy_tensor_dim(t) == 0)
        return luaL_error(L, "len() of a 0-d tensor");
    lua_pushinteger(L, dpy_tensor_size(t, 0));
    return 1;
}

static int t_dtype(lua_State *L) {
    lua_pushstring(L, dpy_dtype_name(dpy_tensor_dtype(dpy_checktensor(L, 1))));
    return 1;
}

static int t_device(lua_State *L) {
    char buf[64];
    dpy_tensor_device(dpy_checktensor(L, 1), buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

static int t_nbytes(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dpy_tensor_nbytes(dpy_checktensor(L, 1)));
    return 1;
}

static int t_is_readonly(lua_State *L) {
    lua_pushboolean(L, (checkbox(L, 1)->flags & DPY_TF_READONLY) != 0);
    return 1;
}

/* Header "dpy.Tensor(float32, cpu, [2, 3])", then the values for tensors up to 1000 elements. */
static int t_tostring(lua_State *L) {
    dpy_tensor_box *b = luaL_checkudata(L, 1, DPY_TENSOR_MT);
    if (b->h == NULL) {
        lua_pushstring(L, "dpy.Tensor(freed)");
        return 1;
    }
    char dev[64];
    dpy_tensor_device(b->h, dev, sizeof dev);
    luaL_Buffer buf;
    luaL_buffinit(L, &buf);
    lua_pushfstring(L, "dpy.Tensor(%s, %s, [", dpy_dtype_name(dpy_tensor_dtype(b->h)), dev);
    luaL_addvalue(&buf);
    for (int i = 0; i < dpy_tensor_dim(b->h); i++) {
        lua_pushfstring(L, i ? ", %I" : "%I", (lua_Integer)dpy_tensor_size(b->h, i));
        luaL_addvalue(&buf);
    }
    luaL_addstring(&buf, "])");
    if (dpy_tensor_numel(b->h) > 0 && dpy_tensor_numel(b->h) <= 1000) {
        char *text = malloc(65536);
        if (text && dpy_tensor_format(b->h, text, 65536) == DPY_OK) {
            lua_pushstring(L, text);   /* may raise on memory: free first */
            free(text);
            luaL_addstring(&buf, "\n");
            luaL_addvalue(&buf);
        } else {
            free(text);
        }
    }
    luaL_pushresult(&buf);
    return 1;
}

/* {==== operations ====} */

/* Finishes an op on the box at arg whose result b may be that tensor itself or share its storage
** (detach, contiguous, to the same dtype): a read-only tensor's stays read-only, as its views do. */
static int done_sharing(lua_State *L, dpy_tensor_box *b, dpy_err e, int arg) {
    dpy_tensor_box *a = checkbox(L, arg);
    if (e == DPY_OK && dpy_tensor_shares(b->h, a->h))
        b->flags = a->flags & DPY_TF_READONLY;
    return done(L, b, e);
}

/* t:abs() ... one closure per unary op, the op as upvalue 1 */
static int t_unary(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done_sharing(L, b, dpy_tensor_unary(&b->h, (dpy_unary_op)lua_tointeger(L, lua_upvalueindex(1)), a), 1);
}

/*
** t:add(u [, alpha]), t:sub(...), t:mul(u), ... where u is a dpy.Tensor or a number; the
** metamethods call the same function, so a number may also come first (2 - t).
*/
static int binary_op(lua_State *L, dpy_binary_op op) {
    if (lua_type(L, 1) == LUA_TNUMBER) {   /* s op t */
        dpy_tensor *t = dpy_checktensor(L, 2);
        dpy_tensor_box *b = dpy_newtensor(L);
        int64_t i;
        return done(L, b, dpy_tensor_scalar(&b->h, op, t, lua_tonumber(L, 1),
                                            integer_at(L, 1, &i), 1));
    }
    dpy_tensor *a = dpy_checktensor(L, 1);
    if (lua_type(L, 2) == LUA_TNUMBER) {
        dpy_tensor_box *b = dpy_newtensor(L);
        int64_t i;
        return done(L, b, dpy_tensor_scalar(&b->h, op, a, lua_tonumber(L, 2),
                                            integer_at(L, 2, &i), 0));
    }
    dpy_tensor *u = dpy_checktensor(L, 2);
    double alpha = lua_type(L, 3) == LUA_TNUMBER ? lua_tonumber(L, 3) : 1.0;
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_binary(&b->h, op, a, u, alpha));
}

static int t_binary(lua_State *L) {
    return binary_op(L, (dpy_binary_op)lua_tointeger(L, lua_upvalueindex(1)));
}

/* t:add_(u [, alpha]) ... in place; returns t. Refuses the read-only dataset. */
static int t_binary_inplace(lua_State *L) {
    dpy_binary_op op = (dpy_binary_op)lua_tointeger(L, lua_upvalueindex(1));
    dpy_tensor *a = checkwritable(L, 1);
    dpy_err e;
    int64_t i;
    if (lua_type(L, 2) == LUA_TNUMBER) {
        e = dpy_tensor_scalar(NULL, op, a, lua_tonumber(L, 2), integer_at(L, 2, &i), 0);
    } else {
        dpy_tensor *u = dpy_checktensor(L, 2);
        e = dpy_tensor_binary(NULL, op, a, u, luaL_optnumber(L, 3, 1.0));
    }
    if (e != DPY_OK)
        return dpy_torch_error(L);
    lua_settop(L, 1);
    return 1;
}

/* t:fill_(v), t:zero_() -> t */
static int t_fill_(lua_State *L) {
    dpy_tensor *a = checkwritable(L, 1);
    int64_t i;
    if (dpy_tensor_scalar(NULL, DPY_COPY, a, luaL_checknumber(L, 2), integer_at(L, 2, &i), 0) != DPY_OK)
        return dpy_torch_error(L);
    lua_settop(L, 1);
    return 1;
}

static int t_zero_(lua_State *L) {
    lua_settop(L, 1);
    lua_pushinteger(L, 0);
    return t_fill_(L);
}

static int m_add(lua_State *L) { return binary_op(L, DPY_ADD); }
static int m_sub(lua_State *L) { return binary_op(L, DPY_SUB); }
static int m_mul(lua_State *L) { return binary_op(L, DPY_MUL); }
static int m_div(lua_State *L) { return binary_op(L, DPY_DIV); }
static int m_mod(lua_State *L) { return binary_op(L, DPY_REM); }
static int m_pow(lua_State *L) { return binary_op(L, DPY_POW); }

static int m_unm(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_unary(&b->h, DPY_NEG, a));
}

/* Optional dim at arg: DPY_ALLDIMS when absent. */
static int64_t optdim(lua_State *L, int arg) {
    return lua_isnoneornil(L, arg) ? DPY_ALLDIMS : (int64_t)luaL_checkinteger(L, arg);
}

/*
** t:sum([dim [, keepdim]]) and the other reductions; min, max and median along a dim return
** (values, indices). std and var are unbiased unless the third argument is false.
*/
static int t_reduce(lua_State *L) {
    dpy_reduce_op op = (dpy_reduce_op)lua_tointeger(L, lua_upvalueindex(1));
    dpy_tensor *a = dpy_checktensor(L, 1);
    int64_t dim = optdim(L, 2);
    int keepdim = lua_toboolean(L, 3);
    double p = 1;
    if (op == DPY_STD || op == DPY_VAR)
        p = lua_isnoneornil(L, 4) ? 1 : lua_toboolean(L, 4);
    dpy_tensor_box *v = dpy_newtensor(L);
    dpy_tensor_box *i = dpy_newtensor(L);
    if (dpy_tensor_reduce(&v->h, &i->h, op, a, dim, keepdim, p) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, v);
    if (i->h == NULL) {
        lua_pop(L, 1);
        return 1;
    }
    dpy_tensor_filled(L, i);
    return 2;
}

/* t:norm([p [, dim [, keepdim]]]) -> dpy.Tensor (p = 2 by default) */
static int t_norm(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    double p = luaL_optnumber(L, 2, 2.0);
    int64_t dim = optdim(L, 3);
    int keepdim = lua_toboolean(L, 4);   /* before the box is pushed at index 4 */
    dpy_tensor_box *v = dpy_newtensor(L);
    return done(L, v, dpy_tensor_reduce(&v->h, NULL, DPY_NORM, a, dim, keepdim, p));
}

/* t:kthvalue(k [, dim]), t:topk(k [, dim [, largest]]), t:sort([dim [, descending]])
** -> values, indices; dim defaults to the last one */
static int order_op(lua_State *L, dpy_order_op op) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    int karg = op == DPY_SORT ? 0 : 2;
    lua_Integer k = karg ? luaL_checkinteger(L, karg) : 0;
    int darg = karg ? 3 : 2;
    lua_Integer dim = luaL_optinteger(L, darg, -1);
    int flag = op == DPY_TOPK ? (lua_isnoneornil(L, darg + 1) ? 1 : lua_toboolean(L, darg + 1))
                              : lua_toboolean(L, darg + 1);
    dpy_tensor_box *v = dpy_newtensor(L);
    dpy_tensor_box *i = dpy_newtensor(L);
    if (dpy_tensor_order(&v->h, &i->h, op, a, k, dim, flag) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, v);
    dpy_tensor_filled(L, i);
    return 2;
}

static int t_kthvalue(lua_State *L) { return order_op(L, DPY_KTHVALUE); }
static int t_topk(lua_State *L) { return order_op(L, DPY_TOPK); }
static int t_sort(lua_State *L) { return order_op(L, DPY_SORT); }

/* Shape ops: integer arguments (a table or varargs), result shares storage; read-only stays. */
static int t_shape(lua_State *L) {
    dpy_shape_op op = (dpy_shape_op)lua_tointeger(L, lua_upvalueindex(1));
    dpy_tensor_box *a = checkbox(L, 1);
    int64_t args[DPY_MAXDIM];
    int n = 0;
    if (lua_istable(L, 2)) {
        int next;
        n = dpy_checkshape(L, 2, args, &next);
    } else {
        for (int i = 2; !lua_isnoneornil(L, i); i++) {
            if (n == DPY_MAXDIM)
                luaL_argerror(L, i, "too many arguments");
            args[n++] = (int64_t)luaL_checkinteger(L, i);
        }
    }
    if (op == DPY_FLATTEN) {   /* defaults: the whole tensor */
        if (n < 1) args[0] = 0;
        if (n < 2) args[1] = -1;
        n = 2;
    }
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_tensor_shape(&b->h, op, a->h, args, n) != DPY_OK)
        return dpy_torch_error(L);
    b->flags = a->flags & DPY_TF_READONLY;
    dpy_tensor_filled(L, b);
    return 1;
}

/* t:index_select(dim, index), t:gather(dim, index): the op as upvalue 1 */
static int t_index_dim(lua_State *L) {
    dpy_index_op op = (dpy_index_op)lua_tointeger(L, lua_upvalueindex(1));
    dpy_tensor *a = dpy_checktensor(L, 1);
    lua_Integer dim = luaL_checkinteger(L, 2);
    dpy_tensor *idx = dpy_checktensor(L, 3);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_index(&b->h, op, a, dim, idx));
}

/* t:masked_select(mask) */

static int t_masked_select(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    dpy_tensor *mask = dpy_checktensor(L, 2);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_index(&b->h, DPY_MASKED_SELECT, a, 0, mask));
}

/* t:clamp([min] [, max]) -> dpy.Tensor; nil leaves a side open */
static int t_clamp(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    double lo = lua_isnoneornil(L, 2) ? NAN : luaL_checknumber(L, 2);
    double hi = lua_isnoneornil(L, 3) ? NAN : luaL_checknumber(L, 3);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_clamp(&b->h, a, lo, hi));
}

/* t:to(dtype | device | {dtype=, device=}) -> dpy.Tensor */
static int t_to(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    int dtype = -1;
    const char *device = NULL;
    if (lua_type(L, 2) == LUA_TSTRING) {
        const char *s = lua_tostring(L, 2);
        if (strcmp(s, "cpu") == 0 || strncmp(s, "cuda", 4) == 0)
            device = checkdevice(L, 2);
        else
            dtype = dpy_checkdtype(L, 2);
    } else {
        dpy_dtype d = DPY_NDTYPES;
        luaL_checktype(L, 2, LUA_TTABLE);
        dpy_optoptions(L, 2, &d, &device);
        dtype = d == DPY_NDTYPES ? -1 : (int)d;
    }
    dpy_tensor_box *b = dpy_newtensor(L);
    return done_sharing(L, b, dpy_tensor_to(&b->h, a, dtype, device), 1);
}

static void checklist(lua_State *L, int arg, const dpy_tensor **ts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        lua_geti(L, arg, (lua_Integer)i + 1);
        ts[i] = dpy_testtensor(L, -1);
        if (ts[i] == NULL)
            luaL_argerror(L, arg, lua_pushfstring(L, "element %d is not a live dpy.Tensor",
                                                  (int)i + 1));
        lua_pop(L, 1);   /* the list still holds it */
    }
}

/* tensor.cat(list [, dim]), tensor.stack(list [, dim]) */
static int cat_op(lua_State *L, int stack) {
    lua_settop(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    size_t n = (size_t)luaL_len(L, 1);
    if (n == 0)
        luaL_argerror(L, 1, "empty list");
    const dpy_tensor **ts = lua_newuserdatauv(L, n * sizeof *ts, 0);
    checklist(L, 1, ts, n);
    lua_Integer dim = luaL_optinteger(L, 2, 0);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_cat(&b->h, ts, n, dim, stack));
}

static int f_cat(lua_State *L) { return cat_op(L, 0); }
static int f_stack(lua_State *L) { return cat_op(L, 1); }

/* tensor.where(cond, a, b) */
static int f_where(lua_State *L) {
    dpy_tensor *c = dpy_checktensor(L, 1), *a = dpy_checktensor(L, 2), *u = dpy_checktensor(L, 3);
    dpy_tensor_box *b = dpy_newtensor(L);
    return done(L, b, dpy_tensor_where(&b->h, c, a, u));
}

/* t[i] -> t:select(0, i) (0-based); t.method -> the method */
static int t_index(lua_State *L) {
    if (lua_isinteger(L, 2)) {
        dpy_tensor_box *a = checkbox(L, 1);
        int64_t args[2] = {0, (int64_t)lua_tointeger(L, 2)};
        dpy_tensor_box *b = dpy_newtensor(L);
        if (dpy_tensor_shape(&b->h, DPY_SELECT, a->h, args, 2) != DPY_OK)
            return dpy_torch_error(L);
        b->flags = a->flags & DPY_TF_READONLY;
        dpy_tensor_filled(L, b);
        return 1;
    }
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));   /* methods */
    return 1;
}

/* t[i] = number | dpy.Tensor: fills or copies into the sub-tensor t:select(0, i) */
static int t_newindex(lua_State *L) {
    dpy_tensor *a = checkwritable(L, 1);
    int64_t args[2] = {0, (int64_t)luaL_checkinteger(L, 2)};
    dpy_tensor_box *row = dpy_newtensor(L);
    if (dpy_tensor_shape(&row->h, DPY_SELECT, a, args, 2) != DPY_OK)
        return dpy_torch_error(L);
    dpy_err e;
    int64_t i;
    if (lua_type(L, 3) == LUA_TNUMBER)
        e = dpy_tensor_scalar(NULL, DPY_COPY, row->h, lua_tonumber(L, 3), integer_at(L, 3, &i), 0);
    else
        e = dpy_tensor_binary(NULL, DPY_COPY, row->h, dpy_checktensor(L, 3), 1.0);
    if (e != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

/* {==== autograd and files ====} */

/* t:requires_grad_([on]) -> t */
static int t_requires_grad_(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    if (dpy_tensor_set_requires_grad(a, lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2)) != DPY_OK)
        return dpy_torch_error(L);
    lua_settop(L, 1);
    return 1;
}

static int t_requires_grad(lua_State *L) {
    lua_pushboolean(L, dpy_tensor_requires_grad(dpy_checktensor(L, 1)));
    return 1;
}

/* t:grad() -> dpy.Tensor or nil */
static int t_grad(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_tensor_grad(&b->h, a) != DPY_OK)
        return dpy_torch_error(L);
    if (b->h == NULL) {
        lua_pushnil(L);
        return 1;
    }
    dpy_tensor_filled(L, b);
    return 1;
}

/* t:backward([grad]) */
static int t_backward(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    dpy_tensor *g = lua_isnoneornil(L, 2) ? NULL : dpy_checktensor(L, 2);
    if (dpy_tensor_backward(a, g) != DPY_OK)
        return dpy_torch_error(L);
    return 0;
}

/* tensor.set_grad_enabled(on) -> previous */
static int f_set_grad_enabled(lua_State *L) {
    lua_pushboolean(L, dpy_torch_set_grad_enabled(lua_toboolean(L, 1)));
    return 1;
}

/* t:save(path) -> true | nil, err (a file readable by PyTorch's torch.load) */
static int t_save(lua_State *L) {
    dpy_tensor *a = dpy_checktensor(L, 1);
    return dpy_torch_result(L, dpy_tensor_save(a, luaL_checkstring(L, 2)));
}

/* tensor.load(path) -> dpy.Tensor | nil, err */
static int f_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char err[512];
    if (dpy_zip_check_file(path, err, sizeof err) != 0) {   /* torch reads members without CRCs */
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_tensor_load(&b->h, path) != DPY_OK) {
        luaL_pushfail(L);
        lua_pushstring(L, dpy_torch_errmsg());
        return 2;
    }
    dpy_tensor_filled(L, b);
    return 1;
}

/*
** tensor.load_shared(path) -> read-only dpy.Tensor | nil, err: loaded once per process and shared
** by every state that loads the same file (its size and mtime unchanged). A run's partition.pt is
** read by every node; parsing it in each took ~8 % of the time to the first round.
*/
typedef struct shared_file {
    struct shared_file *next;
    char *path;
    off_t size;
    struct timespec mtime;
    dpy_tensor *t;
} shared_file;

static shared_file *g_shared;   /* under g_shared_mu; entries live as long as the process */
static pthread_mutex_t g_shared_mu = PTHREAD_MUTEX_INITIALIZER;

static int f_load_shared(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    struct stat st;
    if (stat(path, &st) != 0) {
        luaL_pushfail(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    pthread_mutex_lock(&g_shared_mu);
    shared_file *e = g_shared;
    while (e && !(strcmp(e->path, path) == 0 && e->size == st.st_size &&
                  e->mtime.tv_sec == st.st_mtim.tv_sec && e->mtime.tv_nsec == st.st_mtim.tv_nsec))
        e = e->next;
    char bad[512];
    if (!e && dpy_zip_check_file(path, bad, sizeof bad) != 0) {   /* as tensor.load */
        pthread_mutex_unlock(&g_shared_mu);
        luaL_pushfail(L);
        lua_pushstring(L, bad);
        return 2;
    }
    dpy_err err = e ? dpy_tensor_share(&b->h, e->t) : dpy_tensor_load(&b->h, path);
    if (err == DPY_OK && !e) {   /* kept for the next state (skipped when out of memory) */
        shared_file *n = calloc(1, sizeof *n);
        if (n && (n->path = strdup(path)) && dpy_tensor_share(&n->t, b->h) == DPY_OK) {
            n->size = st.st_size;
            n->mtime = st.st_mtim;
            n->next = g_shared;
            g_shared = n;
        } else if (n) {
            free(n->path);
            free(n);
        }
    }
    pthread_mutex_unlock(&g_shared_mu);
    if (err != DPY_OK) {
        luaL_pushfail(L);
        lua_pushstring(L, dpy_torch_errmsg());
        return 2;
    }
    b->flags = DPY_TF_READONLY;
    dpy_tensor_filled(L, b);
    return 1;
}

/* tensor.pickle({names...}, {tensors...}) -> bytes of a file torch.load reads as the dict
** {name: tensor} (a state dict, when the names are a module's) */
static int f_pickle(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t n = (size_t)luaL_len(L, 1);
    luaL_argcheck(L, (size_t)luaL_len(L, 2) == n, 2, "as many tensors as names expected");
    const char **names = lua_newuserdatauv(L, (n ? n : 1) * sizeof *names, 0);
    const dpy_tensor **ts = lua_newuserdatauv(L, (n ? n : 1) * sizeof *ts, 0);
    for (size_t i = 0; i < n; i++) {
        lua_geti(L, 1, (lua_Integer)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "tensor.pickle: names[%d] is not a string", (int)i + 1);
        names[i] = lua_tostring(L, -1);   /* the names table keeps it alive */
        lua_pop(L, 1);
        lua_geti(L, 2, (lua_Integer)i + 1);
        ts[i] = dpy_checktensor(L, lua_gettop(L));
        lua_pop(L, 1);
    }
    char *buf;
    size_t len;
    if (dpy_pickle_tensors(&buf, &len, names, ts, n) != DPY_OK)
        return luaL_error(L, "tensor.pickle: %s", dpy_torch_errmsg());
    lua_pushlstring(L, buf, len);   /* raises only when Lua is out of memory (buf leaks then) */
    dpy_torch_free(buf);
    return 1;
}

/* tensor.unpickle(bytes) -> {names...}, {tensors...} | nil, err (bytes not a dict of tensors) */
static int f_unpickle(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    char **names;
    dpy_tensor **ts;
    size_t n;
    char err[256];
    if (dpy_zip_check(s, len, err, sizeof err) != 0) {   /* torch reads a member without its CRC */
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    if (dpy_unpickle_tensors(&names, &ts, &n, s, len) != DPY_OK) {
        luaL_pushfail(L);
        lua_pushstring(L, dpy_torch_errmsg());
        return 2;
    }
    lua_createtable(L, (int)n, 0);   /* stack: names, tensors (raises only out of memory) */
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        dpy_tensor_box *b = dpy_newtensor(L);
        b->h = ts[i];
        ts[i] = NULL;
        dpy_tensor_filled(L, b);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -3, (lua_Integer)i + 1);
        dpy_torch_free(names[i]);
        names[i] = NULL;
    }
    dpy_torch_free(names);
    dpy_torch_free(ts);
    return 2;
}

/* tensor.is_tensor(v) -> boolean */
static int f_is_tensor(lua_State *L) {
    lua_pushboolean(L, luaL_testudata(L, 1, DPY_TENSOR_MT) != NULL);
    return 1;
}

/* {==== registration ====} */

typedef struct { const char *name; int op; } op_reg;

static const op_reg UNARY[] = {
    {"neg", DPY_NEG}, {"abs", DPY_ABS}, {"sqrt", DPY_SQRT}, {"exp", DPY_EXP}, {"log", DPY_LOG},
    {"log1p", DPY_LOG1P}, {"sign", DPY_SIGN}, {"floor", DPY_FLOOR}, {"ceil", DPY_CEIL},
    {"round", DPY_ROUND}, {"sin", DPY_SIN}, {"cos", DPY_COS}, {"reciprocal", DPY_RECIPROCAL},
    {"square", DPY_SQUARE}, {"relu", DPY_RELU}, {"gelu", DPY_GELU}, {"sigmoid", DPY_SIGMOID},
    {"tanh", DPY_TANH}, {"isnan", DPY_ISNAN}, {"isinf", DPY_ISINF},
    {"logical_not", DPY_LOGICAL_NOT}, {"clone", DPY_CLONE}, {"contiguous", DPY_CONTIGUOUS},
    {"detach", DPY_DETACH}, {"eigvalsh", DPY_EIGVALSH}, {NULL, 0}};

static const op_reg BINARY[] = {
    {"add", DPY_ADD}, {"sub", DPY_SUB}, {"mul", DPY_MUL}, {"div", DPY_DIV},
    {"remainder", DPY_REM}, {"pow", DPY_POW}, {"eq", DPY_EQ}, {"ne", DPY_NE}, {"lt", DPY_LT},
    {"le", DPY_LE}, {"gt", DPY_GT}, {"ge", DPY_GE}, {"maximum", DPY_MAXIMUM},
    {"minimum", DPY_MINIMUM}, {"matmul", DPY_MATMUL}, {NULL, 0}};

static const op_reg INPLACE[] = {
    {"add_", DPY_ADD}, {"sub_", DPY_SUB}, {"mul_", DPY_MUL}, {"div_", DPY_DIV},
    {"copy_", DPY_COPY}, {NULL, 0}};

static const op_reg REDUCE[] = {
    {"sum", DPY_SUM}, {"mean", DPY_MEAN}, {"std", DPY_STD}, {"var", DPY_VAR},
    {"prod", DPY_PROD}, {"min", DPY_MIN}, {"max", DPY_MAX}, {"argmin", DPY_ARGMIN},
    {"argmax", DPY_ARGMAX}, {"median", DPY_MEDIAN}, {"all", DPY_ALL}, {"any", DPY_ANY},
    {"cumsum", DPY_CUMSUM}, {"softmax", DPY_SOFTMAX}, {"log_softmax", DPY_LOG_SOFTMAX},
    {NULL, 0}};

static const op_reg INDEX[] = {
    {"index_select", DPY_INDEX_SELECT}, {"gather", DPY_GATHER}, {NULL, 0}};

static const op_reg SHAPE[] = {
    {"reshape", DPY_RESHAPE}, {"view", DPY_VIEW}, {"flatten", DPY_FLATTEN},
    {"transpose", DPY_TRANSPOSE}, {"permute", DPY_PERMUTE}, {"squeeze", DPY_SQUEEZE},
    {"unsqueeze", DPY_UNSQUEEZE}, {"narrow", DPY_NARROW}, {"select", DPY_SELECT},
    {"expand", DPY_EXPAND}, {NULL, 0}};

static int count_ops(const op_reg *ops) {
    int n = 0;
    while (ops[n].name)
        n++;
    return n;
}

static void add_ops(lua_State *L, const op_reg *ops, lua_CFunction f) {
    for (; ops->name; ops++) {   /* stack: methods */
        lua_pushinteger(L, ops->op);
        lua_pushcclosure(L, f, 1);
        lua_setfield(L, -2, ops->name);
    }
}

static const luaL_Reg t_methods[] = {
    {"dim", t_dim}, {"numel", t_numel}, {"size", t_size}, {"dtype", t_dtype},
    {"device", t_device}, {"nbytes", t_nbytes}, {"is_readonly", t_is_readonly},
    {"item", t_item}, {"totable", t_totable}, {"bytes", t_bytes}, {"to", t_to},
    {"fill_", t_fill_}, {"zero_", t_zero_}, {"norm", t_norm}, {"kthvalue", t_kthvalue},
    {"topk", t_topk}, {"sort", t_sort}, {"masked_select", t_masked_select},
    {"clamp", t_clamp},
    {"requires_grad_", t_requires_grad_}, {"requires_grad", t_requires_grad},
    {"grad", t_grad}, {"backward", t_backward}, {"save", t_save}, {"free", t_free},
    {NULL, NULL}};

static const luaL_Reg t_meta[] = {
    {"__gc", t_free}, {"__close", t_free}, {"__tostring", t_tostring}, {"__len", t_len},
    {"__newindex", t_newindex}, {"__add", m_add}, {"__sub", m_sub}, {"__mul", m_mul},
    {"__div", m_div}, {"__mod", m_mod}, {"__pow", m_pow}, {"__unm", m_unm}, {NULL, NULL}};

static const luaL_Reg t_functions[] = {
    {"max_bytes", f_max_bytes}, {"set_max_bytes", f_set_max_bytes},
    {"zeros", f_zeros}, {"ones", f_ones}, {"full", f_full}, {"empty", f_empty}, {"eye", f_eye},
    {"arange", f_arange}, {"linspace", f_linspace}, {"rand", f_rand}, {"randn", f_randn},
    {"randint", f_randint}, {"randperm", f_randperm}, {"bernoulli", f_bernoulli},
    {"new", f_new}, {"from_bytes", f_from_bytes}, {"cat", f_cat}, {"stack", f_stack},
    {"where", f_where}, {"load", f_load}, {"load_shared", f_load_shared}, {"is_tensor", f_is_tensor},
    {"pickle", f_pickle}, {"unpickle", f_unpickle},
    {"set_grad_enabled", f_set_grad_enabled}, {NULL, NULL}};

int luaopen_dpy_tensor_core(lua_State *L) {
    luaL_newmetatable(L, DPY_TENSOR_MT);    /* stack: mt */
    luaL_setfuncs(L, t_meta, 0);
    /* sized for all its methods at once: grown one by one, the table was rehashed at 32 and 64
    ** entries in every node's state */
    lua_createtable(L, 0, (int)(sizeof t_methods / sizeof *t_methods) - 1 + count_ops(UNARY) +
                              count_ops(BINARY) + count_ops(INPLACE) + count_ops(REDUCE) +
                              count_ops(SHAPE) + count_ops(INDEX));
    luaL_setfuncs(L, t_methods, 0);         /* stack: mt, methods */
    add_ops(L, UNARY, t_unary);
    add_ops(L, BINARY, t_binary);
    add_ops(L, INPLACE, t_binary_inplace);
    add_ops(L, REDUCE, t_reduce);
    add_ops(L, SHAPE, t_shape);
    add_ops(L, INDEX, t_index_dim);
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, t_index, 1);        /* stack: mt, methods, __index */
    lua_setfield(L, -3, "__index");
    luaL_newlib(L, t_functions);            /* stack: mt, methods, functions */
    lua_insert(L, -2);
    lua_setfield(L, -2, "methods");         /* the Lua sugar adds methods here */
    lua_remove(L, -2);
    return 1;
}
