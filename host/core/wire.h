/*
** wire.h: the packet format between nodes. A packet is a fixed 40-byte header, little-endian,
** then `length` payload bytes:
**   0 magic "DPYL"  4 version  5 flags  6 channel  8 run id  16 sender  20 receiver
**  24 round  28 length  32 checksum: 0 (version 2 held the payload's XXH3 here; since every
**     packet carries a tag over its payload, a nonzero field marks a damaged packet: how the
**     `corrupt` fault is emulated)
**  36 encoding: which transform chain encoded the payload (0: raw values)
** The receiver checks every header field before it trusts any. Between processes, a packet is
** followed by a 16-byte tag (auth.h) over header and payload, checked before the payload is
** handed on; with flag DPY_FLAG_ENCRYPTED the payload is encrypted. Between processes of one
** machine, over a Unix socket (flag DPY_FLAG_UNIX in its handshake), packets carry no tag: the
** kernel alone carries their bytes, from the process that proved it holds the run key (auth.h).
** There, a packet of DPY_RING_MIN_PACKET bytes or more goes through a ring of shared memory
** (ring.h, flag DPY_FLAG_RING): after its header, each piece of its payload is an 8-byte word, its
** length and the writer's place in the ring; with DPY_RING_INLINE set in the length the piece's
** bytes follow on the socket, otherwise they are the next bytes of the ring. The ring itself comes
** once, before the first such packet, with a packet on channel DPY_CHANNEL_RING (its payload: the
** ring's size, DPY_RING_OFFER bytes) and the ring's memfd.
** A connection opens with three handshake packets (no tag): HELLO (connector -> acceptor, its
** nonce), CHALLENGE (the acceptor's nonce and proof), PROOF (the connector's proof); sender and
** receiver are then process indices.
*/
#ifndef DPY_WIRE_H
#define DPY_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define DPY_WIRE_MAGIC 0x4C595044u   /* "DPYL" read little-endian */
#define DPY_WIRE_VERSION 4   /* 4: the Unix socket's handshake (process ids in every transcript) */
#define DPY_WIRE_HEADER 40
#define DPY_CHANNEL_HELLO 0xFFFFu    /* a connection's first packet: sender = process index */
#define DPY_CHANNEL_CHALLENGE 0xFFFEu
#define DPY_CHANNEL_PROOF 0xFFFDu
#define DPY_CHANNEL_NOTICE 0xFFFCu   /* node `sender` is gone; the payload says why ("": finished) */
#define DPY_CHANNEL_RING 0xFFFBu     /* on a Unix socket: the sender's shared ring (ring.h) comes with it */
#define DPY_FLAG_ENCRYPTED 1u
#define DPY_FLAG_UNIX 2u          /* a handshake on a Unix socket */
#define DPY_FLAG_RING 4u          /* the payload comes through the shared ring, in pieces (framing.h) */

/* A handshake packet's channel, and the only payload length it may have (0: not one). */
static inline int dpy_wire_handshake(uint16_t channel) { return channel >= DPY_CHANNEL_PROOF; }
uint32_t dpy_wire_handshake_length(uint16_t channel);

typedef struct {
    uint8_t version, flags;
    uint16_t channel;
    uint64_t run_id;
    uint32_t sender, receiver, round, length, checksum, encoding;
} dpy_header;

void dpy_wire_encode(uint8_t out[DPY_WIRE_HEADER], const dpy_header *h);

/* Checks and decodes a header: magic, version, run id, sender and receiver below nodes, length at
** most max_len (a handshake packet's: exactly its own). Returns 0, or -1 with the reason in why. */
int dpy_wire_decode(const uint8_t in[DPY_WIRE_HEADER], dpy_header *h, uint64_t run_id,
                    uint32_t nodes, uint32_t max_len, char *why, size_t whylen);

#endif
