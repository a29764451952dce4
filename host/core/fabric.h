/*
** fabric.h: the process-wide exchange between nodes. Each process opens one fabric for the nodes
** it hosts. Messages to a node of the same process are copied into its inbox ("mem"); messages to
** a node of another process travel over TCP, or a Unix socket between processes of one machine
** ("tcp": one connection per pair of processes, an I/O thread per process that checks every
** packet before delivering it). Fault injection ("mock":
** drop, duplicate, corrupt, delay) applies to every send when configured.
** A message waits in its receiver's inbox until the receiver asks for its (channel, round, sender):
** a fast node's round r + 1 message simply waits.
*/
#ifndef DPY_FABRIC_H
#define DPY_FABRIC_H

#include <stddef.h>
#include <stdatomic.h>   /* atomic_int */
#include <stdint.h>

#define DPY_MAX_CHANNELS 8

typedef struct dpy_fabric dpy_fabric;

typedef struct {
    uint64_t run_id;
    uint32_t nodes;                  /* nodes in the whole run */
    uint32_t max_payload;            /* larger packets are rejected before any allocation */
    int process, processes;          /* this process's index, and how many there are */
    const int32_t *node_process;     /* uid -> process index (nodes entries; copied) */
    const char *const *addresses;    /* per process "host:port" for tcp (processes > 1) */
    int listener;                    /* > 0: a socket already listening at addresses[process],
                                     ** inherited from the launcher that chose the port */
    double connect_timeout;          /* seconds for the start barrier */
    const atomic_int *stop;          /* or NULL: nonzero (a signal came) ends the wait for peers */
    /* tcp security (auth.h): the run key (DPY_KEY_BYTES; required for processes > 1), payload
    ** encryption, the most connections waiting for their handshake (0: 64; past it the oldest
    ** goes), and the seconds one may take (0: 10) */
    const uint8_t *key;
    int encrypt;
    int max_pending;
    double hello_timeout;
    int tcp_only;                    /* never a Unix socket to a process of this machine (auth.h) */
    int no_ring;                     /* there, never the shared ring (ring.h): the socket alone */
    /* fault injection (mock): probabilities per message, and a delay */
    double drop, duplicate, corrupt, delay;
    uint64_t fault_seed;
    /* emulated link latency, in and between processes: a message waits in its receiver's inbox
    ** this long after it came: latency, or with latency_max > latency a draw per directed link
    ** (dpy_fabric_link_latency) */
    double latency, latency_max;
    /* emulated link bandwidth, bytes per second (0: unlimited): a message of b bytes (payload and
    ** header) waits b / bandwidth more; with 0 < bandwidth_min < bandwidth a draw per directed link
    ** in [bandwidth_min, bandwidth) (dpy_fabric_link_bandwidth). Each message on its own: no queueing. */
    double bandwidth, bandwidth_min;
} dpy_fabric_opts;

typedef struct {
    uint64_t sent_msgs, sent_payload, sent_header;
    uint64_t recv_msgs, recv_payload, recv_header;
} dpy_traffic;

typedef enum { DPY_RECV_OK = 0, DPY_RECV_TIMEOUT, DPY_RECV_DEAD, DPY_RECV_MALFORMED } dpy_recv_status;

int dpy_fabric_open(dpy_fabric **out, const dpy_fabric_opts *o, char *err, size_t errlen);
/* How this process connected to process p: "unix" (a Unix socket), "tcp", or NULL (never). */
const char *dpy_fabric_link(dpy_fabric *f, int p);
/* The payload bytes this process sent process p through shared memory (a ring on a Unix socket). */
uint64_t dpy_fabric_shared_bytes(dpy_fabric *f, int p);
/* Closes every connection and joins the I/O thread; pending messages are freed. */
void dpy_fabric_close(dpy_fabric *f);

/* Sends a copy of data from the local node sender to receiver. Returns 0, or -1 with a reason
** (the receiver's process is gone, a bad uid). */
int dpy_fabric_send(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                    uint32_t round, const void *data, size_t len, char *err, size_t errlen);

/* The same bytes to several receivers: one copy is shared by all the local ones. encoding says
** how the payload was encoded (see wire.h); the receiver gets it back from dpy_fabric_recv.
** A receiver that cannot be reached does not stop the others: every one is tried, and -1 names
** the first that failed (and how many did). */
int dpy_fabric_send_many(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                         uint16_t channel, uint32_t round, uint32_t encoding, const void *data,
                         size_t len, char *err, size_t errlen);

/* A buffer of len bytes that dpy_fabric_send_buffer can hand to local receivers without copying
** (NULL when out of memory). Its owner gives it back with dpy_fabric_release. */
void *dpy_fabric_buffer(size_t len);

/* Whether anyone but its owner still holds a dpy_fabric_buffer (a message to a local receiver
** that has not given it back, another model that shares it). Only an owner adds references: once
** false, it stays false until the owner sends the buffer or shares it again. */
int dpy_fabric_buffer_shared(const void *buffer);

