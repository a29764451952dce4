/*
** l_crypto.c: the cryptography of secure aggregation (dpy.crypto.core), over libsodium: X25519
** key pairs and key agreement, ChaCha20 mask streams added into int64 tensors (arithmetic mod
** 2^64, so that masks cancel exactly), fixed-point encoding of floats, authenticated encryption
** of Shamir shares (XSalsa20-Poly1305), random bytes, and Shamir sharing (host/core/shamir.h).
** Keys and secrets are Lua strings of 32 bytes. Bytes from the network (a peer's public key, a
** ciphertext, shares) that are malformed give nil and a message; wrong argument types raise.
*/
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpy_lua.h"
#include "shamir.h"

#define KEY_BYTES 32
#define CHUNK_WORDS 8192   /* mask streams are made 64 KiB at a time */

static int fail(lua_State *L, const char *msg) {
    luaL_pushfail(L);
    lua_pushstring(L, msg);
    return 2;
}

static const uint8_t *checkkey(lua_State *L, int arg) {
    size_t len;
    const char *k = luaL_checklstring(L, arg, &len);
    if (len != KEY_BYTES)
        luaL_argerror(L, arg, lua_pushfstring(L, "a 32-byte key expected, got %d bytes", (int)len));
    return (const uint8_t *)k;
}

/* The int64 data of the contiguous cpu tensor at arg; writable ones only when write is set. */
static uint64_t *checkwords(lua_State *L, int arg, int write, size_t *n) {
    dpy_tensor_box *b = luaL_checkudata(L, arg, DPY_TENSOR_MT);
    if (!b->h)
        luaL_argerror(L, arg, "use of a freed dpy.Tensor");
    if (write && (b->flags & DPY_TF_READONLY))
        luaL_argerror(L, arg, "read-only dpy.Tensor (shared: a model sent or received); clone it first");
    const void *data = dpy_tensor_data(b->h);
    if (dpy_tensor_dtype(b->h) != DPY_INT64 || (!data && dpy_tensor_numel(b->h) > 0))
        luaL_argerror(L, arg, "a contiguous cpu int64 tensor expected");
    *n = (size_t)dpy_tensor_numel(b->h);
    return (uint64_t *)data;   /* int64 and uint64 may alias; the sums wrap mod 2^64 */
}

static uint64_t *push_words(lua_State *L, size_t n) {
    dpy_tensor_box *b = dpy_newtensor(L);
    int64_t shape[1] = {(int64_t)n};
    if (dpy_tensor_full(&b->h, shape, 1, 0, DPY_INT64, NULL) != DPY_OK)
        dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    return (uint64_t *)dpy_tensor_data(b->h);
}

/* keypair() -> public key, secret key (X25519) */
static int c_keypair(lua_State *L) {
    uint8_t pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
    crypto_box_keypair(pk, sk);
    lua_pushlstring(L, (const char *)pk, sizeof pk);
    lua_pushlstring(L, (const char *)sk, sizeof sk);
    sodium_memzero(sk, sizeof sk);
    return 2;
}

/* public_key(sk) -> the public key of a secret key (a reconstructed one, say) */
static int c_public_key(lua_State *L) {
    const uint8_t *sk = checkkey(L, 1);
    uint8_t pk[crypto_scalarmult_BYTES];
    crypto_scalarmult_base(pk, sk);
    lua_pushlstring(L, (const char *)pk, sizeof pk);
    return 1;
}

/* agree(sk, peer_pk, context) -> a 32-byte key both sides derive alike | nil, msg
** BLAKE2b-256 of context, the X25519 shared point and both public keys in byte order, as
** crypto_kx hashes its point with both keys; context (any bytes) keeps the keys of different
** uses, aggregators and rounds apart. A low-order peer key (an all-zero point) is refused. */
static int c_agree(lua_State *L) {
    const uint8_t *sk = checkkey(L, 1);
    size_t pklen, clen;
    const uint8_t *peer = (const uint8_t *)luaL_checklstring(L, 2, &pklen);
    const char *context = luaL_checklstring(L, 3, &clen);
    if (pklen != KEY_BYTES)
        return fail(L, "a peer's public key must be 32 bytes");
    uint8_t q[crypto_scalarmult_BYTES], mine[crypto_scalarmult_BYTES], key[KEY_BYTES];
    if (crypto_scalarmult(q, sk, peer) != 0)
        return fail(L, "a peer's public key is a low-order point (no shared secret)");
    crypto_scalarmult_base(mine, sk);
    int order = memcmp(mine, peer, KEY_BYTES) <= 0;
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, sizeof key);
    crypto_generichash_update(&h, (const uint8_t *)context, clen);
    crypto_generichash_update(&h, q, sizeof q);
    crypto_generichash_update(&h, order ? mine : peer, KEY_BYTES);
    crypto_generichash_update(&h, order ? peer : mine, KEY_BYTES);
    crypto_generichash_final(&h, key, sizeof key);
    sodium_memzero(q, sizeof q);
    lua_pushlstring(L, (const char *)key, sizeof key);
    sodium_memzero(key, sizeof key);
    return 1;
}

