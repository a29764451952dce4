/*
** l_data.c: dataset files into tensors, and batches out of them. Dataset tensors are read-only
** (DPY_TF_READONLY): loaded once per process and shared by every node that reads them.
*/
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "data_image.h"
#include "dpy_arrays.h"
#include "dpy_core.h"
#include "dpy_lua.h"

/*
** The process-wide dataset cache: every state (node) that reads the same file gets a handle on
** the same storage, so a thousand nodes in one process hold one copy of the data. Entries live
** until the process ends.
*/
typedef struct cache_entry {
    char *key;                  /* path, plus the CIFAR label layout */
    dpy_tensor *images, *labels;
    struct cache_entry *next;
} cache_entry;

static cache_entry *g_cache;
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* Shares the cached tensors of key into the boxes; returns 1 on a hit. Caller holds the lock. */
static int cache_get(const char *key, dpy_tensor_box *images, dpy_tensor_box *labels) {
    for (cache_entry *e = g_cache; e; e = e->next) {
        if (strcmp(e->key, key) != 0)
            continue;
        if (dpy_tensor_share(&images->h, e->images) != DPY_OK)
            return 0;
        if (labels && dpy_tensor_share(&labels->h, e->labels) != DPY_OK)
            return 0;
        return 1;
    }
    return 0;
}

/* Keeps shares of the boxes' tensors under key (silently skipped when out of memory). */
static void cache_put(const char *key, dpy_tensor_box *images, dpy_tensor_box *labels) {
    cache_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key)) || dpy_tensor_share(&e->images, images->h) != DPY_OK ||
        (labels && dpy_tensor_share(&e->labels, labels->h) != DPY_OK)) {
        if (e) {
            free(e->key);
            dpy_tensor_free(e->images);
        }
        free(e);
        return;
    }
    e->next = g_cache;
    g_cache = e;
}

static int io_fail(lua_State *L, const char *msg) {
    luaL_pushfail(L);
    lua_pushstring(L, msg);
    return 2;
}

/*
** Reads path into x: mapped when it can be (a gzipped file needs cache_dir), else into memory,
** saying why when a cache directory was given.
*/
static int load_idx(const char *path, const char *cache_dir, dpy_idx *x, char *err, size_t errlen) {
    if (dpy_idx_map(path, cache_dir, x, err, errlen) == 0)
        return 0;
    if (dpy_idx_read(path, x, err, errlen) != 0)
        return -1;
    if (cache_dir)
        fprintf(stderr, "dpy-lua: %s: reading into memory, not mapped (%s)\n", path, err);
    return 0;
}

/*
** data.core.read_idx(path [, cache_dir]) -> uint8 dpy.Tensor (read-only) | nil, err
** gzipped or not; the tensor maps the file (a gzipped one needs cache_dir: see dpy_idx_map)
*/
static int d_read_idx(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    const char *cache_dir = luaL_optstring(L, 2, NULL);
    dpy_tensor_box *b = dpy_newtensor(L);   /* box first: nothing below raises while x is held */
    char err[512];
    dpy_idx x;
    pthread_mutex_lock(&g_cache_lock);
    if (!cache_get(path, b, NULL)) {
        if (load_idx(path, cache_dir, &x, err, sizeof err) != 0) {
            pthread_mutex_unlock(&g_cache_lock);
            return io_fail(L, err);
        }
        dpy_err e = x.mapped ? dpy_tensor_wrap(&b->h, x.data, x.len, DPY_UINT8, x.dims, x.ndim,
                                               dpy_idx_unmap)
                             : dpy_tensor_from_data(&b->h, x.data, x.len, DPY_UINT8, x.dims, x.ndim);
        if (e != DPY_OK || !x.mapped)
            dpy_idx_free(&x);   /* a mapping the tensor took is the tensor's to release */
        if (e != DPY_OK) {
            pthread_mutex_unlock(&g_cache_lock);
            return dpy_torch_error(L);
        }
        cache_put(path, b, NULL);
        if (!x.mapped)
            dpy_heap_trim();   /* the reader's transient buffers: twice the data */
    }
    pthread_mutex_unlock(&g_cache_lock);
    b->flags = DPY_TF_READONLY;
    dpy_tensor_filled(L, b);
    return 1;
}

