/*
** attach.c: the control plane of a running process (see attach.h). One server thread polls the
** listening socket and the clients; requests for a node wait in that node's queue until the node
** thread comes to a boundary or an event; the pause is a limit on the rounds a node may start.
** Pausing the run everywhere is two steps, driven by the client across the processes: 'H' holds
** every node at its next boundary past the highest round started (the slower ones catch up: a node
** ahead may be waiting for their messages) and returns that round; 'L' then lets every node finish
** the highest round of all the processes and stop.
*/
#define _GNU_SOURCE   /* SO_PEERCRED, MSG_NOSIGNAL */
#include "attach.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 32

enum { STARTING, RUNNING, PAUSED, EVALUATING, DONE };
static const char *const STATE_NAMES[] = {"starting", "running", "paused", "evaluating", "done"};

typedef struct request {
    dpy_attach_request r;
    struct request *next;
} request;

typedef struct {
    uint32_t uid;
    int started;              /* the highest round started */
    int finished;             /* rounds finished (the boundary it came to last) */
    int state;
    atomic_int pending;       /* requests queued (read without the lock) */
    request *head, *tail;
    uint32_t eval_conn, eval_id;
    atomic_int cancel;
} node_state;

typedef struct {
    int fd;                   /* -1: free */
    uint32_t id;
    int alive;
    int busy;                 /* senders writing to it now: fd closed when 0 */
    pthread_mutex_t wmu;      /* one frame at a time */
    unsigned char *buf;       /* the frame being read */
    size_t have, want;
} conn;

struct dpy_attach {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* boundaries wait here: limit, hold, stop, a request */
    node_state *nodes;
    size_t n;
    size_t *order;            /* node indices sorted by uid */
    conn conns[MAX_CONNS];
    uint32_t next_conn;
    int limit;                /* the last round a node may start; -1: none */
    int hold;                 /* nodes stop at their next boundary past hold_at */
    int hold_at;              /* the highest round started when the hold came */
    uint32_t holder;          /* the connection that holds */
    int stopped;
    atomic_int halted;        /* stopped, read without the lock by evaluations */
    int listen_fd, wake[2];
    pthread_t thread;
    char path[4096];          /* the socket as named in the run directory */
    char real[sizeof(((struct sockaddr_un *)0)->sun_path)];   /* where it is bound */
    double frame_seconds;     /* the most a frame takes to go out (frame_seconds()) */
};

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void dpy_attach_header(unsigned char h[DPY_ATTACH_HEADER], uint32_t len, char type, uint32_t uid, uint32_t id) {
    put32(h, len);
    h[4] = (unsigned char)type;
    put32(h + 5, uid);
    put32(h + 9, id);
}

void dpy_attach_parse(const unsigned char h[DPY_ATTACH_HEADER], uint32_t *len, char *type, uint32_t *uid,
                      uint32_t *id) {
    *len = get32(h), *type = (char)h[4], *uid = get32(h + 5), *id = get32(h + 9);
}

