/*
** l_codec.c: the codecs of host/core/codec.h over tensors (dpy.codec.core). Encoders take any
** tensor (converted to a contiguous cpu float32, or its bytes for zstd) and return a 1-d uint8
** tensor; decoders return the tensor, or nil and a message for a malformed payload: received
** bytes are data, not a programming error.
*/
#include <stdint.h>
#include <stdlib.h>

#include "codec.h"
#include "dpy_lua.h"

/* A contiguous cpu view (or copy) of the tensor at arg, in a temporary box pushed on the stack
** (read every argument before calling this); give the box to done() once the data is used. */
static const void *contiguous(lua_State *L, int arg, int convert, dpy_dtype dtype, size_t *len,
                              dpy_tensor_box **box) {
    dpy_tensor *t = dpy_checktensor(L, arg);
    dpy_tensor_box *c = *box = dpy_newtensor(L);
    if (dpy_tensor_cpu_contiguous(&c->h, t, convert, dtype) != DPY_OK)
        dpy_torch_error(L);
    *len = dpy_tensor_nbytes(c->h);
    return dpy_tensor_data(c->h);
}

/* Frees the input's temporary box at once (it may be a model's size) and returns nres. */
static int done(dpy_tensor_box *in, int nres) {
    dpy_tensor_drop(in);
    return nres;
}

/* Pushes len bytes of buf (malloc'd) as a uint8 tensor that owns them. */
static void push_owned(lua_State *L, uint8_t *buf, size_t len) {
    dpy_tensor_box *b = dpy_newtensor(L);
    int64_t shape[1] = {(int64_t)len};
    uint8_t *fit = realloc(buf, len ? len : 1);   /* give back the bound's slack */
    buf = fit ? fit : buf;
    if (dpy_tensor_wrap(&b->h, buf, len, DPY_UINT8, shape, 1, free) != DPY_OK) {
        free(buf);
        dpy_torch_error(L);
    }
    dpy_tensor_filled(L, b);
}

/* What a decoder may produce when the caller gives no bound (a receiver passes its model's size):
** a payload promising more is refused before anything is allocated. */
#define DEFAULT_MAX_BYTES ((lua_Integer)1 << 28)

static size_t check_max(lua_State *L, int arg, lua_Integer dflt) {
    lua_Integer max = luaL_optinteger(L, arg, dflt);
    luaL_argcheck(L, max >= 0, arg, "the bound must be >= 0");
    return (size_t)max;
}

static int decode_fail(lua_State *L, const char *err) {
    luaL_pushfail(L);
    lua_pushstring(L, err);
    return 2;
}

/* quantize(t, bits [, chunk = 0]) -> uint8 tensor */
static int c_quantize(lua_State *L) {
    lua_Integer bits = luaL_checkinteger(L, 2);   /* checked whole: 2^32 + 4 was cut to 4 */
    lua_Integer chunk = luaL_optinteger(L, 3, 0);
    luaL_argcheck(L, (bits >= 1 && bits <= 8) || bits == 16, 2, "bits must be 1..8 or 16");
    luaL_argcheck(L, chunk >= 0, 3, "chunk must be >= 0 (0: one chunk)");
    size_t len;
    dpy_tensor_box *input;
    const float *x = contiguous(L, 1, 1, DPY_FLOAT32, &len, &input);
    size_t n = len / sizeof(float);
    char err[256];
    uint8_t *out = dpy_push_empty(L, dpy_quant_size(n, bits, (size_t)chunk), DPY_UINT8);
    if (dpy_quant_encode(out, x, n, bits, (size_t)chunk, err, sizeof err) != 0)
        return luaL_error(L, "%s", err);
    return done(input, 1);
}

/* dequantize(u8 [, max_values = 2^26]) -> float32 tensor | nil, err */
static int c_dequantize(lua_State *L) {
    size_t max = check_max(L, 2, DEFAULT_MAX_BYTES / 4), len, n;
    dpy_tensor_box *input;
    const uint8_t *in = contiguous(L, 1, 1, DPY_UINT8, &len, &input);
    char err[256];
    if (dpy_quant_count(in, len, max, &n, err, sizeof err) != 0)
        return done(input, decode_fail(L, err));
    float *out = dpy_push_empty(L, n, DPY_FLOAT32);
    if (dpy_quant_decode(out, n, in, len, err, sizeof err) != 0)
        return done(input, decode_fail(L, err));
    return done(input, 1);
}

/* zstd(t [, level = 3]) -> uint8 tensor of t's bytes, compressed */
static int c_zstd(lua_State *L) {
    int es = (int)dpy_dtype_size(dpy_tensor_dtype(dpy_checktensor(L, 1)));
    lua_Integer lv = luaL_optinteger(L, 2, 3);   /* checked whole: 2^32 + 19 was cut to 19 */
    luaL_argcheck(L, lv >= -(1 << 17) && lv <= 22, 2, "the level must be -131072..22 (zstd's)");
    int level = (int)lv;
    size_t len;
    dpy_tensor_box *input;
    const void *in = contiguous(L, 1, 0, DPY_FLOAT32, &len, &input);
    size_t cap = dpy_zstd_bound(len);
    uint8_t *buf = malloc(cap);
    if (!buf)
        return luaL_error(L, "zstd: out of memory (%I bytes)", (lua_Integer)cap);
    char err[256];
    long long n = dpy_zstd_encode(buf, cap, in, len, level, es, err, sizeof err);
    if (n < 0) {
        free(buf);
        return luaL_error(L, "%s", err);
    }
    push_owned(L, buf, (size_t)n);
    return done(input, 1);
}

