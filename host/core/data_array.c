/*
** data_array.c: the dense arrays the NumPy, torch.save and pickle readers produce, and what turns
** a pair of them into a dataset's images (N x C x H x W) and labels (int64 N).
*/
#define _POSIX_C_SOURCE 200809L
#include "dpy_arrays.h"
#include "data_image.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *dpy_array_type_name(dpy_array_type t) {
    static const char *names[] = {"uint8", "int32", "int64", "float32", "float64"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

size_t dpy_array_elsize(dpy_array_type t) {
    static const size_t sizes[] = {1, 4, 8, 4, 8};
    return (unsigned)t < sizeof sizes / sizeof *sizes ? sizes[t] : 0;
}

const char *dpy_array_shape(const dpy_array *a, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < a->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? " x " : "", (long long)a->dims[i]);
    if (a->ndim == 0)
        snprintf(buf, len, "a scalar");
    return buf;
}

void dpy_array_free(dpy_array *a) {
    free(a->data);
    a->data = NULL;
    a->nbytes = 0;
}

/* A regular file's size is known before reading: the buffer is exactly what the file holds. */
int dpy_read_file(const char *path, size_t limit, uint8_t **out, size_t *len, char *err,
                  size_t errlen) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dpy_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dpy_fail(err, errlen, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > limit) {
        close(fd);
        return dpy_fail(err, errlen, "%s: larger than %zu bytes", path, limit);
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return dpy_fail(err, errlen, "out of memory reading %s (%zu bytes)", path, n);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got > (1u << 30) ? (1u << 30) : n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return dpy_fail(err, errlen, "cannot read %s: %s", path, strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = n;
    return 0;
}

/* {==== images and labels ====} */

/* NHWC -> NCHW, elements of any size: one pass, one new buffer. */
static int to_nchw(dpy_array *a, char *err, size_t errlen) {
    int64_t n = a->dims[0], h = a->dims[1], w = a->dims[2], c = a->dims[3];
    size_t es = dpy_array_elsize(a->type), hw = (size_t)(h * w);
    uint8_t *dst = malloc(a->nbytes ? a->nbytes : 1), *src = a->data;
    if (!dst)
        return dpy_fail(err, errlen, "out of memory (%zu bytes)", a->nbytes);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *s = src + (size_t)i * hw * (size_t)c * es;
        uint8_t *d = dst + (size_t)i * hw * (size_t)c * es;
        for (size_t p = 0; p < hw; p++)
            for (int64_t k = 0; k < c; k++)
                memcpy(d + ((size_t)k * hw + p) * es, s + (p * (size_t)c + (size_t)k) * es, es);
    }
    free(a->data);
    a->data = dst;
    a->dims[1] = c;
    a->dims[2] = h;
    a->dims[3] = w;
    return 0;
}

static int64_t numel(const dpy_array *a) {
    int64_t m = 1;
    for (int i = 0; i < a->ndim; i++)
        m *= a->dims[i];
    return m;
}

/* Float images -> float32 (float64 in place: the buffer shrinks to half), every value a finite
** float32: a NaN, an infinity or a float64 past float32's range would be trained on as NaN and inf. */
static int finite_f32(dpy_array *a, const char *what, char *err, size_t errlen) {
    int64_t m = numel(a), per = m / a->dims[0];
    const double *s = a->data;
    float *d = a->data;
    for (int64_t i = 0; i < m; i++) {
        double v = a->type == DPY_ARRAY_F64 ? s[i] : d[i];
        float f = (float)v;
        if (!isfinite(f))
            return dpy_fail(err, errlen, "%s: image %lld holds %g (its value %lld in C x H x W order), %s",
                            what, (long long)(i / per), v, (long long)(i % per),
                            isfinite(v) ? "past float32's range" : "not a finite number");
        d[i] = f;
    }
    a->nbytes = (size_t)m * 4;
    a->type = DPY_ARRAY_F32;
    return 0;
}

/* any integer type -> int64, with the labels checked to be >= 0 */
static int widen_labels(dpy_array *a, const char *what, char *err, size_t errlen) {
    int64_t m = numel(a);
    int64_t *d = malloc(m ? (size_t)m * 8 : 1);
    if (!d)
        return dpy_fail(err, errlen, "out of memory (%lld labels)", (long long)m);
    for (int64_t i = 0; i < m; i++) {
        int64_t v = a->type == DPY_ARRAY_U8    ? ((const uint8_t *)a->data)[i]
                    : a->type == DPY_ARRAY_I32 ? ((const int32_t *)a->data)[i]
                                               : ((const int64_t *)a->data)[i];
        if (v < 0) {
            free(d);
            return dpy_fail(err, errlen, "%s: label %lld at index %lld is negative (labels are "
                            "classes 0 .. K-1)", what, (long long)v, (long long)i);
        }
        d[i] = v;
    }
    free(a->data);
    a->data = d;
    a->nbytes = (size_t)m * 8;
    a->type = DPY_ARRAY_I64;
    a->ndim = 1;
    a->dims[0] = m;
    return 0;
}