/* Reads a CIFAR batch, binary (label_key NULL) or Python, into two read-only boxes, or nil, err. */
static int push_cifar(lua_State *L, const char *path, int label_bytes, int label_index,
                      const char *label_key) {
    dpy_tensor_box *images = dpy_newtensor(L);
    dpy_tensor_box *labels = dpy_newtensor(L);
    char err[512], key[4200];
    if (label_key)
        snprintf(key, sizeof key, "%s#py.%s", path, label_key);
    else
        snprintf(key, sizeof key, "%s#%d.%d", path, label_bytes, label_index);
    pthread_mutex_lock(&g_cache_lock);
    if (!cache_get(key, images, labels)) {
        dpy_cifar c;
        if ((label_key ? dpy_cifar_py_read(path, label_key, &c, err, sizeof err)
                       : dpy_cifar_read(path, label_bytes, label_index, &c, err, sizeof err)) != 0) {
            pthread_mutex_unlock(&g_cache_lock);
            return io_fail(L, err);
        }
        int64_t ishape[4] = {c.n, 3, 32, 32}, lshape[1] = {c.n};
        dpy_err e = dpy_tensor_from_data(&images->h, c.images, (size_t)c.n * 3072, DPY_UINT8,
                                         ishape, 4);
        if (e == DPY_OK)
            e = dpy_tensor_from_data(&labels->h, c.labels, (size_t)c.n, DPY_UINT8, lshape, 1);
        dpy_cifar_free(&c);
        if (e != DPY_OK) {
            pthread_mutex_unlock(&g_cache_lock);
            return dpy_torch_error(L);
        }
        cache_put(key, images, labels);
        dpy_heap_trim();   /* the reader's transient buffers: twice the data */
    }
    pthread_mutex_unlock(&g_cache_lock);
    images->flags = labels->flags = DPY_TF_READONLY;
    dpy_tensor_filled(L, images);
    dpy_tensor_filled(L, labels);
    return 2;
}

/*
** data.core.read_cifar(path, label_bytes, label_index) -> images, labels | nil, err
** images: uint8 n x 3 x 32 x 32, labels: uint8 n (both read-only)
*/
static int d_read_cifar(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int label_bytes = (int)luaL_checkinteger(L, 2);
    int label_index = (int)luaL_checkinteger(L, 3);
    return push_cifar(L, path, label_bytes, label_index, NULL);
}

static int read_numbers(lua_State *L, int arg, double *out, int max) {
    if (lua_isnoneornil(L, arg))
        return 0;
    luaL_checktype(L, arg, LUA_TTABLE);
    int n = (int)luaL_len(L, arg);
    if (n > max)
        luaL_argerror(L, arg, "too many channels");
    for (int i = 0; i < n; i++) {
        lua_geti(L, arg, i + 1);
        out[i] = luaL_checknumber(L, -1);
        lua_pop(L, 1);
    }
    return n;
}

/*
** data.core.batch(images, labels, idx [, mean, std]) -> x, y
** x: float32 images[idx] / 255, normalized per channel; y: int64 labels[idx]. One call, no
** per-sample Lua.
*/
static int d_batch(lua_State *L) {
    lua_settop(L, 5);
    dpy_tensor *images = dpy_checktensor(L, 1);
    dpy_tensor *labels = dpy_checktensor(L, 2);
    dpy_tensor *idx = dpy_checktensor(L, 3);
    double mean[16], std[16];
    int nm = read_numbers(L, 4, mean, 16), ns = read_numbers(L, 5, std, 16);
    if (nm != ns)
        luaL_argerror(L, 5, "mean and std need the same number of channels");
    for (int i = 0; i < ns; i++)
        if (!(std[i] > 0))
            luaL_argerror(L, 5, "std must be > 0");
    dpy_tensor_box *x = dpy_newtensor(L);
    dpy_tensor_box *y = dpy_newtensor(L);
    if (dpy_tensor_batch(&x->h, &y->h, images, labels, idx, mean, std, nm) != DPY_OK)
        return dpy_torch_error(L);
    dpy_tensor_filled(L, x);
    dpy_tensor_filled(L, y);
    return 2;
}

/* data.core.storage(t) -> a string naming t's bytes (their address and count): equal strings
** name the same bytes while both tensors live (a key of data.shared) */
static int d_storage(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    lua_pushfstring(L, "%p+%I", dpy_tensor_data(t), (lua_Integer)dpy_tensor_nbytes(t));
    return 1;
}

/* {==== image files, directory listings, datasets shared by key (lua/dpy/datasets) ====} */

#define NAMES_MT "dpy.data.Names"

/* The box that owns two name lists while they become Lua strings (pushing may raise). */
static int names_gc(lua_State *L) {
    dpy_names *x = luaL_checkudata(L, 1, NAMES_MT);
    dpy_names_free(&x[0]);
    dpy_names_free(&x[1]);
    return 0;
}

