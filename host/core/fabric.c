/* fabric.c: inboxes, the mem and tcp paths, fault injection (see fabric.h). */
#define _GNU_SOURCE
#include "fabric.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dpy_core.h"
#include "wire.h"

/* Payload bytes, shared by every local receiver of one send (no copy per receiver). */
typedef struct {
    atomic_int refs;
    size_t len;
    unsigned char data[];
} payload;

typedef struct msg {
    struct msg *next;
    uint32_t sender, round, encoding;
    uint16_t channel;
    double deliver_at;              /* monotonic seconds (a mock delay); 0: at once */
    payload *p;
} msg;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *head;
    dpy_traffic traffic[DPY_MAX_CHANNELS];
    /* what the node waits for, if it waits: a delivery wakes it only for that message (a woken
    ** thread takes a core from a training one, so wake-ups for other messages are waste) */
    int waiting;
    uint32_t want_sender, want_round;
    uint16_t want_channel;
} inbox;

typedef struct {
    int fd;                         /* the connection to this process, -1 if none */
    int alive;
    pthread_mutex_t write_mu;       /* one writer at a time per connection */
} peer;

typedef struct conn {               /* read state of one connection (I/O thread only) */
    int fd, process;                /* process -1 until its HELLO */
    uint8_t hdr[DPY_WIRE_HEADER];
    size_t hdr_got, got;
    dpy_header h;
    payload *pending;               /* the packet being read, straight into its payload */
    struct conn *next;
} conn;