static node_state *find(dpy_attach *a, uint32_t uid) {
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t u = a->nodes[a->order[mid]].uid;
        if (u == uid)
            return &a->nodes[a->order[mid]];
        if (u < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* {==== sending ====} */

static double mono(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A frame's whole time to go out: a client that reads a large reply a few KB at a time, each within
** the 5 s a send waits for progress, held its node's thread for as long as it liked.
** DPY_ATTACH_FRAME_SECONDS overrides (the tests' slow reader). */
static double frame_seconds(void) {
    const char *env = getenv("DPY_ATTACH_FRAME_SECONDS");
    double s = env ? strtod(env, NULL) : 0;
    return s > 0 && s <= 1e9 ? s : 30;
}

/* Writes p whole by the deadline (mono()): -1 on an error or 5 s without progress, -2 once past it. */
static int write_by(int fd, const unsigned char *p, size_t len, double deadline) {
    while (len > 0) {
        ssize_t k = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k, len -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return -1;
        double left = deadline - mono();
        if (left <= 0)
            return -2;
        int ms = left < 5 ? (int)(left * 1000) + 1 : 5000;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int r = poll(&pf, 1, ms);
        if (r == 0 && ms == 5000)
            return -1;   /* as the socket's SO_SNDTIMEO: 5 s without progress */
        if (r < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

int dpy_attach_send(dpy_attach *a, uint32_t id, char type, uint32_t uid, uint32_t req, const void *payload,
                    size_t len) {
    if (!a)
        return -1;
    if (len > DPY_ATTACH_MAX_PAYLOAD)
        len = DPY_ATTACH_MAX_PAYLOAD;   /* a result that long is cut: the client reads no more */
    pthread_mutex_lock(&a->mu);
    conn *c = NULL;
    for (int k = 0; k < MAX_CONNS && !c; k++)
        if (a->conns[k].fd >= 0 && a->conns[k].alive && a->conns[k].id == id)
            c = &a->conns[k];
    if (c)
        c->busy++;
    pthread_mutex_unlock(&a->mu);
    if (!c)
        return -1;
    unsigned char h[DPY_ATTACH_HEADER];
    dpy_attach_header(h, (uint32_t)len, type, uid, req);
    pthread_mutex_lock(&c->wmu);
    pthread_mutex_lock(&a->mu);
    int gone = !c->alive;   /* a frame before this one failed or timed out: the session is closed */
    pthread_mutex_unlock(&a->mu);
    double deadline = mono() + a->frame_seconds;   /* from when its turn comes */
    int rc = gone ? -1 : write_by(c->fd, h, sizeof h, deadline);
    if (rc == 0 && len)
        rc = write_by(c->fd, payload, len, deadline);
    pthread_mutex_lock(&a->mu);   /* wmu still held: the next frame's turn sees this one's failure */
    c->busy--;
    if (rc != 0)
        c->alive = 0;   /* the server thread closes it */
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_unlock(&c->wmu);
    if (rc != 0 && write(a->wake[1], "", 1) < 0) {
        /* the server notices at its next poll anyway */
    }
    return rc;
}

double dpy_attach_frame_seconds(const dpy_attach *a) { return a->frame_seconds; }

/* {==== the server thread ====} */

static void drop_requests_of(dpy_attach *a, uint32_t id) {
    for (size_t i = 0; i < a->n; i++) {
        node_state *s = &a->nodes[i];
        request **pp = &s->head, *last = NULL;
        while (*pp) {
            request *q = *pp;
            if (q->r.conn == id) {
                *pp = q->next;
                dpy_attach_request_free(&q->r);
                free(q);
                atomic_fetch_sub(&s->pending, 1);
            } else {
                last = q;
                pp = &q->next;
            }
        }
        s->tail = last;
    }
}

/* Closes connections that died, once nobody writes to them. Caller holds a->mu. */
static void reap(dpy_attach *a) {
    for (int k = 0; k < MAX_CONNS; k++) {
        conn *c = &a->conns[k];
        if (c->fd < 0 || c->alive || c->busy)
            continue;
        close(c->fd);
        c->fd = -1;
        free(c->buf);
        c->buf = NULL;
        drop_requests_of(a, c->id);
        for (size_t i = 0; i < a->n; i++)   /* code of a client gone is interrupted: none would */
            if (a->nodes[i].state == EVALUATING && a->nodes[i].eval_conn == c->id)
                atomic_store(&a->nodes[i].cancel, 1);
        if (a->hold && a->holder == c->id) {   /* a hold nobody will finish */
            a->hold = 0;
            pthread_cond_broadcast(&a->cv);
        }
    }
}

/* Holds the nodes past the highest round begun; -> that round. Caller holds a->mu. */
static int hold_locked(dpy_attach *a, uint32_t holder) {
    int top = 0;
    for (size_t i = 0; i < a->n; i++)
        top = a->nodes[i].started > top ? a->nodes[i].started : top;
    a->hold = 1;
    a->hold_at = top;
    a->holder = holder;
    return top;
}

static void status_text(dpy_attach *a, char **out, size_t *len) {
    size_t cap = 64 + a->n * 40, k = 0;
    char *s = malloc(cap);
    if (!s) {
        *out = NULL, *len = 0;
        return;
    }
    k += (size_t)snprintf(s, cap, "limit %d hold %d\n", a->limit, a->hold);
    for (size_t i = 0; i < a->n && k < cap; i++) {
        node_state *n = &a->nodes[a->order[i]];
        k += (size_t)snprintf(s + k, cap - k, "%u %d %s\n", n->uid, n->finished, STATE_NAMES[n->state]);
    }
    *out = s, *len = k < cap ? k : cap - 1;
}

/* One frame from connection id. Replies go out after the lock is dropped. */
static void handle(dpy_attach *a, uint32_t id, unsigned char type, uint32_t uid, uint32_t req,
                   const unsigned char *p, size_t len) {
    char small[64], *text = small;
    size_t tlen = 0;
    char reply = 0;
    pthread_mutex_lock(&a->mu);
    node_state *s = find(a, uid);
    switch (type) {
    case 'S':
        status_text(a, &text, &tlen);
        reply = 'S';
        break;
    case 'E':
    case 'C': {   /* code to run, or text to complete in the node's names: both wait for the node */
        if (!s) {
            tlen = (size_t)snprintf(small, sizeof small, "node %u is not in this process", uid);
            reply = 'X';
            break;
        }
        if (s->state == DONE) {
            tlen = (size_t)snprintf(small, sizeof small, "node %u has finished", uid);
            reply = 'X';
            break;
        }
        request *q = calloc(1, sizeof *q);
        char *code = q ? malloc(len + 1) : NULL;
        if (!code) {
            free(q);
            tlen = (size_t)snprintf(small, sizeof small, "out of memory");
            reply = 'X';
            break;
        }
        memcpy(code, p, len);
        code[len] = '\0';
        q->r = (dpy_attach_request){.conn = id, .id = req, .code = code, .len = len, .kind = (char)type};
        if (s->tail)
            s->tail->next = q;
        else
            s->head = q;
        s->tail = q;
        atomic_fetch_add(&s->pending, 1);
        pthread_cond_broadcast(&a->cv);
        break;
    }
    case 'I': {
        if (!s)
            break;
        request **pp = &s->head, *last = NULL;
        for (; *pp && !((*pp)->r.id == req && (*pp)->r.conn == id); pp = &(*pp)->next)
            last = *pp;
        request *q = *pp;
        if (q) {   /* not begun: it never runs */
            *pp = q->next;
            if (s->tail == q)
                s->tail = last;
            dpy_attach_request_free(&q->r);
            free(q);
            atomic_fetch_sub(&s->pending, 1);
            tlen = (size_t)snprintf(small, sizeof small, "interrupted (it had not begun)");
            reply = 'X';
        } else if (s->state == EVALUATING && s->eval_conn == id && s->eval_id == req) {
            atomic_store(&s->cancel, 1);
        }
        break;
    }
    case 'H':
        tlen = (size_t)snprintf(small, sizeof small, "%d", hold_locked(a, id));
        reply = 'H';
        break;
    case 'L': {
        char num[24] = "", *end;
        memcpy(num, p, len < sizeof num - 1 ? len : sizeof num - 1);
        errno = 0;
        long limit = len ? strtol(num, &end, 10) : -1;
        if (len && (errno || end == num || *end || limit < 0 || limit > INT32_MAX || len >= sizeof num)) {
            tlen = (size_t)snprintf(small, sizeof small, "limit: a round >= 0 expected");   /* nothing changes */
            reply = 'X';
            break;
        }
        a->limit = (int)limit;
        a->hold = 0;
        pthread_cond_broadcast(&a->cv);
        reply = 'L';
        break;
    }
    default:
        break;   /* an unknown frame is ignored: newer clients may ask more */
    }
    pthread_mutex_unlock(&a->mu);
    if (reply)
        dpy_attach_send(a, id, reply, uid, req, text, tlen);
    if (text != small)
        free(text);
}

/* Reads what connection c has; handles each whole frame. -1 when it is closed or misbehaves. */
static int serve_conn(dpy_attach *a, conn *c) {
    if (!c->buf && !(c->buf = malloc(DPY_ATTACH_HEADER + DPY_ATTACH_MAX_PAYLOAD)))
        return -1;
    if (c->want == 0)
        c->want = DPY_ATTACH_HEADER;
    ssize_t k = read(c->fd, c->buf + c->have, c->want - c->have);
    if (k < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (k <= 0)
        return -1;
    c->have += (size_t)k;
    if (c->have < c->want)
        return 0;
    size_t len = get32(c->buf);
    if (len > DPY_ATTACH_MAX_PAYLOAD)
        return -1;
    if (c->want == DPY_ATTACH_HEADER && len > 0) {
        c->want += len;
        return 0;
    }
    handle(a, c->id, c->buf[4], get32(c->buf + 5), get32(c->buf + 9), c->buf + DPY_ATTACH_HEADER, len);
    c->have = c->want = 0;
    return 0;
}

static void accept_one(dpy_attach *a) {
    int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE)
            usleep(100000);   /* out of descriptors: the connection waits, the thread does not spin */
        return;
    }
    struct ucred cred;
    socklen_t cl = sizeof cred;
    /* the folder is the user's own; a process of another user (root aside) is refused anyway */
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || (cred.uid != geteuid() && cred.uid != 0)) {
        close(fd);
        return;
    }
    struct timeval tv = {.tv_sec = 5};   /* a client that stops reading cannot stall a node long */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    pthread_mutex_lock(&a->mu);
    conn *c = NULL;
    for (int k = 0; k < MAX_CONNS && !c; k++)
        if (a->conns[k].fd < 0)
            c = &a->conns[k];
    if (c) {
        c->fd = fd;
        c->id = ++a->next_conn ? a->next_conn : ++a->next_conn;
        c->alive = 1;
        c->have = c->want = 0;
    }
    pthread_mutex_unlock(&a->mu);
    if (!c) {   /* said before closing: the client would take a closed socket for a run that has ended */
        char why[64];
        int n = snprintf(why, sizeof why, "all %d sessions are taken", MAX_CONNS);
        unsigned char h[DPY_ATTACH_HEADER];
        dpy_attach_header(h, (uint32_t)n, 'X', 0, 0);
        double by = mono() + a->frame_seconds;
        if (write_by(fd, h, sizeof h, by) == 0)
            write_by(fd, (const unsigned char *)why, (size_t)n, by);
        close(fd);
    }
}

static void *server(void *arg) {
    dpy_attach *a = arg;
    struct pollfd fds[MAX_CONNS + 2];
    int which[MAX_CONNS + 2];
    for (;;) {
        int nf = 0;
        pthread_mutex_lock(&a->mu);
        reap(a);
        int stopping = a->stopped == 2;
        for (int k = 0; k < MAX_CONNS; k++)
            if (a->conns[k].fd >= 0 && a->conns[k].alive) {
                fds[nf] = (struct pollfd){.fd = a->conns[k].fd, .events = POLLIN};
                which[nf++] = k;
            }
        pthread_mutex_unlock(&a->mu);
        if (stopping)
            return NULL;
        fds[nf] = (struct pollfd){.fd = a->listen_fd, .events = POLLIN};
        fds[nf + 1] = (struct pollfd){.fd = a->wake[0], .events = POLLIN};
        if (poll(fds, (nfds_t)nf + 2, -1) < 0)
            continue;
        if (fds[nf + 1].revents) {
            char b[64];
            if (read(a->wake[0], b, sizeof b) < 0) {
                /* nothing to do: it only wakes the poll */
            }
        }
        if (fds[nf].revents & POLLIN)
            accept_one(a);
        for (int j = 0; j < nf; j++) {
            if (!fds[j].revents)
                continue;
            conn *c = &a->conns[which[j]];
            if ((fds[j].revents & (POLLERR | POLLNVAL)) || serve_conn(a, c) != 0) {
                pthread_mutex_lock(&a->mu);
                c->alive = 0;
                shutdown(c->fd, SHUT_RDWR);   /* a sender blocked on it returns */
                pthread_mutex_unlock(&a->mu);
            }
        }
    }
}

/* {==== opening and closing ====} */

static int bind_at(int fd, const char *where) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", where);
    return bind(fd, (struct sockaddr *)&sa, sizeof sa);
}

/* A stale socket or link of an earlier run of the same directory goes; nothing else is touched. */
static void remove_stale(const char *p) {
    struct stat st;
    if (lstat(p, &st) == 0 && (S_ISSOCK(st.st_mode) || S_ISLNK(st.st_mode)))
        unlink(p);
}

int dpy_attach_listen(const char *path, char *real, size_t reallen, char *err, size_t errlen) {
    char folder[4096];
    snprintf(folder, sizeof folder, "%s", path);
    char *slash = strrchr(folder, '/');
    if (slash) {
        *slash = '\0';
        if (mkdir(folder, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "attach: cannot make %s: %s", folder, strerror(errno));
            return -1;
        }
    }
    remove_stale(path);
    if (strlen(path) < reallen) {
        snprintf(real, reallen, "%s", path);
    } else {   /* past a socket address's 108 bytes: a short private folder, linked from the run */
        char dir[64];
        snprintf(dir, sizeof dir, "/tmp/dpy-attach-%u", (unsigned)geteuid());
        struct stat st;
        if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid() || (st.st_mode & 077)) {
            snprintf(err, errlen, "attach: %s is not a private folder of this user", dir);
            return -1;
        }
        static atomic_uint serial;
        snprintf(real, reallen, "%s/%d-%u.sock", dir, (int)getpid(), atomic_fetch_add(&serial, 1));
        remove_stale(real);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind_at(fd, real) != 0 || chmod(real, 0600) != 0 || listen(fd, 16) != 0 ||
        (strcmp(real, path) != 0 && symlink(real, path) != 0)) {
        snprintf(err, errlen, "attach: cannot listen on %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

void dpy_attach_unlisten(const char *path, const char *real) {
    unlink(real);
    if (strcmp(real, path) != 0)
        unlink(path);
}

static int by_uid(const void *x, const void *y, void *states) {
    const node_state *s = states;
    uint32_t a = s[*(const size_t *)x].uid, b = s[*(const size_t *)y].uid;
    return (a > b) - (a < b);
}

int dpy_attach_open(dpy_attach **out, const char *path, const uint32_t *uids, size_t n, char *err,
                    size_t errlen) {
    *out = NULL;
    dpy_attach *a = calloc(1, sizeof *a);
    if (!a || !(a->nodes = calloc(n ? n : 1, sizeof *a->nodes)) || !(a->order = calloc(n ? n : 1, sizeof *a->order))) {
        if (a)
            free(a->nodes);
        free(a);
        snprintf(err, errlen, "attach: out of memory");
        return -1;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->n = n;
    a->limit = -1;
    a->frame_seconds = frame_seconds();
    a->listen_fd = a->wake[0] = a->wake[1] = -1;
    for (int k = 0; k < MAX_CONNS; k++) {
        a->conns[k].fd = -1;
        pthread_mutex_init(&a->conns[k].wmu, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        a->nodes[i].uid = uids[i];
        a->order[i] = i;
    }
    qsort_r(a->order, n, sizeof *a->order, by_uid, a->nodes);
    snprintf(a->path, sizeof a->path, "%s", path);
    if ((a->listen_fd = dpy_attach_listen(a->path, a->real, sizeof a->real, err, errlen)) < 0 ||
        pipe2(a->wake, O_CLOEXEC) != 0 ||
        pthread_create(&a->thread, NULL, server, a) != 0) {
        if (!err[0])
            snprintf(err, errlen, "attach: %s", strerror(errno));
        if (a->listen_fd >= 0) {
            close(a->listen_fd);
            dpy_attach_unlisten(a->path, a->real);
        }
        for (int k = 0; k < 2; k++)
            if (a->wake[k] >= 0)
                close(a->wake[k]);
        free(a->nodes);
        free(a->order);
        free(a);
        return -1;
    }
    *out = a;
    return 0;
}

void dpy_attach_close(dpy_attach *a) {
    if (!a)
        return;
    dpy_attach_stop(a);
    for (int k = 0; k < MAX_CONNS; k++) {
        pthread_mutex_lock(&a->mu);
        uint32_t id = a->conns[k].fd >= 0 && a->conns[k].alive ? a->conns[k].id : 0;
        pthread_mutex_unlock(&a->mu);
        if (id)
            dpy_attach_send(a, id, 'Z', 0, 0, NULL, 0);
    }
    pthread_mutex_lock(&a->mu);
    a->stopped = 2;
    for (int k = 0; k < MAX_CONNS; k++)
        if (a->conns[k].fd >= 0) {
            a->conns[k].alive = 0;
            shutdown(a->conns[k].fd, SHUT_RDWR);
        }
    pthread_mutex_unlock(&a->mu);
    if (write(a->wake[1], "", 1) < 0) {
        /* the pipe is ours and empty: it does not fail */
    }
    pthread_join(a->thread, NULL);
    for (int k = 0; k < MAX_CONNS; k++) {
        if (a->conns[k].fd >= 0)
            close(a->conns[k].fd);
        free(a->conns[k].buf);
        pthread_mutex_destroy(&a->conns[k].wmu);
    }
    for (size_t i = 0; i < a->n; i++)
        for (request *q = a->nodes[i].head, *next; q; q = next) {
            next = q->next;
            dpy_attach_request_free(&q->r);
            free(q);
        }
    close(a->listen_fd);
    close(a->wake[0]);
    close(a->wake[1]);
    dpy_attach_unlisten(a->path, a->real);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->nodes);
    free(a->order);
    free(a);
}

/* {==== node threads ====} */

/* Takes node s's first request. Caller holds a->mu. */
static int take(node_state *s, dpy_attach_request *req) {
    request *q = s->head;
    if (!q)
        return 0;
    s->head = q->next;
    if (!s->head)
        s->tail = NULL;
    atomic_fetch_sub(&s->pending, 1);
    *req = q->r;
    /* named at once: an interrupt that comes before dpy_attach_evaluating is not lost */
    s->eval_conn = q->r.conn, s->eval_id = q->r.id;
    atomic_store(&s->cancel, 0);
    free(q);
    return 1;
}

int dpy_attach_boundary(dpy_attach *a, size_t i, int next_round, dpy_attach_request *req, int block) {
    if (!a)
        return 0;
    node_state *s = &a->nodes[i];
    int rc;
    pthread_mutex_lock(&a->mu);
    s->finished = next_round - 1;
    for (;;) {
        if (a->stopped) {
            rc = -1;
            break;
        }
        if (take(s, req)) {
            s->state = EVALUATING;
            rc = 1;
            break;
        }
        /* a node behind the hold may catch up: one ahead may be waiting for its messages */
        if ((!a->hold || next_round <= a->hold_at) && (a->limit < 0 || next_round <= a->limit)) {
            s->started = next_round > s->started ? next_round : s->started;
            s->state = RUNNING;
            rc = 0;
            break;
        }
        if (!block) {
            rc = 2;
            break;
        }
        s->state = PAUSED;
        pthread_cond_wait(&a->cv, &a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int dpy_attach_poll(dpy_attach *a, size_t i, dpy_attach_request *req) {
    if (!a || atomic_load_explicit(&a->nodes[i].pending, memory_order_relaxed) == 0)
        return 0;
    pthread_mutex_lock(&a->mu);
    int got = take(&a->nodes[i], req);
    if (got)
        a->nodes[i].state = EVALUATING;
    pthread_mutex_unlock(&a->mu);
    return got;
}

void dpy_attach_request_free(dpy_attach_request *req) {
    free(req->code);
    req->code = NULL;
}

void dpy_attach_evaluating(dpy_attach *a, size_t i, uint32_t conn_id, uint32_t id) {
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    node_state *s = &a->nodes[i];
    if (id == 0 || s->eval_conn != conn_id || s->eval_id != id)   /* the one taken keeps its interrupt */
        atomic_store(&s->cancel, 0);
    s->eval_conn = conn_id, s->eval_id = id;
    if (id == 0 && s->state == EVALUATING)
        s->state = RUNNING;   /* at a boundary, the next wait says paused again */
    else if (id != 0)
        s->state = EVALUATING;
    pthread_mutex_unlock(&a->mu);
}

int dpy_attach_cancelled(dpy_attach *a, size_t i) {
    /* the process stopping ends it too: g:interrupt's hook may have been replaced by the eval's */
    return a && (atomic_load_explicit(&a->nodes[i].cancel, memory_order_relaxed) ||
                 atomic_load_explicit(&a->halted, memory_order_relaxed));
}

int dpy_attach_alive(dpy_attach *a, uint32_t id) {
    if (!a)
        return 0;
    pthread_mutex_lock(&a->mu);
    int alive = 0;
    for (int k = 0; k < MAX_CONNS && !alive; k++)
        alive = a->conns[k].fd >= 0 && a->conns[k].alive && a->conns[k].id == id;
    pthread_mutex_unlock(&a->mu);
    return alive;
}

void dpy_attach_hold(dpy_attach *a, uint32_t conn_id) {
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    /* a client already reaped would never set the limit, nor would reap() release its hold */
    int there = 0;
    for (int k = 0; k < MAX_CONNS && !there; k++)
        there = a->conns[k].fd >= 0 && a->conns[k].id == conn_id;
    if (there)
        hold_locked(a, conn_id);
    pthread_mutex_unlock(&a->mu);
}

void dpy_attach_done(dpy_attach *a, size_t i) {
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    node_state *s = &a->nodes[i];
    s->state = DONE;
    request *left = s->head;   /* asked too late: each client is told */
    s->head = s->tail = NULL;
    atomic_store(&s->pending, 0);
    pthread_mutex_unlock(&a->mu);
    char msg[64];
    int len = snprintf(msg, sizeof msg, "node %u has finished", s->uid);
    for (request *q = left, *next; q; q = next) {
        next = q->next;
        dpy_attach_send(a, q->r.conn, 'X', s->uid, q->r.id, msg, (size_t)len);
        dpy_attach_request_free(&q->r);
        free(q);
    }
}

void dpy_attach_stop(dpy_attach *a) {
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    if (!a->stopped)
        a->stopped = 1;
    atomic_store(&a->halted, 1);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void dpy_attach_limit(dpy_attach *a, int limit) {
    pthread_mutex_lock(&a->mu);
    a->limit = limit;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

int dpy_attach_paused(dpy_attach *a) {
    if (!a)
        return 0;
    pthread_mutex_lock(&a->mu);
    int paused = 0;
    for (size_t i = 0; i < a->n && !paused; i++)
        paused = a->nodes[i].state == PAUSED;
    pthread_mutex_unlock(&a->mu);
    return paused;
}
