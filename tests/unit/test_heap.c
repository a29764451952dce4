/* test_heap.c: a new thread's static TLS pages that are all zero are given back (mincore says
** not resident), every one of a run of them, read as zeros after, take writes, and a page with
** data is kept. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
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
    return check_report("heap");
}
