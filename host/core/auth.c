/* auth.c: the run key, the handshake's proofs and keys, and packet tags (see auth.h). */
#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bytes.h"
#include "dpy_core.h"

static EVP_MAC *poly1305;   /* OpenSSL's, fetched once */
static EVP_CIPHER *chacha20;
static pthread_once_t started = PTHREAD_ONCE_INIT;
static int start_rc;

static void start(void) {
    poly1305 = EVP_MAC_fetch(NULL, "POLY1305", NULL);
    chacha20 = EVP_CIPHER_fetch(NULL, "ChaCha20", NULL);
    start_rc = sodium_init() < 0 ? -1 : poly1305 && chacha20 ? 0 : -2;
}

int dpy_auth_init(char *err, size_t errlen) {
    pthread_once(&started, start);
    if (start_rc == -1)
        return dpy_fail(err, errlen, "libsodium cannot start");
    if (start_rc == -2)
        return dpy_fail(err, errlen, "OpenSSL has no Poly1305 or no ChaCha20");
    return 0;
}

void dpy_auth_random(void *buf, size_t len) { randombytes_buf(buf, len); }

/* {==== the key file ====} */

int dpy_key_create(const char *path, char *err, size_t errlen) {
    if (dpy_auth_init(err, errlen) != 0)
        return -1;
    if (unlink(path) != 0 && errno != ENOENT)   /* a fresh file, never an old run's key */
        return dpy_fail(err, errlen, "%s: %s", path, strerror(errno));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return dpy_fail(err, errlen, "%s: %s", path, strerror(errno));
    uint8_t key[DPY_KEY_BYTES];
    randombytes_buf(key, sizeof key);
    int rc = fchmod(fd, 0600) == 0 && dpy_write_all(fd, key, sizeof key) == 0 && fsync(fd) == 0;
    int e = errno;
    sodium_memzero(key, sizeof key);
    if (close(fd) != 0 && rc)
        rc = 0, e = errno;
    if (!rc) {
        unlink(path);
        return dpy_fail(err, errlen, "%s: %s", path, strerror(e));
    }
    return 0;
}

int dpy_key_load(const char *path, uint8_t key[DPY_KEY_BYTES], char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return dpy_fail(err, errlen, "run key %s: %s", path, strerror(errno));
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) != 0)
        dpy_fail(err, errlen, "run key %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        dpy_fail(err, errlen, "run key %s is not a regular file", path);
    else if (st.st_mode & 077)
        dpy_fail(err, errlen, "run key %s has mode %03o: only its owner may read it (0600)", path,
                 (unsigned)(st.st_mode & 0777));
    else if (st.st_size != DPY_KEY_BYTES)
        dpy_fail(err, errlen, "run key %s holds %lld bytes, not %d", path, (long long)st.st_size,
                 DPY_KEY_BYTES);
    else if (read(fd, key, DPY_KEY_BYTES) != DPY_KEY_BYTES)
        dpy_fail(err, errlen, "run key %s: short read", path);
    else
        rc = 0;
    close(fd);
    return rc;
}

/* {==== the handshake ====} */

#define TRANSCRIPT (8 + 4 + 4 + 2 * DPY_NONCE_BYTES + 1 + 4 + 4)

static void transcript(const dpy_handshake *hs, uint8_t out[TRANSCRIPT]) {
    put64(out, hs->run_id);
    put32(out + 8, hs->connector);
    put32(out + 12, hs->acceptor);
    memcpy(out + 16, hs->nonce_c, DPY_NONCE_BYTES);
    memcpy(out + 16 + DPY_NONCE_BYTES, hs->nonce_a, DPY_NONCE_BYTES);
    out[16 + 2 * DPY_NONCE_BYTES] = hs->flags;
    put32(out + 17 + 2 * DPY_NONCE_BYTES, hs->pid_c);
    put32(out + 21 + 2 * DPY_NONCE_BYTES, hs->pid_a);
}

