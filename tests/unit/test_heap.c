/* test_heap.c: a new thread's static TLS pages that are all zero are given back (mincore says
** not resident), every one of a run of them, read as zeros after, take writes, and a page with
** data is kept; and under jemalloc, dpy_heap_keep_freed gives back what was freed, then keeps
** what is freed (no decay) until its last keeper ends, as jemalloc's own statistics say. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "check.h"
#include "dpy_lua.h"

#define ZEROS (256 << 10)   /* room for a whole page inside it with pages up to 64 KiB */
static __thread unsigned char zeros[ZEROS];          /* .tbss: zeroed at thread start */
static __thread unsigned char data[ZEROS] = {1};     /* .tdata: copied, first byte 1 */

static uintptr_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uintptr_t)p : 4096;
}

static int resident(void *p) {
    uintptr_t page = page_size();
    unsigned char v = 0;
    return mincore((void *)((uintptr_t)p & ~(page - 1)), page, &v) == 0 && (v & 1);
}

static void *thread(void *arg) {
    int *out = arg;
    uintptr_t page = page_size();   /* a page wholly inside the block */
    unsigned char *middle = (unsigned char *)(((uintptr_t)zeros + page) & ~(page - 1));
    out[0] = resident(middle);      /* glibc zeroed it: touched */
    dpy_heap_drop_zero_tls();
    out[1] = resident(middle);
    out[5] = 1;   /* each page wholly inside the block: one run, given back whole */
    uintptr_t end = (uintptr_t)zeros + ZEROS;
    for (uintptr_t p = ((uintptr_t)zeros + page - 1) & ~(page - 1); p + page <= end; p += page)
        out[5] &= !resident((void *)p);
    int all_zero = 1;
    for (size_t i = 0; i < sizeof zeros; i++)
        all_zero &= zeros[i] == 0;
    out[2] = all_zero;
    middle[7] = 42;                 /* a write faults in a page of its own */
    out[3] = middle[7] == 42 && resident(middle);
    out[4] = resident(data) && data[0] == 1;   /* data is kept */
    return NULL;
}

extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));

#ifdef DPY_JEMALLOC
/* a decay of its own, so that what is put back is this one, not a default */
const char *malloc_conf = "dirty_decay_ms:12345";
#endif

/* jemalloc's count of an arena's dirty pages (freed, not given back), fresh */
static size_t dirty_pages(int arena) {
    uint64_t epoch = 1;
    mallctl("epoch", NULL, NULL, &epoch, sizeof epoch);
    char name[64];
    snprintf(name, sizeof name, "stats.arenas.%d.pdirty", arena);
    size_t pages = 0, len = sizeof pages;
    CHECK(mallctl(name, &pages, &len, NULL, 0) == 0);
    return pages;
}

static ssize_t decay_ms(int arena) {
    char name[64];
    snprintf(name, sizeof name, "arena.%d.dirty_decay_ms", arena);
    ssize_t ms = 0;
    size_t len = sizeof ms;
    CHECK(mallctl(name, &ms, &len, NULL, 0) == 0);
    return ms;
}

/* a block of 4 MiB (jemalloc's large extents, below its 8 MiB oversize arena), written and freed */
static void churn(void) {
    size_t size = 4 << 20;
    unsigned char *p = malloc(size);
    CHECK(p != NULL);
    memset(p, 1, size);
    free(p);
}

static void test_keep_freed(void) {
#ifdef DPY_JEMALLOC
    CHECK(strcmp(dpy_heap_allocator(), "jemalloc") == 0);
#endif
    if (strcmp(dpy_heap_allocator(), "jemalloc") != 0) {   /* glibc (sanitizers): nothing to do */
        dpy_heap_keep_freed(1);
        CHECK(!dpy_heap_keeps_freed());
        dpy_heap_keep_freed(0);
        return;
    }
    int arena = dpy_heap_new_arena();
    CHECK(arena >= 0);
    dpy_heap_use_arena(arena);
    dpy_heap_thread_cache(0);
    ssize_t usual = decay_ms(arena);
#ifdef DPY_JEMALLOC
    CHECK(usual == 12345);
#endif
    churn();
    CHECK(dirty_pages(arena) > 0);   /* freed, decaying */
    CHECK(!dpy_heap_keeps_freed());
    dpy_heap_keep_freed(1);
    CHECK(dpy_heap_keeps_freed());
    CHECK(dirty_pages(arena) == 0);  /* what was freed went back */
    CHECK(decay_ms(arena) == -1);
    churn();
    CHECK(dirty_pages(arena) * (size_t)page_size() >= (size_t)(4 << 20));   /* kept whole */
    int during = dpy_heap_new_arena();   /* made while kept: kept too, then as configured */
    CHECK(decay_ms(during) == -1);
    dpy_heap_keep_freed(1);          /* a second group */
    dpy_heap_keep_freed(0);
    CHECK(dpy_heap_keeps_freed());   /* the first still runs */
    CHECK(decay_ms(arena) == -1);
    dpy_heap_keep_freed(0);
    CHECK(!dpy_heap_keeps_freed());
    CHECK(decay_ms(arena) == usual);
    CHECK(decay_ms(during) == usual);
    int later = dpy_heap_new_arena();   /* arenas made later decay as configured too */
    CHECK(decay_ms(later) == usual);
    dpy_heap_keep_freed(0);          /* one too many: nothing changes */
    CHECK(!dpy_heap_keeps_freed());
}

int main(void) {
    int r[6] = {0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread, r) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(r[0] == 1);   /* resident before */
    CHECK(r[1] == 0);   /* given back */
    CHECK(r[2] == 1);   /* still reads as zeros */
    CHECK(r[3] == 1);
    CHECK(r[4] == 1);
    CHECK(r[5] == 1);
    test_keep_freed();
    return check_report("heap");
}
