/*
** dataset.c: readers for the IDX (MNIST, Fashion-MNIST) and CIFAR binary file formats. IDX files
** can also be mapped (a gzipped one through a decompressed copy in a cache directory), so that
** every process of a machine shares one copy of the data, in the page cache.
*/
#define _GNU_SOURCE
#include "dpy_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
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

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/*
** Checks the IDX header over the n bytes at buf (unsigned bytes only, and exactly the data the
** dims promise); fills out's dims, ndim and len, and *off with the data's offset.
*/
static int idx_header(const uint8_t *buf, size_t n, const char *path, dpy_idx *out, size_t *off,
                      char *err, size_t errlen) {
    if (n < 4 || buf[0] != 0 || buf[1] != 0)
        return dpy_fail(err, errlen, "%s: not an IDX file (bad magic)", path);
    if (buf[2] != 0x08)
        return dpy_fail(err, errlen, "%s: IDX element type 0x%02x is not supported (only "
                        "unsigned bytes, 0x08)", path, buf[2]);
    int ndim = buf[3];
    if (ndim < 1 || ndim > DPY_IDX_MAXDIM || n < 4 + 4 * (size_t)ndim)
        return dpy_fail(err, errlen, "%s: bad IDX header (%d dims)", path, ndim);
    size_t want = 1;
    for (int i = 0; i < ndim; i++) {
        out->dims[i] = be32(buf + 4 + 4 * i);
        if (out->dims[i] && want > IDX_LIMIT / (size_t)out->dims[i])   /* checked before it wraps */
            return dpy_fail(err, errlen, "%s: IDX dimensions are too large", path);
        want *= (size_t)out->dims[i];
    }
    *off = 4 + 4 * (size_t)ndim;
    if (n - *off != want)
        return dpy_fail(err, errlen, "%s: the header promises %zu bytes of data but the file "
                        "holds %zu (truncated or corrupt)", path, want, n - *off);
    out->len = want;
    out->ndim = ndim;
    return 0;
}

int dpy_idx_read(const char *path, dpy_idx *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    uint8_t *buf;
    size_t n;
    if (slurp(path, &buf, &n, IDX_LIMIT, err, errlen) != 0)
        return -1;
    size_t off = 0;
    if (idx_header(buf, n, path, out, &off, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    memmove(buf, buf + off, out->len);
    out->data = buf;
    return 0;
}

/* Maps an uncompressed IDX file privately: its pages are the page cache's, shared and clean. */
static int idx_map_file(const char *path, dpy_idx *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dpy_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 4) {
        close(fd);
        return dpy_fail(err, errlen, "%s: not an IDX file (too short)", path);
    }
    /* writable but private: a stray write copies one page instead of crashing the process */
    uint8_t *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return dpy_fail(err, errlen, "cannot map %s: %s", path, strerror(errno));
    size_t off = 0;
    if (idx_header(map, (size_t)st.st_size, path, out, &off, err, errlen) != 0) {
        munmap(map, (size_t)st.st_size);
        return -1;
    }
    out->data = map + off;
    out->mapped = 1;
    return 0;
}

void dpy_idx_unmap(void *data) {
    /* the map starts on the page that holds data: the header is at most 20 bytes before it */
    uint8_t *map = (uint8_t *)((uintptr_t)data & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1));
    size_t body = 1;
    for (int i = 0; i < map[3]; i++)
        body *= be32(map + 4 + 4 * i);
    munmap(map, (size_t)((uint8_t *)data - map) + body);
}

static int is_gzip(const char *path) {
    uint8_t magic[2] = {0, 0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(magic, 1, 2, f);
    fclose(f);
    return got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

/* The cached copy's name: the file's base name, tagged with a hash of its path, size and mtime. */
static int cache_path(const char *path, const char *cache_dir, char *out, size_t outlen,
                      char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0)
        return dpy_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    char key[4200];
    int klen = snprintf(key, sizeof key, "%s|%lld|%lld.%09ld", path, (long long)st.st_size,
                        (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t blen = strlen(base);
    if (blen > 3 && strcmp(base + blen - 3, ".gz") == 0)
        blen -= 3;
    if (klen >= (int)sizeof key ||
        snprintf(out, outlen, "%s/%.*s-%016llx", cache_dir, (int)blen, base,
                 (unsigned long long)XXH3_64bits(key, (size_t)klen)) >= (int)outlen)
        return dpy_fail(err, errlen, "cache path too long for %s", path);
    return 0;
}

/* Decompresses src into dst through a temporary file beside it: dst appears whole or not at all. */
static int gunzip_to(const char *src, const char *dst, char *err, size_t errlen) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", dst);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return dpy_fail(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    fchmod(fd, 0644);   /* mkstemp's 0600 would keep a shared cache to its maker */
    gzFile in = gzopen(src, "rb");
    int rc = in ? 0 : dpy_fail(err, errlen, "cannot open %s: %s", src, strerror(errno));
    uint8_t buf[1 << 16];
    for (size_t total = 0; rc == 0;) {
        int got = gzread(in, buf, sizeof buf);
        int code;
        if (got == 0)
            break;
        if (got < 0)
            rc = dpy_fail(err, errlen, "%s: corrupt or unreadable (%s)", src, gzerror(in, &code));
        else if ((total += (size_t)got) > IDX_LIMIT)
            rc = dpy_fail(err, errlen, "%s: larger than %zu bytes", src, IDX_LIMIT);
        else if (dpy_write_all(fd, buf, (size_t)got) != 0)
            rc = dpy_fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (in)
        gzclose(in);
    if (close(fd) != 0 && rc == 0)
        rc = dpy_fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, dst) != 0)
        rc = dpy_fail(err, errlen, "cannot rename %s: %s", tmp, strerror(errno));
    if (rc != 0)
        unlink(tmp);
    return rc;
}

int dpy_idx_map(const char *path, const char *cache_dir, dpy_idx *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!is_gzip(path))
        return idx_map_file(path, out, err, errlen);
    if (!cache_dir)
        return dpy_fail(err, errlen, "%s: gzipped, and no cache directory", path);
    char cached[4200];
    if (cache_path(path, cache_dir, cached, sizeof cached, err, errlen) != 0 ||
        dpy_mkdir_p(cache_dir, err, errlen) != 0)
        return -1;
    if (access(cached, F_OK) == 0 && idx_map_file(cached, out, err, errlen) == 0)
        return 0;
    /* absent, or torn by a crash: (re)build it; processes racing here each rename a whole copy */
    if (gunzip_to(path, cached, err, errlen) != 0)
        return -1;
    if (idx_map_file(cached, out, err, errlen) != 0) {
        unlink(cached);   /* the source itself is bad: the caller's plain read says how */
        return -1;
    }
    return 0;
}

void dpy_idx_free(dpy_idx *x) {
    if (x->mapped)
        dpy_idx_unmap(x->data);
    else
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
