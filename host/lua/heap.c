/*
** heap.c: the few allocator controls the host uses. dpy-lua links jemalloc (see main.c); the
** sanitizer builds keep glibc's malloc, where these fall back to what glibc offers or do nothing.
*/
#include <malloc.h>
#include <stddef.h>

#include "dpy_lua.h"

/* jemalloc's control entry when it is linked (weak: NULL under glibc's malloc) */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));

void dpy_heap_trim(void) {
    if (mallctl)
        mallctl("arena.4096.purge", NULL, NULL, NULL, 0);   /* 4096: MALLCTL_ARENAS_ALL */
    else
        malloc_trim(0);
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

void dpy_heap_flush_thread(void) {
    if (mallctl)
        mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
}
