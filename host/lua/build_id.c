/* build_id.c: this build's fingerprint, the "build" of `dpy-lua --version` and of a run's
** manifest. Two builds that both call themselves 0.1.0 can give other numbers (any fix that
** changes a result does), so the processes of one run must run the same one: dispatch and the
** rendezvous compare it. It hashes (XXH3, 64 bits) the C host's sources, hashed when the binary
** was built, and the Lua modules it runs: every *.lua under its Lua tree's dpy/, by path and
** contents, hashed once per process as it reads them. */
#include "data_image.h"   /* dpy_dir_list */
#include "dpy_core.h"
#include "dpy_lua.h"
#include "dpy_sources_hash.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static int hash_file(XXH3_state_t *s, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return dpy_fail(err, errlen, "cannot read %s", path);
    char buf[65536];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        XXH3_64bits_update(s, buf, n);
        total += n;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return dpy_fail(err, errlen, "cannot read %s", path);
    XXH3_64bits_update(s, &total, sizeof total);   /* where one file ends and the next begins */
    return 0;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* The *.lua files under root/rel, in byte order of their paths (rel: "dpy", "dpy/sharing", ...). */
static int hash_tree(XXH3_state_t *s, const char *root, const char *rel, char *err, size_t errlen) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", root, rel) >= (int)sizeof path)
        return dpy_fail(err, errlen, "%s/%s: path too long", root, rel);
    dpy_names dirs, files;
    if (dpy_dir_list(path, &dirs, &files, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < files.n && rc == 0; i++) {
        if (!ends_with(files.names[i], ".lua"))
            continue;
        char file[4096];
        if (snprintf(file, sizeof file, "%s/%s", path, files.names[i]) >= (int)sizeof file) {
            rc = dpy_fail(err, errlen, "%s/%s: path too long", path, files.names[i]);
            break;
        }
        XXH3_64bits_update(s, rel, strlen(rel) + 1);
        XXH3_64bits_update(s, files.names[i], strlen(files.names[i]) + 1);
        rc = hash_file(s, file, err, errlen);
    }
    for (size_t i = 0; i < dirs.n && rc == 0; i++) {
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", rel, dirs.names[i]) >= (int)sizeof sub)
            rc = dpy_fail(err, errlen, "%s/%s: path too long", path, dirs.names[i]);
        else
            rc = hash_tree(s, root, sub, err, errlen);
    }
    dpy_names_free(&dirs);
    dpy_names_free(&files);
    return rc;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_id[17], g_err[512];

const char *dpy_build_id(char *err, size_t errlen) {
    pthread_mutex_lock(&g_lock);
    if (!g_id[0] && !g_err[0]) {
        const char *dir = dpy_lua_dir();
        XXH3_state_t *s = XXH3_createState();
        if (!dir)
            dpy_fail(g_err, sizeof g_err, "no Lua tree");
        else if (!s)
            dpy_fail(g_err, sizeof g_err, "out of memory");
        else {
            XXH3_64bits_reset(s);
            XXH3_64bits_update(s, DPY_SOURCES_HASH, sizeof DPY_SOURCES_HASH);
            if (hash_tree(s, dir, "dpy", g_err, sizeof g_err) == 0)
                snprintf(g_id, sizeof g_id, "%016llx", (unsigned long long)XXH3_64bits_digest(s));
        }
        XXH3_freeState(s);
    }
    pthread_mutex_unlock(&g_lock);
    if (g_id[0])
        return g_id;
    snprintf(err, errlen, "%s", g_err);
    return NULL;
}
