/* dirlist.c: a directory's entries, sorted, split into directories and regular files (and
** dangling links, with the files). */
#define _POSIX_C_SOURCE 200809L
#include "data_image.h"
#include "dpy_core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int push(dpy_names *x, size_t *cap, const char *name) {
    if (x->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        char **nn = realloc(x->names, ncap * sizeof *nn);
        if (!nn)
            return -1;
        x->names = nn;
        *cap = ncap;
    }
    if (!(x->names[x->n] = strdup(name)))
        return -1;
    x->n++;
    return 0;
}

void dpy_names_free(dpy_names *x) {
    for (size_t i = 0; i < x->n; i++)
        free(x->names[i]);
    free(x->names);
    x->names = NULL;
    x->n = 0;
}

int dpy_dir_list(const char *path, dpy_names *dirs, dpy_names *files, char *err, size_t errlen) {
    memset(dirs, 0, sizeof *dirs);
    memset(files, 0, sizeof *files);
    DIR *d = opendir(path);
    if (!d)
        return dpy_fail(err, errlen, "cannot open the directory %s: %s", path, strerror(errno));
    size_t dcap = 0, fcap = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                rc = dpy_fail(err, errlen, "cannot list %s: %s", path, strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        dpy_names *into = NULL;
        if (fstatat(dirfd(d), e->d_name, &st, 0) == 0)
            into = S_ISDIR(st.st_mode) ? dirs : S_ISREG(st.st_mode) ? files : NULL;
        else if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            into = files;   /* a dangling link: a file its reader fails to open, naming it, as
                            ** Python's os.walk lists it (not one to leave out without a word) */
        /* else an entry gone since readdir */
        if (into && push(into, into == dirs ? &dcap : &fcap, e->d_name) != 0) {
            rc = dpy_fail(err, errlen, "out of memory listing %s", path);
            break;
        }
    }
    closedir(d);
    if (rc != 0) {
        dpy_names_free(dirs);
        dpy_names_free(files);
        return -1;
    }
    if (dirs->n)
        qsort(dirs->names, dirs->n, sizeof *dirs->names, cmp_names);
    if (files->n)
        qsort(files->names, files->n, sizeof *files->names, cmp_names);
    return 0;
}
