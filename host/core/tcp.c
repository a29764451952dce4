/* tcp.c: the path between processes: tcp, and a Unix socket between processes of one machine
** (below). One connection per pair of processes (the higher index
** connects and proves it holds the run key: HELLO, CHALLENGE, PROOF; auth.h); an I/O thread per
** process reads every connection (epoll, non-blocking), frames packets (wire.h) straight into
** their payloads, and checks each one (header, tag) before it reaches an inbox.
** Once a process has answered the connector's hello by tcp, its Unix socket listens if it is on
** this machine (it listens before it answers anyone): the connector then makes the connection
** there instead, with a handshake of its own, and leaves the tcp one before its proof. On a Unix
** socket packets carry no tag (auth.h); anywhere else, or with tcp_only, the tcp one stays.
** A connection that has not completed its handshake is held at most hello_timeout seconds, and
** at most max_pending of them at once (past it, the oldest goes): file descriptors stay bounded,
** and nothing is allocated for a packet larger than a handshake's before the handshake. */
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
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "bytes.h"
#include "dpy_core.h"
#include "fabric_internal.h"

/* {==== writing ====} */

/* Writes iov whole to fd; pass_fd (>= 0) goes with its first byte (SCM_RIGHTS). */
static int send_msg(int fd, struct iovec *iov, int iovcnt, int pass_fd) {
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)iovcnt;
    if (pass_fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
    }
    while (mh.msg_iovlen > 0) {
        if (mh.msg_iov[0].iov_len == 0) {
            mh.msg_iov++;
            mh.msg_iovlen--;
            continue;
        }
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
        mh.msg_control = NULL;   /* sent with the first byte */
        mh.msg_controllen = 0;
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

static int send_all(int fd, struct iovec *iov, int iovcnt) { return send_msg(fd, iov, iovcnt, -1); }

/* A handshake packet's flags: the encrypt setting, and whether it goes on a Unix socket. */
static uint8_t handshake_flags(const dpy_fabric *f, int unix_socket) {
    return (uint8_t)((f->o.encrypt ? DPY_FLAG_ENCRYPTED : 0) | (unix_socket ? DPY_FLAG_UNIX : 0));
}

/* A handshake packet (no tag) from process `from` to process `to`. */
static int send_handshake(dpy_fabric *f, int fd, uint16_t channel, int from, int to, uint8_t flags,
                          const void *data) {
    dpy_header h = {.channel = channel, .run_id = f->o.run_id, .sender = (uint32_t)from,
                    .receiver = (uint32_t)to, .length = dpy_wire_handshake_length(channel),
                    .flags = flags};
    uint8_t hdr[DPY_WIRE_HEADER];
    dpy_wire_encode(hdr, &h);
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)data, h.length}};
    return send_all(fd, iov, 2);
}

/* A packet larger than this is sealed and written a piece at a time, so that the receiver checks
** one piece while the next travels (a multiple of 64: whole keystream blocks). */
#define PIECE (256 << 10)

/* Writes one sealed packet to fd: header, payload (enciphered into scratch with encrypt), trailer.
** The peer's stream (write_mu held) computes the tag; -1 with errno ENOMEM if it cannot. */
static int write_sealed(peer *pe, int enc, const uint8_t hdr[DPY_WIRE_HEADER], const uint8_t *data,
                        size_t len, uint8_t *scratch) {
    uint8_t tag[DPY_TRAILER_BYTES];
    dpy_auth_stream *s = &pe->ts;
    if (dpy_auth_begin(&pe->tx, enc, hdr, len, s) != 0) {
        errno = ENOMEM;
        return -1;
    }
    if (len <= PIECE) {   /* one write */
        if (dpy_auth_seal_piece(s, data, scratch, len) != 0 || dpy_auth_seal_end(&pe->tx, s, tag) != 0) {
            errno = EIO;
            return -1;
        }
        struct iovec iov[3] = {{(void *)hdr, DPY_WIRE_HEADER}, {enc ? scratch : (void *)data, len},
                               {tag, sizeof tag}};
        return send_all(pe->fd, iov, 3);
    }
    for (size_t off = 0; off < len; off += PIECE) {
        size_t n = len - off < PIECE ? len - off : PIECE;
        const uint8_t *piece = data + off;
        if (enc) {
            if (dpy_auth_seal_piece(s, piece, scratch, n) != 0) {
                errno = EIO;
                return -1;
            }
            piece = scratch;
        }
        struct iovec iov[2] = {{(void *)hdr, off == 0 ? DPY_WIRE_HEADER : 0}, {(void *)piece, n}};
        if (send_all(pe->fd, iov, 2) != 0)
            return -1;
        if (!enc)   /* after the write: the bytes are in cache */
            dpy_auth_seal_piece(s, piece, NULL, n);
    }
    if (dpy_auth_seal_end(&pe->tx, s, tag) != 0) {   /* the tag is random: the receiver refuses it */
        errno = EIO;
        return -1;
    }
    struct iovec iov[1] = {{tag, sizeof tag}};
    return send_all(pe->fd, iov, 1);
}

/* {==== the shared ring, on a Unix socket (ring.h) ====} */

