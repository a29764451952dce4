/*
** fabric_internal.h: what the parts of the fabric share (not a public header; see fabric.h).
**   message.c     payloads shared by local receivers, and the messages that carry them
**   inbox.c       per-node inboxes: round buffering, waking the receiver
**   faults.c      seeded fault injection (drop, duplicate, corrupt, delay)
**   accounting.c  traffic per node and channel, rejected packets and the last reason
**   framing.c     a connection's byte stream: header, payload and trailer of each packet
**   tcp.c         connections, the I/O thread, checking packets from other processes
**   fabric.c      the public API that ties them together
*/
#ifndef DPY_FABRIC_INTERNAL_H
#define DPY_FABRIC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "auth.h"
#include "fabric.h"
#include "framing.h"
#include "wire.h"

/* {==== message.c ====} */

/* Payload bytes, shared by every local receiver of one send (no copy per receiver). */
typedef struct payload {
    atomic_int refs;
    size_t len;
    unsigned char data[];
} payload;

typedef struct msg {
    struct msg *next;
    uint32_t sender, round, encoding;
    uint16_t channel;
    double deliver_at;              /* monotonic seconds (a mock delay); 0: at once */
    int rejected;                   /* the message came but was rejected: p holds the reason */
    payload *p;
} msg;

payload *dpy_payload_new(size_t len, int refs);   /* NULL when out of memory */
void dpy_payload_release(payload *p);             /* NULL-safe; frees with the last reference */

/* The payload whose bytes data is (its header is written to, even when the bytes are not) */
static inline payload *dpy_payload_of(const void *data) {
    return (payload *)((uintptr_t)data - offsetof(payload, data));
}

/* A message holding p (takes the caller's reference), to be delivered at once; NULL: no memory. */
msg *dpy_msg_new(uint32_t sender, uint16_t channel, uint32_t round, uint32_t encoding, payload *p);
void dpy_msg_free(msg *m);                        /* drops its payload reference too */

/* {==== inbox.c ====} */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *head;
    dpy_traffic traffic[DPY_MAX_CHANNELS];   /* the node's counters, under mu (accounting.c) */
    /* what the node waits for, if it waits: a delivery wakes it only for that message (a woken
    ** thread takes a core from a training one, so wake-ups for other messages are waste) */
    int waiting;
    uint32_t want_sender, want_round;
    uint16_t want_channel;
    uint64_t late;   /* messages discarded unread because their round was over, under mu */
} inbox;

void dpy_inbox_init(inbox *in);
/* Frees the messages still waiting, then the lock. */
void dpy_inbox_destroy(inbox *in);
/* Appends m (takes ownership), waking the receiver if it waits for this message. */
void dpy_inbox_put(inbox *in, msg *m);
/* Discards every message of a round before `before`; returns in->late after it (dpy_fabric_late). */
uint64_t dpy_inbox_discard_before(inbox *in, uint32_t before);
/* Wakes the receiver whatever it waits for (a sender may have gone). */
void dpy_inbox_wake(inbox *in);
/* Whether sender can no longer send (asked only while no message of the round is ready). */
typedef int (*dpy_inbox_gone_fn)(void *ctx, uint32_t sender);
/* dpy_fabric_recv on one inbox: on DPY_RECV_OK (and DPY_RECV_MALFORMED: the reason) *out holds
** the payload (the reference is the caller's) and *encoding, when not NULL, the sender's
** encoding. */
dpy_recv_status dpy_inbox_take(inbox *in, uint32_t sender, uint16_t channel, uint32_t round,
                               double timeout, dpy_inbox_gone_fn gone, void *ctx, payload **out,
                               uint32_t *encoding);

/* {==== faults.c ====} */

