/*
** spawn.c: starting child processes (host.spawn). A run's node processes are copies of this
** very program, and executing it again costs each one 0.6-0.9 s of CPU before its first line:
** the dynamic loader binding libtorch and the ~300 libraries Debian's build pulls in, then
** libtorch registering its operators. So when argv[0] is this program's own file, the child is
** forked from this process, already loaded, and runs the command on a fresh Lua state as an
** executed one would (dpy_spawn_init's main). It is executed instead when this process has
** started threads since it was loaded (a forked child would hold only this one, and libgomp's
** pool, once started, does not survive a fork: launcher.lua and the specs' runner work on one
** thread so that it never starts), when the fork fails, when argv[0] is relative and the child
** starts in another directory, or when DPY_FORK=0. Either way the output files are opened here
** (a relative path names a file in this directory) before the child moves to its own.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpy_lua.h"

#if defined(__SANITIZE_ADDRESS__) && __has_include(<sanitizer/lsan_interface.h>)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() __lsan_do_leak_check()   /* what exit would have done (ASAN_OPTIONS) */
#else
#define LEAK_CHECK() ((void)0)
#endif

extern char **environ;

static int (*g_main)(int, char **);
static int g_threads;          /* the threads this process had when its main began */
static int g_torch_threads;    /* the intra-op threads main gave libtorch */
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

/* A child goes when the one that started it does, by whatever end (a second Ctrl-C, SIGKILL, the
** OOM killer): SIGTERM, which stops a run's nodes as Ctrl-C does, instead of a process running on
** unsupervised. The kernel sends it when the starting thread ends; a parent already gone by now
** ends the child here. */
#define PARENT_ENV "DPY_SPAWN_PARENT"
static void follow_parent(pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(128 + SIGTERM);
}

void dpy_spawn_init(int argc, char **argv, int (*main_fn)(int, char **)) {
    g_main = main_fn;
    g_threads = thread_count();
    g_torch_threads = dpy_torch_num_threads();
    /* where the kernel reads the command line from: argv's strings, then the environment's
    ** when they follow (a child's title may run over into them once they are copied away) */
    char *end = argv[0] + strlen(argv[0]) + 1;
    for (int i = 1; i < argc && argv[i] == end; i++)
        end += strlen(end) + 1;
    for (char **e = environ; *e && *e == end; e++)
        end += strlen(end) + 1;
    g_title = argv[0];
    g_title_room = (size_t)(end - argv[0]);
    /* executed by dpy_spawn: set for this child only (after the room above is measured, which
    ** the variable's string is part of) */
    const char *parent = getenv(PARENT_ENV);
    if (parent) {
        pid_t p = (pid_t)atol(parent);
        unsetenv(PARENT_ENV);
        follow_parent(p);
    }
}

/* argv[0] is the file this process runs. */
static int is_self(const char *path) {
    struct stat a, b;
    return stat(path, &a) == 0 && stat("/proc/self/exe", &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* argv[0] names this program's file where the child resolves it: a relative one is named from
** here, so only when the child starts here (not in dir). */
static int names_self(const char *path, const char *dir) {
    return (path[0] == '/' || !dir) && is_self(path);
}

/* Whether the child may be forked, threads aside: it runs this program and DPY_FORK is not 0. */
static int may_fork(const char *path, const char *dir) {
    const char *env = getenv("DPY_FORK");
    return g_main && !(env && strcmp(env, "0") == 0) && g_threads > 0 && names_self(path, dir);
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
    char *name = strdup(program_invocation_name);   /* glibc's, for its messages: argv[0] */
    if (!name)
        return;
    program_invocation_name = name;
    program_invocation_short_name = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
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

void dpy_exit(int code) {
    fflush(NULL);
    LEAK_CHECK();
    _exit(code);
}

/* Closes every descriptor from first on (the parent's files: other processes' sockets). */
static void close_from(int first) {
    if (close_range((unsigned)first, ~0U, 0) == 0)
        return;
    DIR *d = opendir("/proc/self/fd");   /* a kernel before 5.9, or a filter that refuses it */
    if (!d)
        return;
    int mine = dirfd(d);
    for (struct dirent *e; (e = readdir(d));) {
        int n = atoi(e->d_name);
        if (n >= first && n != mine)
            close(n);
    }
    closedir(d);
}

/* In the forked child: what an exec would have given it, then the command. Never returns. The
** files come from fork_child at 4 and above, so fd goes to 3 first, as posix_spawn's does. */
static void run_child(char *const argv[], const int files[4], int fd, pid_t parent, const sigset_t *mask) {
    follow_parent(parent);
    const int out = files[0], err = files[1], dir = files[2], in = files[3];
    if ((fd >= 0 && dup2(fd, 3) < 0) || dup2(out, 1) < 0 || dup2(err >= 0 ? err : 1, 2) < 0 ||
        (in >= 0 && dup2(in, 0) < 0) || (dir >= 0 && fchdir(dir) != 0))
        _exit(127);
    close_from(fd >= 0 ? 4 : 3);
    signal(SIGINT, SIG_DFL);   /* the handlers the parent set (host.catch_interrupt, main.c) */
    signal(SIGTERM, SIG_DFL);
    for (int i = 0; i < 2; i++) {   /* these two as the parent started: ignored under nohup, as exec keeps */
        int sig = i ? SIGPIPE : SIGHUP;
        struct sigaction now;
        if (sigaction(sig, NULL, &now) == 0 && now.sa_handler != SIG_IGN)
            signal(sig, SIG_DFL);
    }
    dpy_host_forget_interrupt();
    sigprocmask(SIG_SETMASK, mask, NULL);   /* blocked since the fork: none went to the handlers */
    set_title(argv);
    int argc = 0;
    while (argv[argc])
        argc++;
    dpy_exit(g_main(argc, (char **)argv));
}

/* open(2) at descriptor 4 or above (clear of the child's 0 to 3), close-on-exec; -1 and errno. */
static int open_above_3(const char *path, int flags) {
    int f = open(path, flags | O_CLOEXEC, 0644);
    if (f < 0 || f > 3)
        return f;
    int moved = fcntl(f, F_DUPFD_CLOEXEC, 4);
    int e = errno;
    close(f);
    errno = e;
    return moved;
}

/* 0 and *pid; -1 when fork failed (posix_spawn may still succeed); else an errno, as posix_spawn
** would give it (a bad fd, an output or a directory that cannot be opened). */
static int fork_child(char *const argv[], const dpy_spawn_io *io, pid_t *pid) {
    if (io->fd >= 0 && fcntl(io->fd, F_GETFD) < 0)
        return errno;
    const int out_flags = O_WRONLY | O_CREAT | O_TRUNC;
    int files[4] = {-1, -1, -1, -1}, rc = 0;   /* out, err, dir, in: opened here, relative paths named here */
    if ((files[0] = open_above_3(io->out, out_flags)) < 0 ||
        (io->err && (files[1] = open_above_3(io->err, out_flags)) < 0) ||
        (io->dir && (files[2] = open_above_3(io->dir, O_PATH | O_DIRECTORY)) < 0) ||
        (io->in && (files[3] = open_above_3(io->in, O_RDONLY)) < 0))
        rc = errno;
    if (rc == 0) {
        fflush(NULL);   /* else the child writes this process's buffered output again */
        sigset_t all, old;
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, &old);
        pid_t self = getpid(), p = fork();
        if (p == 0)
            run_child(argv, files, io->fd, self, &old);
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (p < 0)
            rc = -1;
        else
            *pid = p;
    }
    for (int i = 0; i < 4; i++)
        if (files[i] >= 0)
            close(files[i]);
    return rc;
}

/* This process's environment with PARENT_ENV=its pid first (an inherited one left out); NULL when
** out of memory. The caller frees the first string and the array. */
static char **env_with_parent(void) {
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = malloc((n + 2) * sizeof *env);
    char *mine = malloc(sizeof PARENT_ENV + 24);
    if (!env || !mine) {
        free(env);
        free(mine);
        return NULL;
    }
    snprintf(mine, sizeof PARENT_ENV + 24, PARENT_ENV "=%ld", (long)getpid());
    size_t k = 0;
    env[k++] = mine;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], PARENT_ENV "=", sizeof PARENT_ENV) != 0)
            env[k++] = environ[i];
    env[k] = NULL;
    return env;
}