struct dpy_fabric {
    dpy_fabric_opts o;
    int32_t *node_process;
    unsigned char *gone;            /* by uid: a local node that has finished (under mu) */
    inbox *inboxes;                 /* by uid; only this process's nodes are used */
    peer *peers;                    /* by process */
    pthread_mutex_t mu;             /* peers' fd and alive, counters, the fault generator */
    pthread_cond_t cv;              /* signalled when a connection is identified */
    int connected;
    uint64_t rejected, rng;
    char last_reject[320];
    int listen_fd, epfd, wake[2];
    pthread_t io;
    int io_started;
    volatile int stopping;
    conn *conns;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static struct timespec at(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    return ts;
}

static void reject(dpy_fabric *f, const char *why) {
    pthread_mutex_lock(&f->mu);
    f->rejected++;
    snprintf(f->last_reject, sizeof f->last_reject, "%s", why);
    pthread_mutex_unlock(&f->mu);
}

/* splitmix64 draw in [0, 1); caller holds f->mu */
static double draw(dpy_fabric *f) {
    uint64_t z = (f->rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static int is_local(const dpy_fabric *f, uint32_t node) {
    return node < f->o.nodes && f->node_process[node] == f->o.process;
}

int dpy_fabric_is_local(dpy_fabric *f, uint32_t node) { return is_local(f, node); }

static void count(dpy_traffic *t, int sent, size_t payload) {
    if (sent) {
        t->sent_msgs++;
        t->sent_payload += payload;
        t->sent_header += DPY_WIRE_HEADER;
    } else {
        t->recv_msgs++;
        t->recv_payload += payload;
        t->recv_header += DPY_WIRE_HEADER;
    }
}

/* Hands m to its local receiver's inbox (takes ownership). */
static void deliver(dpy_fabric *f, uint32_t receiver, msg *m) {
    inbox *in = &f->inboxes[receiver];
    pthread_mutex_lock(&in->mu);
    m->next = NULL;
    msg **p = &in->head;
    while (*p)
        p = &(*p)->next;
    *p = m;
    int wanted = in->waiting && m->sender == in->want_sender && m->channel == in->want_channel &&
                 m->round == in->want_round;
    pthread_mutex_unlock(&in->mu);
    if (wanted)
        pthread_cond_signal(&in->cv);   /* after the unlock: the woken node needs the lock */
}

static void wake_all(dpy_fabric *f) {
    for (uint32_t u = 0; u < f->o.nodes; u++) {
        if (!is_local(f, u))
            continue;
        pthread_mutex_lock(&f->inboxes[u].mu);
        pthread_cond_broadcast(&f->inboxes[u].cv);
        pthread_mutex_unlock(&f->inboxes[u].mu);
    }
}

static void mark_dead(dpy_fabric *f, int process) {
    pthread_mutex_lock(&f->mu);
    int was = f->peers[process].alive;
    f->peers[process].alive = 0;
    pthread_mutex_unlock(&f->mu);
    if (was)
        wake_all(f);
}

int dpy_fabric_alive(dpy_fabric *f, int process) {
    if (process == f->o.process)
        return 1;
    pthread_mutex_lock(&f->mu);
    int a = f->peers[process].alive;
    pthread_mutex_unlock(&f->mu);
    return a;
}

static int node_gone(dpy_fabric *f, uint32_t node) {
    pthread_mutex_lock(&f->mu);
    int g = f->gone[node];
    pthread_mutex_unlock(&f->mu);
    return g;
}

void dpy_fabric_node_gone(dpy_fabric *f, uint32_t node) {
    if (!is_local(f, node))
        return;
    pthread_mutex_lock(&f->mu);
    f->gone[node] = 1;
    pthread_mutex_unlock(&f->mu);
    wake_all(f);
}

/* {==== sending ====} */

static int send_all(int fd, const uint8_t *hdr, const void *data, size_t len) {
    struct iovec iov[2] = {{(void *)hdr, DPY_WIRE_HEADER}, {(void *)data, len}};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = len ? 2 : 1;
    while (mh.msg_iovlen > 0) {
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {   /* non-blocking socket: wait */
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                poll(&pfd, 1, 1000);
                continue;
            }
            return -1;
        }
        while (mh.msg_iovlen > 0 && (size_t)n >= mh.msg_iov[0].iov_len) {
            n -= (ssize_t)mh.msg_iov[0].iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + n;
            mh.msg_iov[0].iov_len -= (size_t)n;
        }
    }
    return 0;
}

static payload *new_payload(size_t len, int refs) {
    payload *p = malloc(sizeof *p + (len ? len : 1));
    if (p) {
        atomic_init(&p->refs, refs);
        p->len = len;
    }
    return p;
}

static void payload_release(payload *p) {
    if (p && atomic_fetch_sub(&p->refs, 1) == 1)
        free(p);
}

/* The payload whose bytes data is (its header is written to, even when the bytes are not) */
static payload *payload_of(const void *data) {
    return (payload *)((uintptr_t)data - offsetof(payload, data));
}

void *dpy_fabric_buffer(size_t len) {
    payload *p = new_payload(len, 1);
    return p ? p->data : NULL;
}

static void free_msg(msg *m) {
    payload_release(m->p);
    free(m);
}

static msg *new_msg(uint32_t sender, uint16_t channel, uint32_t round, uint32_t encoding,
                    payload *p) {
    msg *m = malloc(sizeof *m);
    if (m) {
        m->sender = sender;
        m->channel = channel;
        m->round = round;
        m->encoding = encoding;
        m->deliver_at = 0;
        m->p = p;
    }
    return m;
}

int dpy_fabric_send(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                    uint32_t round, const void *data, size_t len, char *err, size_t errlen) {
    return dpy_fabric_send_many(f, sender, &receiver, 1, channel, round, 0, data, len, err, errlen);
}

/* What fault injection decided for one message. */
typedef struct { int copies, corrupt; double delay; } fate;

static fate decide(dpy_fabric *f, size_t len) {
    fate d = {1, 0, 0};
    if (f->o.drop > 0 || f->o.duplicate > 0 || f->o.corrupt > 0 || f->o.delay > 0) {
        pthread_mutex_lock(&f->mu);
        if (draw(f) < f->o.drop)
            d.copies = 0;
        else if (draw(f) < f->o.duplicate)
            d.copies = 2;
        d.corrupt = len > 0 && draw(f) < f->o.corrupt;
        d.delay = f->o.delay > 0 ? f->o.delay * draw(f) : 0;
        pthread_mutex_unlock(&f->mu);
    }
    return d;
}

static int send_remote(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                       uint32_t round, uint32_t encoding, const void *data, size_t len, fate d,
                       char *err, size_t errlen) {
    int p = f->node_process[receiver];
    dpy_header h = {.channel = channel, .run_id = f->o.run_id, .sender = sender,
                    .receiver = receiver, .round = round, .length = (uint32_t)len,
                    .checksum = dpy_wire_checksum(data, len), .encoding = encoding};
    uint8_t hdr[DPY_WIRE_HEADER];
    dpy_wire_encode(hdr, &h);
    if (d.corrupt)
        hdr[32] ^= 0x5a;   /* a wrong checksum: the receiving process rejects the packet */
    peer *pe = &f->peers[p];
    pthread_mutex_lock(&pe->write_mu);
    int rc = 0, why = 0;
    for (int c = 0; c < d.copies && rc == 0; c++) {
        errno = 0;
        rc = pe->fd >= 0 ? send_all(pe->fd, hdr, data, len) : -1;
        why = pe->fd >= 0 ? errno : 0;
    }
    pthread_mutex_unlock(&pe->write_mu);
    if (rc != 0) {
        mark_dead(f, p);
        return dpy_fail(err, errlen, "node %u's process %d is unreachable: %s", receiver, p,
                        why ? strerror(why) : "its connection is closed");
    }
    return 0;
}

/* given: the payload that holds data, shared as it is, or NULL: local receivers share a copy */
static int send_many(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                     uint16_t channel, uint32_t round, uint32_t encoding, const void *data,
                     size_t len, payload *given, char *err, size_t errlen) {
    if (!is_local(f, sender))
        return dpy_fail(err, errlen, "node %u is not hosted by this process", sender);
    if (channel >= DPY_MAX_CHANNELS)
        return dpy_fail(err, errlen, "channel %u out of range (0..%d)", channel, DPY_MAX_CHANNELS - 1);
    if (len > f->o.max_payload)
        return dpy_fail(err, errlen, "payload of %zu bytes exceeds the limit of %u", len, f->o.max_payload);
    for (size_t i = 0; i < n; i++)
        if (receivers[i] >= f->o.nodes)
            return dpy_fail(err, errlen, "no node %u (the run has %u)", receivers[i], f->o.nodes);
    payload *shared = given;   /* one copy of the bytes for every local receiver */
    if (shared)
        atomic_fetch_add(&shared->refs, 1);   /* as a copy's: dropped below */
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint32_t receiver = receivers[i];
        fate d = decide(f, len);
        inbox *own = &f->inboxes[sender];
        pthread_mutex_lock(&own->mu);
        count(&own->traffic[channel], 1, len);
        pthread_mutex_unlock(&own->mu);
        if (!is_local(f, receiver)) {
            if (d.copies > 0)
                rc = send_remote(f, sender, receiver, channel, round, encoding, data, len, d, err,
                                 errlen);
            continue;
        }
        for (int c = 0; c < d.copies; c++) {
            if (d.corrupt) {   /* what a receiver's checksum catches: counted, logged, dropped */
                char why[128];
                snprintf(why, sizeof why, "checksum mismatch from node %u (round %u)", sender, round);
                reject(f, why);
                continue;
            }
            if (!shared) {
                shared = new_payload(len, 1);   /* the sender's own reference, dropped below */
                if (!shared)
                    return dpy_fail(err, errlen, "out of memory queueing %zu bytes", len);
                if (len)
                    memcpy(shared->data, data, len);
            }
            msg *m = new_msg(sender, channel, round, encoding, shared);
            if (!m) {
                rc = dpy_fail(err, errlen, "out of memory queueing a message");
                break;
            }
            atomic_fetch_add(&shared->refs, 1);
            m->deliver_at = d.delay > 0 ? now() + d.delay : 0;
            deliver(f, receiver, m);
        }
    }
    payload_release(shared);
    return rc;
}

int dpy_fabric_send_many(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                         uint16_t channel, uint32_t round, uint32_t encoding, const void *data,
                         size_t len, char *err, size_t errlen) {
    return send_many(f, sender, receivers, n, channel, round, encoding, data, len, NULL, err,
                     errlen);
}

int dpy_fabric_send_buffer(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                           uint16_t channel, uint32_t round, uint32_t encoding,
                           const void *buffer, char *err, size_t errlen) {
    payload *p = payload_of(buffer);
    return send_many(f, sender, receivers, n, channel, round, encoding, buffer, p->len, p, err,
                     errlen);
}

/* {==== receiving ====} */

dpy_recv_status dpy_fabric_recv(dpy_fabric *f, uint32_t receiver, uint32_t sender,
                                uint16_t channel, uint32_t round, double timeout,
                                void **data, size_t *len, uint32_t *encoding) {
    *data = NULL;
    *len = 0;
    inbox *in = &f->inboxes[receiver];
    double deadline = timeout >= 0 ? now() + timeout : -1;
    int sender_process = sender < f->o.nodes ? f->node_process[sender] : -1;
    pthread_mutex_lock(&in->mu);
    for (;;) {
        double wake = deadline;
        double t = now();
        int pending = 0;   /* a delayed message of this round: it arrives even if its sender left */
        for (msg **p = &in->head; *p;) {
            msg *m = *p;
            if (m->channel != channel || m->sender != sender) {
                p = &m->next;
                continue;
            }
            if (m->round < round) {   /* stale: its round is over for this receiver */
                *p = m->next;
                free_msg(m);
                continue;
            }
            if (m->round == round) {
                if (m->deliver_at <= t) {
                    *p = m->next;
                    /* counted when taken, so a round's bytes are that round's messages */
                    count(&in->traffic[channel], 0, m->p->len);
                    pthread_mutex_unlock(&in->mu);
                    *len = m->p->len;
                    *data = m->p->data;   /* no copy: dpy_fabric_release drops the reference */
                    if (encoding)
                        *encoding = m->encoding;
                    free(m);
                    return DPY_RECV_OK;
                }
                if (wake < 0 || m->deliver_at < wake)
                    wake = m->deliver_at;
                pending = 1;
            }
            p = &m->next;
        }
        int dead = sender_process < 0 || !dpy_fabric_alive(f, sender_process) ||
                   node_gone(f, sender);
        if (dead && !pending) {
            pthread_mutex_unlock(&in->mu);
            return DPY_RECV_DEAD;
        }
        if (deadline >= 0 && t >= deadline) {
            pthread_mutex_unlock(&in->mu);
            return DPY_RECV_TIMEOUT;
        }
        in->waiting = 1;
        in->want_sender = sender;
        in->want_channel = channel;
        in->want_round = round;
        if (wake >= 0) {
            struct timespec ts = at(wake);
            pthread_cond_timedwait(&in->cv, &in->mu, &ts);
        } else {
            pthread_cond_wait(&in->cv, &in->mu);
        }
        in->waiting = 0;
    }
}

void dpy_fabric_release(void *data) {
    if (data)
        payload_release(payload_of(data));
}

void dpy_fabric_traffic(dpy_fabric *f, uint32_t node, unsigned channel, dpy_traffic *out) {
    memset(out, 0, sizeof *out);
    if (!is_local(f, node))
        return;
    inbox *in = &f->inboxes[node];
    pthread_mutex_lock(&in->mu);
    for (unsigned c = 0; c < DPY_MAX_CHANNELS; c++) {
        if (channel < DPY_MAX_CHANNELS && c != channel)
            continue;
        const dpy_traffic *t = &in->traffic[c];
        out->sent_msgs += t->sent_msgs;
        out->sent_payload += t->sent_payload;
        out->sent_header += t->sent_header;
        out->recv_msgs += t->recv_msgs;
        out->recv_payload += t->recv_payload;
        out->recv_header += t->recv_header;
    }
    pthread_mutex_unlock(&in->mu);
}

uint64_t dpy_fabric_rejected(dpy_fabric *f, char *last, size_t len) {
    pthread_mutex_lock(&f->mu);
    uint64_t n = f->rejected;
    if (last)
        snprintf(last, len, "%s", f->last_reject);
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* {==== tcp: connections and the I/O thread ====} */

static int parse_address(const char *addr, char *host, size_t hostlen, char *port, size_t portlen) {
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1])
        return -1;
    snprintf(host, hostlen, "%.*s", (int)(colon - addr), addr);
    snprintf(port, portlen, "%s", colon + 1);
    return 0;
}