/* Makes pe's shared ring and passes it (write_mu held): 1, or 0 when none can be made (the
** packets to pe go on the socket alone, for the run), -1 when the socket fails. The ring packet
** goes in a sendmsg of its own, its descriptor with its first byte (read_unix). */
static int offer_ring(dpy_fabric *f, peer *pe) {
    int fd = dpy_ring_create(&pe->ring, dpy_ring_bytes(f->o.max_payload));
    if (fd < 0) {
        pe->ring_off = 1;
        return 0;
    }
    dpy_header h = {.channel = DPY_CHANNEL_RING, .run_id = f->o.run_id, .length = DPY_RING_OFFER};
    uint8_t pkt[DPY_WIRE_HEADER + DPY_RING_OFFER];
    dpy_wire_encode(pkt, &h);
    put64(pkt + DPY_WIRE_HEADER, pe->ring.size);
    struct iovec iov[1] = {{pkt, sizeof pkt}};
    int rc = send_msg(pe->fd, iov, 1, fd), e = errno;
    close(fd);   /* the mapping holds the memory, and the peer its own descriptor */
    errno = e;
    return rc == 0 ? 1 : -1;
}

/* Writes header hdr and its payload through pe's ring, a piece at a time (wire.h): each piece is
** copied in, then its word written, so that the reader copies one out while the next goes in. A
** piece the ring has no room for (the reader is behind) goes on the socket. */
static int send_ringed(peer *pe, const uint8_t hdr[DPY_WIRE_HEADER], const uint8_t *data, size_t len) {
    for (size_t off = 0; off < len;) {
        size_t want = len - off < DPY_RING_PIECE ? len - off : DPY_RING_PIECE;
        size_t n = dpy_ring_room(&pe->ring, want);
        /* not a sliver of what the reader freed; but at the ring's end, whatever is left there,
        ** or the next piece would start there again */
        int through = n == want || n >= DPY_RING_PIECE / 4 || (n > 0 && n == dpy_ring_to_end(&pe->ring));
        uint8_t word[DPY_RING_WORD];
        put32(word, (uint32_t)(through ? n : want) | (through ? 0 : DPY_RING_INLINE));
        put32(word + 4, (uint32_t)pe->ring.pos);   /* where the reader must be: a check of step */
        if (through) {
            dpy_ring_put(&pe->ring, data + off, n);
            atomic_store_explicit(&pe->ring_bytes, pe->ring.pos, memory_order_relaxed);
        } else {
            n = want;
        }
        struct iovec iov[3] = {{(void *)hdr, off == 0 ? DPY_WIRE_HEADER : 0}, {word, sizeof word},
                               {(void *)(data + off), through ? 0 : n}};
        if (send_all(pe->fd, iov, 3) != 0)
            return -1;
        off += n;
    }
    return 0;
}

int dpy_tcp_write_raw(dpy_fabric *f, int p, const void *bytes, size_t len, int pass_fd) {
    peer *pe = &f->peers[p];
    pthread_mutex_lock(&pe->write_mu);
    struct iovec iov[1] = {{(void *)bytes, len}};
    int rc = pe->fd < 0 ? -1 : send_msg(pe->fd, iov, 1, pass_fd);
    pthread_mutex_unlock(&pe->write_mu);
    return rc;
}

/* {==== sending ====} */

/* Seals header h and its payload under process p's connection key (and encrypts it, with
** encrypt), and writes it d.copies times, each with its own sequence number; on a Unix socket,
** header and payload alone, through the shared ring from DPY_RING_MIN_PACKET bytes. */
static int send_packet(dpy_fabric *f, int p, dpy_header *h, const void *data, size_t len, fate d,
                       char *err, size_t errlen) {
    peer *pe = &f->peers[p];
    pthread_mutex_lock(&pe->write_mu);
    int untagged = pe->untagged, enc = f->o.encrypt && !untagged;
    int ringed = untagged && pe->fd >= 0 && len >= DPY_RING_MIN_PACKET && !f->o.no_ring && !pe->ring_off;
    if (ringed && !pe->ring.map)
        ringed = offer_ring(f, pe);
    h->checksum = 0;   /* the tag covers the payload (wire.h) */
    h->flags = (uint8_t)((enc ? DPY_FLAG_ENCRYPTED : 0) | (ringed > 0 ? DPY_FLAG_RING : 0));
    uint8_t hdr[DPY_WIRE_HEADER];
    dpy_wire_encode(hdr, h);
    if (d.corrupt)
        dpy_faults_corrupt_header(hdr);
    size_t scratch_len = len < PIECE ? len : PIECE;
    uint8_t *scratch = enc && len ? malloc(scratch_len) : NULL;   /* the ciphertext, a piece at a time */
    if (enc && len && !scratch) {
        pthread_mutex_unlock(&pe->write_mu);
        return dpy_fail(err, errlen, "out of memory encrypting %zu bytes", len);
    }
    int rc = ringed < 0 ? -1 : 0, why = ringed < 0 ? errno : 0;
    for (int c = 0; c < d.copies && rc == 0; c++) {
        struct iovec plain[2] = {{hdr, sizeof hdr}, {(void *)data, len}};
        errno = 0;
        rc = pe->fd < 0  ? -1
             : ringed    ? send_ringed(pe, hdr, data, len)
             : untagged  ? send_all(pe->fd, plain, 2)
                         : write_sealed(pe, enc, hdr, data, len, scratch);
        why = pe->fd >= 0 ? errno : 0;
    }
    pthread_mutex_unlock(&pe->write_mu);
    free(scratch);
    if (rc != 0) {
        dpy_fabric_process_gone(f, p);
        return dpy_fail(err, errlen, "node %u's process %d is unreachable: %s", h->receiver, p,
                        why ? strerror(why) : "its connection is closed");
    }
    return 0;
}