/* One more reference to a dpy_fabric_buffer, given back with dpy_fabric_release. */
void dpy_fabric_retain(void *buffer);

/* dpy_fabric_send_many for the whole of a dpy_fabric_buffer: local receivers share the buffer
** itself, so the sender must not write to it afterwards. */
int dpy_fabric_send_buffer(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                           uint16_t channel, uint32_t round, uint32_t encoding,
                           const void *buffer, char *err, size_t errlen);

/* Waits up to timeout seconds (< 0: forever) for the message (channel, round) from sender to the
** local node receiver. On DPY_RECV_OK *data and *len hold it (and *encoding, when not NULL, the
** sender's encoding); give it back with dpy_fabric_release.
** DPY_RECV_DEAD: the sender's process is gone, or the sender finished or failed (see
** dpy_fabric_gone_reason). DPY_RECV_MALFORMED: the message came but was rejected (a checksum
** mismatch): *data and *len hold the reason, as text, to give back with dpy_fabric_release.
** Messages of earlier rounds on that channel from that sender are discarded as stale. */
dpy_recv_status dpy_fabric_recv(dpy_fabric *f, uint32_t receiver, uint32_t sender,
                                uint16_t channel, uint32_t round, double timeout,
                                void **data, size_t *len, uint32_t *encoding);

/* Discards every message to the local node `node` of a round before `before` (any sender, any
** channel, a delayed one not yet due too), and returns how many messages of rounds it was done with
** it has discarded unread so far: these, and those dpy_fabric_recv discarded as stale (a rejected
** copy is counted among the rejections instead). 0 for a node of another process. */
uint64_t dpy_fabric_late(dpy_fabric *f, uint32_t node, uint32_t before);

/* The emulated latency of the link from -> to, in seconds: opts.latency, or a uniform draw in
** [latency, latency_max) from fault_seed and the link (the same in every process). */
double dpy_fabric_link_latency(const dpy_fabric *f, uint32_t from, uint32_t to);
/* The emulated bandwidth of the link from -> to, in bytes per second (0: unlimited). */
double dpy_fabric_link_bandwidth(const dpy_fabric *f, uint32_t from, uint32_t to);

/* Gives back a payload returned by dpy_fabric_recv or a dpy_fabric_buffer (NULL-safe). */
void dpy_fabric_release(void *data);

/* Traffic of a local node on a channel (channel >= DPY_MAX_CHANNELS: all channels): what it sent,
** and what it received (messages it took with dpy_fabric_recv). */
void dpy_fabric_traffic(dpy_fabric *f, uint32_t node, unsigned channel, dpy_traffic *out);
/* Packets rejected by this process's checks, and the reason of the last one ("" if none). */
uint64_t dpy_fabric_rejected(dpy_fabric *f, char *last, size_t len);

/* Why packets and connections are rejected: each is counted, and the first from each peer (a
** process, or an address before its handshake) is logged on stderr. */
typedef enum {
    DPY_REJECT_HEADER,        /* a header that does not parse or check (framing lost) */
    DPY_REJECT_HELLO,         /* a handshake that fails: no proof, wrong key, data before it */
    DPY_REJECT_DUPLICATE,     /* a handshake claiming a process already connected */
    DPY_REJECT_AUTH,          /* a packet whose tag fails: forged, altered or replayed */
    DPY_REJECT_CHECKSUM,
    DPY_REJECT_MISADDRESSED,
    DPY_REJECT_CAP,           /* more connections waiting for their handshake than allowed */
    DPY_REJECT_IDLE,          /* a connection that did not complete its handshake in time */
    DPY_REJECT_MEMORY,
    DPY_REJECT_KINDS
} dpy_reject_kind;

extern const char *const dpy_reject_names[DPY_REJECT_KINDS];
/* The counts by kind (DPY_REJECT_KINDS entries). */
void dpy_fabric_rejected_by(dpy_fabric *f, uint64_t counts[DPY_REJECT_KINDS]);
/* Marks a local node as finished (why NULL) or failed (why: the reason): whoever waits for its
** messages is told at once (after the messages it did send), in this process and, by a notice
** on the wire, in every other. */
void dpy_fabric_node_gone(dpy_fabric *f, uint32_t node, const char *why);
/* What is known of why node is gone: 1 and its reason in buf ("" when it finished its rounds),
** or 0 when nothing is (it is running, or its process went away without a word). */
int dpy_fabric_gone_reason(dpy_fabric *f, uint32_t node, char *buf, size_t len);
/* The run is being stopped (a signal): every wait for a message ends at once (DPY_RECV_DEAD). */
void dpy_fabric_interrupt(dpy_fabric *f);
/* Whether a process is still connected (always 1 for this process). */
int dpy_fabric_alive(dpy_fabric *f, int process);
int dpy_fabric_is_local(dpy_fabric *f, uint32_t node);

#endif
