/*
** framing.h: the reading side of one connection's byte stream, apart from its socket. It names
** where the next bytes go (header, then the payload, read straight into its buffer, then the
** trailer) and says what their arrival means; the tag is computed as the payload comes. A packet
** through the shared ring (wire.h) comes as piece words, each followed by its bytes on the socket
** or copied out of the ring. tcp.c reads a socket into the places it names; the fuzz harness feeds
** it bytes the same way.
*/
#ifndef DPY_FRAMING_H
#define DPY_FRAMING_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "ring.h"
#include "wire.h"

typedef struct payload payload;

typedef struct {
    uint8_t hdr[DPY_WIRE_HEADER], tag[DPY_TRAILER_BYTES];
    size_t hdr_got, got, tag_got;
    dpy_header h;
    payload *pending;        /* the packet being read, straight into its payload */
    dpy_auth_stream rs;      /* its tag, as its bytes come */
    int untagged;            /* a Unix socket's: packets have no trailer (auth.h) */
    dpy_ring ring;           /* there, the peer's shared ring, once it came (ring.h) */
    int ringed;              /* the packet comes in pieces (DPY_FLAG_RING): */
    uint8_t word[DPY_RING_WORD];   /* the next piece's word, */
    size_t word_got, inline_left;   /* and the bytes of an inline piece still to come */
} dpy_frame;

/* What a header must satisfy; ready: the connection's handshake is done (only handshake
** packets before it, and nothing allocated for more); rx: its receiving key (when ready). */
typedef struct {
    uint64_t run_id;
    uint32_t nodes, max_payload;
    int ready, encrypt;
    const dpy_auth_dir *rx;
} dpy_frame_rules;

enum {
    DPY_FRAME_MORE = 0,      /* read more */
    DPY_FRAME_PACKET,        /* a whole packet: fr->h, fr->hdr, fr->tag, and dpy_frame_take */
    DPY_FRAME_BAD_HEADER,    /* framing is lost (why says how): the connection goes */
    DPY_FRAME_EARLY,         /* data before the handshake */
    DPY_FRAME_MEMORY,        /* no memory for the payload */
};

/* Where the next bytes go: *at, at most the count returned (> 0). */
size_t dpy_frame_want(dpy_frame *fr, uint8_t **at);
/* n bytes (0 < n <= what dpy_frame_want said) were written there: DPY_FRAME_*. */
int dpy_frame_got(dpy_frame *fr, size_t n, const dpy_frame_rules *r, char *why, size_t whylen);
/* After DPY_FRAME_PACKET: its payload (the caller's now), and the frame is ready for the next. */
payload *dpy_frame_take(dpy_frame *fr);
/* Frees what a frame holds (a packet cut off midway, the context of its tag, the ring). */
void dpy_frame_clear(dpy_frame *fr);

#endif