int dpy_tcp_send(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                 uint32_t round, uint32_t encoding, const void *data, size_t len, fate d,
                 char *err, size_t errlen) {
    dpy_header h = {.channel = channel, .run_id = f->o.run_id, .sender = sender,
                    .receiver = receiver, .round = round, .length = (uint32_t)len, .encoding = encoding};
    return send_packet(f, f->node_process[receiver], &h, data, len, d, err, errlen);
}

/* Tells process p that node is gone and why ("": it finished), authenticated like any packet. */
void dpy_tcp_notice(dpy_fabric *f, int p, uint32_t node, const char *why) {
    dpy_header h = {.channel = DPY_CHANNEL_NOTICE, .run_id = f->o.run_id, .sender = node,
                    .receiver = node, .length = (uint32_t)strlen(why)};
    char err[256];
    fate once = {.copies = 1};
    send_packet(f, p, &h, why, h.length, once, err, sizeof err);   /* a dead p is marked gone inside */
}

const char *dpy_fabric_link(dpy_fabric *f, int p) {
    if (p < 0 || p >= f->o.processes || p == f->o.process)
        return NULL;
    pthread_mutex_lock(&f->mu);   /* never write_mu, which a send holds as long as it takes */
    const char *link = f->peers[p].link;
    pthread_mutex_unlock(&f->mu);
    return link;
}

uint64_t dpy_fabric_shared_bytes(dpy_fabric *f, int p) {
    if (p < 0 || p >= f->o.processes || p == f->o.process)
        return 0;
    return atomic_load(&f->peers[p].ring_bytes);
}

/* {==== connections ====} */

/* Process p is reached on fd (a Unix socket: untagged) from now on: the writers' side. */
static void peer_connected(dpy_fabric *f, int p, int fd, int unix_socket) {
    peer *pe = &f->peers[p];
    pthread_mutex_lock(&pe->write_mu);
    pe->fd = fd;
    pe->untagged = unix_socket;
    pthread_mutex_unlock(&pe->write_mu);
    pthread_mutex_lock(&f->mu);
    pe->link = unix_socket ? "unix" : "tcp";
    pe->alive = 1;
    f->connected++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static int parse_address(const char *addr, char *host, size_t hostlen, char *port, size_t portlen) {
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1])
        return -1;
    snprintf(host, hostlen, "%.*s", (int)(colon - addr), addr);
    snprintf(port, portlen, "%s", colon + 1);
    return 0;
}

/* A signal came (the host's flag): the process stops waiting for its peers. */
static int stopped(const dpy_fabric *f) { return f->o.stop && atomic_load(f->o.stop); }

/* The wait for peers goes in slices this long, so that a signal ends it within one. */
#define STOP_SLICE_MS 100

/* Waits for events on fd until deadline, in slices so that a signal ends the wait: 0 when fd is
** ready, else -1 (too late or stopped: ETIMEDOUT; or poll's errno). */
static int wait_fd(const dpy_fabric *f, int fd, short events, double deadline) {
    for (;;) {
        int ms = (int)((deadline - dpy_fabric_now()) * 1000);
        if (ms <= 0 || stopped(f)) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pfd = {.fd = fd, .events = events};
        int ready = poll(&pfd, 1, ms < STOP_SLICE_MS ? ms : STOP_SLICE_MS);
        if (ready > 0)
            return 0;
        if (ready < 0 && errno != EINTR)
            return -1;
    }
}

/* Waits until fd's connect ends (wait_fd): 0 if it connected, else -1 with errno set. */
static int connected(const dpy_fabric *f, int fd, double deadline) {
    if (wait_fd(f, fd, POLLOUT, deadline) != 0)
        return -1;
    int e = 0;
    socklen_t len = sizeof e;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
    errno = e;
    return e ? -1 : 0;
}

