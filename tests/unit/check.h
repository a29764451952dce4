/* check.h: the few assertions the C unit tests need; a failed check exits non-zero. */
#ifndef DPY_CHECK_H
#define DPY_CHECK_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_failures, check_count;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        check_count++;                                                                 \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            check_failures++;                                                          \
        }                                                                              \
    } while (0)

#define CHECK_CONTAINS(haystack, needle)                                               \
    do {                                                                               \
        check_count++;                                                                 \
        if (strstr((haystack), (needle)) == NULL) {                                    \
            fprintf(stderr, "%s:%d: '%s' does not contain '%s'\n", __FILE__, __LINE__, \
                    (haystack), (needle));                                             \
            check_failures++;                                                          \
        }                                                                              \
    } while (0)

/* The descriptors this process holds (a leak shows as one more). */
static inline int check_open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

/* A base for a test's listening ports, this process's own: below 32768, where the kernel gives
** outgoing connections their ports (a listener on one that a connection beside it held failed with
** "Address already in use"). */
static inline int check_port_base(void) {
    return 20000 + (int)((getpid() * 7) % 12000);
}

static int check_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_count - check_failures, check_failures);
    return check_failures ? 1 : 0;
}

#endif