static void push_names(lua_State *L, const dpy_names *x) {
    lua_createtable(L, (int)x->n, 0);
    for (size_t i = 0; i < x->n; i++) {
        lua_pushstring(L, x->names[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* data.core.list_dir(path) -> dirs, files (names, each list sorted by bytes) | nil, err */
static int d_list_dir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    dpy_names *x = lua_newuserdatauv(L, 2 * sizeof *x, 0);   /* box first, empty */
    memset(x, 0, 2 * sizeof *x);
    luaL_setmetatable(L, NAMES_MT);
    char err[512];
    if (dpy_dir_list(path, &x[0], &x[1], err, sizeof err) != 0)
        return io_fail(L, err);
    push_names(L, &x[0]);
    push_names(L, &x[1]);
    dpy_names_free(&x[0]);
    dpy_names_free(&x[1]);
    return 2;
}

/* data.core.image_probe(path) -> width, height, channels (1 grey, 3 colour) | nil, err */
static int d_image_probe(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    dpy_image_info info;
    char err[512];
    if (dpy_image_probe(path, &info, err, sizeof err) != 0)
        return io_fail(L, err);
    lua_pushinteger(L, info.width);
    lua_pushinteger(L, info.height);
    lua_pushinteger(L, info.channels);
    return 3;
}

static int check_side(lua_State *L, int arg) {
    lua_Integer v = luaL_checkinteger(L, arg);
    luaL_argcheck(L, v >= 1 && v <= DPY_IMAGE_MAX_SIDE, arg, "image side out of range");
    return (int)v;
}

/*
** data.core.read_images(paths, channels, height, width) -> uint8 dpy.Tensor | nil, err
** n x channels x height x width, image i decoded from paths[i] (PNG or JPEG); the first file that
** is missing, corrupt or of another size ends it, named in err
*/
static int d_read_images(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer c = luaL_checkinteger(L, 2);
    luaL_argcheck(L, c == 1 || c == 3, 2, "channels must be 1 or 3");
    int h = check_side(L, 3), w = check_side(L, 4);
    lua_settop(L, 4);
    lua_Integer n = luaL_len(L, 1);
    luaL_argcheck(L, n >= 1, 1, "no image paths");
    for (lua_Integer i = 1; i <= n; i++) {
        size_t len;
        if (lua_geti(L, 1, i) != LUA_TSTRING)
            return luaL_error(L, "bad argument #1 to 'read_images' (paths[%I] is a %s, not a "
                              "string)", (LUAI_UACINT)i, luaL_typename(L, -1));
        if (strlen(lua_tolstring(L, -1, &len)) != len)
            return luaL_error(L, "bad argument #1 to 'read_images' (paths[%I] holds a NUL byte)",
                              (LUAI_UACINT)i);
        lua_pop(L, 1);
    }
    int64_t shape[4] = {(int64_t)n, (int64_t)c, h, w};
    size_t per = (size_t)c * (size_t)h * (size_t)w;
    dpy_tensor_box *b = dpy_newtensor(L);   /* the box owns the pixels from the start */
    if (dpy_tensor_empty(&b->h, shape, 4, DPY_UINT8, NULL) != DPY_OK)
        return dpy_torch_error(L);
    uint8_t *pixels = (uint8_t *)dpy_tensor_data(b->h);
    char err[512];
    for (lua_Integer i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        int rc = dpy_image_decode(lua_tostring(L, -1), (int)c, h, w, pixels + (size_t)i * per, err,
                                  sizeof err);
        lua_pop(L, 1);
        if (rc != 0) {
            dpy_tensor_drop(b);
            return io_fail(L, err);
        }
    }
    dpy_tensor_filled(L, b);
    return 1;
}

/* data.core.channel_stats(images) -> means, stds: per channel of a uint8 n x c x ... tensor,
** on the 0..1 scale; a channel that no image varies gets std 1 (normalizing only centres it), as
** data.numpy's do: a std of 0 would make every batch 0/0 */
static int d_channel_stats(lua_State *L) {
    dpy_tensor *t = dpy_checktensor(L, 1);
    const uint8_t *data = dpy_tensor_data(t);
    luaL_argcheck(L, dpy_tensor_dtype(t) == DPY_UINT8 && dpy_tensor_dim(t) >= 2 && data, 1,
                  "a contiguous cpu uint8 tensor of n x channels x ... expected");
    int64_t n = dpy_tensor_size(t, 0), c = dpy_tensor_size(t, 1);
    luaL_argcheck(L, c >= 1 && c <= 64 && n >= 1, 1, "1 to 64 channels and a sample expected");
    double mean[64], std[64];
    dpy_u8_channel_stats(data, n, (int)c, dpy_tensor_numel(t) / (n * c), mean, std);
    for (int pass = 0; pass < 2; pass++) {
        lua_createtable(L, (int)c, 0);
        for (int k = 0; k < c; k++) {
            lua_pushnumber(L, pass ? (std[k] > 0 ? std[k] : 1.0) : mean[k]);
            lua_rawseti(L, -2, k + 1);
        }
    }
    return 2;
}

/*
** The datasets that Lua builds (lua/dpy/datasets), kept per process by key like the files above:
** entries are immutable once listed and live until the process ends, so their tensors can be
** shared after the lock is let go. The lock is recursive: a builder may itself ask for another
** key (a test split for its training split's statistics); other threads wait, and then share.
*/
typedef struct shared_entry {
    char *key, *meta;             /* key: keylen bytes, NULs allowed */
    size_t keylen, metalen, n;
    char **names;
    dpy_tensor **tensors;
    struct shared_entry *next;
} shared_entry;

static shared_entry *g_shared;
static pthread_mutex_t g_shared_lock;
static pthread_once_t g_shared_once = PTHREAD_ONCE_INIT;

static void shared_init(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_shared_lock, &a);
    pthread_mutexattr_destroy(&a);
}

static void shared_free(shared_entry *e) {
    for (size_t i = 0; e->names && i < e->n; i++) {
        free(e->names[i]);
        dpy_tensor_free(e->tensors[i]);
    }
    free(e->names);
    free(e->tensors);
    free(e->key);
    free(e->meta);
    free(e);
}

/* An entry from the builder's results at 3 (name -> tensor) and 4 (string or nil), or NULL and
** *bad. Raises nothing: the caller holds the lock. */
static shared_entry *shared_make(lua_State *L, const char *key, size_t keylen, const char **bad) {
    *bad = "the builder must return a table of tensors by name, and a string or nil";
    if (!lua_istable(L, 3) || (!lua_isnil(L, 4) && lua_type(L, 4) != LUA_TSTRING))
        return NULL;
    size_t n = 0;
    for (lua_pushnil(L); lua_next(L, 3); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || !dpy_testtensor(L, lua_absindex(L, -1))) {
            lua_pop(L, 2);
            return NULL;
        }
        n++;
    }
    *bad = "out of memory";
    shared_entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->names = calloc(n ? n : 1, sizeof *e->names);
    e->tensors = calloc(n ? n : 1, sizeof *e->tensors);
    if ((e->key = malloc(keylen + 1)) != NULL) {
        memcpy(e->key, key, keylen + 1);
        e->keylen = keylen;
    }
    size_t metalen = 0;
    const char *meta = lua_tolstring(L, 4, &metalen);
    if (meta && (e->meta = malloc(metalen + 1)) != NULL) {
        memcpy(e->meta, meta, metalen + 1);
        e->metalen = metalen;
    }
    int ok = e->names && e->tensors && e->key && (!meta || e->meta);
    lua_pushnil(L);
    while (ok && lua_next(L, 3)) {
        e->names[e->n] = strdup(lua_tostring(L, -2));
        ok = e->names[e->n] != NULL &&
             dpy_tensor_share(&e->tensors[e->n], dpy_testtensor(L, lua_absindex(L, -1))) == DPY_OK;
        e->n++;
        lua_pop(L, ok ? 1 : 2);   /* the value; the key too when the walk stops here */
    }
    if (!ok) {
        shared_free(e);
        return NULL;
    }
    return e;
}

/*
** data.core.shared(key, build) -> tensors, meta
** The first call for key in the process runs build() -> {name = dpy.Tensor, ...}, meta (a string
** or nil) and keeps both; every call returns read-only shares of the tensors (a new table) and the
** string. build's error is raised as it is, and nothing is kept.
*/
static int d_shared(lua_State *L) {
    size_t keylen;
    const char *key = luaL_checklstring(L, 1, &keylen);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 2);
    pthread_once(&g_shared_once, shared_init);
    pthread_mutex_lock(&g_shared_lock);
    shared_entry *e = g_shared;
    while (e && (e->keylen != keylen || memcmp(e->key, key, keylen) != 0))
        e = e->next;
    if (!e) {
        lua_pushvalue(L, 2);
        if (lua_pcall(L, 0, 2, 0) != LUA_OK) {
            pthread_mutex_unlock(&g_shared_lock);
            return lua_error(L);
        }
        const char *bad;
        if (!(e = shared_make(L, key, keylen, &bad))) {
            pthread_mutex_unlock(&g_shared_lock);
            return luaL_error(L, "data.core.shared: %s", bad);
        }
        e->next = g_shared;
        g_shared = e;
    }
    pthread_mutex_unlock(&g_shared_lock);
    lua_settop(L, 2);
    lua_createtable(L, 0, (int)e->n);
    for (size_t i = 0; i < e->n; i++) {
        dpy_tensor_box *b = dpy_newtensor(L);
        if (dpy_tensor_share(&b->h, e->tensors[i]) != DPY_OK)
            return dpy_torch_error(L);
        b->flags = DPY_TF_READONLY;
        dpy_tensor_filled(L, b);
        lua_setfield(L, -2, e->names[i]);
    }
    if (e->meta)
        lua_pushlstring(L, e->meta, e->metalen);
    else
        lua_pushnil(L);
    return 2;
}