/* random_bytes(n) -> n bytes from the system's CSPRNG */
static int c_random_bytes(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= (1 << 20), 1, "between 0 and 2^20 bytes");
    luaL_Buffer b;
    uint8_t *p = (uint8_t *)luaL_buffinitsize(L, &b, (size_t)n);
    randombytes_buf(p, (size_t)n);
    luaL_pushresultsize(&b, (size_t)n);
    return 1;
}

/* Adds sign times the ChaCha20 keystream of key (nonce 0), read as 64-bit words, to w[0 .. n). */
static void add_stream(uint64_t *w, size_t n, const uint8_t *key, int sign) {
    static const uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];
    uint64_t buf[CHUNK_WORDS];
    for (size_t done = 0; done < n; done += CHUNK_WORDS) {
        size_t k = n - done < CHUNK_WORDS ? n - done : CHUNK_WORDS;
        /* the block counter continues where the last chunk stopped (64 bytes a block) */
        crypto_stream_chacha20_xor_ic((uint8_t *)buf, (const uint8_t *)memset(buf, 0, k * 8), k * 8,
                                      nonce, (uint64_t)done * 8 / 64, key);
        if (sign > 0)
            for (size_t i = 0; i < k; i++) w[done + i] += buf[i];
        else
            for (size_t i = 0; i < k; i++) w[done + i] -= buf[i];
    }
    sodium_memzero(buf, sizeof buf);
}

