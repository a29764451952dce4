/* dataset.c: readers for the IDX (MNIST, Fashion-MNIST) and CIFAR binary file formats. */
#include "dpy_core.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/*
** Reads the whole (possibly gzipped) file, growing the buffer only as bytes actually arrive: a
** corrupt header cannot make us allocate what the file does not hold. Caps at limit bytes.
*/
static int slurp(const char *path, uint8_t **out, size_t *len, size_t limit, char *err,
                 size_t errlen) {
    gzFile f = gzopen(path, "rb");
    if (!f)
        return dpy_fail(err, errlen, "cannot open %s: %s", path, strerror(errno ? errno : ENOENT));
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        gzclose(f);
        return dpy_fail(err, errlen, "out of memory reading %s", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap >= limit) {
                free(buf);
                gzclose(f);
                return dpy_fail(err, errlen, "%s: larger than %zu bytes", path, limit);
            }
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                gzclose(f);
                return dpy_fail(err, errlen, "out of memory reading %s", path);
            }
            buf = nb;
            cap *= 2;
        }
        unsigned want = (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n);
        int got = gzread(f, buf + n, want);
        if (got < 0) {
            int code;
            const char *msg = gzerror(f, &code);
            dpy_fail(err, errlen, "%s: corrupt or unreadable (%s)", path, msg);
            free(buf);
            gzclose(f);
            return -1;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    gzclose(f);
    *out = buf;
    *len = n;
    return 0;
}

#define IDX_LIMIT ((size_t)1 << 33)

int dpy_idx_read(const char *path, dpy_idx *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    uint8_t *buf;
    size_t n;
    if (slurp(path, &buf, &n, IDX_LIMIT, err, errlen) != 0)
        return -1;
    if (n < 4 || buf[0] != 0 || buf[1] != 0) {
        free(buf);
        return dpy_fail(err, errlen, "%s: not an IDX file (bad magic)", path);
    }
    if (buf[2] != 0x08) {
        unsigned type = buf[2];
        free(buf);
        return dpy_fail(err, errlen, "%s: IDX element type 0x%02x is not supported (only unsigned "
                    "bytes, 0x08)", path, type);
    }
    int ndim = buf[3];
    if (ndim < 1 || ndim > DPY_IDX_MAXDIM || n < 4 + 4 * (size_t)ndim) {
        free(buf);
        return dpy_fail(err, errlen, "%s: bad IDX header (%d dims)", path, ndim);
    }
    size_t want = 1;
    for (int i = 0; i < ndim; i++) {
        const uint8_t *p = buf + 4 + 4 * i;
        uint32_t d = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        out->dims[i] = d;
        want *= d;
        if (want > IDX_LIMIT) {
            free(buf);
            return dpy_fail(err, errlen, "%s: IDX dimensions are too large", path);
        }
    }
    size_t off = 4 + 4 * (size_t)ndim;
    if (n - off != want) {
        free(buf);
        return dpy_fail(err, errlen, "%s: the header promises %zu bytes of data but the file holds "
                    "%zu (truncated or corrupt)", path, want, n - off);
    }
    memmove(buf, buf + off, want);
    out->data = buf;
    out->len = want;
    out->ndim = ndim;
    return 0;
}

void dpy_idx_free(dpy_idx *x) {
    free(x->data);
    x->data = NULL;
    x->len = 0;
}

#define CIFAR_PIXELS 3072

int dpy_cifar_read(const char *path, int label_bytes, int label_index, dpy_cifar *out,
                   char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (label_bytes < 1 || label_bytes > 2 || label_index < 0 || label_index >= label_bytes)
        return dpy_fail(err, errlen, "cifar: bad label layout (%d bytes, index %d)", label_bytes,
                    label_index);
    uint8_t *buf;
    size_t n;
    if (slurp(path, &buf, &n, IDX_LIMIT, err, errlen) != 0)
        return -1;
    size_t rec = (size_t)label_bytes + CIFAR_PIXELS;
    if (n == 0 || n % rec != 0) {
        free(buf);
        return dpy_fail(err, errlen, "%s: %zu bytes is not a whole number of %zu-byte CIFAR records",
                    path, n, rec);
    }
    size_t count = n / rec;
    out->images = malloc(count * CIFAR_PIXELS);
    out->labels = malloc(count);
    if (!out->images || !out->labels) {
        free(buf);
        dpy_cifar_free(out);
        return dpy_fail(err, errlen, "out of memory reading %s", path);
    }
    for (size_t i = 0; i < count; i++) {
        const uint8_t *r = buf + i * rec;
        out->labels[i] = r[label_index];
        memcpy(out->images + i * CIFAR_PIXELS, r + label_bytes, CIFAR_PIXELS);
    }
    free(buf);
    out->n = (int64_t)count;
    return 0;
}

void dpy_cifar_free(dpy_cifar *c) {
    free(c->images);
    free(c->labels);
    c->images = c->labels = NULL;
    c->n = 0;
}