/* }==== */

/* {==== NumPy, torch.save and CIFAR-pickle datasets (dpy_arrays.h) ====} */

/*
** data.core.read_cifar_py(path, label_key) -> images, labels | nil, err
** a CIFAR-10/100 Python batch; label_key "labels", "fine_labels" or "coarse_labels"
*/
static int d_read_cifar_py(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    return push_cifar(L, path, 0, 0, luaL_checkstring(L, 2));
}

#define ARRAY_NAMES 16

/* The list of strings at arg into names (pointers into the strings on the stack). */
static int check_names(lua_State *L, int arg, const char **names) {
    luaL_checktype(L, arg, LUA_TTABLE);
    int n = (int)luaL_len(L, arg);
    luaL_argcheck(L, n <= ARRAY_NAMES, arg, "too many names");
    for (int i = 0; i < n; i++) {
        lua_geti(L, arg, i + 1);
        names[i] = lua_tostring(L, -1);
        luaL_argcheck(L, names[i] != NULL, arg, "names must be strings");
        lua_pop(L, 1);   /* the table still holds the string */
    }
    return n;
}

typedef struct {
    const char *path;
    const char *names[ARRAY_NAMES];
    int nnames, position;
} array_source;

static int read_source(int torch, const array_source *src, dpy_array *out, char *err, size_t errlen) {
    return torch ? dpy_torch_read(src->path, src->names, src->nnames, src->position, out, err, errlen)
                 : dpy_npy_read(src->path, src->names, src->nnames, out, err, errlen);
}