/* unzstd(u8, dtype [, max_bytes = 2^28]) -> tensor | nil, err */
static int c_unzstd(lua_State *L) {
    dpy_dtype dtype = dpy_checkdtype(L, 2);
    size_t max = check_max(L, 3, DEFAULT_MAX_BYTES);
    size_t len, size;
    dpy_tensor_box *input;
    const uint8_t *in = contiguous(L, 1, 1, DPY_UINT8, &len, &input);
    int es;
    char err[256];
    if (dpy_zstd_size(in, len, max, &size, &es, err, sizeof err) != 0)
        return done(input, decode_fail(L, err));
    if ((size_t)es != dpy_dtype_size(dtype)) {
        snprintf(err, sizeof err, "zstd payload holds %d-byte elements, not %s", es,
                 dpy_dtype_name(dtype));
        return done(input, decode_fail(L, err));
    }
    void *out = dpy_push_empty(L, size / (size_t)es, dtype);
    if (dpy_zstd_decode(out, size, in, len, err, sizeof err) != 0)
        return done(input, decode_fail(L, err));
    return done(input, 1);
}

/* fpzip(t [, precision = 0]) -> uint8 tensor (precision 0: lossless) */
static int c_fpzip(lua_State *L) {
    lua_Integer pr = luaL_optinteger(L, 2, 0);   /* checked whole: 2^32 + 16 was cut to 16 */
    luaL_argcheck(L, pr == 0 || (pr >= 2 && pr <= 32), 2, "precision must be 2..32 bits (0: lossless)");
    int precision = (int)pr;
    size_t len;
    dpy_tensor_box *input;
    const float *x = contiguous(L, 1, 1, DPY_FLOAT32, &len, &input);
    size_t n = len / sizeof(float), cap = dpy_fpzip_bound(n);
    uint8_t *buf = malloc(cap);
    if (!buf)
        return luaL_error(L, "fpzip: out of memory (%I bytes)", (lua_Integer)cap);
    char err[256];
    long long r = dpy_fpzip_encode(buf, cap, x, n, precision, err, sizeof err);
    if (r < 0) {
        free(buf);
        return luaL_error(L, "%s", err);
    }
    push_owned(L, buf, (size_t)r);
    return done(input, 1);
}

/* unfpzip(u8 [, max_values = 2^26]) -> float32 tensor | nil, err */
static int c_unfpzip(lua_State *L) {
    size_t max = check_max(L, 2, DEFAULT_MAX_BYTES / 4), len, n;
    dpy_tensor_box *input;
    const uint8_t *in = contiguous(L, 1, 1, DPY_UINT8, &len, &input);
    char err[256];
    if (dpy_fpzip_count(in, len, max, &n, err, sizeof err) != 0)
        return done(input, decode_fail(L, err));
    float *out = dpy_push_empty(L, n, DPY_FLOAT32);
    if (dpy_fpzip_decode(out, n, in, len, err, sizeof err) != 0)
        return done(input, decode_fail(L, err));
    return done(input, 1);
}

/* quantize_size(n, bits [, chunk = 0]), zstd_bound(bytes), fpzip_bound(n): the largest encoding
** of n values (or bytes), which bounds what the next decoder of a chain may produce */
static int c_quantize_size(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1), bits = luaL_checkinteger(L, 2);
    lua_Integer chunk = luaL_optinteger(L, 3, 0);
    luaL_argcheck(L, n >= 0 && n <= ((lua_Integer)1 << 50), 1, "must be 0..2^50");
    luaL_argcheck(L, (bits >= 1 && bits <= 8) || bits == 16, 2, "bits must be 1..8 or 16");
    luaL_argcheck(L, chunk >= 0, 3, "chunk must be >= 0 (0: one chunk)");
    lua_pushinteger(L, (lua_Integer)dpy_quant_size((size_t)n, (int)bits, (size_t)chunk));
    return 1;
}

static int c_zstd_bound(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= ((lua_Integer)1 << 50), 1, "must be 0..2^50");
    lua_pushinteger(L, (lua_Integer)dpy_zstd_bound((size_t)n));
    return 1;
}

static int c_fpzip_bound(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= ((lua_Integer)1 << 50), 1, "must be 0..2^50");
    lua_pushinteger(L, (lua_Integer)dpy_fpzip_bound((size_t)n));
    return 1;
}

static const luaL_Reg functions[] = {
    {"quantize_size", c_quantize_size}, {"zstd_bound", c_zstd_bound},
    {"fpzip_bound", c_fpzip_bound},
    {"quantize", c_quantize}, {"dequantize", c_dequantize}, {"zstd", c_zstd},
    {"unzstd", c_unzstd},     {"fpzip", c_fpzip},           {"unfpzip", c_unfpzip},
    {NULL, NULL}};

int luaopen_dpy_codec_core(lua_State *L) {
    luaL_newlib(L, functions);
    return 1;
}