typedef struct {
    double drop, duplicate, corrupt, delay;   /* probabilities per message; the longest delay */
    double latency, latency_max;              /* per link (dpy_faults_link_latency) */
    double bandwidth, bandwidth_min;          /* per link (dpy_faults_link_bandwidth) */
    uint64_t seed;                            /* the links' draws */
    pthread_mutex_t mu;                       /* the generator */
    uint64_t rng;
} faults;

/* What fault injection decided for one message. */
typedef struct { int copies, corrupt; double delay; } fate;

void dpy_faults_init(faults *fl, const dpy_fabric_opts *o);
void dpy_faults_destroy(faults *fl);
fate dpy_faults_decide(faults *fl, size_t len);
/* The emulated latency of the link from -> to (no lock: a pure function of the seed and the link). */
double dpy_faults_link_latency(const faults *fl, uint32_t from, uint32_t to);
/* The emulated bandwidth of the link from -> to, bytes per second (0: unlimited). */
double dpy_faults_link_bandwidth(const faults *fl, uint32_t from, uint32_t to);
/* The seconds a message of len payload bytes waits in the receiver's inbox: the link's latency
** and its transfer time (the header's bytes included). */
double dpy_faults_link_wait(const faults *fl, uint32_t from, uint32_t to, size_t len);
/* Makes an encoded header's checksum wrong: the receiving process rejects the packet. */
void dpy_faults_corrupt_header(uint8_t hdr[DPY_WIRE_HEADER]);

/* {==== accounting.c ====} */

#define DPY_REJECT_LOGGED 64   /* peers whose first rejection was logged; past them, none is */

typedef struct {
    pthread_mutex_t mu;
    uint64_t count, by[DPY_REJECT_KINDS];
    char last[320];
    char logged[DPY_REJECT_LOGGED][64];
    int nlogged;
    int process;                /* this process's index, for the log */
} rejects;

/* One message sent (sent != 0) or taken; the caller holds the inbox's lock. */
void dpy_traffic_add(dpy_traffic *t, int sent, size_t payload_len);
/* One message sent by the node of inbox in (takes its lock). */
void dpy_traffic_sent(inbox *in, uint16_t channel, size_t payload_len);
/* dpy_fabric_traffic for the node of inbox in. */
void dpy_traffic_read(inbox *in, unsigned channel, dpy_traffic *out);

void dpy_rejects_init(rejects *r);
void dpy_rejects_destroy(rejects *r);
/* Counts one rejection; logs it when it is the first from peer ("process 3", an address; NULL:
** never logged, as for injected faults). */
void dpy_rejects_add(rejects *r, dpy_reject_kind kind, const char *peer, const char *why);
uint64_t dpy_rejects_read(rejects *r, char *last, size_t len);
void dpy_rejects_by(rejects *r, uint64_t counts[DPY_REJECT_KINDS]);

/* {==== tcp.c ====} */

typedef struct {
    int fd;                         /* the connection to this process, -1 if none */
    int alive;                      /* under the fabric's mu */
    pthread_mutex_t write_mu;       /* one writer at a time per connection */
    dpy_auth_dir tx;                /* sending: this connection's key and sequence (write_mu) */
    dpy_auth_stream ts;             /* sending: the tag of the packet being written (write_mu) */
    int untagged;                   /* a Unix socket: packets go without a tag (write_mu) */
    dpy_ring ring;                  /* there, the shared ring to it, once made and passed (write_mu) */
    int ring_off;                   /* never the ring: none could be made, or the peer is gone (write_mu) */
    _Atomic uint64_t ring_bytes;    /* ring.pos, for readers without write_mu: bytes sent through it */
    const char *link;               /* "unix" or "tcp" once connected, kept after it is gone (mu) */
} peer;

enum { CONN_HELLO, CONN_PROOF, CONN_READY };   /* waiting for its HELLO, for its PROOF; ready */

