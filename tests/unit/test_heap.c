/* test_heap.c: under jemalloc, dpy_heap_keep_freed gives back what was freed, then keeps what is
** freed (no decay) until its last keeper ends, as jemalloc's own statistics say; while a start of
** nodes goes on the process takes 4 KiB pages, and after it what huge_pages asked, as the kernel
** says (PR_GET_THP_DISABLE). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

#include "check.h"
#include "dpy_lua.h"

static uintptr_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uintptr_t)p : 4096;
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

/* whether the kernel gives this process huge pages now (PR_GET_THP_DISABLE is 0) */
static int huge_now(void) { return prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 0; }

static void test_start_pages(void) {
    if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {   /* a kernel without the setting */
        puts("heap: the kernel refuses PR_SET_THP_DISABLE; start pages not checked");
        return;
    }
    dpy_heap_start(1);                /* before any huge_pages call: the inherited setting holds */
    dpy_heap_start(0);
    CHECK(!huge_now());
    CHECK(dpy_heap_huge_pages(1) == 0);
    CHECK(huge_now());
    dpy_heap_start(1);
    CHECK(!huge_now());               /* a start: 4 KiB pages */
    dpy_heap_start(1);                /* a second start meanwhile */
    dpy_heap_start(0);
    CHECK(!huge_now());               /* the first goes on */
    CHECK(dpy_heap_huge_pages(1) == 0);
    CHECK(!huge_now());               /* asked during a start: after it */
    dpy_heap_start(0);
    CHECK(huge_now());
    dpy_heap_start(0);                /* one end too many: nothing changes */
    CHECK(huge_now());
    CHECK(dpy_heap_huge_pages(0) == 0);
    CHECK(!huge_now());
    dpy_heap_start(1);
    dpy_heap_start(0);
    CHECK(!huge_now());               /* huge_pages = false holds after a start */
    dpy_heap_start(0);
    CHECK(!huge_now());
    CHECK(dpy_heap_huge_pages(1) == 0);
    CHECK(huge_now());
}

int main(void) {
    test_keep_freed();
    test_start_pages();
    return check_report("heap");
}
