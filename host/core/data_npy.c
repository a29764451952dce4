/*
** data_npy.c: NumPy's .npy files and .npz archives (numpy.save, numpy.savez, savez_compressed),
** after numpy/lib/format.py: "\x93NUMPY", version, header length, a Python dict literal
** {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with spaces and ended by a
** newline, then the data. The archives are read with libzip (stored or deflated members); the
** member reader here serves the torch.save reader too.
*/
#include "dpy_arrays.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

/* {==== the header ====} */

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* a '...' or "..." literal without escapes into out */
static int quoted(cursor *c, char *out, size_t outlen) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return -1;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= outlen)
            return -1;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return -1;
    c->p++;
    out[n] = '\0';
    return 0;
}

static int word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* (a, b, ...) of non-negative integers, (n,) and () included */
static int shape_tuple(cursor *c, dpy_array *out) {
    if (!word(c, "("))
        return -1;
    out->ndim = 0;
    for (;;) {
        if (word(c, ")"))
            return 0;
        if (out->ndim == DPY_ARRAY_MAXDIM)
            return -2;
        skip_ws(c);
        int64_t v = 0;
        int digits = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_C(1) << 53))
                return -1;
            v = v * 10 + (*c->p++ - '0');
            digits++;
        }
        if (c->p < c->end && *c->p == 'L')   /* Python 2's repr of a long */
            c->p++;
        if (!digits)
            return -1;
        out->dims[out->ndim++] = v;
        if (!word(c, ",")) {
            if (!word(c, ")"))
                return -1;
            return 0;
        }
    }
}

static int descr_type(const char *d, const char *what, dpy_array_type *t, char *err,
                      size_t errlen) {
    static const struct { const char *code; dpy_array_type t; } known[] = {
        {"u1", DPY_ARRAY_U8}, {"i4", DPY_ARRAY_I32}, {"i8", DPY_ARRAY_I64},
        {"f4", DPY_ARRAY_F32}, {"f8", DPY_ARRAY_F64},
    };
    if (d[0] == 'O' || (d[0] && d[1] == 'O'))
        return dpy_fail(err, errlen, "%s: an object array (dtype '%s') cannot be read: save a "
                        "numeric array", what, d);
    if (d[0] == '>' && strcmp(d + 1, "u1") != 0)
        return dpy_fail(err, errlen, "%s: big-endian dtype '%s' is not supported: save it with "
                        ".astype('<%s')", what, d, d + 1);
    if (d[0] == '<' || d[0] == '|' || d[0] == '>')
        for (size_t i = 0; i < sizeof known / sizeof *known; i++)
            if (strcmp(d + 1, known[i].code) == 0) {
                *t = known[i].t;
                return 0;
            }
    return dpy_fail(err, errlen, "%s: dtype '%s' is not supported (uint8, int32, int64, float32 "
                    "or float64, little-endian)", what, d);
}

int dpy_npy_parse(const uint8_t *buf, size_t len, const char *what, dpy_array *out,
                  size_t *data_off, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return dpy_fail(err, errlen, "%s: not a .npy file (bad magic)", what);
    int major = buf[6];
    if (major < 1 || major > 3 || buf[7] != 0)
        return dpy_fail(err, errlen, "%s: .npy format version %d.%d is not supported", what, major,
                        buf[7]);
    size_t start = major == 1 ? 10 : 12;
    if (len < start)
        return dpy_fail(err, errlen, "%s: truncated .npy header", what);
    size_t hlen = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                             : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                                   (size_t)buf[11] << 24;
    if (hlen > len - start)
        return dpy_fail(err, errlen, "%s: truncated .npy header (%zu bytes promised, %zu there)",
                        what, hlen, len - start);
    cursor c = {(const char *)buf + start, (const char *)buf + start + hlen};
    char key[32], descr[32] = "";
    int have = 0, fortran = 0;
    if (!word(&c, "{"))
        goto bad;
    for (;;) {
        if (word(&c, "}"))
            break;
        if (quoted(&c, key, sizeof key) != 0 || !word(&c, ":"))
            goto bad;
        if (strcmp(key, "descr") == 0) {
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return dpy_fail(err, errlen, "%s: a structured dtype (record array) is not "
                                "supported", what);
            if (quoted(&c, descr, sizeof descr) != 0)
                goto bad;
            have |= 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (word(&c, "True"))
                fortran = 1;
            else if (!word(&c, "False"))
                goto bad;
            have |= 2;
        } else if (strcmp(key, "shape") == 0) {
            int r = shape_tuple(&c, out);
            if (r == -2)
                return dpy_fail(err, errlen, "%s: more than %d dimensions", what, DPY_ARRAY_MAXDIM);
            if (r != 0)
                goto bad;
            have |= 4;
        } else {
            goto bad;
        }
        if (!word(&c, ",")) {
            if (!word(&c, "}"))
                goto bad;
            break;
        }
    }
    skip_ws(&c);
    if (c.p != c.end || have != 7)
        goto bad;
    if (descr_type(descr, what, &out->type, err, errlen) != 0)
        return -1;
    if (fortran && out->ndim > 1)
        return dpy_fail(err, errlen, "%s: the array is in Fortran order: save "
                        "numpy.ascontiguousarray(a) instead", what);
    size_t want = dpy_array_elsize(out->type);
    for (int i = 0; i < out->ndim; i++) {
        if (out->dims[i] && want > DPY_ARRAY_LIMIT / (size_t)out->dims[i])   /* before it wraps */
            return dpy_fail(err, errlen, "%s: the shape is too large", what);
        want *= (size_t)out->dims[i];
    }
    *data_off = start + hlen;
    if (len - *data_off != want) {
        char s[128];
        return dpy_fail(err, errlen, "%s: the header promises %zu bytes of data (%s, %s) but "
                        "the file holds %zu (truncated or corrupt)", what, want,
                        dpy_array_shape(out, s, sizeof s), descr, len - *data_off);
    }
    out->nbytes = want;
    return 0;
bad:
    return dpy_fail(err, errlen, "%s: bad .npy header: %.*s", what,
                    (int)(hlen > 120 ? 120 : hlen), (const char *)buf + start);
}