/* keyed BLAKE2b of a label and the transcript */
static void derive(const uint8_t key[DPY_KEY_BYTES], const char *label, const dpy_handshake *hs,
                   uint8_t out[32]) {
    uint8_t t[TRANSCRIPT];
    transcript(hs, t);
    crypto_generichash_state st;
    crypto_generichash_init(&st, key, DPY_KEY_BYTES, 32);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label) + 1);
    crypto_generichash_update(&st, t, sizeof t);
    crypto_generichash_final(&st, out, 32);
}

void dpy_auth_unix_name(const uint8_t key[DPY_KEY_BYTES], uint64_t run_id, int process,
                        const char *addr, char out[DPY_UNIX_NAME_BYTES]) {
    uint8_t id[12], h[16];
    put64(id, run_id);
    put32(id + 8, (uint32_t)process);
    crypto_generichash_state st;
    crypto_generichash_init(&st, key, DPY_KEY_BYTES, sizeof h);
    crypto_generichash_update(&st, (const uint8_t *)"dpy unix socket", 16);
    crypto_generichash_update(&st, id, sizeof id);
    crypto_generichash_update(&st, (const uint8_t *)addr, strlen(addr));
    crypto_generichash_final(&st, h, sizeof h);
    memcpy(out, "dpy-lua-", 8);
    sodium_bin2hex(out + 8, DPY_UNIX_NAME_BYTES - 8, h, sizeof h);
}

void dpy_auth_proof(const uint8_t key[DPY_KEY_BYTES], const dpy_handshake *hs, char role,
                    uint8_t out[DPY_PROOF_BYTES]) {
    derive(key, role == 'A' ? "dpy proof: acceptor" : "dpy proof: connector", hs, out);
}

int dpy_auth_proof_ok(const uint8_t a[DPY_PROOF_BYTES], const uint8_t b[DPY_PROOF_BYTES]) {
    return sodium_memcmp(a, b, DPY_PROOF_BYTES) == 0;
}

void dpy_auth_session(const uint8_t key[DPY_KEY_BYTES], const dpy_handshake *hs,
                      dpy_auth_dir *c_to_a, dpy_auth_dir *a_to_c) {
    derive(key, "dpy session: connector to acceptor", hs, c_to_a->key);
    derive(key, "dpy session: acceptor to connector", hs, a_to_c->key);
    c_to_a->seq = a_to_c->seq = 0;
}

/* {==== packets ====} */

/* A packet's tag is computed over its pieces as they are written or read (the receiver checks
** one piece while the next travels). Without encrypt: Poly1305 over header and payload under
** the one-time key of ChaCha20's block 0. With encrypt: ChaCha20-Poly1305 (IETF, RFC 8439):
** the payload XOR the keystream from block 1, and the tag over header, padding, ciphertext,
** padding and both lengths; the one-shot AEAD of libsodium gives the same bytes. */

static const uint8_t zeros[16];

/* Once a step failed, no more OpenSSL calls on the stream: OpenSSL 3.0 crashes on an unkeyed
** Poly1305 context rather than refusing. */
static void mac_update(dpy_auth_stream *s, const uint8_t *data, size_t n) {
    if (n && !s->failed)
        s->failed = EVP_MAC_update(s->mac, data, n) != 1;
}

/* The tag, which also clears the context's key (OpenSSL frees a Poly1305 context without
** clearing it; only its final step does); a failed stream gives random bytes no one accepts. */
static void mac_final(dpy_auth_stream *s, uint8_t tag[DPY_TAG_BYTES]) {
    size_t n = 0;
    if (s->keyed)   /* keyed: final is safe, and clears the key even after a failed step */
        s->failed |= EVP_MAC_final(s->mac, tag, &n, DPY_TAG_BYTES) != 1 || n != DPY_TAG_BYTES;
    s->keyed = 0;
    if (s->failed)
        dpy_auth_random(tag, DPY_TAG_BYTES);
}

