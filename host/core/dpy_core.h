/*
** dpy_core.h: the engine in plain C11 (no Lua, no C++): dataset file readers and safe file output.
** Functions return 0 on success, or -1 with a message in err.
*/
#ifndef DPY_CORE_H
#define DPY_CORE_H

#include <stddef.h>
#include <stdint.h>

#define DPY_IDX_MAXDIM 4

/* An IDX file (MNIST's format), gzipped or not: unsigned bytes with up to 4 dims. */
typedef struct {
    uint8_t *data;                  /* owned; dims[0] * ... * dims[ndim-1] bytes */
    size_t len;
    int ndim;
    int64_t dims[DPY_IDX_MAXDIM];
    int mapped;                     /* data lies in a file mapping (dpy_idx_map) */
} dpy_idx;

/* Reads the file into memory. */
int dpy_idx_read(const char *path, dpy_idx *out, char *err, size_t errlen);
/* Maps the file, or a gzipped one's decompressed copy in cache_dir (made on first use, named by
** the file's path, size and mtime; cache_dir NULL: none): the data is the page cache's, one copy
** for every process of the machine. */
int dpy_idx_map(const char *path, const char *cache_dir, dpy_idx *out, char *err, size_t errlen);
/* Unmaps the data of a mapped IDX file, given only its data pointer (a tensor's release). */
void dpy_idx_unmap(void *data);
void dpy_idx_free(dpy_idx *x);

/* A CIFAR binary batch: records of label_bytes label bytes then 3072 pixels (3 x 32 x 32).
** label_index picks the label byte kept (CIFAR-100: 0 coarse, 1 fine). */
typedef struct {
    uint8_t *images;                /* owned; n * 3072 bytes, channel-major as in the file */
    uint8_t *labels;                /* owned; n bytes */
    int64_t n;
} dpy_cifar;

int dpy_cifar_read(const char *path, int label_bytes, int label_index, dpy_cifar *out,
                   char *err, size_t errlen);
void dpy_cifar_free(dpy_cifar *c);

/* {==== decoded datasets in the dataset cache directory (data_cache.c) ====} */

#define DPY_CACHE_MAXDIM 8

/* One array of a cache file: its name, a type code the caller defines, dims and byte count. */
typedef struct {
    char name[64];
    int code, ndim;
    int64_t dims[DPY_CACHE_MAXDIM];
    uint64_t nbytes;
    uint64_t offset;                /* of its bytes in the file (reading) */
} dpy_cache_array;

/* A cache file being read: its meta string and the arrays it holds, then their bytes. */
typedef struct {
    int fd;
    char *path, *meta;              /* meta: metalen bytes, NUL-terminated */
    size_t metalen, n;
    uint64_t total;
    dpy_cache_array *arrays;        /* n */
    struct XXH3_state_s *hash;
} dpy_cache_file;

/* Opens path's header: 0 when it holds key (f filled: map its arrays, check, then close it), 1
** when there is no such file or it was made under another key (nothing to close), -1 when it
** cannot be read or is truncated or corrupt (err says which; nothing to close). */
int dpy_cache_open(const char *path, const char *key, size_t keylen, dpy_cache_file *f, char *err,
                   size_t errlen);
/* Maps array i (in order: each one once, all before dpy_cache_check), shared with every process
** that maps it: its bytes, or NULL and err. Release them with dpy_cache_unmap. */
void *dpy_cache_map(dpy_cache_file *f, size_t i, char *err, size_t errlen);
void dpy_cache_unmap(void *data);
/* After every array is mapped: 0 when the file's checksum holds, else -1 (corrupt: drop them). */
int dpy_cache_check(dpy_cache_file *f, char *err, size_t errlen);
void dpy_cache_close(dpy_cache_file *f);
/* Writes the arrays (data[i]: arrays[i].nbytes each, at most 64 arrays) under key and meta to a
** temporary file beside path, renamed into place: readers see the old file or the new one. */
int dpy_cache_write(const char *path, const char *key, size_t keylen, const char *meta,
                    size_t metalen, const dpy_cache_array *arrays, const void *const *data, size_t n,
                    char *err, size_t errlen);

/* Writes all len bytes to fd, through short writes and signals: 0, or -1 with errno set. */
int dpy_write_all(int fd, const void *data, size_t len);
/* Writes path atomically: a temporary file beside it, fsync, rename, fsync of the directory.
** A crash leaves either the old file or the new one, never a torn one. */
int dpy_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);
/* A second signal's end of the process, from its handler (async-signal-safe): no write starts
** from now on (one asked for waits for the end), and those in progress end, their file renamed
** into place or removed (5 s at most). */
void dpy_write_atomic_drain(void);
/* mkdir -p */
int dpy_mkdir_p(const char *path, char *err, size_t errlen);

/* Formats a message into err and returns -1: the error path of every function here. */
int dpy_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
