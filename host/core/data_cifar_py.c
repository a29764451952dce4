/*
** data_cifar_py.c: CIFAR-10/100's "python version" batches (cifar-10-batches-py/data_batch_1 ...,
** cifar-100-python/train, test), what torchvision downloads: each a pickled dict whose b'data' is
** a uint8 n x 3072 numpy array (pickled as numpy.core.multiarray._reconstruct(ndarray, (0,), b'b')
** then BUILD with (1, shape, dtype('u1'), fortran, raw bytes); at pickle protocol 5,
** numpy.core.numeric._frombuffer(bytearray, dtype('u1'), shape, order)) and whose labels are a
** list of ints.
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

/* The raw bytes and row count of the uint8 n x 3072 array at value a, or a message. */
static const char *array_u8(const pk_doc *d, const pk_value *a, const uint8_t **raw,
                            int64_t *rows) {
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
    const pk_value *code = dtype && dtype->kind == PK_CALL && pk_is_global(d, dtype->items[0], G_DTYPE)
                               ? item(d, pk_at(d, dtype->items[1]), 0) : NULL;
    if (!pk_text_is(code, "u1"))
        return "is not a uint8 numpy array";
    if (!c_order)
        return "is a numpy array in Fortran order";
    const pk_value *n = item(d, shape, 0), *w = item(d, shape, 1);
    if (!shape || shape->kind != PK_TUPLE || shape->n != 2 || !n || n->kind != PK_INT || n->i < 0 ||
        !w || w->kind != PK_INT || w->i != CIFAR_PIXELS)
        return "is not an n x 3072 array";
    if (!data || data->kind != PK_BYTES || data->len / CIFAR_PIXELS != (uint64_t)n->i ||
        data->len % CIFAR_PIXELS)
        return "holds a different number of bytes than its shape says (truncated or corrupt)";
    *raw = data->s;
    *rows = n->i;
    return NULL;
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
    const uint8_t *raw;
    int64_t n;
    const char *bad = array_u8(d, pk_at(d, data), &raw, &n);
    if (bad)
        return dpy_fail(err, errlen, "%s: 'data' %s", path, bad);
    const pk_value *l = pk_at(d, labels);
    int ok = l && l->kind == PK_LIST && l->n == n;
    for (int32_t i = 0; ok && i < l->n; i++) {
        const pk_value *v = pk_at(d, l->items[i]);
        ok = v && v->kind == PK_INT && v->i >= 0 && v->i <= 255;
    }
    if (!ok)
        return dpy_fail(err, errlen, "%s: '%s' is not a list of %lld labels in 0..255", path,
                        label_key, (long long)n);
    out->images = malloc(n ? (size_t)n * CIFAR_PIXELS : 1);
    out->labels = malloc(n ? (size_t)n : 1);
    if (!out->images || !out->labels)
        return dpy_fail(err, errlen, "out of memory reading %s", path);
    memcpy(out->images, raw, (size_t)n * CIFAR_PIXELS);
    for (int32_t i = 0; i < l->n; i++)
        out->labels[i] = (uint8_t)pk_at(d, l->items[i])->i;
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