/* Clears what a packet leaves in s (its keys and position, the MAC's key included, whether or
** not the packet was finished), keeping its contexts. */
static void wipe(dpy_auth_stream *s) {
    if (s->keyed) {
        uint8_t tag[DPY_TAG_BYTES];
        mac_final(s, tag);
        sodium_memzero(tag, sizeof tag);
    }
    EVP_MAC_CTX *mac = s->mac;
    EVP_CIPHER_CTX *cipher = s->cipher;
    sodium_memzero(s, sizeof *s);
    s->mac = mac;
    s->cipher = cipher;
}

int dpy_auth_begin(const dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], size_t len,
                   dpy_auth_stream *s) {
    wipe(s);
    if (!s->mac) {
        char err[80];
        if (dpy_auth_init(err, sizeof err) != 0 || !(s->mac = EVP_MAC_CTX_new(poly1305)))
            return -1;
    }
    if (encrypt && !s->cipher && !(s->cipher = EVP_CIPHER_CTX_new()))
        return -1;
    s->dir = d;
    s->encrypt = encrypt;
    s->len = len;
    s->seq = d->seq;
    memcpy(s->hdr, hdr, 40);
    put64(s->nonce, s->seq);
    uint8_t otk[crypto_onetimeauth_poly1305_KEYBYTES];
    crypto_stream_chacha20_ietf(otk, sizeof otk, s->nonce, d->key);
    s->keyed = EVP_MAC_init(s->mac, otk, sizeof otk, NULL) == 1;
    sodium_memzero(otk, sizeof otk);
    if (!s->keyed) {
        wipe(s);
        return -1;
    }
    mac_update(s, hdr, 40);
    if (encrypt)
        mac_update(s, zeros, (16 - 40 % 16) % 16);
    return 0;
}

void dpy_auth_stream_free(dpy_auth_stream *s) {
    wipe(s);
    EVP_MAC_CTX_free(s->mac);
    EVP_CIPHER_CTX_free(s->cipher);
    sodium_memzero(s, sizeof *s);
}

/* out = in XOR the keystream, for n payload bytes from offset at (a multiple of 64: whole blocks).
** OpenSSL's ChaCha20 (its AVX2 code, 1.6 times libsodium's here): the IV is the block counter
** (little-endian), then the nonce, as in RFC 8439. The cipher is set once per context; later
** calls only set the key and the IV. */
static void xor_stream(dpy_auth_stream *s, uint8_t *out, const uint8_t *in, size_t n, size_t at) {
    if (s->failed)
        return;
    uint8_t iv[16];
    put32(iv, (uint32_t)(1 + at / 64));
    memcpy(iv + 4, s->nonce, 12);
    const EVP_CIPHER *c = EVP_CIPHER_CTX_get0_cipher(s->cipher) ? NULL : chacha20;
    int ok = EVP_EncryptInit_ex2(s->cipher, c, s->dir->key, iv, NULL) == 1;
    for (size_t off = 0; ok && off < n;) {
        int step = n - off < (1u << 30) ? (int)(n - off) : 1 << 30, got = 0;
        ok = EVP_EncryptUpdate(s->cipher, out + off, &got, in + off, step) == 1 && got == step;
        off += (size_t)step;
    }
    sodium_memzero(iv, sizeof iv);
    s->failed = !ok;   /* never with a keyed context */
}

int dpy_auth_seal_piece(dpy_auth_stream *s, const uint8_t *in, uint8_t *out, size_t n) {
    if (s->encrypt) {   /* pieces are whole keystream blocks, but for the last */
        xor_stream(s, out, in, n, s->done);
        mac_update(s, out, n);
    } else {
        mac_update(s, in, n);
    }
    s->done += n;
    return s->failed ? -1 : 0;
}

