/*
** data_torch.c: tensors from torch.save files, read without libtorch. The format (PyTorch >= 1.6,
** and what torch::pickle_save writes) is a zip archive <name>/data.pkl, <name>/data/<key>, ...:
** data.pkl is a pickle (protocol 2) where each tensor is
**     torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)
** and each storage a persistent id ('storage', torch.<Type>Storage, key, location, numel) whose
** bytes (little-endian) are the record data/<key>. Our own strict reader (pickle.h) checks every
** field, and the bounds of each view against its storage, before a byte is copied; libtorch's
** unpickler is not used because a crafted file could make it resize a storage to any size.
*/
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "dpy_arrays.h"
#include "pickle.h"

static const char *const GLOBALS[] = {
    "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter", "collections.OrderedDict",
    "torch.jit._pickle.restore_type_tag", "torch.ByteStorage", "torch.IntStorage", "torch.LongStorage", "torch.FloatStorage",
    "torch.DoubleStorage", "torch.CharStorage", "torch.ShortStorage", "torch.HalfStorage",
    "torch.BoolStorage", "torch.BFloat16Storage",
};
enum { G_REBUILD, G_PARAMETER, G_ORDERED_DICT, G_TYPE_TAG, G_STORAGE0 };
/* the storages in GLOBALS order from G_STORAGE0; -1: a dtype we do not read */
static const int STORAGE_TYPES[] = {DPY_ARRAY_U8, DPY_ARRAY_I32, DPY_ARRAY_I64, DPY_ARRAY_F32,
                                    DPY_ARRAY_F64, -1, -1, -1, -1, -1};
static const char *const STORAGE_NAMES[] = {"uint8", "int32", "int64", "float32", "float64",
                                            "int8", "int16", "float16", "bool", "bfloat16"};

typedef struct {
    const char *path;
    zip_t *z;
    char prefix[256];               /* the archive's top folder, e.g. "archive" */
    pk_doc doc;
    char *err;
    size_t errlen;
} tfile;

__attribute__((format(printf, 2, 3))) static int tfail(tfile *f, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dpy_fail(f->err, f->errlen, "%s: %s", f->path, msg);
}

static const pk_value *item(const tfile *f, const pk_value *v, int32_t k) {
    return v && (v->kind == PK_TUPLE || v->kind == PK_LIST) && k < v->n ? pk_at(&f->doc, v->items[k]) : NULL;
}

static int is_int(const pk_value *v) { return v && v->kind == PK_INT; }

/* Opens the archive and finds <prefix>/data.pkl; refuses the legacy (pre-1.6) format by name. */
static int open_archive(tfile *f, zip_int64_t *pkl) {
    uint8_t magic[4] = {0};
    FILE *fp = fopen(f->path, "rb");
    if (!fp)
        return dpy_fail(f->err, f->errlen, "cannot open %s: %s", f->path, strerror(errno));
    size_t got = fread(magic, 1, 4, fp);
    fclose(fp);
    if (got < 4 || memcmp(magic, "PK\x03\x04", 4) != 0) {
        if (got >= 2 && magic[0] == 0x80)
            return tfail(f, "the legacy torch.save format (PyTorch < 1.6, or "
                         "_use_new_zipfile_serialization=False): load it in Python and torch.save "
                         "it again");
        return tfail(f, "not a torch.save file (no zip archive)");
    }
    int code;
    f->z = zip_open(f->path, ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (!f->z) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, code);
        int rc = tfail(f, "not a readable torch.save archive (%s: truncated or corrupt?)", zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return rc;
    }
    zip_int64_t n = zip_get_num_entries(f->z, 0);
    for (zip_int64_t i = 0; i < n; i++) {
        const char *name = zip_get_name(f->z, (zip_uint64_t)i, 0);
        const char *slash = name ? strchr(name, '/') : NULL;
        if (slash && strcmp(slash, "/data.pkl") == 0 && (size_t)(slash - name) < sizeof f->prefix) {
            memcpy(f->prefix, name, (size_t)(slash - name));
            f->prefix[slash - name] = '\0';
            *pkl = i;
            return 0;
        }
    }
    return tfail(f, "a zip archive without the data.pkl of a torch.save file");
}

