/*
** heap.c: the few allocator and memory controls the host uses. dpy-lua links jemalloc (see
** launch.c); the sanitizer builds keep glibc's malloc, where these fall back to what glibc offers
** or do nothing.
*/
#define _GNU_SOURCE   /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/prctl.h>

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

/* launch.c's malloc_conf decay, where jemalloc does not say */
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
** jemalloc asks for transparent huge pages on its memory (launch.c); the kernel gives them unless the
** process opts out, which it checks at every fault: turning them off keeps what is mapped and takes
** 4 KiB pages from then on. While its nodes start, the process takes 4 KiB pages whatever the config
** says: a virtual machine may hand out fresh huge pages far slower (2.5-5x on the AMD EPYC VM of 7
** December 2026; 8,192 nodes ready in 6 s instead of 8.3, docs/performance.md). After the start, a
** fault takes a huge page where its 2 MiB are not mapped in 4 KiB pages already.
*/
static pthread_mutex_t thp_mu = PTHREAD_MUTEX_INITIALIZER;
static int thp_wanted = -1;   /* under thp_mu: what host.huge_pages asked last; -1: as inherited */
static int thp_starts;        /* under thp_mu: the starts of nodes going on */

static int thp_apply_locked(void) {
    if (thp_wanted < 0)   /* nothing asked yet: a start gives back what the process inherited */
        thp_wanted = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 0;
    return prctl(PR_SET_THP_DISABLE, thp_wanted && thp_starts == 0 ? 0 : 1, 0, 0, 0) == 0 ? 0 : -1;
}

int dpy_heap_huge_pages(int on) {
    pthread_mutex_lock(&thp_mu);
    thp_wanted = on != 0;
    int rc = thp_apply_locked();
    pthread_mutex_unlock(&thp_mu);
    return rc;
}

void dpy_heap_start(int on) {
    pthread_mutex_lock(&thp_mu);
    if (on)
        thp_starts++;
    else if (thp_starts > 0)
        thp_starts--;
    thp_apply_locked();   /* best effort: a kernel that refuses leaves the pages as they were */
    pthread_mutex_unlock(&thp_mu);
}

/* glibc's own figure (ld.so, GLIBC_PRIVATE: looked up, not linked): every thread's static TLS. */
long dpy_heap_static_tls(void) {
    void (*info)(size_t *, size_t *) =
        (void (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
    if (info == NULL)
        return -1;
    size_t size = 0, align = 0;
    info(&size, &align);
    return (long)size;
}

void dpy_heap_thread_cache(int on) {
    bool b = on != 0;
    if (mallctl)
        mallctl("thread.tcache.enabled", NULL, NULL, &b, sizeof b);
}