void dpy_auth_open_upto(dpy_auth_stream *s, uint8_t *data, size_t got) {
    if (got > s->done)
        mac_update(s, data + s->done, got - s->done);
    s->done = got;
    if (s->encrypt) {   /* deciphered a whole block at a time; the tail once it is all there */
        size_t upto = got == s->len ? got : got - got % 64;
        if (upto > s->clear)
            xor_stream(s, data + s->clear, data + s->clear, upto - s->clear, s->clear);
        s->clear = upto > s->clear ? upto : s->clear;
    }
}

static void finish(dpy_auth_stream *s, uint8_t tag[DPY_TAG_BYTES]) {
    if (s->encrypt) {
        uint8_t lengths[16];
        put64(lengths, 40);
        put64(lengths + 8, s->len);
        mac_update(s, zeros, (16 - s->len % 16) % 16);
        mac_update(s, lengths, sizeof lengths);
    }
    mac_final(s, tag);
}

int dpy_auth_seal_end(dpy_auth_dir *d, dpy_auth_stream *s, uint8_t trailer[DPY_TRAILER_BYTES]) {
    put64(trailer, s->seq);
    finish(s, trailer + 8);
    int rc = s->failed ? -1 : 0;
    d->seq = s->seq + 1;
    wipe(s);
    return rc;
}

int dpy_auth_open_end(dpy_auth_dir *d, dpy_auth_stream *s, uint8_t *data,
                      const uint8_t trailer[DPY_TRAILER_BYTES]) {
    uint64_t seq = get64(trailer);
    int rc = DPY_AUTH_REPLAYED;
    if (seq >= d->seq && seq != s->seq && s->done == s->len) {
        /* a later number than the next: the packets between were dropped (forged, say). The tag
        ** began under the next number: begin again under this one (a rare, slower path). */
        if (s->encrypt)
            xor_stream(s, data, data, s->clear, 0);   /* back to the ciphertext */
        int failed = s->failed;
        dpy_auth_dir at = *d;
        at.seq = seq;
        uint8_t hdr[40];
        memcpy(hdr, s->hdr, sizeof hdr);
        if (dpy_auth_begin(&at, s->encrypt, hdr, s->len, s) != 0)
            return DPY_AUTH_MEMORY;   /* begin left s wiped */
        s->failed = failed;   /* data may not be the ciphertext any more */
        s->dir = d;
        dpy_auth_open_upto(s, data, s->len);
    }
    if (seq >= d->seq) {   /* tcp keeps order: a later packet has a higher number */
        uint8_t want[DPY_TAG_BYTES];
        finish(s, want);
        rc = seq == s->seq && s->done == s->len && !s->failed && crypto_verify_16(want, trailer + 8) == 0
                 ? DPY_AUTH_OK
                 : DPY_AUTH_FORGED;
    }
    if (rc == DPY_AUTH_OK)
        d->seq = seq + 1;
    wipe(s);
    return rc;
}

int dpy_auth_seal(dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], const uint8_t *in,
                  uint8_t *out, size_t len, uint8_t trailer[DPY_TRAILER_BYTES]) {
    dpy_auth_stream s = {0};
    int rc = dpy_auth_begin(d, encrypt, hdr, len, &s);
    if (rc == 0) {
        rc = dpy_auth_seal_piece(&s, in, out, len);
        rc |= dpy_auth_seal_end(d, &s, trailer);
    }
    dpy_auth_stream_free(&s);
    return rc;
}

int dpy_auth_open(dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], uint8_t *data, size_t len,
                  const uint8_t trailer[DPY_TRAILER_BYTES]) {
    dpy_auth_stream s = {0};
    int rc = DPY_AUTH_MEMORY;
    if (dpy_auth_begin(d, encrypt, hdr, len, &s) == 0) {
        dpy_auth_open_upto(&s, data, len);
        rc = dpy_auth_open_end(d, &s, data, trailer);
    }
    dpy_auth_stream_free(&s);
    return rc;
}