/* Forks the child, or executes it (posix_spawn): 0 and *pid, or an errno. */
static int start(char *const argv[], const dpy_spawn_io *io, pid_t *pid) {
    int rc = -1;
    if (may_fork(argv[0], io->dir)) {
        /* A process working on fewer threads than main gave it (the specs' runner) has stopped
        ** libtorch's pool threads: they come back for the count that the fork needs, and the
        ** child starts with main's count, as an executed one would. */
        int threads = dpy_torch_num_threads();
        if (threads != g_torch_threads)
            dpy_torch_set_threads(g_torch_threads);
        if (thread_count() == g_threads)
            rc = fork_child(argv, io, pid);
        if (threads != g_torch_threads)
            dpy_torch_set_threads(threads);
    }
    if (rc >= 0)
        return rc;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (io->fd >= 0)   /* first, before fd 1 is replaced; onto itself it clears close-on-exec (glibc) */
        posix_spawn_file_actions_adddup2(&fa, io->fd, 3);
    posix_spawn_file_actions_addopen(&fa, 1, io->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (io->err)
        posix_spawn_file_actions_addopen(&fa, 2, io->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    else
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (io->in)
        posix_spawn_file_actions_addopen(&fa, 0, io->in, O_RDONLY, 0);
    if (io->dir)   /* after the opens: relative paths name files here, as in the forked child */
        posix_spawn_file_actions_addchdir_np(&fa, io->dir);
    char **env = names_self(argv[0], io->dir) ? env_with_parent() : NULL;   /* it follows its parent */
    rc = posix_spawn(pid, argv[0], &fa, NULL, argv, env ? env : environ);
    posix_spawn_file_actions_destroy(&fa);
    if (env) {
        free(env[0]);
        free(env);
    }
    return rc;
}

/* What a start that failed stumbled on: the first of io's fd, its output files, its directory
** that cannot be had now, in the order the child takes them (opening them again creates nothing
** the child had not: an output it could open, it created); else the program itself. */
static const char *culprit(char *const argv[], const dpy_spawn_io *io) {
    if (io->fd >= 0 && fcntl(io->fd, F_GETFD) < 0)
        return NULL;
    const char *paths[] = {io->out, io->err, io->dir, io->in};
    const int flags[] = {O_WRONLY | O_CREAT, O_WRONLY | O_CREAT, O_PATH | O_DIRECTORY, O_RDONLY};
    for (int i = 0; i < 4; i++) {
        if (!paths[i])
            continue;
        int f = open(paths[i], flags[i] | O_CLOEXEC, 0644);
        if (f < 0)
            return paths[i];
        close(f);
    }
    return argv[0];
}

int dpy_spawn(char *const argv[], const dpy_spawn_io *io, pid_t *pid, const char **what) {
    int rc = start(argv, io, pid);
    if (rc != 0)
        *what = culprit(argv, io);
    return rc;
}
