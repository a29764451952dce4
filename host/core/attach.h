/*
** attach.h: the control plane of a running process, for `dpy-lua attach`. Each process of a run
** listens on a Unix socket in the run directory (attach/p<process>.sock, mode 0600 in a 0700
** folder, peers of another user refused). A client asks for the nodes' state, queues Lua code for
** one node, and pauses or steps the run at round boundaries; the node threads pick up what is
** queued between two events and block at a boundary while the run is paused. Unused, it costs a
** thread asleep in poll() and one mutex per round per node.
**
** Frames, both ways: a 13-byte header (payload length u32, type u8, uid u32, id u32; big-endian)
** and the payload. Client to process: 'S' status, 'E' eval (payload: Lua source for node uid),
** 'I' interrupt eval id, 'H' hold past the highest round any node has started (reply 'H': that
** round), 'L' limit (payload: the last round a node may start, decimal; empty: none). Process to
** client: 'S' (one line per node: "uid round state"), 'R' / 'X' (a result, or an error, for eval
** id), 'W' (a watched value), 'B' (a breakpoint hit), 'L' (limit set), 'Z' (the process is done).
*/
#ifndef DPY_ATTACH_H
#define DPY_ATTACH_H

#include <stddef.h>
#include <stdint.h>

#define DPY_ATTACH_HEADER 13
#define DPY_ATTACH_MAX_PAYLOAD ((size_t)1 << 20)

typedef struct dpy_attach dpy_attach;

/* A frame's header, written and read (for the clients, l_attach.c). */
void dpy_attach_header(unsigned char h[DPY_ATTACH_HEADER], uint32_t len, char type, uint32_t uid, uint32_t id);
void dpy_attach_parse(const unsigned char h[DPY_ATTACH_HEADER], uint32_t *len, char *type, uint32_t *uid,
                      uint32_t *id);

typedef struct {
    uint32_t conn;   /* the client connection that asked */
    uint32_t id;     /* its request id */
    char *code;      /* NUL-terminated Lua source (malloc'd), or the text to complete */
    size_t len;
    char kind;       /* 'E': run the code; 'C': the names Tab may complete it with */
} dpy_attach_request;

/* A listening Unix socket at path, mode 0600, its folder made 0700: the fd, or -1 with err. A path
** too long for a socket address gets its socket in a short private folder and a symbolic link at
** path; real (of sizeof(sun_path) bytes) says where it is bound. */
int dpy_attach_listen(const char *path, char *real, size_t reallen, char *err, size_t errlen);
/* Removes what dpy_attach_listen made. */
void dpy_attach_unlisten(const char *path, const char *real);

/* Listens on path for the nodes uids[0..n) of this process; 0, or -1 with err. */
int dpy_attach_open(dpy_attach **out, const char *path, const uint32_t *uids, size_t n, char *err,
                    size_t errlen);
/* Tells every client the process is done ('Z'), closes, removes the socket. NULL: nothing. */
void dpy_attach_close(dpy_attach *a);

/* {==== node threads (i: the node's index in uids) ====} */

/* Before round next_round: 1 when a request is handed over in *req (serve it, then call again),
** 0 when the node may start the round, -1 when the process is stopping. Blocks while paused;
** with block 0 it returns 2 instead. */
int dpy_attach_boundary(dpy_attach *a, size_t i, int next_round, dpy_attach_request *req, int block);
/* Between two events: 1 and a request when one is queued for node i, else 0 (a load, no lock). */
int dpy_attach_poll(dpy_attach *a, size_t i, dpy_attach_request *req);
void dpy_attach_request_free(dpy_attach_request *req);
/* Marks node i as evaluating request id of conn (id 0: done); an interrupt names it. */
void dpy_attach_evaluating(dpy_attach *a, size_t i, uint32_t conn, uint32_t id);
/* Whether the client interrupted node i's evaluation in hand, or the process is stopping. */
int dpy_attach_cancelled(dpy_attach *a, size_t i);
/* Sends a frame to connection conn: 0, or -1 when it is gone, or -2 when the frame did not go out
** within dpy_attach_frame_seconds (its client reads too slowly): the connection is closed. */
int dpy_attach_send(dpy_attach *a, uint32_t conn, char type, uint32_t uid, uint32_t id, const void *payload,
                    size_t len);
/* The most seconds a frame takes to go out: 30, or DPY_ATTACH_FRAME_SECONDS. */
double dpy_attach_frame_seconds(const dpy_attach *a);
/* Whether connection conn is still open. */
int dpy_attach_alive(dpy_attach *a, uint32_t conn);
/* A breakpoint: every node of this process stops at its next boundary past the highest round begun
** until conn sets a limit (as 'H' does); nothing when conn is gone. */
void dpy_attach_hold(dpy_attach *a, uint32_t conn);
/* Node i has finished. */
void dpy_attach_done(dpy_attach *a, size_t i);
/* The process stops: every wait at a boundary returns -1 from now on. */
void dpy_attach_stop(dpy_attach *a);
/* No node starts a round past limit (-1: none), as a client's 'L' does. */
void dpy_attach_limit(dpy_attach *a, int limit);
/* Whether the process is paused (held, or a limit reached by a node). */
int dpy_attach_paused(dpy_attach *a);

#endif
