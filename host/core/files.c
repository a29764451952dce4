/* files.c: crash-safe file output (results stay readable whatever happens mid-run). */
#define _POSIX_C_SOURCE 200809L
#include "dpy_core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int dpy_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int fail_errno(char *err, size_t errlen, const char *what, const char *path) {
    snprintf(err, errlen, "cannot %s %s: %s", what, path, strerror(errno));
    return -1;
}

/* Without malloc: a write may end while a second signal's handler waits for it (the thread it
** interrupted may hold the allocator's lock). */
static void fsync_dir_of(const char *path) {
    char copy[4096];
    if (snprintf(copy, sizeof copy, "%s", path) >= (int)sizeof copy)
        return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int dpy_write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno != EINTR)
            return -1;
        if (w > 0) {
            p += w;
            len -= (size_t)w;
        }
    }
    return 0;
}

static int write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* The writes in progress in this process, and whether it is ending (dpy_write_atomic_drain). */
static atomic_int g_writing, g_ending;

/* The signals that end a run are held while the temporary file exists: one that would end the
** process (a second Ctrl-C) takes effect after the rename or the unlink, never between. Holding
** them covers this thread only: a signal sent to the process goes to another one, whose handler
** (host.catch_interrupt's) ends the process by dpy_write_atomic_drain. */
int dpy_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    atomic_fetch_add(&g_writing, 1);   /* before the check: the drain sees this write, or this write its end */
    if (atomic_load(&g_ending)) {   /* the process ends in a moment: no new file, and no error to report */
        atomic_fetch_sub(&g_writing, 1);
        for (;;) {
            struct timespec s = {1, 0};
            nanosleep(&s, NULL);
        }
    }
    int rc = write_atomic(path, data, len, err, errlen);
    atomic_fetch_sub(&g_writing, 1);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

void dpy_write_atomic_drain(void) {
    atomic_store(&g_ending, 1);
    for (int i = 0; i < 5000 && atomic_load(&g_writing) > 0; i++) {   /* 5 s at most: a disk that hangs */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

static int write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "path too long: %s", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail_errno(err, errlen, "create", tmp);
    if (dpy_write_all(fd, data, len) != 0) {
        fail_errno(err, errlen, "write", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (fsync(fd) != 0) {
        fail_errno(err, errlen, "sync", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0) {
        fail_errno(err, errlen, "close", tmp);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        fail_errno(err, errlen, "rename into", path);
        unlink(tmp);
        return -1;
    }
    fsync_dir_of(path);
    return 0;
}

int dpy_mkdir_p(const char *path, char *err, size_t errlen) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        snprintf(err, errlen, "path too long: %s", path);
        return -1;
    }
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return fail_errno(err, errlen, "create directory", buf);
            *p = c;
            if (c == '\0')
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a directory", path);
        return -1;
    }
    return 0;
}
