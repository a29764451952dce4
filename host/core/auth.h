/*
** auth.h: the run key and what the tcp path does with it (libsodium, and OpenSSL for the payload).
** Every run has a fresh 32-byte random key in a 0600 file. A connection starts with a
** challenge-response under the key (fresh nonces from both ends, so a recorded handshake cannot
** be replayed); both ends then derive a key per direction of that connection. Every packet after
** it on a tcp connection is followed by a trailer: its sequence number on the connection (8
** bytes, little-endian) and a 16-byte tag over the 40-byte header and the payload under the
** direction's key and that number. A forged, altered or misrouted packet fails the tag; a
** replayed one (a number not above the last accepted) is refused before it; a packet of another
** connection fails under its key. The tag is Poly1305 under a one-time key from ChaCha20 (as in
** ChaCha20-Poly1305, RFC 8439); with encrypt, the payload is encrypted by ChaCha20-Poly1305
** (IETF) with the header as associated data. Poly1305 over the payload is
** OpenSSL's (its AVX2 code, twice libsodium's speed here), and so is the payload's ChaCha20;
** the rest is libsodium's.
** Processes of one machine also meet on a Unix socket in the abstract namespace, named from the
** key (no one without it can know the name before it is taken). Its handshake is the same, with
** both processes' ids in the transcript as each end sees them (its own, and the peer's from
** SO_PEERCRED), so that a relay between them fails the proofs; after it the kernel alone
** carries the bytes between the two processes that proved themselves, and packets carry no tag.
*/
#ifndef DPY_AUTH_H
#define DPY_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/types.h>   /* EVP_MAC_CTX, EVP_CIPHER_CTX */
#include <sodium.h>

#define DPY_KEY_BYTES 32
#define DPY_NONCE_BYTES 32
#define DPY_PROOF_BYTES 32
#define DPY_TAG_BYTES 16
#define DPY_TRAILER_BYTES (8 + DPY_TAG_BYTES)

/* One direction of one connection: its key and the lowest sequence number still acceptable. */
typedef struct {
    uint8_t key[DPY_KEY_BYTES];
    uint64_t seq;
} dpy_auth_dir;

enum { DPY_AUTH_OK = 0, DPY_AUTH_FORGED = -1, DPY_AUTH_REPLAYED = -2, DPY_AUTH_MEMORY = -3 };

/* libsodium's and OpenSSL's one-time setup (thread-safe, idempotent): 0, or -1. */
int dpy_auth_init(char *err, size_t errlen);

/* Writes a fresh random key to path, mode 0600 (an existing file is replaced, never reused). */
int dpy_key_create(const char *path, char *err, size_t errlen);
/* Reads a key file: a regular file of exactly DPY_KEY_BYTES bytes that only its owner can read. */
int dpy_key_load(const char *path, uint8_t key[DPY_KEY_BYTES], char *err, size_t errlen);

void dpy_auth_random(void *buf, size_t len);

/* The handshake's transcript: run id, connecting and accepting process, both nonces, flags,
** and on a Unix socket both ends' process ids (0 on tcp). */
typedef struct {
    uint64_t run_id;
    uint32_t connector, acceptor;
    uint8_t nonce_c[DPY_NONCE_BYTES], nonce_a[DPY_NONCE_BYTES];
    uint8_t flags;
    uint32_t pid_c, pid_a;
} dpy_handshake;

/* The abstract Unix socket name (without its leading NUL) of process `process` of run run_id,
** listening at tcp address addr: "dpy-lua-" and 32 hex digits of a keyed hash. */
#define DPY_UNIX_NAME_BYTES 41
void dpy_auth_unix_name(const uint8_t key[DPY_KEY_BYTES], uint64_t run_id, int process,
                        const char *addr, char out[DPY_UNIX_NAME_BYTES]);

