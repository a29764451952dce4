/* tcp.c: the path between processes. One connection per pair of processes (the higher index
** connects, its first packet a HELLO naming it); an I/O thread per process reads every connection
** (epoll, non-blocking), frames packets (wire.h) straight into their payloads, and checks each one
** before it reaches an inbox. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dpy_core.h"
#include "fabric_internal.h"

/* {==== writing ====} */

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

int dpy_tcp_send(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                 uint32_t round, uint32_t encoding, const void *data, size_t len, fate d,
                 char *err, size_t errlen) {
    int p = f->node_process[receiver];
    dpy_header h = {.channel = channel, .run_id = f->o.run_id, .sender = sender,
                    .receiver = receiver, .round = round, .length = (uint32_t)len,
                    .checksum = dpy_wire_checksum(data, len), .encoding = encoding};
    uint8_t hdr[DPY_WIRE_HEADER];
    dpy_wire_encode(hdr, &h);
    if (d.corrupt)
        dpy_faults_corrupt_header(hdr);
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
        dpy_fabric_process_gone(f, p);
        return dpy_fail(err, errlen, "node %u's process %d is unreachable: %s", receiver, p,
                        why ? strerror(why) : "its connection is closed");
    }
    return 0;
}

void dpy_tcp_notice(dpy_fabric *f, int p, uint32_t node, const char *why) {
    size_t len = strlen(why);
    dpy_header h = {.channel = DPY_CHANNEL_NOTICE, .run_id = f->o.run_id, .sender = node,
                    .receiver = node, .length = (uint32_t)len,
                    .checksum = dpy_wire_checksum(why, len)};
    uint8_t hdr[DPY_WIRE_HEADER];
    dpy_wire_encode(hdr, &h);
    peer *pe = &f->peers[p];
    pthread_mutex_lock(&pe->write_mu);
    int rc = pe->fd >= 0 ? send_all(pe->fd, hdr, why, len) : -1;
    pthread_mutex_unlock(&pe->write_mu);
    if (rc != 0)
        dpy_fabric_process_gone(f, p);
}

/* {==== connections ====} */

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
        dpy_fabric_process_gone(f, c->process);
    } else if (why) {
        dpy_rejects_add(&f->rejects, why);
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

/* {==== reading ====} */

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
            dpy_rejects_add(&f->rejects, why);
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
        dpy_rejects_add(&f->rejects, "data before hello on an unidentified connection");
        return -1;
    }
    if (h->channel == DPY_CHANNEL_NOTICE && f->node_process[h->sender] == c->process &&
        dpy_wire_checksum(pl->data, h->length) == h->checksum) {
        dpy_fabric_mark_gone(f, h->sender, (const char *)pl->data, h->length);
        free(pl);
        return 0;
    }
    if (dpy_wire_checksum(pl->data, h->length) != h->checksum) {
        free(pl);
        snprintf(why, sizeof why, "checksum mismatch from node %u (round %u)", h->sender, h->round);
        /* the framing is intact: drop the packet, keep the peer, tell its receiver at once */
        if (f->node_process[h->sender] == c->process)
            dpy_fabric_reject(f, h->sender, h->receiver, h->channel, h->round, why);
        else
            dpy_rejects_add(&f->rejects, why);
        return 0;
    }
    if (!dpy_fabric_local(f, h->receiver) || f->node_process[h->sender] != c->process ||
        h->channel >= DPY_MAX_CHANNELS) {
        free(pl);
        snprintf(why, sizeof why, "misaddressed packet (node %u -> %u, channel %u) from process %d",
                 h->sender, h->receiver, h->channel, c->process);
        dpy_rejects_add(&f->rejects, why);
        return 0;
    }
    msg *m = dpy_msg_new(h->sender, h->channel, h->round, h->encoding, pl);
    if (!m) {
        free(pl);
        dpy_rejects_add(&f->rejects, "out of memory for a message");
        return 0;
    }
    dpy_inbox_put(&f->inboxes[h->receiver], m);
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
                dpy_rejects_add(&f->rejects, msgbuf);
            drop_conn(f, c, msgbuf);   /* framing is lost: the connection goes */
            return;
        }
        c->got = 0;
        c->pending = dpy_payload_new(c->h.length, 1);   /* at most max_payload */
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

/* {==== start and stop ====} */

int dpy_tcp_start(dpy_fabric *f, char *err, size_t errlen) {
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
    double deadline = dpy_fabric_now() + o->connect_timeout;
    for (int p = 0; p < o->process; p++) {
        int fd;
        char cerr[256];
        while ((fd = open_socket(o->addresses[p], 0, cerr, sizeof cerr)) < 0) {
            if (dpy_fabric_now() > deadline)
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
    while (f->connected < o->processes - 1 && dpy_fabric_now() < deadline) {
        struct timespec ts = dpy_fabric_at(deadline);
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

void dpy_tcp_stop(dpy_fabric *f) {
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
}
