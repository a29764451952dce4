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
