/*
** heap.c: the few allocator and memory controls the host uses. dpy-lua links jemalloc (see
** main.c); the sanitizer builds keep glibc's malloc, where these fall back to what glibc offers
** or do nothing.
*/
#define _GNU_SOURCE   /* dl_iterate_phdr */
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "dpy_lua.h"

/* jemalloc's control entry when it is linked (weak: NULL under glibc's malloc) */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));

const char *dpy_heap_allocator(void) { return mallctl ? "jemalloc" : "libc"; }

void dpy_heap_trim(void) {
    if (mallctl)
        mallctl("arena.4096.purge", NULL, NULL, NULL, 0);   /* 4096: MALLCTL_ARENAS_ALL */
    else
        malloc_trim(0);
}

/* main.c's malloc_conf decay, where jemalloc does not say */
#define CONFIGURED_DECAY_MS 10000

static pthread_mutex_t keep_mu = PTHREAD_MUTEX_INITIALIZER;
static int keepers;             /* keep 1s without their keep 0 (under keep_mu) */
static ssize_t saved_default;   /* what arenas were made with before the first keeper */
static ssize_t *saved;          /* by arena index: its own decay then (oversize arenas have theirs) */
static unsigned nsaved;

/* Sets an arena's dirty decay to ms (its value before in *old, if old): 0, or nonzero where the arena
** is not made yet (it will be made with the default). */
static int swap_decay(unsigned arena, ssize_t ms, ssize_t *old) {
    char name[64];
    snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", arena);
    size_t len = sizeof *old;
    return mallctl(name, old, old ? &len : NULL, &ms, sizeof ms);
}

static unsigned arena_count(void) {
    unsigned count = 0;
    size_t len = sizeof count;
    mallctl("arenas.narenas", &count, &len, NULL, 0);
    return count;
}

void dpy_heap_keep_freed(int keep) {
    if (!mallctl)
        return;
    pthread_mutex_lock(&keep_mu);
    if (keep && keepers++ == 0) {
        /* the default first: an arena made meanwhile is made keeping */
        ssize_t never = -1;
        size_t len = sizeof saved_default;
        if (mallctl("arenas.dirty_decay_ms", &saved_default, &len, &never, sizeof never) != 0)
            saved_default = CONFIGURED_DECAY_MS;
        unsigned count = arena_count();
        saved = calloc(count ? count : 1, sizeof *saved);
        nsaved = saved ? count : 0;
        for (unsigned i = 0; i < count; i++) {
            ssize_t old;
            if (swap_decay(i, -1, &old) != 0)
                old = saved_default;
            if (saved)
                saved[i] = old;
        }
        mallctl("arena.4096.purge", NULL, NULL, NULL, 0);   /* 4096: all; what was freed goes back */
    } else if (!keep && keepers > 0 && --keepers == 0) {
        mallctl("arenas.dirty_decay_ms", NULL, NULL, &saved_default, sizeof saved_default);
        unsigned count = arena_count();
        for (unsigned i = 0; i < count; i++)   /* those made meanwhile: the default */
            swap_decay(i, i < nsaved ? saved[i] : saved_default, NULL);
        free(saved);
        saved = NULL;
        nsaved = 0;
    }
    pthread_mutex_unlock(&keep_mu);
}

void dpy_heap_decay_by_default(int decay) {
    if (!mallctl)
        return;
    const char *conf = getenv("MALLOC_CONF");   /* a decay the user set holds everywhere */
    ssize_t ms = -1;
    size_t len = sizeof ms;
    if ((decay || (conf && strstr(conf, "dirty_decay_ms"))) &&
        mallctl("opt.dirty_decay_ms", &ms, &len, NULL, 0) != 0)
        ms = CONFIGURED_DECAY_MS;
    pthread_mutex_lock(&keep_mu);
    keepers = 0;   /* a command's start: a group of the process it was forked from keeps nothing here */
    free(saved);
    saved = NULL;
    nsaved = 0;
    mallctl("arenas.dirty_decay_ms", NULL, NULL, &ms, sizeof ms);
    unsigned count = arena_count();
    for (unsigned i = 0; i < count; i++)
        swap_decay(i, ms, NULL);
    pthread_mutex_unlock(&keep_mu);
}

