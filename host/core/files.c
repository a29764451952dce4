/* files.c: crash-safe file output (results stay readable whatever happens mid-run). */
#define _POSIX_C_SOURCE 200809L
#include "dpy_core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy)
        return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
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

/* The signals that end a run are held while the temporary file exists: one that would end the
** process (a second Ctrl-C) takes effect after the rename or the unlink, never between. */
int dpy_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    int rc = write_atomic(path, data, len, err, errlen);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
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
