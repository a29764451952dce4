/*
** l_sparse.c: the sparse codec and helpers of host/core/sparse.h over tensors (dpy.sparse.core).
** Indices are 1-d int64 tensors (0-based, sorted), values 1-d float32. The decoder returns
** nil and a message for a malformed payload; misuse (an index out of range in a scatter, a
** read-only destination) raises.
*/
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpy_lua.h"
#include "sparse.h"
#include "wavelet.h"

/* A contiguous cpu copy or share of the tensor at arg in dtype, in a temporary box (read every
** argument before calling this); n: its element count. */
static const void *view(lua_State *L, int arg, dpy_dtype dtype, size_t *n, dpy_tensor_box **box) {
    dpy_tensor *t = dpy_checktensor(L, arg);
    dpy_tensor_box *c = *box = dpy_newtensor(L);
    if (dpy_tensor_cpu_contiguous(&c->h, t, 1, dtype) != DPY_OK)
        dpy_torch_error(L);
    *n = (size_t)dpy_tensor_numel(c->h);
    return dpy_tensor_data(c->h);
}

/* The writable float32 data of the tensor at arg, itself (no copy): in-place helpers. */
static float *writable(lua_State *L, int arg, size_t *n) {
    dpy_tensor *t = dpy_checktensor(L, arg);
    dpy_tensor_box *b = luaL_checkudata(L, arg, DPY_TENSOR_MT);
    if (b->flags & DPY_TF_READONLY)
        luaL_argerror(L, arg, "read-only dpy.Tensor (shared: the dataset, or a model sent or "
                              "received); clone it first");
    float *p = (float *)dpy_tensor_data(t);
    if (dpy_tensor_dtype(t) != DPY_FLOAT32 || !p)
        luaL_argerror(L, arg, "a contiguous cpu float32 tensor expected");
    *n = (size_t)dpy_tensor_numel(t);
    return p;
}

static const char *const VTYPES[] = {"float32", "float16", "bfloat16", NULL};

static lua_Integer check_size(lua_State *L, int arg) {
    lua_Integer n = luaL_checkinteger(L, arg);
    luaL_argcheck(L, n >= 0 && n <= ((lua_Integer)1 << 50), arg, "must be 0..2^50");
    return n;
}

/* encode(n, idx | nil, values [, vtype = "float32"]) -> u8 tensor, header, index, value bytes.
** idx nil: implicit indices (the receiver regenerates them). */
static int s_encode(lua_State *L) {
    uint64_t n = (uint64_t)check_size(L, 1);
    int implicit = lua_isnoneornil(L, 2);
    if (!implicit)
        dpy_checktensor(L, 2);
    dpy_checktensor(L, 3);
    int vtype = luaL_checkoption(L, 4, "float32", VTYPES) + 1;
    size_t k, ki = 0;
    dpy_tensor_box *vbox, *ibox = NULL;
    const float *val = view(L, 3, DPY_FLOAT32, &k, &vbox);
    const int64_t *idx = implicit ? NULL : view(L, 2, DPY_INT64, &ki, &ibox);
    if (!implicit && ki != k) {
        dpy_tensor_drop(vbox), dpy_tensor_drop(ibox);
        return luaL_error(L, "sparse.encode: %d indices for %d values", (int)ki, (int)k);
    }
    int coding = implicit ? DPY_SPARSE_IMPLICIT : DPY_SPARSE_DELTAS;
    size_t cap = dpy_sparse_bound(k, vtype, coding);
    uint8_t *buf = malloc(cap);
    char err[256];
    dpy_sparse_sizes sz;
    long long len = buf ? dpy_sparse_encode(buf, cap, n, idx, val, k, vtype, coding, &sz, err,
                                            sizeof err)
                        : -1;
    dpy_tensor_drop(vbox);
    if (ibox)
        dpy_tensor_drop(ibox);
    if (len < 0) {
        free(buf);
        return luaL_error(L, "%s", buf ? err : "sparse.encode: out of memory");
    }
    uint8_t *out = dpy_push_empty(L, (size_t)len, DPY_UINT8);
    memcpy(out, buf, (size_t)len);
    free(buf);
    lua_pushinteger(L, (lua_Integer)sz.header);
    lua_pushinteger(L, (lua_Integer)sz.indices);
    lua_pushinteger(L, (lua_Integer)sz.values);
    return 4;
}