int dpy_heap_decay_ms(long *ms) {
    ssize_t v;
    size_t len = sizeof v;
    if (!mallctl || mallctl("arenas.dirty_decay_ms", &v, &len, NULL, 0) != 0)
        return -1;
    *ms = (long)v;
    return 0;
}

int dpy_heap_keeps_freed(void) {
    pthread_mutex_lock(&keep_mu);
    int k = keepers > 0;
    pthread_mutex_unlock(&keep_mu);
    return k;
}

int dpy_heap_new_arena(void) {
    unsigned index;
    size_t len = sizeof index;
    if (!mallctl || mallctl("arenas.create", &index, &len, NULL, 0) != 0)
        return -1;
    return (int)index;
}

void dpy_heap_use_arena(int index) {
    unsigned u = (unsigned)index;
    if (mallctl && index >= 0)
        mallctl("thread.arena", NULL, NULL, &u, sizeof u);
}

/*
** jemalloc asks for transparent huge pages on its memory (main.c); the kernel gives them unless the
** process opts out, which it checks at every fault: turning them off keeps what is mapped and
** takes 4 KiB pages from then on.
*/
int dpy_heap_huge_pages(int on) {
    return prctl(PR_SET_THP_DISABLE, on ? 0 : 1, 0, 0, 0) == 0 ? 0 : -1;
}

void dpy_heap_thread_cache(int on) {
    bool b = on != 0;
    if (mallctl)
        mallctl("thread.tcache.enabled", NULL, NULL, &b, sizeof b);
}

/* A run of whole zero pages not yet given back: adjacent pages go in one madvise, since each call
** interrupts the process's other cores to flush their TLBs, dear on a virtual machine (a page a
** call was ~22 calls a thread, a run a call 3-4; 1024 nodes reach their first round ~4 % sooner). */
typedef struct {
    uintptr_t page, from, to;
} zero_run;

static void give_back(const zero_run *r) {
    if (r->to > r->from)
        madvise((void *)r->from, r->to - r->from, MADV_DONTNEED);
}

/*
** Every thread gets its own copy of each library's static thread-local block, copied or zeroed at
** pthread_create, so each node thread starts with ~108 KiB of resident TLS (Debian's libtorch
** brings openblas, glog and ~290 other libraries). Most of it stays zero: openblas's and glog's
** buffers, which node threads never use, were 0.08 MiB a node (bench/decentralized scale). A
** page wholly inside one library's block that is all zero is given back; a later write faults in
** a fresh zero page, the same contents. Safe because nothing else writes a thread's blocks: the
** thread runs this first, before the libraries' code runs in it, with its signals blocked (a
** handler's write between the check and the madvise would be lost), and a library still being
** loaded by another thread has no block listed for it yet. Best effort: a failed madvise keeps
** the page.
*/
static int drop_zero_pages(struct dl_phdr_info *info, size_t size, void *ud) {
    (void)size;
    zero_run *r = ud;
    uintptr_t page = r->page;
    if (!info->dlpi_tls_data)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_TLS)
            continue;
        uintptr_t start = (uintptr_t)info->dlpi_tls_data;
        uintptr_t end = (start + info->dlpi_phdr[i].p_memsz) & ~(page - 1);
        for (uintptr_t p = (start + page - 1) & ~(page - 1); p + page <= end; p += page) {
            const uint64_t *w = (const uint64_t *)p;
            size_t k = 0;
            while (k < page / sizeof *w && w[k] == 0)
                k++;
            if (k < page / sizeof *w)
                continue;
            if (p != r->to) {   /* not adjacent to the run: the run goes, a new one starts */
                give_back(r);
                r->from = p;
            }
            r->to = p + page;
        }
    }
    return 0;
}

void dpy_heap_drop_zero_tls(void) {
    long page = sysconf(_SC_PAGESIZE);
    zero_run r = {.page = page > 0 ? (uintptr_t)page : 4096};
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    dl_iterate_phdr(drop_zero_pages, &r);
    give_back(&r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