/* A socket listening on addr, or (listening 0) connected to it by deadline; -1 with err. */
static int open_socket(const dpy_fabric *f, const char *addr, int listening, double deadline,
                       char *err, size_t errlen) {
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
        /* without blocking: a host that drops the SYN would hold connect() for minutes, past
        ** the deadline and a signal; the handshake then reads it blocking, with poll */
        int flags = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        rc = connect(fd, res->ai_addr, res->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS)
            rc = connected(f, fd, deadline);
        int e = errno;
        fcntl(fd, F_SETFL, flags);
        errno = e;
    }
    freeaddrinfo(res);
    if (rc != 0) {
        dpy_fail(err, errlen, "%s %s: %s", listening ? "listen on" : "connect to", addr, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Process p's Unix socket address (abstract: no file), named from the key (auth.h); its length. */
static socklen_t unix_address(const dpy_fabric *f, int p, struct sockaddr_un *sa) {
    char name[DPY_UNIX_NAME_BYTES];
    dpy_auth_unix_name(f->key, f->o.run_id, p, f->o.addresses[p], name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, name, DPY_UNIX_NAME_BYTES - 1);   /* sun_path[0] = 0: abstract */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + DPY_UNIX_NAME_BYTES);
}

/* This process's Unix socket, listening; -1 when tcp_only or when it cannot be had (its peers
** then reach it by tcp alone, and the log says why). */
static int listen_unix(const dpy_fabric *f) {
    if (f->o.tcp_only)
        return -1;
    struct sockaddr_un sa;
    socklen_t len = unix_address(f, f->o.process, &sa);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 128) != 0) {
        fprintf(stderr, "dpy-lua: process %d has no Unix socket (%s): the processes of this machine "
                "reach it by tcp\n", f->o.process, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    return fd;
}

/* A connection to process p's Unix socket, blocking; -1 when there is none here (it is on
** another machine, it is tcp_only, or a relay stands between). A full backlog waits up to 1 s. */
static int connect_unix(const dpy_fabric *f, int p) {
    if (f->o.tcp_only)
        return -1;
    struct sockaddr_un sa;
    socklen_t len = unix_address(f, p, &sa);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval wait = {.tv_sec = 1};
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait) != 0 ||
                    connect(fd, (struct sockaddr *)&sa, len) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The id of the process at the other end of Unix socket fd (SO_PEERCRED: the connecting one's,
** or the one that listens); 0 when unknown. */
static uint32_t peer_pid(int fd) {
    struct ucred cr;
    socklen_t len = sizeof cr;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 ? (uint32_t)cr.pid : 0;
}

/* The launcher's socket for this process, listening since it chose the port: no other program
** can take the port before this process starts (two runs started together once drew the same
** ports, and one failed to listen). It must listen on the port its peers will dial. */
static int adopt_listener(int fd, const char *addr, char *err, size_t errlen) {
    fcntl(fd, F_SETFD, FD_CLOEXEC);   /* this process's own children do not keep it */
    int on = 0;
    socklen_t len = sizeof on;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) != 0 || !on)
        return dpy_fail(err, errlen, "listen on %s: descriptor %d is not a listening socket", addr, fd);
    char host[256], want[32];
    if (parse_address(addr, host, sizeof host, want, sizeof want) != 0)
        return dpy_fail(err, errlen, "'%s' is not host:port", addr);
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    int port = -1;
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) == 0)
        port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                              : ((struct sockaddr_in *)&sa)->sin_port);
    if (port != atoi(want))
        return dpy_fail(err, errlen, "listen on %s: the socket handed down listens on port %d", addr, port);
    return fd;
}

static conn *add_conn(dpy_fabric *f, int fd, int process, int unix_socket) {
    int one = 1, buf = 4 << 20;
    if (!unix_socket)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->fd = fd;
    c->ring_fd = -1;
    c->process = process;
    c->unix_socket = c->fr.untagged = unix_socket;
    c->state = process >= 0 ? CONN_READY : CONN_HELLO;
    c->since = dpy_fabric_now();
    c->next = f->conns;
    f->conns = c;
    if (c->state != CONN_READY)
        f->pending_conns++;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &ev);
    return c;
}

/* Who c is, for the log: its process once known, else its address. */
static const char *conn_peer(conn *c, char *buf, size_t len) {
    if (c->state == CONN_READY)
        snprintf(buf, len, "process %d", c->process);
    else
        snprintf(buf, len, "%s", c->from[0] ? c->from : "an unknown address");
    return buf;
}

static void reject(dpy_fabric *f, conn *c, dpy_reject_kind kind, const char *why) {
    char who[80];
    dpy_rejects_add(&f->rejects, kind, conn_peer(c, who, sizeof who), why);
}

static void free_conn(conn *c) {
    close(c->fd);
    if (c->ring_fd >= 0)
        close(c->ring_fd);
    dpy_frame_clear(&c->fr);   /* and the peer's ring */
    free(c);
}

/* Closes c; a ready connection's process is gone (never one still in its handshake). */
static void drop_conn(dpy_fabric *f, conn *c) {
    epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->state == CONN_READY && !f->stopping) {
        peer *pe = &f->peers[c->process];
        pthread_mutex_lock(&pe->write_mu);
        pe->fd = -1;
        dpy_ring_free(&pe->ring);   /* nothing more goes to it */
        pe->ring_off = 1;
        pthread_mutex_unlock(&pe->write_mu);
        dpy_fabric_process_gone(f, c->process);
    }
    if (c->state != CONN_READY)
        f->pending_conns--;
    for (conn **p = &f->conns; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    free_conn(c);
}

static double hello_timeout(const dpy_fabric *f) {
    return f->o.hello_timeout > 0 ? f->o.hello_timeout : 10;
}

/* Closes the connections whose handshake is overdue. */
static void sweep(dpy_fabric *f) {
    double now = dpy_fabric_now();
    conn *c = f->conns;
    while (c) {
        conn *next = c->next;
        if (c->state != CONN_READY && now - c->since > hello_timeout(f)) {
            char why[128];
            snprintf(why, sizeof why, "no handshake within %.0f s", hello_timeout(f));
            reject(f, c, DPY_REJECT_IDLE, why);
            drop_conn(f, c);
        }
        c = next;
    }
}