static int open_socket(const char *addr, int listening, char *err, size_t errlen) {
    char host[256], port[32];
    if (parse_address(addr, host, sizeof host, port, sizeof port) != 0)
        return dpy_fail(err, errlen, "'%s' is not host:port", addr);
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return dpy_fail(err, errlen, "%s: %s", addr, gai_strerror(gai));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(res);
        return dpy_fail(err, errlen, "socket: %s", strerror(errno));
    }
    int one = 1;
    int rc;
    if (listening) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        rc = bind(fd, res->ai_addr, res->ai_addrlen);
        if (rc == 0)
            rc = listen(fd, 128);
    } else {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        rc = connect(fd, res->ai_addr, res->ai_addrlen);
    }
    freeaddrinfo(res);
    if (rc != 0) {
        dpy_fail(err, errlen, "%s %s: %s", listening ? "listen on" : "connect to", addr, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static void add_conn(dpy_fabric *f, int fd, int process) {
    int one = 1, buf = 4 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    c->process = process;
    c->next = f->conns;
    f->conns = c;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void drop_conn(dpy_fabric *f, conn *c, const char *why) {
    epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->process >= 0 && !f->stopping) {
        peer *pe = &f->peers[c->process];
        pthread_mutex_lock(&pe->write_mu);
        pe->fd = -1;
        pthread_mutex_unlock(&pe->write_mu);
        mark_dead(f, c->process);
    } else if (why) {
        reject(f, why);
    }
    close(c->fd);
    for (conn **p = &f->conns; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    free(c->pending);
    free(c);
}

/* A whole packet arrived on c: check it and deliver it. Returns -1 to drop the connection. */
static int on_packet(dpy_fabric *f, conn *c) {
    char why[256];
    dpy_header *h = &c->h;
    payload *pl = c->pending;
    c->pending = NULL;
    if (h->channel == DPY_CHANNEL_HELLO) {
        free(pl);
        int p = (int)h->sender;
        if (c->process >= 0 || p < 0 || p >= f->o.processes || p == f->o.process) {
            snprintf(why, sizeof why, "unexpected hello from process %d", p);
            reject(f, why);
            return -1;
        }
        c->process = p;
        pthread_mutex_lock(&f->peers[p].write_mu);
        f->peers[p].fd = c->fd;
        pthread_mutex_unlock(&f->peers[p].write_mu);
        pthread_mutex_lock(&f->mu);
        f->peers[p].alive = 1;
        f->connected++;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        return 0;
    }
    if (c->process < 0) {
        free(pl);
        reject(f, "data before hello on an unidentified connection");
        return -1;
    }
    if (dpy_wire_checksum(pl->data, h->length) != h->checksum) {
        free(pl);
        snprintf(why, sizeof why, "checksum mismatch from node %u (round %u)", h->sender, h->round);
        reject(f, why);
        return 0;   /* the framing is intact: drop the packet, keep the peer */
    }
    if (!is_local(f, h->receiver) || f->node_process[h->sender] != c->process ||
        h->channel >= DPY_MAX_CHANNELS) {
        free(pl);
        snprintf(why, sizeof why, "misaddressed packet (node %u -> %u, channel %u) from process %d",
                 h->sender, h->receiver, h->channel, c->process);
        reject(f, why);
        return 0;
    }
    msg *m = new_msg(h->sender, h->channel, h->round, h->encoding, pl);
    if (!m) {
        free(pl);
        reject(f, "out of memory for a message");
        return 0;
    }
    deliver(f, h->receiver, m);
    return 0;
}

/* Reads all that is available on c (a non-blocking socket), packet after packet. */
static void on_readable(dpy_fabric *f, conn *c) {
    char why[256];
    for (;;) {
        if (c->hdr_got == DPY_WIRE_HEADER && c->got == c->h.length) {   /* a whole packet */
            c->hdr_got = 0;
            if (on_packet(f, c) != 0) {
                drop_conn(f, c, NULL);
                return;
            }
            continue;
        }
        ssize_t n = c->hdr_got < DPY_WIRE_HEADER
                        ? read(c->fd, c->hdr + c->hdr_got, DPY_WIRE_HEADER - c->hdr_got)
                        : read(c->fd, c->pending->data + c->got, c->h.length - c->got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            drop_conn(f, c, NULL);
            return;
        }
        if (c->hdr_got == DPY_WIRE_HEADER) {
            c->got += (size_t)n;
            continue;
        }
        c->hdr_got += (size_t)n;
        if (c->hdr_got < DPY_WIRE_HEADER)
            continue;
        if (dpy_wire_decode(c->hdr, &c->h, f->o.run_id, f->o.nodes, f->o.max_payload, why,
                            sizeof why) != 0) {
            char msgbuf[300];
            snprintf(msgbuf, sizeof msgbuf, "bad packet header (%s)", why);
            if (c->process >= 0)
                reject(f, msgbuf);
            drop_conn(f, c, msgbuf);   /* framing is lost: the connection goes */
            return;
        }
        c->got = 0;
        c->pending = new_payload(c->h.length, 1);   /* at most max_payload */
        if (!c->pending) {
            drop_conn(f, c, "out of memory for a packet");
            return;
        }
    }
}

static void *io_main(void *arg) {
    dpy_fabric *f = arg;
    struct epoll_event evs[64];
    while (!f->stopping) {
        int n = epoll_wait(f->epfd, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < n && !f->stopping; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == &f->listen_fd) {
                int fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0)
                    add_conn(f, fd, -1);
            } else if (ptr != &f->wake) {
                on_readable(f, ptr);
            }
        }
    }
    return NULL;
}

/* Connects to every lower-indexed process (retrying while it starts), accepts the others, and
** waits until all are identified. */
static int start_tcp(dpy_fabric *f, char *err, size_t errlen) {
    const dpy_fabric_opts *o = &f->o;
    f->listen_fd = open_socket(o->addresses[o->process], 1, err, errlen);
    if (f->listen_fd < 0)
        return -1;
    f->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (f->epfd < 0 || pipe2(f->wake, O_CLOEXEC) != 0)
        return dpy_fail(err, errlen, "epoll: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &f->listen_fd};
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->listen_fd, &ev);
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &f->wake};
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->wake[0], &wev);
    double deadline = now() + o->connect_timeout;
    for (int p = 0; p < o->process; p++) {
        int fd;
        char cerr[256];
        while ((fd = open_socket(o->addresses[p], 0, cerr, sizeof cerr)) < 0) {
            if (now() > deadline)
                return dpy_fail(err, errlen, "process %d at %s did not answer within %.0f s (%s)", p,
                            o->addresses[p], o->connect_timeout, cerr);
            usleep(50000);
        }
        dpy_header h = {.channel = DPY_CHANNEL_HELLO, .run_id = o->run_id,
                        .sender = (uint32_t)o->process};
        uint8_t hdr[DPY_WIRE_HEADER];
        dpy_wire_encode(hdr, &h);
        if (send_all(fd, hdr, NULL, 0) != 0) {
            close(fd);
            return dpy_fail(err, errlen, "hello to process %d: %s", p, strerror(errno));
        }
        f->peers[p].fd = fd;
        f->peers[p].alive = 1;
        f->connected++;
        add_conn(f, fd, p);
    }
    if (pthread_create(&f->io, NULL, io_main, f) != 0)
        return dpy_fail(err, errlen, "cannot start the I/O thread");
    f->io_started = 1;
    pthread_mutex_lock(&f->mu);
    while (f->connected < o->processes - 1 && now() < deadline) {
        struct timespec ts = at(deadline);
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    int ok = f->connected >= o->processes - 1;
    pthread_mutex_unlock(&f->mu);
    if (!ok) {
        char missing[256] = "";
        for (int p = 0; p < o->processes; p++)
            if (p != o->process && !dpy_fabric_alive(f, p))
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %d", p);
        return dpy_fail(err, errlen, "start barrier: processes%s did not connect within %.0f s",
                    missing, o->connect_timeout);
    }
    return 0;
}