static dpy_err wrap_array(dpy_tensor **out, dpy_array *a) {
    dpy_dtype t = a->type == DPY_ARRAY_U8 ? DPY_UINT8 : a->type == DPY_ARRAY_F32 ? DPY_FLOAT32 : DPY_INT64;
    dpy_err e = dpy_tensor_wrap(out, a->data, a->nbytes, t, a->dims, a->ndim, free);
    if (e == DPY_OK)
        a->data = NULL;   /* the tensor's now */
    return e;
}

/*
** Loads and converts both arrays, and fills the boxes: images, labels, and stats (float64: the
** channels' means, their standard deviations, then the largest label). Calls no Lua.
*/
static int load_arrays(int torch, const array_source *isrc, const array_source *lsrc,
                       dpy_layout layout, dpy_tensor_box *images, dpy_tensor_box *labels,
                       dpy_tensor_box *stats, char *err, size_t errlen) {
    dpy_array x, y;
    memset(&y, 0, sizeof y);
    double st[2 * 16 + 1];
    int rc = read_source(torch, isrc, &x, err, errlen);
    if (rc == 0)
        rc = read_source(torch, lsrc, &y, err, errlen);
    if (rc == 0) {
        char what[8400];
        if (strcmp(isrc->path, lsrc->path) != 0)
            snprintf(what, sizeof what, "%s and %s", isrc->path, lsrc->path);
        else
            snprintf(what, sizeof what, "%s", isrc->path);
        rc = dpy_dataset_arrays(&x, &y, layout, what, err, errlen);
    }
    if (rc == 0)
        rc = dpy_array_channel_stats(&x, st, st + x.dims[1], 16, err, errlen);
    if (rc == 0) {
        int c = (int)x.dims[1];
        int64_t max = 0, n = y.dims[0], sshape[1] = {2 * c + 1};
        for (int64_t i = 0; i < n; i++)
            max = ((int64_t *)y.data)[i] > max ? ((int64_t *)y.data)[i] : max;
        st[2 * c] = (double)max;
        if (wrap_array(&images->h, &x) != DPY_OK || wrap_array(&labels->h, &y) != DPY_OK ||
            dpy_tensor_from_data(&stats->h, st, sizeof *st * (size_t)(2 * c + 1), DPY_FLOAT64,
                                 sshape, 1) != DPY_OK)
            rc = dpy_fail(err, errlen, "torch: %s", dpy_torch_errmsg());
    }
    dpy_array_free(&x);
    dpy_array_free(&y);
    return rc;
}