static void on_accept(dpy_fabric *f, int listen_fd) {
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    int fd = accept4(listen_fd, (struct sockaddr *)&sa, &salen, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            usleep(10000);   /* the listening socket stays readable: do not spin */
        return;
    }
    int cap = f->o.max_pending > 0 ? f->o.max_pending : 64;
    if (f->pending_conns >= cap) {   /* the oldest waiting one goes: list order is newest first */
        conn *oldest = NULL;
        for (conn *c = f->conns; c; c = c->next)
            if (c->state != CONN_READY)
                oldest = c;
        if (oldest) {
            char why[128];
            snprintf(why, sizeof why, "more than %d connections waiting for their handshake", cap);
            reject(f, oldest, DPY_REJECT_CAP, why);
            drop_conn(f, oldest);
        }
    }
    conn *c = add_conn(f, fd, -1, listen_fd == f->unix_fd);
    if (!c)
        return;
    if (c->unix_socket) {
        c->peer_pid = peer_pid(fd);
        snprintf(c->from, sizeof c->from, "a Unix socket");
        return;
    }
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, host, sizeof host);
    else if (sa.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, host, sizeof host);
    snprintf(c->from, sizeof c->from, "%s", host);   /* no port: one log line per machine */
}

/* {==== reading ====} */

static int already_connected(dpy_fabric *f, int p) {
    pthread_mutex_lock(&f->mu);
    int a = f->peers[p].alive || f->peers[p].fd >= 0;
    pthread_mutex_unlock(&f->mu);
    return a;
}

/* A handshake packet on c (the accepting end). Returns -1 to drop the connection. */
static int on_handshake(dpy_fabric *f, conn *c, const uint8_t *data) {
    char why[256];
    dpy_header *h = &c->fr.h;
    int p = (int)h->sender;
    uint8_t want[DPY_PROOF_BYTES];
    if (c->state == CONN_READY) {   /* the process is connected: the packet goes, not it */
        snprintf(why, sizeof why, "a handshake packet on process %d's open connection", c->process);
        reject(f, c, DPY_REJECT_HELLO, why);
        return 0;
    }
    int expect = c->state == CONN_HELLO ? DPY_CHANNEL_HELLO : DPY_CHANNEL_PROOF;
    if (h->channel != expect || (c->state == CONN_PROOF && p != c->process)) {
        snprintf(why, sizeof why, "handshake out of order (channel 0x%04x)", h->channel);
        reject(f, c, DPY_REJECT_HELLO, why);
        return -1;
    }
    if (p <= f->o.process || p >= f->o.processes || h->receiver != (uint32_t)f->o.process) {
        snprintf(why, sizeof why, "unexpected hello from process %d to process %u", p, h->receiver);
        reject(f, c, DPY_REJECT_HELLO, why);
        return -1;
    }
    if ((h->flags & DPY_FLAG_ENCRYPTED) != (f->o.encrypt ? DPY_FLAG_ENCRYPTED : 0)) {
        snprintf(why, sizeof why, "process %d has encrypt = %s, this process %s", p,
                 f->o.encrypt ? "false" : "true", f->o.encrypt ? "true" : "false");
        reject(f, c, DPY_REJECT_HELLO, why);
        return -1;
    }
    if (!(h->flags & DPY_FLAG_UNIX) != !c->unix_socket) {
        snprintf(why, sizeof why, "process %d's hello is marked for %s", p,
                 c->unix_socket ? "tcp but came on a Unix socket" : "a Unix socket but came by tcp");
        reject(f, c, DPY_REJECT_HELLO, why);
        return -1;
    }
    if (already_connected(f, p)) {   /* refused: the connected one stays, and stays alive */
        snprintf(why, sizeof why, "a second hello for process %d, which is connected: refused", p);
        reject(f, c, DPY_REJECT_DUPLICATE, why);
        return -1;
    }
    if (c->state == CONN_HELLO) {
        c->process = p;
        c->hs = (dpy_handshake){.run_id = f->o.run_id, .connector = (uint32_t)p,
                                .acceptor = (uint32_t)f->o.process, .flags = h->flags};
        if (c->unix_socket)   /* as this end sees them (hello) */
            c->hs.pid_c = c->peer_pid, c->hs.pid_a = (uint32_t)getpid();
        memcpy(c->hs.nonce_c, data, DPY_NONCE_BYTES);
        dpy_auth_random(c->hs.nonce_a, DPY_NONCE_BYTES);
        uint8_t reply[DPY_NONCE_BYTES + DPY_PROOF_BYTES];
        memcpy(reply, c->hs.nonce_a, DPY_NONCE_BYTES);
        dpy_auth_proof(f->key, &c->hs, 'A', reply + DPY_NONCE_BYTES);
        c->state = CONN_PROOF;
        return send_handshake(f, c->fd, DPY_CHANNEL_CHALLENGE, f->o.process, p, h->flags, reply);
    }
    dpy_auth_proof(f->key, &c->hs, 'C', want);
    if (!dpy_auth_proof_ok(want, data)) {
        snprintf(why, sizeof why, "process %d's hello failed the key check (not this run's key)", p);
        reject(f, c, DPY_REJECT_HELLO, why);
        return -1;
    }
    peer *pe = &f->peers[p];
    pthread_mutex_lock(&pe->write_mu);
    dpy_auth_session(f->key, &c->hs, &c->rx, &pe->tx);
    pthread_mutex_unlock(&pe->write_mu);
    c->state = CONN_READY;
    f->pending_conns--;
    peer_connected(f, p, c->fd, c->unix_socket);
    return 0;
}

