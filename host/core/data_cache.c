/*
** data_cache.c: decoded datasets kept in the dataset cache directory (dpy_cache_*), so that a
** slow format (FEMNIST's JSON) is parsed once per machine rather than at every process start.
**
** A file: "DPYDSC01", then u64 keylen, metalen, n (arrays), total (the file's length); the key,
** the meta string; per array its name (u8 length, bytes), code (u8), ndim (u8), dims (i64 each),
** nbytes (u64); each array's bytes; last, the XXH3-64 of everything before it. Native byte order
** (a file from another machine's byte order fails the length check). The file
** is written beside its place and renamed: readers see a whole file or none; a truncated or
** corrupt one fails the length or the checksum check, and is never handed on.
*/
#define _GNU_SOURCE
#include "dpy_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char MAGIC[8] = {'D', 'P', 'Y', 'D', 'S', 'C', '0', '1'};
#define KEY_MAX ((uint64_t)1 << 24)
#define META_MAX ((uint64_t)1 << 30)

/* Reads exactly len bytes, hashing them: 0, or -1 (short: the file is shorter than it says). */
static int read_hashed(dpy_cache_file *f, void *buf, size_t len) {
    uint8_t *p = buf;
    for (size_t left = len; left > 0;) {
        ssize_t got = read(f->fd, p, left > ((size_t)1 << 30) ? (size_t)1 << 30 : left);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        left -= (size_t)got;
    }
    XXH3_64bits_update(f->hash, buf, len);
    return 0;
}

static int bad(dpy_cache_file *f, char *err, size_t errlen, const char *what) {
    dpy_fail(err, errlen, "%s: %s", f->path, what);
    dpy_cache_close(f);
    return -1;
}

int dpy_cache_open(const char *path, const char *key, size_t keylen, dpy_cache_file *f, char *err,
                   size_t errlen) {
    memset(f, 0, sizeof *f);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)   /* no file (the write says why, if it cannot) */
            return 1;
        return dpy_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    }
    f->path = strdup(path);
    f->hash = XXH3_createState();
    struct stat st;
    if (!f->path || !f->hash || XXH3_64bits_reset(f->hash) != XXH_OK)
        return bad(f, err, errlen, "out of memory");
    if (fstat(f->fd, &st) != 0)
        return bad(f, err, errlen, strerror(errno));
    char magic[8];
    uint64_t h[4];
    if (read_hashed(f, magic, sizeof magic) != 0 || memcmp(magic, MAGIC, sizeof magic) != 0 ||
        read_hashed(f, h, sizeof h) != 0)
        return bad(f, err, errlen, "not a dataset cache file of this version (truncated or corrupt)");
    if (h[3] != (uint64_t)st.st_size)
        return bad(f, err, errlen, "truncated or corrupt (its length is not the one it was written with)");
    if (h[0] > KEY_MAX || h[1] > META_MAX || h[2] > 64 || h[0] + h[1] > h[3])
        return bad(f, err, errlen, "corrupt header");
    char *k = malloc(h[0] + 1);
    if (!k)
        return bad(f, err, errlen, "out of memory");
    int same = read_hashed(f, k, h[0]) == 0 && h[0] == keylen && memcmp(k, key, keylen) == 0;
    free(k);
    if (!same) {   /* made from other files (or torn, which the rebuild replaces just as well) */
        dpy_cache_close(f);
        return 1;
    }
    f->metalen = h[1];
    f->n = h[2];
    f->total = h[3];
    f->meta = malloc(f->metalen + 1);
    f->arrays = calloc(f->n ? f->n : 1, sizeof *f->arrays);
    if (!f->meta || !f->arrays)
        return bad(f, err, errlen, "out of memory");
    if (read_hashed(f, f->meta, f->metalen) != 0)
        return bad(f, err, errlen, "truncated");
    f->meta[f->metalen] = '\0';
    uint64_t sum = 0;
    for (size_t i = 0; i < f->n; i++) {
        dpy_cache_array *a = &f->arrays[i];
        uint8_t nl, code, ndim;
        if (read_hashed(f, &nl, 1) != 0 || nl >= sizeof a->name || read_hashed(f, a->name, nl) != 0 ||
            read_hashed(f, &code, 1) != 0 || read_hashed(f, &ndim, 1) != 0 ||
            ndim > DPY_CACHE_MAXDIM || read_hashed(f, a->dims, 8 * (size_t)ndim) != 0 ||
            read_hashed(f, &a->nbytes, 8) != 0)
            return bad(f, err, errlen, "corrupt header");
        a->name[nl] = '\0';
        a->code = code;
        a->ndim = ndim;
        uint64_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            if (a->dims[d] < 0 || (a->dims[d] && numel > UINT64_MAX / 16 / (uint64_t)a->dims[d]))
                return bad(f, err, errlen, "corrupt header");
            numel *= (uint64_t)a->dims[d];
        }
        if (a->nbytes > f->total || a->nbytes % (numel ? numel : 1) != 0 || (numel == 0) != (a->nbytes == 0))
            return bad(f, err, errlen, "corrupt header");
        sum += a->nbytes;
    }
    off_t at = lseek(f->fd, 0, SEEK_CUR);
    if (at < 0 || (uint64_t)at + sum + 8 != f->total)
        return bad(f, err, errlen, "corrupt header (its arrays do not fill the file)");
    return 0;
}

