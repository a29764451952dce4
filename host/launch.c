/*
** launch.c: the dpy-lua executable. It loads the program, libdpy-lua.so (main.c and everything
** it links, libtorch's libraries among them), with dlopen and runs it. Libraries an executable
** needs at start get a block of every thread's static TLS, copied and zeroed at each
** pthread_create: Debian's libtorch brings 108 KiB of them (openblas 60, glog 30, libtorch 10;
** 116,224 bytes a thread with glibc's reserve), which every node thread touched as it started
** (8,192 threads: 0.95 GB of new memory, and ~0.45 ms of the main thread's time a node). Loaded with dlopen,
** a library's TLS is allocated in a thread that first uses it, and in no other; one that asks for
** static TLS must fit glibc's reserve (docs/performance.md).
** The allocator stays here: jemalloc must be the process's malloc from its start.
*/
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef DPY_JEMALLOC
/*
** jemalloc reads this at start: freed pages go back to the system gradually over about 10 s
** (decay, done as the arena is used: no background thread). A round's buffers are freed and
** taken again well within that, so rounds keep their pages (16 and 64 nodes: the same seconds per
** round as keeping them for good, alternated runs), and what only a peak or the nodes' start used
** goes back: 1024 nodes 2.84 -> 2.75 MiB a node, 64 nodes 4.6 -> 4.3 (bench/decentralized
** scale). Purged pages are dropped at once (muzzy 0), not left to the kernel. A 0.5 s decay cost
** rounds 8-23 % (docs/performance.md).
** Its memory is asked for in transparent huge pages (thp): one fault maps 2 MiB instead of 4 KiB,
** for more memory (the untouched tails of size classes come resident). While its nodes start the
** process takes 4 KiB pages, and the config's huge_pages = false takes them always (heap.c).
** Once its nodes are built a process stops the decay (l_nodes.c, unless release_memory).
*/
const char *malloc_conf = "dirty_decay_ms:10000,muzzy_decay_ms:0,thp:always";
#endif

/* libdpy-lua.so beside the executable (the build tree), in ../lib/dpy-lua (an install), or in the
** build tree this executable came from (a copy of it alone). */
static void find_program(char *buf, size_t len) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *dir = dirname(exe);
        static const char *const candidates[] = {"/libdpy-lua.so", "/../lib/dpy-lua/libdpy-lua.so"};
        for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
            struct stat st;
            snprintf(buf, len, "%s%s", dir, candidates[i]);
            if (stat(buf, &st) == 0)
                return;
        }
    }
    snprintf(buf, len, "%s", DPY_BUILD_PROGRAM);
}

int main(int argc, char **argv) {
    char path[PATH_MAX + 64];
    find_program(path, sizeof path);
    /* global: Debian's Lua C modules (lfs, term.core, system.core) link no liblua, and find lua_*
    ** in the liblua5.4 that the program brings */
    void *program = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (program == NULL) {
        const char *why = dlerror();
        why = why ? why : "(no reason given)";
        fprintf(stderr, "dpy-lua: cannot load the program: %s\n", why);
        if (strstr(why, "static TLS"))   /* a library built for static TLS beyond glibc's reserve */
            fprintf(stderr, "dpy-lua: a larger reserve: GLIBC_TUNABLES=glibc.rtld.optional_static_tls=1048576\n");
        return 1;
    }
    int (*dpy_main)(int, char **) = (int (*)(int, char **))dlsym(program, "dpy_main");
    if (dpy_main == NULL) {
        fprintf(stderr, "dpy-lua: %s has no dpy_main: %s\n", path, dlerror());
        return 1;
    }
    return dpy_main(argc, argv);
}