/* The peer's shared ring came on c (its memfd with the packet's first bytes): mapped, or the
** connection goes (the packets that use it could not be read). */
static int on_ring(dpy_fabric *f, conn *c, payload *pl) {
    char why[128];
    int fd = c->ring_fd;
    c->ring_fd = -1;
    if (!c->unix_socket || c->fr.ring.map || fd < 0 || pl->len != DPY_RING_OFFER) {
        if (fd >= 0)
            close(fd);
        reject(f, c, DPY_REJECT_HEADER,
               !c->unix_socket ? "a shared ring offered on tcp"
               : c->fr.ring.map ? "a second shared ring"
               : c->fd_cut ? "a shared ring whose file descriptor this process could not take (out of descriptors?)"
               : fd < 0 ? "a shared ring without its file descriptor"
                        : "a shared ring packet of the wrong length");
        return -1;
    }
    if (dpy_ring_adopt(&c->fr.ring, fd, get64(pl->data), why, sizeof why) != 0) {
        reject(f, c, DPY_REJECT_HEADER, why);
        return -1;
    }
    return 0;
}

/* A whole packet arrived on c: check it and deliver it. Returns -1 to drop the connection. */
static int on_packet(dpy_fabric *f, conn *c) {
    char why[256];
    dpy_header *h = &c->fr.h;
    payload *pl = dpy_frame_take(&c->fr);
    if (c->ring_fd >= 0 && h->channel != DPY_CHANNEL_RING) {   /* a descriptor no packet asks for */
        close(c->ring_fd);
        c->ring_fd = -1;
    }
    if (dpy_wire_handshake(h->channel)) {
        int rc = on_handshake(f, c, pl->data);
        free(pl);
        return rc;
    }
    int auth = c->fr.untagged ? DPY_AUTH_OK : dpy_auth_open_end(&c->rx, &c->fr.rs, pl->data, c->fr.tag);
    if (auth == DPY_AUTH_MEMORY) {
        free(pl);
        reject(f, c, DPY_REJECT_MEMORY, "out of memory checking a packet's tag");
        return 0;
    }
    if (auth != DPY_AUTH_OK) {
        free(pl);
        snprintf(why, sizeof why, "a %s packet (node %u -> %u, round %u)",
                 auth == DPY_AUTH_REPLAYED ? "replayed" : "forged or altered", h->sender,
                 h->receiver, h->round);
        reject(f, c, DPY_REJECT_AUTH, why);
        return 0;   /* never mixed in; the framing is intact */
    }
    if (h->checksum != 0) {   /* a damaged packet its sender's tag covers (injected faults) */
        free(pl);
        snprintf(why, sizeof why, "checksum mismatch from node %u (round %u)", h->sender, h->round);
        reject(f, c, DPY_REJECT_CHECKSUM, why);
        /* the framing is intact: drop the packet, keep the peer, tell its receiver at once */
        if (f->node_process[h->sender] == c->process)
            dpy_fabric_reject(f, h->sender, h->receiver, h->channel, h->round, why);
        return 0;
    }
    if (h->channel == DPY_CHANNEL_RING) {
        int rc = on_ring(f, c, pl);
        free(pl);
        return rc;
    }
    if (h->channel == DPY_CHANNEL_NOTICE && f->node_process[h->sender] == c->process) {
        dpy_fabric_mark_gone(f, h->sender, (const char *)pl->data, h->length);   /* authenticated above */
        free(pl);
        return 0;
    }
    if (!dpy_fabric_local(f, h->receiver) || f->node_process[h->sender] != c->process ||
        h->channel >= DPY_MAX_CHANNELS) {
        free(pl);
        snprintf(why, sizeof why, "misaddressed packet (node %u -> %u, channel %u) from process %d",
                 h->sender, h->receiver, h->channel, c->process);
        reject(f, c, DPY_REJECT_MISADDRESSED, why);
        return 0;
    }
    msg *m = dpy_msg_new(h->sender, h->channel, h->round, h->encoding, pl);
    if (!m) {
        free(pl);
        reject(f, c, DPY_REJECT_MEMORY, "out of memory for a message");
        return 0;
    }
    double wait = dpy_faults_link_wait(&f->faults, h->sender, h->receiver, h->length);   /* emulated */
    if (wait > 0)
        m->deliver_at = dpy_fabric_now() + wait;
    dpy_inbox_put(&f->inboxes[h->receiver], m);
    return 0;
}

/* read() on a Unix socket, keeping a file descriptor that comes with a packet's first byte once
** the handshake is done (the ring packet's, on_ring) and closing every other. */
static ssize_t read_unix(conn *c, uint8_t *at, size_t want) {
    /* framing.h never asks past the section it reads (a header, a word, a piece, the payload), so
    ** a read at a header's start begins the packet the kernel gives a descriptor with */
    int first_byte = at == c->fr.hdr && c->fr.hdr_got == 0;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {at, want};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0)
        return n;
    if (first_byte)   /* descriptors the kernel dropped, this process having no room for them */
        c->fd_cut = (mh.msg_flags & MSG_CTRUNC) != 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (first_byte && c->state == CONN_READY && c->ring_fd < 0 && !c->fr.ring.map)
                c->ring_fd = fd;   /* on_packet closes it unless the packet is the ring's */
            else
                close(fd);
        }
    }
    return n;
}

