/* ring.c: the shared byte ring between two processes (see ring.h). */
#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

/* The header: the reader's count, alone on its page (the reader maps the rest read-only). */
static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static _Atomic uint64_t *taken(const dpy_ring *r) { return (_Atomic uint64_t *)r->map; }

static int map_ring(dpy_ring *r, int fd, size_t size) {
    void *m = mmap(NULL, page() + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    r->map = m;
    r->bytes = r->map + page();
    r->size = size;
    r->pos = 0;
    return 0;
}

size_t dpy_ring_bytes(uint64_t max_payload) {
    uint64_t two = 2 * max_payload, pg = page();
    if (two >= DPY_RING_BYTES)
        return DPY_RING_BYTES;
    size_t size = (size_t)((two + pg - 1) / pg * pg);
    return size < DPY_RING_PIECE ? DPY_RING_PIECE : size;
}

int dpy_ring_create(dpy_ring *r, size_t size) {
    memset(r, 0, sizeof *r);
    int fd = memfd_create("dpy-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    /* its pages taken now: where memory is short, an error here and not a SIGBUS in a copy */
    if (ftruncate(fd, (off_t)(page() + size)) != 0 || fallocate(fd, 0, 0, (off_t)(page() + size)) != 0 ||
        fcntl(fd, F_ADD_SEALS, seals) != 0 || map_ring(r, fd, size) != 0) {
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
    int seals = fcntl(fd, F_GET_SEALS), e = 0;
    const char *bad = NULL;
    if (seals < 0 || fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC)
        bad = "not a memfd on tmpfs";
    else if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        bad = "not sealed against resizing";
    else if (size < DPY_RING_PIECE || size > DPY_RING_BYTES || size % page() != 0)
        bad = "of an impossible size";
    else if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != page() + size)
        bad = "not of the size announced";
    else if (map_ring(r, fd, (size_t)size) != 0 || mprotect(r->bytes, r->size, PROT_READ) != 0) {
        e = errno;
        dpy_ring_free(r);
        bad = "this process could not map";
    }
    close(fd);   /* the mapping holds the memory */
    if (bad) {
        snprintf(why, whylen, "a shared ring %s%s%s", bad, e ? ": " : "", e ? strerror(e) : "");
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
    memcpy(r->bytes + r->pos % r->size, data, n);
    r->pos += n;   /* the reader learns of them by the socket, after this */
}

void dpy_ring_get(dpy_ring *r, void *out, size_t n) {
    memcpy(out, r->bytes + r->pos % r->size, n);
    r->pos += n;
    atomic_store_explicit(taken(r), r->pos, memory_order_release);
}

void dpy_ring_free(dpy_ring *r) {
    if (r->map)
        munmap(r->map, (size_t)(r->bytes - r->map) + r->size);
    r->map = NULL;
}