/* The proof that role ('A': the acceptor, 'C': the connector) holds the key. */
void dpy_auth_proof(const uint8_t key[DPY_KEY_BYTES], const dpy_handshake *hs, char role,
                    uint8_t out[DPY_PROOF_BYTES]);
/* Constant-time comparison of two proofs: 1 when equal. */
int dpy_auth_proof_ok(const uint8_t a[DPY_PROOF_BYTES], const uint8_t b[DPY_PROOF_BYTES]);
/* The keys of the connection's two directions (connector to acceptor, and back). */
void dpy_auth_session(const uint8_t key[DPY_KEY_BYTES], const dpy_handshake *hs,
                      dpy_auth_dir *c_to_a, dpy_auth_dir *a_to_c);

/* Seals one packet: its trailer (the next sequence number, the tag over header and payload).
** encrypt: the payload is encrypted from in to out (may be the same buffer); else out is unused.
** 0, or -1 when there is no memory for it. */
int dpy_auth_seal(dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], const uint8_t *in,
                  uint8_t *out, size_t len, uint8_t trailer[DPY_TRAILER_BYTES]);
/* Checks one received packet by its trailer (encrypt: decrypts it in place): DPY_AUTH_OK (and
** the next packet must have the next number), DPY_AUTH_REPLAYED, or DPY_AUTH_FORGED (then data
** holds garbage, to be dropped); DPY_AUTH_MEMORY when it could not be checked. */
int dpy_auth_open(dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], uint8_t *data, size_t len,
                  const uint8_t trailer[DPY_TRAILER_BYTES]);

/* The same, a piece at a time, so that a packet is checked while it travels. A stream is
** zeroed before its first use and kept from packet to packet (its contexts are allocated once);
** dpy_auth_stream_free releases it. */
typedef struct {
    const dpy_auth_dir *dir;
    EVP_MAC_CTX *mac;
    EVP_CIPHER_CTX *cipher;   /* with encrypt */
    uint8_t nonce[12], hdr[40];
    uint64_t seq;        /* the number the tag is computed under */
    size_t len, done;    /* payload bytes: all, and those in the tag so far */
    size_t clear;        /* opening with encrypt: bytes deciphered so far */
    int encrypt;
    int keyed;           /* the MAC context holds this packet's one-time key */
    int failed;          /* OpenSSL refused a step (never with keyed contexts): the tag fails */
} dpy_auth_stream;

/* Starts the tag of a packet of len payload bytes with header hdr, under d's next number:
** 0, or -1 when the stream's contexts cannot be made or keyed (no memory). */
int dpy_auth_begin(const dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], size_t len,
                   dpy_auth_stream *s);
/* Clears s (the MAC's key too, for a packet left unfinished) and frees its contexts. */
void dpy_auth_stream_free(dpy_auth_stream *s);
/* Sealing: the next n payload bytes, in order (encrypt: enciphered from in to out, and every
** piece but the last a multiple of 64 bytes). 0, or -1 when OpenSSL failed (never with keyed
** contexts): out is then not to be sent. */
int dpy_auth_seal_piece(dpy_auth_stream *s, const uint8_t *in, uint8_t *out, size_t n);
/* The trailer; d's next number moves on. 0, or -1 as for a piece (the tag is then random). */
int dpy_auth_seal_end(dpy_auth_dir *d, dpy_auth_stream *s, uint8_t trailer[DPY_TRAILER_BYTES]);
/* Opening: the payload data[0, got) has arrived (got only grows); encrypt: deciphered in place
** as far as whole blocks allow. */
void dpy_auth_open_upto(dpy_auth_stream *s, uint8_t *data, size_t got);
/* After the whole payload: as dpy_auth_open. The tag is computed under d's next number as the
** pieces come; a packet with a later number (those between were dropped) is checked again. */
int dpy_auth_open_end(dpy_auth_dir *d, dpy_auth_stream *s, uint8_t *data,
                      const uint8_t trailer[DPY_TRAILER_BYTES]);

#endif