/* {==== open and close ====} */

static void init_cond(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

int dpy_fabric_open(dpy_fabric **out, const dpy_fabric_opts *o, char *err, size_t errlen) {
    *out = NULL;
    if (o->nodes == 0 || o->processes < 1 || o->process < 0 || o->process >= o->processes)
        return dpy_fail(err, errlen, "bad fabric layout (%u nodes, process %d of %d)", o->nodes,
                    o->process, o->processes);
    if (o->processes > 1 && !o->addresses)
        return dpy_fail(err, errlen, "%d processes need tcp addresses", o->processes);
    for (uint32_t u = 0; u < o->nodes; u++)
        if (o->node_process[u] < 0 || o->node_process[u] >= o->processes)
            return dpy_fail(err, errlen, "node %u is mapped to process %d of %d", u,
                        o->node_process[u], o->processes);
    dpy_fabric *f = calloc(1, sizeof *f);
    if (!f)
        return dpy_fail(err, errlen, "out of memory");
    f->o = *o;
    f->listen_fd = f->epfd = f->wake[0] = f->wake[1] = -1;
    f->rng = o->fault_seed;
    f->node_process = malloc(o->nodes * sizeof *f->node_process);
    f->inboxes = calloc(o->nodes, sizeof *f->inboxes);
    f->peers = calloc((size_t)o->processes, sizeof *f->peers);
    f->gone = calloc(o->nodes, 1);
    if (!f->node_process || !f->inboxes || !f->peers || !f->gone) {
        free(f->gone);
        free(f->node_process);
        free(f->inboxes);
        free(f->peers);
        free(f);
        return dpy_fail(err, errlen, "out of memory");
    }
    memcpy(f->node_process, o->node_process, o->nodes * sizeof *f->node_process);
    f->o.node_process = f->node_process;
    pthread_mutex_init(&f->mu, NULL);
    init_cond(&f->cv);
    for (uint32_t u = 0; u < o->nodes; u++) {
        pthread_mutex_init(&f->inboxes[u].mu, NULL);
        init_cond(&f->inboxes[u].cv);
    }
    for (int p = 0; p < o->processes; p++) {
        f->peers[p].fd = -1;
        f->peers[p].alive = p == o->process;
        pthread_mutex_init(&f->peers[p].write_mu, NULL);
    }
    if (o->processes > 1 && start_tcp(f, err, errlen) != 0) {
        dpy_fabric_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void dpy_fabric_close(dpy_fabric *f) {
    if (!f)
        return;
    f->stopping = 1;
    if (f->io_started) {
        ssize_t w = write(f->wake[1], "x", 1);
        (void)w;
        pthread_join(f->io, NULL);
    }
    while (f->conns) {
        conn *c = f->conns;
        f->conns = c->next;
        close(c->fd);
        free(c->pending);
        free(c);
    }
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    if (f->epfd >= 0)
        close(f->epfd);
    if (f->wake[0] >= 0) {
        close(f->wake[0]);
        close(f->wake[1]);
    }
    for (uint32_t u = 0; u < f->o.nodes; u++) {
        for (msg *m = f->inboxes[u].head; m;) {
            msg *next = m->next;
            free_msg(m);
            m = next;
        }
        pthread_mutex_destroy(&f->inboxes[u].mu);
        pthread_cond_destroy(&f->inboxes[u].cv);
    }
    free(f->inboxes);
    free(f->peers);
    free(f->gone);
    free(f->node_process);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}
