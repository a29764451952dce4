/*
** data_cache.c: decoded datasets kept in the dataset cache directory (dpy_cache_*), so that a
** slow format (FEMNIST's JSON) is parsed once per machine rather than at every process start.
**
** A file: "DPYDSC02", then u64 keylen, metalen, n (arrays), total (the file's length); the key,
** the meta string; per array its name (u8 length, bytes), code (u8), ndim (u8), dims (i64 each),
** nbytes (u64); then each array's bytes, at an offset that is a multiple of 64 KiB (zeros before,
** and its nbytes again in the 8 bytes just before); last, the XXH3-64 of the header and of each
** array's 8 + nbytes bytes. Native byte order (a file from another machine's byte order fails the
** length check). The arrays are mapped, not copied: every process of the machine shares one copy,
** the page cache's. The file is written beside its place and renamed: readers see a whole file or
** none (a mapping keeps the file it was made on); a truncated or corrupt one fails the length or
** the checksum check, and is never handed on.
*/
#define _GNU_SOURCE
#include "dpy_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char MAGIC[8] = {'D', 'P', 'Y', 'D', 'S', 'C', '0', '2'};
#define ALIGN ((uint64_t)1 << 16)   /* a multiple of any page size */
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
    }
    off_t at = lseek(f->fd, 0, SEEK_CUR);
    uint64_t end = at < 0 ? 0 : (uint64_t)at;
    for (size_t i = 0; i < f->n; i++) {
        f->arrays[i].offset = (end + 8 + ALIGN - 1) / ALIGN * ALIGN;
        end = f->arrays[i].offset + f->arrays[i].nbytes;
        if (end > f->total)
            break;
    }
    if (at < 0 || end + 8 != f->total)
        return bad(f, err, errlen, "corrupt header (its arrays do not fill the file)");
    return 0;
}

void *dpy_cache_map(dpy_cache_file *f, size_t i, char *err, size_t errlen) {
    const dpy_cache_array *a = &f->arrays[i];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* writable but private: a stray write copies one page instead of crashing the process */
    uint8_t *map = mmap(NULL, page + a->nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd,
                        (off_t)(a->offset - page));
    if (map == MAP_FAILED) {
        dpy_fail(err, errlen, "cannot map %s: %s", f->path, strerror(errno));
        return NULL;
    }
    uint8_t *data = map + page;
    uint64_t nbytes;
    memcpy(&nbytes, data - 8, 8);
    XXH3_64bits_update(f->hash, data - 8, 8 + a->nbytes);
    if (nbytes != a->nbytes) {   /* the header's count, or the unmap would free the wrong length */
        munmap(map, page + a->nbytes);
        dpy_fail(err, errlen, "%s: corrupt (array %s)", f->path, a->name);
        return NULL;
    }
    return data;
}

void dpy_cache_unmap(void *data) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t nbytes;
    memcpy(&nbytes, (uint8_t *)data - 8, 8);
    munmap((uint8_t *)data - page, page + nbytes);
}

int dpy_cache_check(dpy_cache_file *f, char *err, size_t errlen) {
    uint64_t want, got = XXH3_64bits_digest(f->hash);
    if (pread(f->fd, &want, sizeof want, (off_t)(f->total - 8)) != (ssize_t)sizeof want || want != got)
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
    uint64_t end = 8 + 32 + keylen + metalen;
    for (size_t i = 0; i < n; i++)
        end += 1 + strlen(arrays[i].name) + 2 + 8 * (uint64_t)arrays[i].ndim + 8;
    for (size_t i = 0; i < n; i++)
        end = (end + 8 + ALIGN - 1) / ALIGN * ALIGN + arrays[i].nbytes;
    uint64_t h[4] = {keylen, metalen, n, end + 8};
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
    static const uint8_t zeros[4096];
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint64_t at = (uint64_t)lseek(fd, 0, SEEK_CUR), start = (at + 8 + ALIGN - 1) / ALIGN * ALIGN;
        for (uint64_t pad = start - 8 - at; rc == 0 && pad > 0;) {
            size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
            rc = dpy_write_all(fd, zeros, k);
            pad -= k;
        }
        if (rc == 0)
            rc = write_hashed(fd, hs, &arrays[i].nbytes, 8) || write_hashed(fd, hs, data[i], arrays[i].nbytes)
                     ? -1 : 0;
    }
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
