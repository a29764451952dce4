/* ring.c: the shared byte ring between two processes (see ring.h). */
#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define HEADER 4096   /* the reader's count, alone on its page */

static _Atomic uint64_t *taken(const dpy_ring *r) { return (_Atomic uint64_t *)r->map; }

static int map_ring(dpy_ring *r, int fd, size_t size) {
    void *m = mmap(NULL, HEADER + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    r->map = m;
    r->size = size;
    r->pos = 0;
    return 0;
}

int dpy_ring_create(dpy_ring *r, size_t size) {
    memset(r, 0, sizeof *r);
    int fd = memfd_create("dpy-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (ftruncate(fd, (off_t)(HEADER + size)) != 0 || fcntl(fd, F_ADD_SEALS, seals) != 0 ||
        map_ring(r, fd, size) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int dpy_ring_adopt(dpy_ring *r, int fd, uint64_t size, char *why, size_t whylen) {
    memset(r, 0, sizeof *r);
    struct stat st;
    struct statfs fs;
    int seals = fcntl(fd, F_GET_SEALS);
    const char *bad = NULL;
    if (seals < 0 || fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC)
        bad = "not a memfd";
    else if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        bad = "not sealed against resizing";
    else if (size < DPY_RING_PIECE || size > (1u << 30) || size % HEADER != 0)
        bad = "of an impossible size";
    else if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != HEADER + size)
        bad = "not of the size announced";
    if (!bad && map_ring(r, fd, (size_t)size) != 0)
        bad = "not mappable";
    if (!bad && mprotect(r->map + HEADER, r->size, PROT_READ) != 0) {   /* the reader writes its count alone */
        dpy_ring_free(r);
        bad = "not mappable";
    }
    close(fd);   /* the mapping holds the memory */
    if (bad) {
        snprintf(why, whylen, "a shared ring %s", bad);
        return -1;
    }
    return 0;
}

size_t dpy_ring_to_end(const dpy_ring *r) { return r->size - (size_t)(r->pos % r->size); }

size_t dpy_ring_room(const dpy_ring *r, size_t want) {
    uint64_t done = atomic_load_explicit(taken(r), memory_order_acquire);
    if (done > r->pos || r->pos - done > r->size)   /* not a count the reader could hold */
        return 0;
    size_t free_bytes = r->size - (size_t)(r->pos - done), to_end = dpy_ring_to_end(r);
    size_t n = free_bytes < to_end ? free_bytes : to_end;
    return n < want ? n : want;
}

void dpy_ring_put(dpy_ring *r, const void *data, size_t n) {
    memcpy(r->map + HEADER + r->pos % r->size, data, n);
    r->pos += n;   /* the reader learns of them by the socket, after this */
}

int dpy_ring_fits(const dpy_ring *r, size_t n) { return r->map && n > 0 && n <= dpy_ring_to_end(r); }

void dpy_ring_get(dpy_ring *r, void *out, size_t n) {
    memcpy(out, r->map + HEADER + r->pos % r->size, n);
    r->pos += n;
    atomic_store_explicit(taken(r), r->pos, memory_order_release);
}

void dpy_ring_free(dpy_ring *r) {
    if (r->map)
        munmap(r->map, HEADER + r->size);
    r->map = NULL;
}
