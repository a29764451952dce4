/*
** spawn.c: starting child processes (host.spawn). A run's node processes are copies of this
** very program, and executing it again costs each one 0.6-0.9 s of CPU before its first line:
** the dynamic loader binding libtorch and the ~300 libraries Debian's build pulls in, then
** libtorch registering its operators. So when argv[0] is this program's own file, the child is
** forked from this process, already loaded, and runs the command on a fresh Lua state as an
** executed one would (dpy_spawn_init's main). It is executed instead when this process has
** started threads since it was loaded (a forked child would hold only this one, and libgomp's
** pool, once started, does not survive a fork), or when DPY_FORK=0.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpy_lua.h"

extern char **environ;

static int (*g_main)(int, char **);
static int g_threads;          /* the threads this process had when its main began */
static char *g_title;          /* the original argv and environment strings, end to end */
static size_t g_title_room;

/* The process's thread count (/proc/self/status), or -1. */
static int thread_count(void) {
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    fclose(f);
    return n;
}

void dpy_spawn_init(int argc, char **argv, int (*main_fn)(int, char **)) {
    g_main = main_fn;
    g_threads = thread_count();
    /* where the kernel reads the command line from: argv's strings, then the environment's
    ** when they follow (a child's title may run over into them once they are copied away) */
    char *end = argv[0] + strlen(argv[0]) + 1;
    for (int i = 1; i < argc && argv[i] == end; i++)
        end += strlen(end) + 1;
    for (char **e = environ; *e && *e == end; e++)
        end += strlen(end) + 1;
    g_title = argv[0];
    g_title_room = (size_t)(end - argv[0]);
}

/* argv[0] is the file this process runs. */
static int is_self(const char *path) {
    struct stat a, b;
    return stat(path, &a) == 0 && stat("/proc/self/exe", &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

static int can_fork(const char *path) {
    const char *env = getenv("DPY_FORK");
    return g_main && !(env && strcmp(env, "0") == 0) && g_threads > 0 &&
           thread_count() == g_threads && is_self(path);
}

/* The child's command line in place of this process's (ps, pgrep -f and /proc/PID/cmdline show
** it), words joined by spaces as setproctitle does, cut to the room there is. */
static void set_title(char *const argv[]) {
    if (!g_title || g_title_room < 2)
        return;
    for (char **e = environ; *e; e++) {   /* the environment's strings move out of the way */
        char *copy = strdup(*e);
        if (!copy)
            return;
        *e = copy;
    }
    size_t n = 0;
    for (int i = 0; argv[i] && n + 1 < g_title_room; i++) {
        if (i > 0)
            g_title[n++] = ' ';
        size_t len = strlen(argv[i]);
        if (len > g_title_room - 1 - n)
            len = g_title_room - 1 - n;
        memcpy(g_title + n, argv[i], len);
        n += len;
    }
    memset(g_title + n, 0, g_title_room - n);
}

/* In the forked child: what an exec would have given it, then the command. Never returns. */
static void run_child(char *const argv[], int out, int fd) {
    if (dup2(out, 1) < 0 || dup2(1, 2) < 0 || (fd >= 0 && dup2(fd, 3) < 0))
        _exit(127);
    close_range(fd >= 0 ? 4 : 3, ~0U, 0);   /* the parent's files: other processes' sockets */
    signal(SIGINT, SIG_DFL);   /* the handlers the parent set (host.catch_interrupt, main.c) */
    signal(SIGTERM, SIG_DFL);
    dpy_host_forget_interrupt();
    set_title(argv);
    int argc = 0;
    while (argv[argc])
        argc++;
    int code = g_main(argc, (char **)argv);
    fflush(NULL);
    _exit(code);   /* as main does: no exit handlers */
}

int dpy_spawn(char *const argv[], const char *out, int fd, pid_t *pid) {
    if (can_fork(argv[0])) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (o < 0)
            return errno;
        fflush(NULL);   /* else the child writes this process's buffered output again */
        pid_t p = fork();
        if (p == 0)
            run_child(argv, o, fd);
        int e = errno;
        close(o);
        if (p < 0)
            return e;
        *pid = p;
        return 0;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (fd >= 0)   /* first, before fd 1 is replaced; onto itself it clears close-on-exec (glibc) */
        posix_spawn_file_actions_adddup2(&fa, fd, 3);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}