/* Shares the cached tensors of key into the three boxes: 1 when all are there. */
static int arrays_cached(const char *key, size_t klen, dpy_tensor_box *images,
                         dpy_tensor_box *labels, dpy_tensor_box *stats) {
    char skey[8400];
    snprintf(skey, sizeof skey, "%.*s#stats", (int)klen, key);
    if (cache_get(key, images, labels) && cache_get(skey, stats, NULL))
        return 1;
    dpy_tensor_drop(images);   /* a partial hit: load afresh */
    dpy_tensor_drop(labels);
    dpy_tensor_drop(stats);
    return 0;
}

/*
** data.core.read_arrays(format, images_path, images_names, labels_path, labels_names [, layout])
**   -> images, labels, stats | nil, err
** format "npy" (.npy files, .npz archives) or "torch" (torch.save files); *_names: the npz
** members or dict keys tried in order (a file of one array needs none; from a torch tuple or
** list, images are element 0 and labels element 1); layout "auto" (default), "nchw" or "nhwc".
** images: uint8 or float32 N x C x H x W, labels: int64 N, both read-only and read once per
** process; stats: {mean = {...}, std = {...}, max_label = k} of these images and labels.
*/
static int d_read_arrays(lua_State *L) {
    static const char *const formats[] = {"npy", "torch", NULL};
    static const char *const layouts[] = {"auto", "nchw", "nhwc", NULL};
    int torch = luaL_checkoption(L, 1, NULL, formats);
    array_source isrc = {.path = luaL_checkstring(L, 2), .position = 0};
    isrc.nnames = check_names(L, 3, isrc.names);
    array_source lsrc = {.path = luaL_checkstring(L, 4), .position = 1};
    lsrc.nnames = check_names(L, 5, lsrc.names);
    dpy_layout layout = (dpy_layout)luaL_checkoption(L, 6, "auto", layouts);
    luaL_Buffer kb;   /* the cache key: everything that makes the result */
    luaL_buffinit(L, &kb);
    const array_source *srcs[2] = {&isrc, &lsrc};
    lua_pushfstring(L, "arrays|%s|%s", formats[torch], layouts[layout]);
    luaL_addvalue(&kb);
    for (int k = 0; k < 2; k++) {
        lua_pushfstring(L, "|%s|", srcs[k]->path);
        luaL_addvalue(&kb);
        for (int i = 0; i < srcs[k]->nnames; i++) {
            lua_pushfstring(L, "%s,", srcs[k]->names[i]);
            luaL_addvalue(&kb);
        }
    }
    luaL_pushresult(&kb);
    size_t klen;
    const char *key = lua_tolstring(L, -1, &klen);
    dpy_tensor_box *images = dpy_newtensor(L);   /* boxes first: nothing below raises */
    dpy_tensor_box *labels = dpy_newtensor(L);
    dpy_tensor_box *stats = dpy_newtensor(L);
    char err[1024];
    pthread_mutex_lock(&g_cache_lock);
    if (!arrays_cached(key, klen, images, labels, stats)) {
        if (load_arrays(torch, &isrc, &lsrc, layout, images, labels, stats, err, sizeof err) != 0) {
            pthread_mutex_unlock(&g_cache_lock);
            return io_fail(L, err);
        }
        char skey[8400];
        snprintf(skey, sizeof skey, "%.*s#stats", (int)klen, key);
        cache_put(key, images, labels);
        cache_put(skey, stats, NULL);
        dpy_heap_trim();   /* the readers' transient buffers */
    }
    pthread_mutex_unlock(&g_cache_lock);
    images->flags = labels->flags = DPY_TF_READONLY;
    dpy_tensor_filled(L, images);
    dpy_tensor_filled(L, labels);
    /* stats: the tensor's values into a table, then the tensor goes */
    const double *st = dpy_tensor_data(stats->h);
    int c = (int)dpy_tensor_size(images->h, 1);
    lua_createtable(L, 0, 3);
    for (int k = 0; k < 2; k++) {
        lua_createtable(L, c, 0);
        for (int i = 0; i < c; i++) {
            lua_pushnumber(L, st[k * c + i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, k ? "std" : "mean");
    }
    lua_pushinteger(L, (lua_Integer)st[2 * c]);
    lua_setfield(L, -2, "max_label");
    dpy_tensor_drop(stats);
    lua_remove(L, -2);   /* the stats box */
    return 3;
}

/*
** data.core.unit_bytes(rows, n, width) -> uint8 dpy.Tensor n x width | nil
** rows: n tables of width numbers in 0..1 (LEAF's byte / 255 pixels), each as float32, times 255,
** rounded half to even: the bytes that tensor.new(rows, "float32"):mul(255):round():to("uint8")
** makes, without a float tensor. nil when rows is anything else: the caller's slower path says what.
*/
static int d_unit_bytes(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_checkinteger(L, 2), width = luaL_checkinteger(L, 3);
    luaL_argcheck(L, n >= 1 && (lua_Integer)lua_rawlen(L, 1) == n, 2, "rows must hold n tables");
    luaL_argcheck(L, width >= 1 && width <= (1 << 20), 3, "width out of range");
    lua_settop(L, 3);
    int64_t shape[2] = {(int64_t)n, (int64_t)width};
    dpy_tensor_box *b = dpy_newtensor(L);   /* the box owns the bytes from the start */
    if (dpy_tensor_empty(&b->h, shape, 2, DPY_UINT8, NULL) != DPY_OK)
        return dpy_torch_error(L);
    uint8_t *out = (uint8_t *)dpy_tensor_data(b->h);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 1, i) != LUA_TTABLE || (lua_Integer)lua_rawlen(L, -1) != width)
            goto other;
        for (lua_Integer j = 1; j <= width; j++) {
            int isnum;
            lua_rawgeti(L, -1, j);
            float v = (float)lua_tonumberx(L, -1, &isnum);
            int number = isnum && lua_type(L, -1) == LUA_TNUMBER;
            lua_pop(L, 1);
            if (!number || !(v >= 0.0f && v <= 1.0f))
                goto other;
            *out++ = (uint8_t)nearbyintf(v * 255.0f);
        }
        lua_pop(L, 1);
    }
    dpy_tensor_filled(L, b);
    return 1;