typedef struct conn {               /* read state of one connection (I/O thread only) */
    int fd, process;                /* process -1 until its HELLO */
    int state;
    int unix_socket;                /* accepted on the Unix socket: no tags once ready */
    uint32_t peer_pid;              /* there, the connecting process's id (SO_PEERCRED) */
    int ring_fd;                    /* there, a file descriptor that came, for the ring packet; -1 */
    int fd_cut;                     /* the packet being read lost its descriptor (MSG_CTRUNC) */
    double since;                   /* when it was accepted (the handshake's deadline) */
    char from[64];                  /* the remote address, for the log */
    dpy_handshake hs;
    dpy_auth_dir rx;                /* receiving: the connection's key and sequence */
    dpy_frame fr;                   /* the packet being read */
    struct conn *next;
} conn;

/* Connects to every lower-indexed process (retrying while it starts), accepts the others, and
** waits until all are identified. */
int dpy_tcp_start(dpy_fabric *f, char *err, size_t errlen);
/* Sends d.copies copies of one packet to receiver's process (d.copies > 0). */
int dpy_tcp_send(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                 uint32_t round, uint32_t encoding, const void *data, size_t len, fate d,
                 char *err, size_t errlen);
/* Tells process p that local node is gone (why: "" when it finished); best effort. */
void dpy_tcp_notice(dpy_fabric *f, int p, uint32_t node, const char *why);
/* Joins the I/O thread and closes every connection (safe when never started). */
void dpy_tcp_stop(dpy_fabric *f);
/* For tests: len bytes as they are on the connection to process p, descriptor pass_fd (>= 0) with
** the first, as a peer that holds the run key could send them. 0, or -1. */
int dpy_tcp_write_raw(dpy_fabric *f, int p, const void *bytes, size_t len, int pass_fd);

/* {==== fabric.c ====} */

struct dpy_fabric {
    dpy_fabric_opts o;
    int32_t *node_process;
    unsigned char *gone;            /* by uid: a node that has finished or failed (under mu) */
    char **gone_why;                /* by uid: why ("": finished; NULL: not said) (under mu) */
    inbox *inboxes;                 /* by uid; only this process's nodes are used */
    peer *peers;                    /* by process */
    pthread_mutex_t mu;             /* gone, peers' alive, connected, interrupted */
    int interrupted;                /* dpy_fabric_interrupt: no wait outlasts it */
    faults faults;
    rejects rejects;
    /* tcp.c's */
    pthread_cond_t cv;              /* signalled when a connection is identified (with mu) */
    int connected, pending_conns;
    uint8_t key[DPY_KEY_BYTES];
    int listen_fd, unix_fd, epfd, wake[2];   /* unix_fd: -1 when tcp_only or taken */
    pthread_t io;
    int io_started;
    atomic_int stopping;            /* dpy_tcp_stop: the I/O thread ends (read without mu) */
    conn *conns;
};

/* A process went away: whoever waits for one of its nodes is told at once. */
void dpy_fabric_process_gone(dpy_fabric *f, int process);
/* A node (of any process) is gone, for why (len bytes, not terminated): recorded, receivers woken. */
void dpy_fabric_mark_gone(dpy_fabric *f, uint32_t node, const char *why, size_t len);
/* A message from sender to local receiver came but was rejected (why): counted, and its receiver
** told at once instead of waiting for a message that will not come. */
void dpy_fabric_reject(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                       uint32_t round, const char *why);

static inline int dpy_fabric_local(const dpy_fabric *f, uint32_t node) {
    return node < f->o.nodes && f->node_process[node] == f->o.process;
}

/* {==== the clock: monotonic seconds ====} */

static inline double dpy_fabric_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A deadline past what a timespec holds (a timeout of 1e300 s, inf) is the furthest it does hold,
** about 30 million years: the cast of such a double came out negative, and the wait spun. */
static inline struct timespec dpy_fabric_at(double t) {
    struct timespec ts;
    if (!(t < 1e15))   /* NaN too */
        t = 1e15;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    return ts;
}

/* A condition variable whose timed waits use the monotonic clock. */
static inline void dpy_fabric_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

#endif
