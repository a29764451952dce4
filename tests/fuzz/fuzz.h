/* fuzz.h: what the libFuzzer harnesses share. Each harness hands one decoder of outside bytes
** its input and checks only that it returns (0 or -1 with a message): a crash, a sanitizer
** report, a hang (-timeout) or a runaway allocation (-rss_limit_mb, -malloc_limit_mb) fails. */
#ifndef DPY_FUZZ_H
#define DPY_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The decoders of files take a path: the input as an in-memory file, /proc/self/fd/N. */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t pathlen) {
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) {
        perror("memfd");
        abort();
    }
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
    return fd;
}

/* A decoder's answer must be 0, or -1 with a message. */
static inline void fuzz_answer(int rc, const char *err) {
    if (rc != 0 && (rc != -1 || err[0] == '\0')) {
        fprintf(stderr, "decoder answered %d with message '%s'\n", rc, err);
        abort();
    }
}

#endif