int dpy_dataset_arrays(dpy_array *images, dpy_array *labels, dpy_layout layout, const char *what,
                       char *err, size_t errlen) {
    char s1[128], s2[128];
    if (images->type != DPY_ARRAY_U8 && images->type != DPY_ARRAY_F32 &&
        images->type != DPY_ARRAY_F64)
        return dpy_fail(err, errlen, "%s: images are %s; they must be uint8, float32 or float64",
                        what, dpy_array_type_name(images->type));
    if (labels->type != DPY_ARRAY_U8 && labels->type != DPY_ARRAY_I32 &&
        labels->type != DPY_ARRAY_I64)
        return dpy_fail(err, errlen, "%s: labels are %s; they must be integers (int64, int32 or "
                        "uint8)", what, dpy_array_type_name(labels->type));
    int grey = images->ndim == 3;   /* N x H x W: no channel dim to move */
    if (grey) {
        memmove(images->dims + 2, images->dims + 1, 2 * sizeof *images->dims);
        images->dims[1] = 1;
        images->ndim = 4;
    } else if (images->ndim != 4) {
        return dpy_fail(err, errlen, "%s: images are %s; they must be N x H x W, N x C x H x W "
                        "or N x H x W x C", what, dpy_array_shape(images, s1, sizeof s1));
    }
    if (!(labels->ndim == 1 || (labels->ndim == 2 && labels->dims[1] == 1)))
        return dpy_fail(err, errlen, "%s: labels are %s; they must be N or N x 1", what,
                        dpy_array_shape(labels, s1, sizeof s1));
    if (images->dims[0] != labels->dims[0])
        return dpy_fail(err, errlen, "%s: %s images but %s labels", what,
                        dpy_array_shape(images, s1, sizeof s1), dpy_array_shape(labels, s2, sizeof s2));
    if (images->dims[0] == 0)
        return dpy_fail(err, errlen, "%s: no samples", what);
    for (int i = 1; i < images->ndim; i++)
        if (images->dims[i] == 0)
            return dpy_fail(err, errlen, "%s: images are %s: empty", what,
                            dpy_array_shape(images, s1, sizeof s1));
    int c1 = images->dims[1] == 1 || images->dims[1] == 3;
    int c3 = images->dims[3] == 1 || images->dims[3] == 3;
    if (!grey && layout == DPY_LAYOUT_AUTO && !c1 && !c3)   /* RGBA N x H x W x 4, or 4-channel NCHW? */
        return dpy_fail(err, errlen, "%s: images are %s: layout 'auto' cannot tell their channels "
                        "(neither dim 1 nor the last is 1 or 3): give layout = 'nhwc' or 'nchw'", what,
                        dpy_array_shape(images, s1, sizeof s1));
    if (!grey && (layout == DPY_LAYOUT_NHWC || (layout == DPY_LAYOUT_AUTO && c3 && !c1)))
        if (to_nchw(images, err, errlen) != 0)
            return -1;
    if (images->dims[1] > 16)
        return dpy_fail(err, errlen, "%s: images are %s: %lld channels (more than 16)%s", what,
                        dpy_array_shape(images, s1, sizeof s1), (long long)images->dims[1],
                        layout == DPY_LAYOUT_NCHW ? "; are they N x H x W x C (layout = 'nhwc')?" : "");
    if (images->type != DPY_ARRAY_U8 && finite_f32(images, what, err, errlen) != 0)
        return -1;
    return widen_labels(labels, what, err, errlen);
}

int dpy_array_channel_stats(const dpy_array *images, double *mean, double *std, int maxc,
                            char *err, size_t errlen) {
    if (images->ndim != 4 || images->dims[1] > maxc)
        return dpy_fail(err, errlen, "channel statistics need N x C x H x W images, C <= %d", maxc);
    int64_t n = images->dims[0], c = images->dims[1], hw = images->dims[2] * images->dims[3];
    if (images->type == DPY_ARRAY_U8) {
        dpy_u8_channel_stats(images->data, n, (int)c, hw, mean, std);
        return 0;
    }
    for (int64_t k = 0; k < c; k++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; i++) {
            const float *p = (const float *)images->data + (size_t)((i * c + k) * hw);
            for (int64_t j = 0; j < hw; j++) {
                sum += p[j];
                sq += (double)p[j] * p[j];
            }
        }
        double count = (double)n * (double)hw;
        mean[k] = sum / count;
        double var = sq / count - mean[k] * mean[k];
        std[k] = var > 0 ? sqrt(var) : 0;
    }
    return 0;
}