other:
    dpy_tensor_drop(b);
    lua_pushnil(L);
    return 1;
}

/* {==== decoded datasets in the dataset cache directory (data_cache.c) ====} */

#define CACHE_MT "dpy.data.CacheFile"

/* The dtypes a cache file holds, by their code in the file (their index here). */
static const dpy_dtype CACHE_DTYPES[] = {DPY_UINT8, DPY_INT64, DPY_FLOAT32, DPY_FLOAT64};
#define CACHE_NDTYPES ((int)(sizeof CACHE_DTYPES / sizeof *CACHE_DTYPES))

static int cache_gc(lua_State *L) {
    dpy_cache_close(luaL_checkudata(L, 1, CACHE_MT));
    return 0;
}

/* data.core.stamp(path) -> "<size> bytes, mtime <sec>.<nsec>" | nil, err: a part of a cache key
** that changes whenever the file does */
static int d_stamp(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    if (stat(path, &st) != 0) {
        luaL_pushfail(L);
        lua_pushfstring(L, "cannot open %s: %s", path, strerror(errno));
        return 2;
    }
    char buf[96];
    snprintf(buf, sizeof buf, "%lld bytes, mtime %lld.%09ld", (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    lua_pushstring(L, buf);
    return 1;
}

/* data.core.hash(s) -> s's XXH3-64 as 16 hex digits (a cache file's name) */
static int d_hash(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    char buf[20];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)XXH3_64bits(s, len));
    lua_pushstring(L, buf);
    return 1;
}

/*
** data.core.cache_read(path, key) -> {name = tensor, ...}, meta | nil (no file, or one made under
** another key) | nil, err (unreadable, truncated or corrupt: its length and checksum are checked)
** The tensors map the file: every process that reads it shares one copy, the page cache's.
*/
static int d_cache_read(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t keylen;
    const char *key = luaL_checklstring(L, 2, &keylen);
    lua_settop(L, 2);
    dpy_cache_file *f = lua_newuserdatauv(L, sizeof *f, 0);   /* box first, empty */
    memset(f, 0, sizeof *f);
    f->fd = -1;
    luaL_setmetatable(L, CACHE_MT);
    char err[1024];
    int rc = dpy_cache_open(path, key, keylen, f, err, sizeof err);
    if (rc == 1) {
        lua_pushnil(L);
        return 1;
    }
    if (rc != 0)
        return io_fail(L, err);
    lua_createtable(L, 0, (int)f->n);
    for (size_t i = 0; i < f->n; i++) {
        const dpy_cache_array *a = &f->arrays[i];
        if (a->code < 0 || a->code >= CACHE_NDTYPES) {
            snprintf(err, sizeof err, "%s: corrupt header (array type %d)", path, a->code);
            dpy_cache_close(f);
            return io_fail(L, err);
        }
        dpy_tensor_box *b = dpy_newtensor(L);   /* the box, then the mapping it will own */
        void *data = dpy_cache_map(f, i, err, sizeof err);
        if (!data) {
            dpy_cache_close(f);
            return io_fail(L, err);   /* the mapped ones go with the table */
        }
        if (dpy_tensor_wrap(&b->h, data, a->nbytes, CACHE_DTYPES[a->code], a->dims, a->ndim,
                            dpy_cache_unmap) != DPY_OK) {
            dpy_cache_unmap(data);
            snprintf(err, sizeof err, "%s: corrupt header (%s: %s)", path, a->name, dpy_torch_errmsg());
            dpy_cache_close(f);
            return io_fail(L, err);
        }
        dpy_tensor_filled(L, b);
        lua_setfield(L, -2, a->name);
    }
    rc = dpy_cache_check(f, err, sizeof err);
    if (rc == 0)
        lua_pushlstring(L, f->meta, f->metalen);
    dpy_cache_close(f);
    if (rc != 0)
        return io_fail(L, err);   /* the tensors' garbage goes with the table */
    return 2;
}