static int read_record(tfile *f, const char *rel, int must, uint8_t **buf, size_t *len) {
    char name[600], what[4300];
    snprintf(name, sizeof name, "%s/%s", f->prefix, rel);
    snprintf(what, sizeof what, "%s, record %s", f->path, name);
    zip_int64_t i = zip_name_locate(f->z, name, 0);
    if (i < 0) {
        *buf = NULL;
        return must ? tfail(f, "no record %s (truncated or corrupt)", name) : 0;
    }
    return dpy_zip_member(f->z, i, what, buf, len, f->err, f->errlen);
}

/* Copies the view (offset, size, stride) of the storage bytes into out->data, C order. */
static int copy_view(tfile *f, const uint8_t *src, int64_t offset, const int64_t *stride,
                     dpy_array *out) {
    size_t es = dpy_array_elsize(out->type);
    out->data = malloc(out->nbytes ? out->nbytes : 1);
    if (!out->data)
        return tfail(f, "out of memory copying a tensor");
    int64_t idx[DPY_ARRAY_MAXDIM] = {0}, count = (int64_t)(out->nbytes / es);
    uint8_t *dst = out->data;
    for (int64_t e = 0; e < count; e++) {
        int64_t off = offset;
        for (int d = 0; d < out->ndim; d++)
            off += idx[d] * stride[d];
        memcpy(dst + (size_t)e * es, src + (size_t)off * es, es);
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (++idx[d] < out->dims[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}

/* The tensor at value v (a _rebuild_tensor_v2 call, or a Parameter around one) into out. */
static int tensor_of(tfile *f, const pk_value *v, dpy_array *out) {
    if (v && v->kind == PK_CALL && pk_is_global(&f->doc, v->items[0], G_PARAMETER))
        v = item(f, pk_at(&f->doc, v->items[1]), 0);
    if (!v || v->kind != PK_CALL || !pk_is_global(&f->doc, v->items[0], G_REBUILD))
        return tfail(f, "holds something other than a tensor there");
    const pk_value *args = pk_at(&f->doc, v->items[1]);
    const pk_value *persid = item(f, args, 0), *offset = item(f, args, 1);
    const pk_value *size = item(f, args, 2), *stride = item(f, args, 3);
    const pk_value *pid = persid && persid->kind == PK_PERSID ? pk_at(&f->doc, persid->items[0]) : NULL;
    const pk_value *stype = item(f, pid, 1), *key = item(f, pid, 2), *snumel = item(f, pid, 4);
    if (args->n < 6 || !pid || pid->n != 5 || !pk_text_is(item(f, pid, 0), "storage") ||
        !stype || stype->kind != PK_GLOBAL || stype->i < G_STORAGE0 || !key ||
        key->kind != PK_STR || key->len == 0 || key->len > 64 || !is_int(snumel) || snumel->i < 0 ||
        !is_int(offset) || offset->i < 0 || !size || size->kind != PK_TUPLE || !stride ||
        stride->kind != PK_TUPLE || size->n != stride->n || size->n > DPY_ARRAY_MAXDIM)
        return tfail(f, "a tensor whose storage, offset, size or stride is malformed");
    int t = STORAGE_TYPES[stype->i - G_STORAGE0];
    if (t < 0)
        return tfail(f, "%s tensors are not supported (uint8, int32, int64, float32, float64)",
                     STORAGE_NAMES[stype->i - G_STORAGE0]);
    out->type = (dpy_array_type)t;
    out->ndim = size->n;
    size_t es = dpy_array_elsize(out->type);
    int64_t strides[DPY_ARRAY_MAXDIM], last = offset->i, count = 1;
    for (int d = 0; d < size->n; d++) {
        const pk_value *sz = item(f, size, d), *st = item(f, stride, d);
        if (!is_int(sz) || sz->i < 0 || !is_int(st) || st->i < 0)
            return tfail(f, "a tensor with a negative or non-integer size or stride");
        out->dims[d] = sz->i;
        strides[d] = st->i;
        int64_t span;
        if (__builtin_mul_overflow(count, sz->i, &count) || count > (int64_t)(DPY_ARRAY_LIMIT / es) ||
            (sz->i && (__builtin_mul_overflow(sz->i - 1, st->i, &span) ||
                       __builtin_add_overflow(last, span, &last))))
            return tfail(f, "a tensor whose size is too large");
    }
    out->nbytes = (size_t)count * es;
    if (snumel->i > (int64_t)(DPY_ARRAY_LIMIT / es) || (count > 0 && last >= snumel->i))
        return tfail(f, "a tensor that reaches past the end of its storage (corrupt)");
    char rel[80];
    snprintf(rel, sizeof rel, "data/%.*s", (int)key->len, (const char *)key->s);
    uint8_t *bytes;
    size_t len;
    if (read_record(f, rel, 1, &bytes, &len) != 0)
        return -1;
    int rc = 0;
    if (len < (size_t)snumel->i * es)
        rc = tfail(f, "the storage record %s is shorter than its tensor says (truncated or "
                   "corrupt)", rel);
    else
        rc = copy_view(f, bytes, offset->i, strides, out);
    free(bytes);
    return rc;
}

static void list_keys(tfile *f, const pk_value *dict, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int32_t k = 0; k + 1 < dict->n && n + 1 < len; k += 2) {
        const pk_value *key = pk_at(&f->doc, dict->items[k]);
        if (key && (key->kind == PK_STR || key->kind == PK_BYTES))
            n += (size_t)snprintf(buf + n, len - n, "%s%.*s", n ? ", " : "",
                                  (int)(key->len > 40 ? 40 : key->len), (const char *)key->s);
    }
}

static int pick(tfile *f, const char *const *names, int nnames, int position, dpy_array *out) {
    const pk_value *root = pk_at(&f->doc, f->doc.root);
    if (root && root->kind == PK_DICT) {
        for (int i = 0; i < nnames; i++) {
            int32_t v = pk_dict_get(&f->doc, root, names[i]);
            if (v >= 0) {
                snprintf(out->name, sizeof out->name, "%s", names[i]);
                return tensor_of(f, pk_at(&f->doc, v), out);
            }
        }
        char have[256], want[256];
        size_t n = 0;
        want[0] = '\0';
        for (int i = 0; i < nnames && n < sizeof want; i++)
            n += (size_t)snprintf(want + n, sizeof want - n, "%s%s", i ? ", " : "", names[i]);
        list_keys(f, root, have, sizeof have);
        return dpy_fail(f->err, f->errlen, "%s: the dict has no key %s (its keys: %s)", f->path,
                        want, have);
    }
    if (root && (root->kind == PK_TUPLE || root->kind == PK_LIST)) {
        if (position >= root->n) {
            char msg[80];
            snprintf(msg, sizeof msg, "%d", root->n);
            return tfail(f, "holds a tuple or list of %s, with no element for this array", msg);
        }
        snprintf(out->name, sizeof out->name, "%d", position);
        return tensor_of(f, pk_at(&f->doc, root->items[position]), out);
    }
    return tensor_of(f, root, out);
}

int dpy_torch_read(const char *path, const char *const *names, int nnames, int position,
                   dpy_array *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    tfile f = {.path = path, .err = err, .errlen = errlen};
    f.doc.root = -1;
    zip_int64_t pkl = -1;
    uint8_t *pickle = NULL, *order = NULL;
    size_t plen, olen = 0;
    int rc = open_archive(&f, &pkl);
    if (rc == 0)
        rc = read_record(&f, "byteorder", 0, &order, &olen);
    if (rc == 0 && order && !(olen == 6 && memcmp(order, "little", 6) == 0))
        rc = tfail(&f, "big-endian tensors are not supported");
    if (rc == 0) {
        char what[4200];
        snprintf(what, sizeof what, "%s, %s/data.pkl", path, f.prefix);
        rc = dpy_zip_member(f.z, pkl, what, &pickle, &plen, err, errlen);
        if (rc == 0)
            rc = pk_parse(&f.doc, pickle, plen, GLOBALS, (int)(sizeof GLOBALS / sizeof *GLOBALS),
                          what, err, errlen);
    }
    if (rc == 0)
        rc = pick(&f, names, nnames, position, out);
    pk_free(&f.doc);
    free(pickle);
    free(order);
    if (f.z)
        zip_discard(f.z);
    if (rc != 0)
        dpy_array_free(out);
    return rc;
}
