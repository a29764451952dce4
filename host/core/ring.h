/*
** ring.h: a byte ring in memory shared by two processes of one machine, one way: the writer copies
** a packet's payload in, the reader copies it out, and only an 8-byte word per piece goes on their
** Unix socket (tcp.c, framing.h). Two copies in user space, as a socket makes in the kernel, but
** without its buffers: the ring's pages are the same every time, and the reader copies out one
** piece while the writer copies in the next.
** The writer makes the ring (a memfd sealed against resizing, so the reader's mapping can never
** lose pages under it) and passes it over the socket; its first page holds the count of bytes the
** reader has taken, the rest the bytes. The reader copies every piece into its own payload before
** anything reads it, so a writer that touches the ring afterwards changes nothing delivered.
** The socket orders the two: a piece's bytes are in the ring before its word is written, and the
** reader copies them only after reading the word (each system call a full barrier).
*/
#ifndef DPY_RING_H
#define DPY_RING_H

#include <stddef.h>
#include <stdint.h>

#define DPY_RING_BYTES (2u << 20)         /* the most bytes of a ring (one way between two processes) */
#define DPY_RING_OFFER 8                  /* the ring packet's payload: the ring's size */
#define DPY_RING_MIN_PACKET (64u << 10)   /* packets from this size go through it */
#define DPY_RING_PIECE (128u << 10)       /* the most copied in before the reader hears of it */
#define DPY_RING_INLINE 0x80000000u       /* a piece word's bit: these bytes follow on the socket */
#define DPY_RING_WORD 8                   /* a piece word: its length (and the bit), the writer's place */

typedef struct {
    uint8_t *map;    /* the header (a page), then size bytes; NULL: none */
    uint8_t *bytes;  /* where those size bytes start */
    size_t size;
    uint64_t pos;    /* the writer's bytes written, or the reader's bytes taken */
} dpy_ring;

/* The size of a ring for payloads of at most max_payload bytes: room for two (the reader takes one
** while the next goes in), in whole pages, from DPY_RING_PIECE to DPY_RING_BYTES. */
size_t dpy_ring_bytes(uint64_t max_payload);
/* The writer's ring of size bytes (dpy_ring_bytes), its pages allocated: its memfd, for the reader
** (the caller closes it once passed; the mapping holds the memory), or -1 with errno. */
int dpy_ring_create(dpy_ring *r, size_t size);
/* The reader's: maps the ring the writer passed as fd (taken: closed in any case) after checking it
** is a memfd on tmpfs (not hugetlbfs, whose pages may not come back) of a page + size bytes
** (whole pages, DPY_RING_PIECE to DPY_RING_BYTES) that can neither shrink nor grow; its bytes
** read-only. 0, or -1 with why. */
int dpy_ring_adopt(dpy_ring *r, int fd, uint64_t size, char *why, size_t whylen);
/* The writer: how many of the next want bytes fit at once (0: the reader has not taken enough, or
** its count is impossible: then the bytes go on the socket). */
size_t dpy_ring_room(const dpy_ring *r, size_t want);
/* The bytes from the writer's or the reader's place to the ring's end. */
size_t dpy_ring_to_end(const dpy_ring *r);
/* The writer: copies n bytes in (n <= dpy_ring_room). */
void dpy_ring_put(dpy_ring *r, const void *data, size_t n);
/* The reader: copies the next n bytes out (n <= dpy_ring_to_end) and tells the writer they are taken. */
void dpy_ring_get(dpy_ring *r, void *out, size_t n);
/* Unmaps r; safe on a zeroed or freed ring. */
void dpy_ring_free(dpy_ring *r);

#endif