int dpy_cache_read(dpy_cache_file *f, void *const *dest, char *err, size_t errlen) {
    for (size_t i = 0; i < f->n; i++)
        if (read_hashed(f, dest[i], f->arrays[i].nbytes) != 0)
            return dpy_fail(err, errlen, "%s: truncated", f->path);
    uint64_t want, got = XXH3_64bits_digest(f->hash);
    ssize_t r = read(f->fd, &want, sizeof want);
    if (r != (ssize_t)sizeof want || want != got)
        return dpy_fail(err, errlen, "%s: corrupt (checksum mismatch)", f->path);
    return 0;
}

void dpy_cache_close(dpy_cache_file *f) {
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    XXH3_freeState(f->hash);
    free(f->path);
    free(f->meta);
    free(f->arrays);
    f->hash = NULL;
    f->path = f->meta = NULL;
    f->arrays = NULL;
}

/* Writes len bytes to fd and into the hash: 0, or -1 with errno set. */
static int write_hashed(int fd, XXH3_state_t *h, const void *data, size_t len) {
    XXH3_64bits_update(h, data, len);
    return dpy_write_all(fd, data, len);
}

int dpy_cache_write(const char *path, const char *key, size_t keylen, const char *meta,
                    size_t metalen, const dpy_cache_array *arrays, const void *const *data, size_t n,
                    char *err, size_t errlen) {
    if (n > 64)
        return dpy_fail(err, errlen, "%s: too many arrays (%zu)", path, n);
    uint64_t head = 8 + 32 + keylen + metalen, body = 0;
    for (size_t i = 0; i < n; i++) {
        head += 1 + strlen(arrays[i].name) + 2 + 8 * (uint64_t)arrays[i].ndim + 8;
        body += arrays[i].nbytes;
    }
    uint64_t h[4] = {keylen, metalen, n, head + body + 8};
    char tmp[4300];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp)
        return dpy_fail(err, errlen, "path too long: %s", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return dpy_fail(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    fchmod(fd, 0644);   /* mkstemp's 0600 would keep a shared cache to its maker */
    XXH3_state_t *hs = XXH3_createState();
    int rc = hs && XXH3_64bits_reset(hs) == XXH_OK ? 0 : (errno = ENOMEM, -1);
    if (rc == 0)
        rc = write_hashed(fd, hs, MAGIC, sizeof MAGIC) || write_hashed(fd, hs, h, sizeof h) ||
                     write_hashed(fd, hs, key, keylen) || write_hashed(fd, hs, meta, metalen)
                 ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const dpy_cache_array *a = &arrays[i];
        uint8_t nl = (uint8_t)strlen(a->name), code = (uint8_t)a->code, ndim = (uint8_t)a->ndim;
        rc = write_hashed(fd, hs, &nl, 1) || write_hashed(fd, hs, a->name, nl) ||
                     write_hashed(fd, hs, &code, 1) || write_hashed(fd, hs, &ndim, 1) ||
                     write_hashed(fd, hs, a->dims, 8 * (size_t)ndim) ||
                     write_hashed(fd, hs, &a->nbytes, 8)
                 ? -1 : 0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = write_hashed(fd, hs, data[i], arrays[i].nbytes);
    if (rc == 0) {
        uint64_t sum = XXH3_64bits_digest(hs);
        rc = dpy_write_all(fd, &sum, sizeof sum);
    }
    if (rc != 0)
        dpy_fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    XXH3_freeState(hs);
    if (close(fd) != 0 && rc == 0)
        rc = dpy_fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = dpy_fail(err, errlen, "cannot rename %s: %s", tmp, strerror(errno));
    if (rc != 0)
        unlink(tmp);
    return rc;
}
