/*
** l_data.c: dataset files into tensors, and batches out of them. Dataset tensors are read-only
** (DPY_TF_READONLY): loaded once per process and shared by every node that reads them.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/*
** data.core.read_cifar(path, label_bytes, label_index) -> images, labels | nil, err
** images: uint8 n x 3 x 32 x 32, labels: uint8 n (both read-only)
*/
static int d_read_cifar(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int label_bytes = (int)luaL_checkinteger(L, 2);
    int label_index = (int)luaL_checkinteger(L, 3);
    dpy_tensor_box *images = dpy_newtensor(L);
    dpy_tensor_box *labels = dpy_newtensor(L);
    char err[512], key[4200];
    snprintf(key, sizeof key, "%s#%d.%d", path, label_bytes, label_index);
    pthread_mutex_lock(&g_cache_lock);
    if (!cache_get(key, images, labels)) {
        dpy_cifar c;
        if (dpy_cifar_read(path, label_bytes, label_index, &c, err, sizeof err) != 0) {
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

static const luaL_Reg functions[] = {{"read_idx", d_read_idx}, {"read_cifar", d_read_cifar},
                                     {"batch", d_batch}, {NULL, NULL}};

int luaopen_dpy_data_core(lua_State *L) {
    luaL_newlib(L, functions);
    return 1;
}