static int array_cmp(const void *a, const void *b) {
    return strcmp(((const dpy_cache_array *)a)->name, ((const dpy_cache_array *)b)->name);
}

/*
** data.core.cache_write(path, key, meta, {name = tensor, ...}) -> true | nil, err
** contiguous cpu tensors of uint8, int64, float32 or float64; path's folder is made when missing
*/
static int d_cache_write(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t keylen, metalen;
    const char *key = luaL_checklstring(L, 2, &keylen);
    const char *meta = luaL_checklstring(L, 3, &metalen);
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_settop(L, 4);
    dpy_cache_array arrays[64];
    const void *data[64];
    size_t n = 0;
    for (lua_pushnil(L); lua_next(L, 4); lua_pop(L, 1)) {
        size_t nl;
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &nl) : NULL;
        luaL_argcheck(L, name && nl < sizeof arrays[0].name, 4, "names of fewer than 64 bytes expected");
        luaL_argcheck(L, n < 64, 4, "at most 64 tensors");
        dpy_tensor *t = dpy_checktensor(L, lua_absindex(L, -1));
        dpy_cache_array *a = &arrays[n];
        memset(a, 0, sizeof *a);
        a->code = -1;
        for (int c = 0; c < CACHE_NDTYPES; c++)
            if (dpy_tensor_dtype(t) == CACHE_DTYPES[c])
                a->code = c;
        data[n] = dpy_tensor_data(t);
        a->ndim = dpy_tensor_dim(t);
        luaL_argcheck(L, a->code >= 0 && data[n] && a->ndim <= DPY_CACHE_MAXDIM, 4,
                      "contiguous cpu tensors of uint8, int64, float32 or float64 expected");
        memcpy(a->name, name, nl + 1);
        for (int d = 0; d < a->ndim; d++)
            a->dims[d] = dpy_tensor_size(t, d);
        a->nbytes = dpy_tensor_nbytes(t);
        n++;
    }
    qsort(arrays, n, sizeof *arrays, array_cmp);   /* the same file for the same tensors */
    for (size_t i = 0; i < n; i++) {
        lua_getfield(L, 4, arrays[i].name);
        data[i] = dpy_tensor_data(dpy_checktensor(L, -1));
        lua_pop(L, 1);   /* the table keeps it */
    }
    char err[1024], dir[4200];
    const char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
        if (dpy_mkdir_p(dir, err, sizeof err) != 0)
            return io_fail(L, err);
    }
    if (dpy_cache_write(path, key, keylen, meta, metalen, arrays, data, n, err, sizeof err) != 0)
        return io_fail(L, err);
    lua_pushboolean(L, 1);
    return 1;
}

/* }==== */

static const luaL_Reg functions[] = {{"read_idx", d_read_idx}, {"read_cifar", d_read_cifar},
                                     {"batch", d_batch}, {"storage", d_storage},
                                     {"list_dir", d_list_dir}, {"image_probe", d_image_probe},
                                     {"read_images", d_read_images},
                                     {"channel_stats", d_channel_stats}, {"shared", d_shared},
                                     {"read_arrays", d_read_arrays}, {"read_cifar_py", d_read_cifar_py},
                                     {"unit_bytes", d_unit_bytes}, {"stamp", d_stamp}, {"hash", d_hash},
                                     {"cache_read", d_cache_read}, {"cache_write", d_cache_write},
                                     {NULL, NULL}};

int luaopen_dpy_data_core(lua_State *L) {
    if (luaL_newmetatable(L, NAMES_MT)) {
        lua_pushcfunction(L, names_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, CACHE_MT)) {
        lua_pushcfunction(L, cache_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    luaL_newlib(L, functions);
    return 1;
}
