/*
** data_cifar_py.c: CIFAR-10/100's "python version" batches (cifar-10-batches-py/data_batch_1 ...,
** cifar-100-python/train, test), what torchvision downloads: each a pickled dict whose b'data' is
** a uint8 n x 3072 numpy array (pickled as numpy.core.multiarray._reconstruct(ndarray, (0,), b'b')
** then BUILD with (1, shape, dtype('u1'), fortran, raw bytes); at pickle protocol 5,
** numpy.core.numeric._frombuffer(bytearray, dtype('u1'), shape, order)) and whose labels are a
** list of ints. A batch someone re-saved as torchvision still reads it may hold its labels as a
** 1-D integer numpy array (np.array(labels): int64) and its data as n x 3 x 32 x 32.
** Read with the strict reader of pickle.h: nothing but these globals is accepted.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpy_arrays.h"
#include "pickle.h"

static const char *const GLOBALS[] = {
    "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct", "numpy.ndarray",
    "numpy.dtype", "numpy.core.numeric._frombuffer", "numpy._core.numeric._frombuffer",
    "_codecs.encode",
};
enum { G_RECONSTRUCT, G_RECONSTRUCT2, G_NDARRAY, G_DTYPE, G_FROMBUFFER, G_FROMBUFFER2 };

#define CIFAR_PIXELS 3072

static const pk_value *item(const pk_doc *d, const pk_value *v, int32_t k) {
    return v && k < v->n ? pk_at(d, v->items[k]) : NULL;
}

/* A plain C-order numpy array: its bytes, shape and element type. */
typedef struct {
    const uint8_t *raw;
    size_t len;
    int64_t dims[4];
    int ndim;
    char kind;      /* 'u' or 'i' */
    int size;       /* bytes per element: 1, 2, 4, 8 */
} np_array;

/* The numpy array at value a (of at most 4 dimensions, of integers in little-endian order), or a
** message. */
static const char *array_of(const pk_doc *d, const pk_value *a, np_array *out) {
    if (!a || a->kind != PK_CALL)
        return "is not a numpy array";
    const pk_value *args = pk_at(d, a->items[1]), *shape, *dtype, *data;
    int c_order;
    if (pk_is_global(d, a->items[0], G_FROMBUFFER) || pk_is_global(d, a->items[0], G_FROMBUFFER2)) {
        /* protocol 5: _frombuffer(buffer, dtype, shape, order), order 'C' or 'F' */
        if (!args || args->kind != PK_TUPLE || args->n != 4)
            return "is a numpy array without (buffer, dtype, shape, order)";
        data = item(d, args, 0), dtype = item(d, args, 1), shape = item(d, args, 2);
        const pk_value *order = item(d, args, 3);
        if (!pk_text_is(order, "C") && !pk_text_is(order, "F"))
            return "is a numpy array in an order other than 'C' or 'F'";
        c_order = pk_text_is(order, "C");
    } else {
        if (!(pk_is_global(d, a->items[0], G_RECONSTRUCT) || pk_is_global(d, a->items[0], G_RECONSTRUCT2)))
            return "is not a numpy array";
        const pk_value *state = pk_at(d, a->items[2]);
        if (!args || args->n < 1 || !pk_is_global(d, args->items[0], G_NDARRAY))
            return "is not a plain numpy.ndarray";
        if (!state || state->kind != PK_TUPLE || state->n != 5)
            return "is a numpy array without the state (version, shape, dtype, fortran, data)";
        const pk_value *fortran = item(d, state, 3);
        shape = item(d, state, 1), dtype = item(d, state, 2), data = item(d, state, 4);
        c_order = fortran && (fortran->kind == PK_BOOL || fortran->kind == PK_INT) && fortran->i == 0;
    }
    /* dtype(code, False, True), then BUILD with (3, byte order, ...) */
    const pk_value *code = dtype && dtype->kind == PK_CALL && pk_is_global(d, dtype->items[0], G_DTYPE)
                               ? item(d, pk_at(d, dtype->items[1]), 0) : NULL;
    static const char *const CODES[] = {"u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8"};
    int known = -1;
    for (int k = 0; k < 8 && known < 0; k++)
        known = pk_text_is(code, CODES[k]) ? k : -1;
    if (known < 0)
        return "is not a numpy array of integers";
    out->kind = CODES[known][0], out->size = CODES[known][1] - '0';
    const pk_value *order = item(d, pk_at(d, dtype->items[2]), 1);
    if (out->size > 1 && pk_text_is(order, ">"))
        return "is a big-endian NumPy array (re-save it with .astype('<i8'))";
    if (!c_order)
        return "is a numpy array in Fortran order";
    if (!shape || shape->kind != PK_TUPLE || shape->n < 1 || shape->n > 4)
        return "is a numpy array of other than 1 to 4 dimensions";
    if (!data || data->kind != PK_BYTES)
        return "is a numpy array without its bytes";
    uint64_t count = 1;   /* stays <= len: no product overflows */
    out->ndim = shape->n;
    for (int k = 0; k < shape->n; k++) {
        const pk_value *dim = item(d, shape, k);
        if (!dim || dim->kind != PK_INT || dim->i < 0)
            return "is a numpy array whose shape is not a tuple of sizes";
        out->dims[k] = dim->i;
        if (dim->i != 0 && count > data->len / (uint64_t)dim->i)
            return "holds a different number of bytes than its shape says (truncated or corrupt)";
        count *= (uint64_t)dim->i;
    }
    if (data->len / (uint64_t)out->size != count || data->len % (uint64_t)out->size)
        return "holds a different number of bytes than its shape says (truncated or corrupt)";
    out->raw = data->s, out->len = data->len;
    return NULL;
}