/* stream(key, n) -> int64 tensor of the n first 64-bit words of key's ChaCha20 keystream */
static int c_stream(lua_State *L) {
    const uint8_t *key = checkkey(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_argcheck(L, n >= 0 && n <= (INT64_C(1) << 40), 2, "a count between 0 and 2^40 expected");
    add_stream(push_words(L, (size_t)n), (size_t)n, key, 1);
    return 1;
}

static int checksign(lua_State *L, int arg) {
    lua_Integer s = luaL_optinteger(L, arg, 1);
    luaL_argcheck(L, s == 1 || s == -1, arg, "sign must be 1 or -1");
    return (int)s;
}

/* mask_(t, key [, sign = 1]) -> t: adds (or subtracts) key's stream to the int64 tensor t, mod 2^64 */
static int c_mask(lua_State *L) {
    size_t n;
    uint64_t *w = checkwords(L, 1, 1, &n);
    const uint8_t *key = checkkey(L, 2);
    add_stream(w, n, key, checksign(L, 3));
    lua_settop(L, 1);
    return 1;
}

/* add_(acc, x [, sign = 1]) -> acc: acc + sign * x mod 2^64 (int64 tensors of one size) */
static int c_add(lua_State *L) {
    size_t n, m;
    uint64_t *a = checkwords(L, 1, 1, &n);
    const uint64_t *x = checkwords(L, 2, 0, &m);
    int sign = checksign(L, 3);
    if (n != m)
        return luaL_error(L, "add_: sizes differ (%d and %d values)", (int)n, (int)m);
    if (sign > 0)
        for (size_t i = 0; i < n; i++) a[i] += x[i];
    else
        for (size_t i = 0; i < n; i++) a[i] -= x[i];
    lua_settop(L, 1);
    return 1;
}

/* encode(t, bits [, weight = 1 [, limit = 2^62]]) -> int64 tensor of round(weight * t * 2^bits)
** | nil, msg: a value not finite, or beyond limit in magnitude once encoded, is refused (naming
** its 0-based index), since it would wrap in the sum. */
static int c_encode(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    lua_Integer bits = luaL_checkinteger(L, 2);
    double weight = luaL_optnumber(L, 3, 1), limit = luaL_optnumber(L, 4, 0x1p62);
    luaL_argcheck(L, bits >= 0 && bits <= 52, 2, "fraction bits must be in 0 .. 52");
    luaL_argcheck(L, isfinite(weight), 3, "the weight must be finite");
    luaL_argcheck(L, limit > 0 && limit <= 0x1p62, 4, "the limit must be in (0, 2^62]");
    dpy_tensor_box *c = dpy_newtensor(L);
    if (dpy_tensor_cpu_contiguous(&c->h, t, 1, DPY_FLOAT64) != DPY_OK)
        return dpy_torch_error(L);
    const double *x = dpy_tensor_data(c->h);
    size_t n = (size_t)dpy_tensor_numel(c->h);
    uint64_t *w = push_words(L, n);
    double scale = ldexp(weight, (int)bits);
    for (size_t i = 0; i < n; i++) {
        double v = nearbyint(x[i] * scale);
        if (!(fabs(v) <= limit)) {   /* NaN fails too */
            char msg[160];
            snprintf(msg, sizeof msg, "value %.9g at index %zu is %s the fixed-point range (|v| * 2^%d <= %.3g)",
                     x[i], i, isfinite(x[i]) ? "beyond" : "not finite, outside", (int)bits, limit);
            dpy_tensor_drop(c);
            return fail(L, msg);
        }
        w[i] = (uint64_t)(int64_t)v;
    }
    dpy_tensor_drop(c);
    return 1;
}

/* decode(t, bits [, divisor = 1]) -> float32 tensor of the signed int64 values / 2^bits / divisor */
static int c_decode(lua_State *L) {
    size_t n;
    const uint64_t *w = checkwords(L, 1, 0, &n);
    lua_Integer bits = luaL_checkinteger(L, 2);
    double divisor = luaL_optnumber(L, 3, 1);
    luaL_argcheck(L, bits >= 0 && bits <= 52, 2, "fraction bits must be in 0 .. 52");
    luaL_argcheck(L, divisor != 0 && isfinite(divisor), 3, "the divisor must be finite and nonzero");
    dpy_tensor_box *b = dpy_newtensor(L);
    int64_t shape[1] = {(int64_t)n};
    if (dpy_tensor_empty(&b->h, shape, 1, DPY_FLOAT32, NULL) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, b);
    float *out = (float *)dpy_tensor_data(b->h);
    double scale = ldexp(1 / divisor, -(int)bits);
    for (size_t i = 0; i < n; i++) out[i] = (float)((double)(int64_t)w[i] * scale);
    return 1;
}

/* seal(key, plaintext) -> nonce .. ciphertext (XSalsa20-Poly1305, a random nonce) */
static int c_seal(lua_State *L) {
    const uint8_t *key = checkkey(L, 1);
    size_t len;
    const uint8_t *m = (const uint8_t *)luaL_checklstring(L, 2, &len);
    size_t total = crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + len;
    luaL_Buffer b;
    uint8_t *out = (uint8_t *)luaL_buffinitsize(L, &b, total);
    randombytes_buf(out, crypto_secretbox_NONCEBYTES);
    crypto_secretbox_easy(out + crypto_secretbox_NONCEBYTES, m, len, out, key);
    luaL_pushresultsize(&b, total);
    return 1;
}

/* open(key, sealed) -> plaintext | nil, msg (too short, or not sealed under key) */
static int c_open(lua_State *L) {
    const uint8_t *key = checkkey(L, 1);
    size_t len;
    const uint8_t *c = (const uint8_t *)luaL_checklstring(L, 2, &len);
    if (len < crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES)
        return fail(L, "sealed message too short");
    size_t mlen = len - crypto_secretbox_NONCEBYTES - crypto_secretbox_MACBYTES;
    luaL_Buffer b;
    uint8_t *out = (uint8_t *)luaL_buffinitsize(L, &b, mlen ? mlen : 1);
    if (crypto_secretbox_open_easy(out, c + crypto_secretbox_NONCEBYTES,
                                   len - crypto_secretbox_NONCEBYTES, c, key) != 0)
        return fail(L, "sealed message does not authenticate under this key");
    luaL_pushresultsize(&b, mlen);
    return 1;
}

/* The list of holder xs at arg (integers in 1 .. 2^61 - 2), in a userdata pushed on the stack. */
static uint64_t *checkxs(lua_State *L, int arg, size_t *n) {
    luaL_checktype(L, arg, LUA_TTABLE);
    *n = (size_t)luaL_len(L, arg);
    luaL_argcheck(L, *n >= 1 && *n <= 65536, arg, "1 to 65536 holders expected");
    uint64_t *xs = lua_newuserdatauv(L, *n * sizeof *xs, 0);
    for (size_t i = 0; i < *n; i++) {
        lua_geti(L, arg, (lua_Integer)i + 1);
        int ok;
        lua_Integer x = lua_tointegerx(L, -1, &ok);
        if (!ok)
            luaL_argerror(L, arg, lua_pushfstring(L, "holder %d's x is not an integer", (int)i + 1));
        xs[i] = (uint64_t)x;
        lua_pop(L, 1);
    }
    return xs;
}

/* shamir_split(secret, t, xs) -> { share for xs[1], ... } (strings of #secret * 2 bytes: one
** little-endian 64-bit field element per 4 bytes of secret), t of them recover it */
static int c_shamir_split(lua_State *L) {
    size_t len;
    const uint8_t *secret = (const uint8_t *)luaL_checklstring(L, 1, &len);
    lua_Integer t = luaL_checkinteger(L, 2);
    size_t n;
    uint64_t *xs = checkxs(L, 3, &n);
    luaL_argcheck(L, len > 0 && len % 4 == 0 && len <= 2048, 1, "a secret of 4 .. 2048 bytes, a multiple of 4");
    luaL_argcheck(L, t >= 1 && (size_t)t <= n, 2, "the threshold must be in 1 .. #xs");
    size_t words = len / 4;
    uint64_t *random = lua_newuserdatauv(L, ((size_t)t - 1) * words * 8 + 8, 0);
    uint64_t *shares = lua_newuserdatauv(L, n * words * 8, 0);
    randombytes_buf(random, ((size_t)t - 1) * words * 8);
    char err[160];
    int rc = dpy_shamir_split(secret, len, (uint32_t)t, xs, n, random, shares, err, sizeof err);
    sodium_memzero(random, ((size_t)t - 1) * words * 8);
    if (rc != 0)
        return luaL_error(L, "shamir_split: %s", err);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushlstring(L, (const char *)(shares + i * words), words * 8);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* shamir_combine(xs, shares) -> secret | nil, msg (shares as shamir_split made them) */
static int c_shamir_combine(lua_State *L) {
    size_t k;
    uint64_t *xs = checkxs(L, 1, &k);
    luaL_checktype(L, 2, LUA_TTABLE);
    if ((size_t)luaL_len(L, 2) != k)
        return luaL_error(L, "shamir_combine: %d xs but %d shares", (int)k, (int)luaL_len(L, 2));
    lua_geti(L, 2, 1);
    size_t first = lua_type(L, -1) == LUA_TSTRING ? lua_rawlen(L, -1) : 0;
    lua_pop(L, 1);
    if (first == 0 || first % 8 != 0 || first > 4096)
        return fail(L, "a share is not a whole number (1 to 512) of 64-bit field elements");
    size_t words = first / 8;
    uint64_t *ys = lua_newuserdatauv(L, k * first, 0);
    for (size_t i = 0; i < k; i++) {
        lua_geti(L, 2, (lua_Integer)i + 1);
        size_t len;
        const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
        if (!s || len != first)
            return fail(L, "shares of different lengths");
        memcpy(ys + i * words, s, len);
        lua_pop(L, 1);
    }
    uint8_t secret[2048];
    char err[160];
    if (dpy_shamir_combine(xs, ys, k, words * 4, secret, err, sizeof err) != 0)
        return fail(L, err);
    lua_pushlstring(L, (const char *)secret, words * 4);
    sodium_memzero(secret, sizeof secret);
    return 1;
}

static const luaL_Reg functions[] = {
    {"keypair", c_keypair},       {"public_key", c_public_key},
    {"agree", c_agree},           {"random_bytes", c_random_bytes},
    {"stream", c_stream},         {"mask_", c_mask},
    {"add_", c_add},              {"encode", c_encode},
    {"decode", c_decode},         {"seal", c_seal},
    {"open", c_open},             {"shamir_split", c_shamir_split},
    {"shamir_combine", c_shamir_combine}, {NULL, NULL}};

int luaopen_dpy_crypto_core(lua_State *L) {
    if (sodium_init() < 0)   /* idempotent and thread-safe */
        return luaL_error(L, "libsodium failed to initialize");
    luaL_newlib(L, functions);
    return 1;
}