/* Reads all that is available on c (a non-blocking socket), packet after packet (framing.h). */
static void on_readable(dpy_fabric *f, conn *c) {
    char why[256];
    for (;;) {
        uint8_t *at;
        size_t want = dpy_frame_want(&c->fr, &at);
        ssize_t n = c->unix_socket ? read_unix(c, at, want) : read(c->fd, at, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            drop_conn(f, c);
            return;
        }
        dpy_frame_rules rules = {.run_id = f->o.run_id, .nodes = f->o.nodes, .max_payload = f->o.max_payload,
                                 .ready = c->state == CONN_READY, .encrypt = f->o.encrypt, .rx = &c->rx};
        int ev = dpy_frame_got(&c->fr, (size_t)n, &rules, why, sizeof why);
        if (ev == DPY_FRAME_PACKET && on_packet(f, c) != 0)
            ev = -1;
        if (ev == DPY_FRAME_BAD_HEADER) {
            char msgbuf[300];
            snprintf(msgbuf, sizeof msgbuf, "bad packet header (%s)", why);
            reject(f, c, DPY_REJECT_HEADER, msgbuf);   /* framing is lost: the connection goes */
        } else if (ev == DPY_FRAME_EARLY) {
            reject(f, c, DPY_REJECT_HELLO, "data before the handshake on an unidentified connection");
        } else if (ev == DPY_FRAME_MEMORY) {
            reject(f, c, DPY_REJECT_MEMORY, "out of memory for a packet");
        }
        if (ev != DPY_FRAME_MORE && ev != DPY_FRAME_PACKET) {
            drop_conn(f, c);
            return;
        }
    }
}

static void *io_main(void *arg) {
    dpy_fabric *f = arg;
    struct epoll_event evs[64];
    double next_sweep = dpy_fabric_now() + 0.25;
    while (!f->stopping) {
        int n = epoll_wait(f->epfd, evs, 64, 250);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < n && !f->stopping; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == &f->listen_fd || ptr == &f->unix_fd)
                on_accept(f, *(int *)ptr);
            else if (ptr != &f->wake)
                on_readable(f, ptr);
        }
        if (dpy_fabric_now() > next_sweep) {
            sweep(f);
            next_sweep = dpy_fabric_now() + 0.25;
        }
    }
    return NULL;
}

/* {==== the connecting end's handshake (before the I/O thread starts) ====} */