/* The images (n x 3072 or n x 3 x 32 x 32 uint8, as torchvision reshapes them) at value a. */
static const char *images_of(const pk_doc *d, const pk_value *a, np_array *x, char *why,
                             size_t whylen) {
    const char *bad = array_of(d, a, x);
    if (bad)
        return bad;
    if (x->kind != 'u' || x->size != 1)
        return "is not a uint8 numpy array";
    int flat = x->ndim == 2 && x->dims[1] == CIFAR_PIXELS;
    int square = x->ndim == 4 && x->dims[1] == 3 && x->dims[2] == 32 && x->dims[3] == 32;
    if (flat || square)
        return NULL;
    int n = snprintf(why, whylen, "is not an n x 3072 or n x 3 x 32 x 32 array (");
    for (int k = 0; k < x->ndim && n > 0 && (size_t)n < whylen; k++)
        n += snprintf(why + n, whylen - (size_t)n, "%s%lld", k ? " x " : "", (long long)x->dims[k]);
    if (n > 0 && (size_t)n < whylen)
        snprintf(why + n, whylen - (size_t)n, ")");
    return why;
}

/* Element i of an integer array (little-endian), as a signed 64-bit value (a u8 past 2^63 wraps
** negative: out of range all the same). */
static int64_t element(const np_array *a, size_t i) {
    const uint8_t *p = a->raw + i * (size_t)a->size;
    uint64_t v = 0;
    for (int k = a->size - 1; k >= 0; k--)
        v = v << 8 | p[k];
    if (a->kind == 'i' && a->size < 8 && (v >> (8 * a->size - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * a->size);   /* sign-extend */
    return (int64_t)v;
}

/* The labels at value l (a list of ints, or a 1-D integer numpy array) into out[0..n-1], each
** 0..255, or -1 with a message. */
static int labels_of(const pk_doc *d, const pk_value *l, int64_t n, const char *path,
                     const char *key, uint8_t *out, char *err, size_t errlen) {
    np_array a;
    int64_t count = -1, bad_at = -1, bad = 0;
    if (l && l->kind == PK_LIST) {
        count = l->n;
        for (int32_t i = 0; i < l->n && count == n; i++) {
            const pk_value *v = pk_at(d, l->items[i]);
            if (!v || v->kind != PK_INT)
                return dpy_fail(err, errlen, "%s: '%s' holds something not an integer (entry %d)",
                                path, key, (int)i);
            if (v->i < 0 || v->i > 255) {
                bad_at = i, bad = v->i;
                break;
            }
            out[i] = (uint8_t)v->i;
        }
    } else if (l && l->kind == PK_CALL) {
        const char *why = array_of(d, l, &a);
        if (why)
            return dpy_fail(err, errlen, "%s: '%s' %s", path, key, why);
        if (a.ndim != 1)
            return dpy_fail(err, errlen, "%s: '%s' is a NumPy array of %d dimensions, not 1", path,
                            key, a.ndim);
        count = a.dims[0];
        for (int64_t i = 0; i < count && count == n; i++) {
            int64_t v = element(&a, (size_t)i);
            if (v < 0 || v > 255) {
                bad_at = i, bad = v;
                break;
            }
            out[i] = (uint8_t)v;
        }
    }
    if (count != n || bad_at >= 0) {
        char at[64] = "";
        if (bad_at >= 0)
            snprintf(at, sizeof at, " (entry %lld is %lld)", (long long)bad_at, (long long)bad);
        else if (count >= 0)
            snprintf(at, sizeof at, " (it holds %lld)", (long long)count);
        return dpy_fail(err, errlen, "%s: '%s' is not a list or NumPy array of %lld labels in 0..255%s",
                        path, key, (long long)n, at);
    }
    return 0;
}

/* The images and labels of the batch's dict into out. */
static int batch(const pk_doc *d, const char *path, const char *label_key, dpy_cifar *out,
                 char *err, size_t errlen) {
    const pk_value *root = pk_at(d, d->root);
    if (!root || root->kind != PK_DICT)
        return dpy_fail(err, errlen, "%s: not a CIFAR batch (the pickle is not a dict)", path);
    int32_t data = pk_dict_get(d, root, "data"), labels = pk_dict_get(d, root, label_key);
    if (data < 0 || labels < 0)
        return dpy_fail(err, errlen, "%s: not a CIFAR batch (no '%s' entry)", path,
                        data < 0 ? "data" : label_key);
    np_array x;
    char why[160];
    const char *bad = images_of(d, pk_at(d, data), &x, why, sizeof why);
    if (bad)
        return dpy_fail(err, errlen, "%s: 'data' %s", path, bad);
    int64_t n = x.dims[0];
    out->images = malloc(n ? (size_t)n * CIFAR_PIXELS : 1);
    out->labels = malloc(n ? (size_t)n : 1);
    if (!out->images || !out->labels)
        return dpy_fail(err, errlen, "out of memory reading %s", path);
    if (labels_of(d, pk_at(d, labels), n, path, label_key, out->labels, err, errlen) != 0)
        return -1;
    memcpy(out->images, x.raw, (size_t)n * CIFAR_PIXELS);
    out->n = n;
    return 0;
}

int dpy_cifar_py_read(const char *path, const char *label_key, dpy_cifar *out, char *err,
                      size_t errlen) {
    memset(out, 0, sizeof *out);
    uint8_t *buf;
    size_t len;
    if (dpy_read_file(path, DPY_ARRAY_LIMIT, &buf, &len, err, errlen) != 0)
        return -1;
    pk_doc d;
    int rc = pk_parse(&d, buf, len, GLOBALS, (int)(sizeof GLOBALS / sizeof *GLOBALS), path, err,
                      errlen);
    if (rc == 0) {
        rc = batch(&d, path, label_key, out, err, errlen);
        pk_free(&d);
    }
    free(buf);
    if (rc != 0)
        dpy_cifar_free(out);
    return rc;
}