/* Keeps the data of a parsed buffer: moved to its start, so that free(data) releases it. */
static void keep_data(dpy_array *a, uint8_t *buf, size_t off) {
    memmove(buf, buf + off, a->nbytes);
    a->data = buf;
    if (a->nbytes == 0) {
        free(buf);
        a->data = NULL;
    }
}

/* {==== .npz ====} */

static int zip_fail(char *err, size_t errlen, const char *path, zip_error_t *ze) {
    dpy_fail(err, errlen, "%s: not a readable .npz archive (%s: truncated or corrupt?)", path, zip_error_strerror(ze));
    zip_error_fini(ze);
    return -1;
}

/* "a, b, c" of the archive's .npy members (names without the suffix) */
static void member_list(zip_t *z, char *out, size_t len) {
    size_t n = 0;
    out[0] = '\0';
    zip_int64_t count = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < count && n + 1 < len; i++) {
        const char *name = zip_get_name(z, (zip_uint64_t)i, 0);
        size_t l = name ? strlen(name) : 0;
        if (l > 4 && strcmp(name + l - 4, ".npy") == 0)
            n += (size_t)snprintf(out + n, len - n, "%s%.*s", n ? ", " : "", (int)(l - 4), name);
    }
    if (!out[0])
        snprintf(out, len, "no .npy members");
}

/* Reads every member of z through to its end, so that libzip checks each one's CRC and length:
** torch's readers do not (a bit flipped in a checkpoint's model went through as a number). 0, or
** -1 naming the member and what is wrong. Discards z. */
static int check_members(zip_t *z, const char *where, char *err, size_t errlen) {
    uint8_t scratch[1 << 16];
    int rc = 0;
    zip_int64_t count = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < count && rc == 0; i++) {
        const char *name = zip_get_name(z, (zip_uint64_t)i, 0);
        zip_file_t *f = zip_fopen_index(z, (zip_uint64_t)i, 0);
        if (!f) {
            rc = dpy_fail(err, errlen, "%s%s: cannot open the member (%s)", where, name ? name : "?",
                          zip_strerror(z));
            break;
        }
        zip_int64_t got;
        while ((got = zip_fread(f, scratch, sizeof scratch)) > 0) {
        }
        if (got < 0)
            rc = dpy_fail(err, errlen, "%s%s: corrupt member (%s)", where, name ? name : "?",
                          zip_file_strerror(f));
        zip_fclose(f);
    }
    zip_discard(z);   /* frees its source too */
    return rc;
}

int dpy_zip_check(const void *buf, size_t len, char *err, size_t errlen) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(buf, len, 0, &ze);
    zip_t *z = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : NULL;
    if (!z) {
        if (src)
            zip_source_free(src);
        dpy_fail(err, errlen, "not a readable zip archive (%s)", zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return -1;
    }
    zip_error_fini(&ze);
    return check_members(z, "", err, errlen);
}

