/* first_touch.c: how fast this machine hands a process memory it has not used yet, the floor under
** a run's time to its first round (every node's model, momentum and Lua state are new memory).
** THREADS threads each map MIB / THREADS MiB, in transparent huge pages as dpy-lua's allocator
** asks for them (or in 4 KiB pages, as a process takes them while its nodes start: "small"), and
** write one byte per 4 KiB page; then the same again in memory just given back (the kernel's own
** pages, already backed). On a virtual machine whose host backs guest memory when first touched,
** the first figure can be tens of times lower than the second.
** Prints "first_touch_GBps" and "retouch_GBps" (all threads together).
** usage: bench_first_touch MIB THREADS [huge | small] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static size_t g_bytes;   /* per thread */
static int g_huge;        /* huge pages, or 4 KiB ones ("small") */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *fresh(void) {
    char *p = mmap(NULL, g_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(p, g_bytes, g_huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);   /* whatever the kernel's default */
    return p;
}

static void touch(volatile char *p) {
    for (size_t i = 0; i < g_bytes; i += 4096)
        p[i] = 1;
}

static pthread_barrier_t g_start;

/* First touch, then (after all threads have timed theirs) the same in freshly recycled memory. */
static void *worker(void *arg) {
    double *secs = arg;
    char *p = fresh();
    pthread_barrier_wait(&g_start);
    double t0 = now();
    touch(p);
    secs[0] = now() - t0;
    munmap(p, g_bytes);
    pthread_barrier_wait(&g_start);
    p = fresh();
    t0 = now();
    touch(p);
    secs[1] = now() - t0;
    munmap(p, g_bytes);
    return NULL;
}

int main(int argc, char **argv) {
    g_huge = argc < 4 || strcmp(argv[3], "huge") == 0;
    if (argc < 3 || argc > 4 || (!g_huge && strcmp(argv[3], "small") != 0)) {
        fprintf(stderr, "usage: bench_first_touch MIB THREADS [huge | small]\n");
        return 2;
    }
    int threads = atoi(argv[2]);
    if (threads < 1 || threads > 256 || atol(argv[1]) < threads) {
        fprintf(stderr, "bench_first_touch: MIB >= THREADS >= 1\n");
        return 2;
    }
    g_bytes = ((size_t)atol(argv[1]) << 20) / (size_t)threads;
    pthread_t t[256];
    double secs[256][2];
    pthread_barrier_init(&g_start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, secs[i]);
    double slowest[2] = {0, 0};
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        for (int k = 0; k < 2; k++)
            slowest[k] = secs[i][k] > slowest[k] ? secs[i][k] : slowest[k];
    }
    double total = (double)g_bytes * threads / 1e9;
    printf("first_touch_GBps %.3f\nretouch_GBps %.3f\n", total / slowest[0], total / slowest[1]);
    return 0;
}