/* Reads len bytes from a blocking fd until deadline: 0, or -1 (closed, too late, or stopped). */
static int read_until(const dpy_fabric *f, int fd, uint8_t *buf, size_t len, double deadline) {
    while (len > 0) {
        if (wait_fd(f, fd, POLLIN, deadline) != 0)
            return -1;
        ssize_t n = read(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* HELLO and CHALLENGE with process p on fd (a Unix socket with unix_socket), into hs. 0: p
** proved it holds the key; 1: the connection closed (try again); -1: p failed the key check,
** with the reason in err. */
static int hello(dpy_fabric *f, int fd, int p, int unix_socket, dpy_handshake *hs, double deadline,
                 char *err, size_t errlen) {
    *hs = (dpy_handshake){.run_id = f->o.run_id, .connector = (uint32_t)f->o.process,
                          .acceptor = (uint32_t)p, .flags = handshake_flags(f, unix_socket)};
    if (unix_socket)   /* as this end sees them: a relay's id would differ from one end's */
        hs->pid_c = (uint32_t)getpid(), hs->pid_a = peer_pid(fd);
    dpy_auth_random(hs->nonce_c, DPY_NONCE_BYTES);
    if (send_handshake(f, fd, DPY_CHANNEL_HELLO, f->o.process, p, hs->flags, hs->nonce_c) != 0)
        return 1;
    uint8_t hdr[DPY_WIRE_HEADER], reply[DPY_NONCE_BYTES + DPY_PROOF_BYTES], want[DPY_PROOF_BYTES];
    if (read_until(f, fd, hdr, sizeof hdr, deadline) != 0)
        return 1;
    dpy_header h;
    char why[256];
    if (dpy_wire_decode(hdr, &h, f->o.run_id, f->o.nodes, 0, why, sizeof why) != 0 ||
        h.channel != DPY_CHANNEL_CHALLENGE || h.sender != (uint32_t)p)
        return dpy_fail(err, errlen, "process %d at %s answered the hello wrongly (%s)", p,
                        f->o.addresses[p], h.channel != DPY_CHANNEL_CHALLENGE ? "no challenge" : why);
    if (read_until(f, fd, reply, sizeof reply, deadline) != 0)
        return 1;
    memcpy(hs->nonce_a, reply, DPY_NONCE_BYTES);
    dpy_auth_proof(f->key, hs, 'A', want);
    if (!dpy_auth_proof_ok(want, reply + DPY_NONCE_BYTES))
        return dpy_fail(err, errlen, "process %d at %s failed the key check: %s", p, f->o.addresses[p],
                        unix_socket ? "another key, or another process between (its id differs)"
                                    : "it does not hold this run's key");
    return 0;
}

/* PROOF to process p on fd, after hello: the connection is p's from then on. 0; 1: the
** connection closed (fd stays the caller's); -1: out of memory (fd closed). */
static int prove(dpy_fabric *f, int fd, int p, int unix_socket, const dpy_handshake *hs, char *err,
                 size_t errlen) {
    uint8_t proof[DPY_PROOF_BYTES];
    dpy_auth_proof(f->key, hs, 'C', proof);
    if (send_handshake(f, fd, DPY_CHANNEL_PROOF, f->o.process, p, hs->flags, proof) != 0)
        return 1;
    conn *c = add_conn(f, fd, p, unix_socket);
    if (!c)
        return dpy_fail(err, errlen, "out of memory");
    dpy_auth_session(f->key, hs, &f->peers[p].tx, &c->rx);   /* before the I/O thread starts */
    peer_connected(f, p, fd, unix_socket);
    return 0;
}

/* The connection to process p, made on its Unix socket when p answered the hello on tcp fd and
** listens here (fd is then closed before its proof), else on fd. fd is the callee's either way:
** 0, or as hello and prove. */
static int connect_to(dpy_fabric *f, int fd, int p, double deadline, char *err, size_t errlen) {
    dpy_handshake hs, uhs;
    int rc = hello(f, fd, p, 0, &hs, deadline, err, errlen);
    /* within half the time p holds fd waiting for its proof, so that fd is still there */
    double soon = dpy_fabric_now() + hello_timeout(f) / 2;
    int u = rc == 0 ? connect_unix(f, p) : -1;   /* p answered: its Unix socket listens if it is here */
    if (u >= 0) {
        char uerr[256] = "it closed the connection or did not answer in time";
        int urc = hello(f, u, p, 1, &uhs, soon < deadline ? soon : deadline, uerr, sizeof uerr) == 0
                      ? prove(f, u, p, 1, &uhs, err, errlen)
                      : 1;
        if (urc <= 0) {   /* on the Unix socket (-1: out of memory, u closed) */
            close(fd);    /* left before its proof: p forgets it */
            return urc;
        }
        close(u);   /* a relay between, say (wire.md): tcp it is */
        fprintf(stderr, "dpy-lua: process %d reached process %d's Unix socket, but its handshake failed "
                "(%s): connected by tcp\n", f->o.process, p, uerr);
    }
    if (rc == 0) {
        rc = prove(f, fd, p, 0, &hs, err, errlen);
        if (rc <= 0)
            return rc;    /* -1: fd closed */
    }
    close(fd);
    return rc;
}

/* {==== start and stop ====} */

int dpy_tcp_start(dpy_fabric *f, char *err, size_t errlen) {
    const dpy_fabric_opts *o = &f->o;
    if (dpy_auth_init(err, errlen) != 0)
        return -1;
    f->listen_fd = o->listener > 0 ? adopt_listener(o->listener, o->addresses[o->process], err, errlen)
                               : open_socket(f, o->addresses[o->process], 1, 0, err, errlen);
    if (f->listen_fd < 0)
        return -1;
    f->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (f->epfd < 0 || pipe2(f->wake, O_CLOEXEC) != 0)
        return dpy_fail(err, errlen, "epoll: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &f->listen_fd};
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->listen_fd, &ev);
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &f->wake};
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->wake[0], &wev);
    f->unix_fd = listen_unix(f);   /* before the I/O thread answers any hello (connect_to) */
    if (f->unix_fd >= 0) {
        struct epoll_event uev = {.events = EPOLLIN, .data.ptr = &f->unix_fd};
        epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->unix_fd, &uev);
    }
    double deadline = dpy_fabric_now() + o->connect_timeout;
    for (int p = 0; p < o->process; p++) {
        char cerr[256];
        for (;;) {
            int fd = open_socket(f, o->addresses[p], 0, deadline, cerr, sizeof cerr);
            int rc = fd >= 0 ? connect_to(f, fd, p, deadline, err, errlen) : 1;
            if (rc == 0)
                break;
            if (rc < 0)
                return -1;
            if (stopped(f))
                return dpy_fail(err, errlen, "interrupted while connecting to process %d at %s", p,
                                o->addresses[p]);
            if (fd >= 0)
                snprintf(cerr, sizeof cerr, "it closed the connection during the handshake (a "
                         "different run, or encrypt setting?)");
            if (dpy_fabric_now() > deadline)
                return dpy_fail(err, errlen, "process %d at %s did not answer within %.0f s (%s)", p,
                                o->addresses[p], o->connect_timeout, cerr);
            usleep(50000);
        }
    }
    if (pthread_create(&f->io, NULL, io_main, f) != 0)
        return dpy_fail(err, errlen, "cannot start the I/O thread");
    f->io_started = 1;
    pthread_mutex_lock(&f->mu);
    while (f->connected < o->processes - 1 && dpy_fabric_now() < deadline && !stopped(f)) {
        double until = dpy_fabric_now() + STOP_SLICE_MS / 1000.0;
        struct timespec ts = dpy_fabric_at(until < deadline ? until : deadline);
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    int ok = f->connected >= o->processes - 1;
    pthread_mutex_unlock(&f->mu);
    if (!ok) {
        char missing[256] = "";
        for (int p = 0; p < o->processes; p++)
            if (p != o->process && !dpy_fabric_alive(f, p))
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %d", p);
        if (stopped(f))
            return dpy_fail(err, errlen, "interrupted while waiting for processes%s to connect", missing);
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
        free_conn(c);
    }
    for (int p = 0; p < f->o.processes && f->peers; p++)
        dpy_ring_free(&f->peers[p].ring);
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    if (f->unix_fd >= 0)
        close(f->unix_fd);
    if (f->epfd >= 0)
        close(f->epfd);
    if (f->wake[0] >= 0) {
        close(f->wake[0]);
        close(f->wake[1]);
    }
}