int dpy_zip_check_file(const char *path, char *err, size_t errlen) {
    int code = 0;
    zip_t *z = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (!z) {   /* an archive whose directory disagrees with itself is refused here; a file that
                ** is none, or cannot be opened, is left to torch's reader, which says what it is */
        if (code != ZIP_ER_INCONS)
            return 0;
        zip_error_t ze;
        zip_error_init_with_code(&ze, code);
        dpy_fail(err, errlen, "%s: not a readable zip archive (%s)", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return -1;
    }
    char where[4096];
    snprintf(where, sizeof where, "%s: ", path);
    return check_members(z, where, err, errlen);
}

/* The buffer grows only as the member's bytes arrive, never to what the directory merely
** claims; libzip checks the CRC and the length as it goes. */
int dpy_zip_member(struct zip *z, int64_t idx, const char *what, uint8_t **out, size_t *len,
                   char *err, size_t errlen) {
    zip_stat_t st;
    if (zip_stat_index(z, (zip_uint64_t)idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
        return dpy_fail(err, errlen, "%s: cannot stat the member (%s)", what, zip_strerror(z));
    if (st.size > DPY_ARRAY_LIMIT)
        return dpy_fail(err, errlen, "%s: larger than %zu bytes", what, DPY_ARRAY_LIMIT);
    zip_file_t *f = zip_fopen_index(z, (zip_uint64_t)idx, 0);
    if (!f)
        return dpy_fail(err, errlen, "%s: cannot open the member (%s)", what, zip_strerror(z));
    size_t claimed = (size_t)st.size, n = 0;
    size_t cap = claimed < (1u << 20) ? claimed + 1 : (1u << 20);
    uint8_t *buf = malloc(cap);
    int rc = buf ? 0 : dpy_fail(err, errlen, "out of memory reading %s", what);
    while (rc == 0) {
        if (n == cap) {
            if (cap > claimed) {
                rc = dpy_fail(err, errlen, "%s: more data than the archive says", what);
                break;
            }
            size_t ncap = cap * 2 > claimed + 1 ? claimed + 1 : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                rc = dpy_fail(err, errlen, "out of memory reading %s", what);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        zip_int64_t got = zip_fread(f, buf + n, cap - n);
        if (got < 0)
            rc = dpy_fail(err, errlen, "%s: corrupt member (%s)", what, zip_file_strerror(f));
        else if (got == 0)
            break;
        else
            n += (size_t)got;
    }
    zip_fclose(f);
    if (rc == 0 && n != st.size)
        rc = dpy_fail(err, errlen, "%s: %zu bytes where the archive says %llu (corrupt)", what, n,
                      (unsigned long long)st.size);
    if (rc != 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

static int npz_read(const char *path, const char *const *names, int nnames, dpy_array *out,
                    char *err, size_t errlen) {
    int code;
    zip_t *z = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (!z) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, code);
        return zip_fail(err, errlen, path, &ze);
    }
    zip_int64_t idx = -1;
    int which = 0;
    for (; which < nnames && idx < 0; which++) {
        char member[80];
        snprintf(member, sizeof member, "%s.npy", names[which]);
        idx = zip_name_locate(z, member, 0);
    }
    if (idx < 0) {
        char have[256], want[256];
        size_t n = 0;
        want[0] = '\0';
        for (int i = 0; i < nnames && n < sizeof want; i++)
            n += (size_t)snprintf(want + n, sizeof want - n, "%s%s", i ? ", " : "", names[i]);
        member_list(z, have, sizeof have);
        zip_discard(z);
        return dpy_fail(err, errlen, "%s: no member named %s (it holds: %s)", path, want, have);
    }
    char what[4200];
    snprintf(what, sizeof what, "%s, member %s.npy", path, names[which - 1]);
    uint8_t *buf;
    size_t len, off;
    int rc = dpy_zip_member(z, idx, what, &buf, &len, err, errlen);
    zip_discard(z);
    if (rc != 0)
        return -1;
    if (dpy_npy_parse(buf, len, what, out, &off, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    keep_data(out, buf, off);
    snprintf(out->name, sizeof out->name, "%s", names[which - 1]);
    return 0;
}

int dpy_npy_read(const char *path, const char *const *names, int nnames, dpy_array *out,
                 char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    uint8_t magic[6] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return dpy_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got >= 4 && memcmp(magic, "PK", 2) == 0)
        return npz_read(path, names, nnames, out, err, errlen);
    uint8_t *buf;
    size_t len, off;
    if (dpy_read_file(path, DPY_ARRAY_LIMIT, &buf, &len, err, errlen) != 0)
        return -1;
    if (dpy_npy_parse(buf, len, path, out, &off, err, errlen) != 0) {
        free(buf);
        if (got < 6 || memcmp(magic, "\x93NUMPY", 6) != 0)
            return dpy_fail(err, errlen, "%s: neither a .npy file nor an .npz archive (bad magic)",
                            path);
        return -1;
    }
    keep_data(out, buf, off);
    return 0;
}