/* decode(u8, max_n) -> n, idx (nil when implicit), float32 values | nil, err */
static int s_decode(lua_State *L) {
    dpy_checktensor(L, 1);
    uint64_t max_n = (uint64_t)check_size(L, 2);
    size_t len;
    dpy_tensor_box *in;
    const uint8_t *p = view(L, 1, DPY_UINT8, &len, &in);
    char err[256];
    dpy_sparse_info info;
    if (dpy_sparse_info_of(p, len, max_n, &info, err, sizeof err) != 0) {
        dpy_tensor_drop(in);
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    size_t k = (size_t)info.k;
    lua_pushinteger(L, (lua_Integer)info.n);
    int64_t *idx = NULL;
    if (info.coding == DPY_SPARSE_DELTAS)
        idx = dpy_push_empty(L, k, DPY_INT64);
    else
        lua_pushnil(L);
    float *val = dpy_push_empty(L, k, DPY_FLOAT32);
    int rc = dpy_sparse_decode(p, len, max_n, idx, val, k, err, sizeof err);
    dpy_tensor_drop(in);
    if (rc != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;   /* the half-filled tensors are left to the GC: never handed on */
    }
    return 3;
}

/* bound(k [, vtype [, implicit]]) -> the largest encoding of k values */
static int s_bound(lua_State *L) {
    size_t k = (size_t)check_size(L, 1);
    int vtype = luaL_checkoption(L, 2, "float32", VTYPES) + 1;
    int coding = lua_toboolean(L, 3) ? DPY_SPARSE_IMPLICIT : DPY_SPARSE_DELTAS;
    lua_pushinteger(L, (lua_Integer)dpy_sparse_bound(k, vtype, coding));
    return 1;
}

/* topk(x, k) -> int64 indices of the k largest |x| (ties: lower index), sorted by index */
static int s_topk(lua_State *L) {
    dpy_checktensor(L, 1);
    lua_Integer k = luaL_checkinteger(L, 2);
    size_t n;
    dpy_tensor_box *in;
    const float *x = view(L, 1, DPY_FLOAT32, &n, &in);
    if (k < 0 || (size_t)k > n) {
        dpy_tensor_drop(in);
        return luaL_argerror(L, 2, lua_pushfstring(L, "must be 0..%d (the tensor's size)", (int)n));
    }
    int64_t *idx = dpy_push_empty(L, (size_t)k, DPY_INT64);
    int rc = dpy_sparse_topk(idx, x, n, (size_t)k);
    dpy_tensor_drop(in);
    if (rc != 0)
        return luaL_error(L, "sparse.topk: out of memory");
    return 1;
}

/* sample(seed, n, k) -> k distinct sorted int64 indices of 0..n-1, from the seed alone */
static int s_sample(lua_State *L) {
    uint64_t seed = (uint64_t)luaL_checkinteger(L, 1);
    lua_Integer n = check_size(L, 2), k = luaL_checkinteger(L, 3);
    luaL_argcheck(L, k >= 0 && k <= n, 3, "must be 0..n");
    int64_t *idx = dpy_push_empty(L, (size_t)k, DPY_INT64);
    if (dpy_sparse_sample(idx, seed, (size_t)n, (size_t)k) != 0)
        return luaL_error(L, "sparse.sample: out of memory (%I of %I indices)", k, n);
    return 1;
}

/* The indices at arg, checked against a destination of n values (misuse raises). */
static const int64_t *indices(lua_State *L, int arg, size_t n, size_t *k, dpy_tensor_box **box) {
    const int64_t *idx = view(L, arg, DPY_INT64, k, box);
    for (size_t i = 0; i < *k; i++)
        if (idx[i] < 0 || (size_t)idx[i] >= n) {
            long long bad = (long long)idx[i];
            dpy_tensor_drop(*box);
            luaL_error(L, "sparse: index %I (entry %I) outside 0..%I", (lua_Integer)bad,
                       (lua_Integer)i, (lua_Integer)n - 1);
        }
    return idx;
}

/* dst[idx] = values (add: dst[idx] += values), in place, in index order */
static int scatter(lua_State *L, int add) {
    size_t n, k, kv;
    float *dst = writable(L, 1, &n);
    dpy_checktensor(L, 2);
    dpy_checktensor(L, 3);
    dpy_tensor_box *ibox, *vbox;
    const float *val = view(L, 3, DPY_FLOAT32, &kv, &vbox);
    const int64_t *idx = indices(L, 2, n, &k, &ibox);
    if (k != kv) {
        dpy_tensor_drop(ibox), dpy_tensor_drop(vbox);
        return luaL_error(L, "sparse: %I indices for %I values", (lua_Integer)k, (lua_Integer)kv);
    }
    if (add)
        for (size_t i = 0; i < k; i++)
            dst[idx[i]] += val[i];
    else
        for (size_t i = 0; i < k; i++)
            dst[idx[i]] = val[i];
    dpy_tensor_drop(ibox), dpy_tensor_drop(vbox);
    lua_settop(L, 1);
    return 1;
}

static int s_scatter(lua_State *L) { return scatter(L, 0); }
static int s_scatter_add(lua_State *L) { return scatter(L, 1); }

/* fill_at(dst, idx, value): dst[idx] = value, in place */
static int s_fill_at(lua_State *L) {
    size_t n, k;
    float *dst = writable(L, 1, &n);
    dpy_checktensor(L, 2);
    float v = (float)luaL_checknumber(L, 3);
    dpy_tensor_box *ibox;
    const int64_t *idx = indices(L, 2, n, &k, &ibox);
    for (size_t i = 0; i < k; i++)
        dst[idx[i]] = v;
    dpy_tensor_drop(ibox);
    lua_settop(L, 1);
    return 1;
}

static const char *const FAMILIES[] = {"daubechies", "haar", "bspline", NULL};

/* The wavelet's member at arg: an integer that an int holds (2^32 + 4 was cut to member 4) */
static int check_member(lua_State *L, int arg, int family) {
    lua_Integer m = luaL_optinteger(L, arg, family == DPY_WAVELET_HAAR ? 2 : 4);
    luaL_argcheck(L, m >= 1 && m <= INT_MAX, arg, "the member is out of range");
    return (int)m;
}

/* wavelet(x [, family = "daubechies" [, member = 4]]) -> float32 coefficients (a power of two of
** them: x zero-padded) */
static int s_wavelet(lua_State *L) {
    dpy_checktensor(L, 1);
    int family = luaL_checkoption(L, 2, "daubechies", FAMILIES);
    int member = check_member(L, 3, family);
    size_t n;
    dpy_tensor_box *in;
    const float *x = view(L, 1, DPY_FLOAT32, &n, &in);
    float *coef = dpy_push_empty(L, dpy_wavelet_size(n), DPY_FLOAT32);
    char err[256];
    int rc = dpy_wavelet_forward(coef, x, n, family, member, err, sizeof err);
    dpy_tensor_drop(in);
    if (rc != 0)
        return luaL_error(L, "%s", err);
    return 1;
}

/* unwavelet(coef, n [, family [, member]]) -> the n values whose transform coef is */
static int s_unwavelet(lua_State *L) {
    dpy_checktensor(L, 1);
    size_t n = (size_t)check_size(L, 2);
    int family = luaL_checkoption(L, 3, "daubechies", FAMILIES);
    int member = check_member(L, 4, family);
    size_t m;
    dpy_tensor_box *in;
    const float *coef = view(L, 1, DPY_FLOAT32, &m, &in);
    if (m != dpy_wavelet_size(n)) {
        dpy_tensor_drop(in);
        return luaL_error(L, "unwavelet: %I coefficients, but %I values take %I",
                          (lua_Integer)m, (lua_Integer)n, (lua_Integer)dpy_wavelet_size(n));
    }
    float *x = dpy_push_empty(L, n, DPY_FLOAT32);
    char err[256];
    int rc = dpy_wavelet_inverse(x, n, coef, family, member, err, sizeof err);
    dpy_tensor_drop(in);
    if (rc != 0)
        return luaL_error(L, "%s", err);
    return 1;
}

/* rfft(x) -> float32 2 (n/2 + 1) coefficients (libtorch's real FFT, re and im interleaved) */
static int s_rfft(lua_State *L) {
    dpy_tensor *x = dpy_checktensor(L, 1);
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_tensor_rfft(&b->h, x) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return 1;
}

/* irfft(c, n) -> the n values of those coefficients */
static int s_irfft(lua_State *L) {
    dpy_tensor *c = dpy_checktensor(L, 1);
    int64_t n = (int64_t)check_size(L, 2);
    dpy_tensor_box *b = dpy_newtensor(L);
    if (dpy_tensor_irfft(&b->h, c, n) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return 1;
}

static const luaL_Reg functions[] = {
    {"wavelet", s_wavelet}, {"unwavelet", s_unwavelet}, {"rfft", s_rfft}, {"irfft", s_irfft},
    {"encode", s_encode}, {"decode", s_decode},   {"bound", s_bound},
    {"topk", s_topk},     {"sample", s_sample},   {"scatter_", s_scatter},
    {"scatter_add_", s_scatter_add},              {"fill_at_", s_fill_at},
    {NULL, NULL}};

int luaopen_dpy_sparse_core(lua_State *L) {
    luaL_newlib(L, functions);
    return 1;
}
