/* auth.c: the run key, the handshake's proofs and keys, and packet tags (see auth.h). */
#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bytes.h"
#include "dpy_core.h"

int dpy_auth_init(char *err, size_t errlen) {
    if (sodium_init() < 0)
        return dpy_fail(err, errlen, "libsodium cannot start");
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

#define TRANSCRIPT (8 + 4 + 4 + 2 * DPY_NONCE_BYTES + 1)

static void transcript(const dpy_handshake *hs, uint8_t out[TRANSCRIPT]) {
    put64(out, hs->run_id);
    put32(out + 8, hs->connector);
    put32(out + 12, hs->acceptor);
    memcpy(out + 16, hs->nonce_c, DPY_NONCE_BYTES);
    memcpy(out + 16 + DPY_NONCE_BYTES, hs->nonce_a, DPY_NONCE_BYTES);
    out[16 + 2 * DPY_NONCE_BYTES] = hs->flags;
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

static void nonce_of(uint64_t seq, uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES]) {
    memset(nonce, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
    put64(nonce, seq);
}

/* Poly1305 over header and payload under the packet's one-time key (ChaCha20's first block) */
static void mac(const dpy_auth_dir *d, const uint8_t nonce[], const uint8_t hdr[40],
                const uint8_t *data, size_t len, uint8_t tag[DPY_TAG_BYTES]) {
    uint8_t otk[crypto_onetimeauth_poly1305_KEYBYTES];
    crypto_stream_chacha20_ietf(otk, sizeof otk, nonce, d->key);
    crypto_onetimeauth_poly1305_state st;
    crypto_onetimeauth_poly1305_init(&st, otk);
    crypto_onetimeauth_poly1305_update(&st, hdr, 40);
    crypto_onetimeauth_poly1305_update(&st, data, len);
    crypto_onetimeauth_poly1305_final(&st, tag);
    sodium_memzero(otk, sizeof otk);
}

void dpy_auth_seal(dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], const uint8_t *in,
                   uint8_t *out, size_t len, uint8_t trailer[DPY_TRAILER_BYTES]) {
    uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    put64(trailer, d->seq);
    nonce_of(d->seq++, nonce);
    if (encrypt)
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(out, trailer + 8, NULL, in, len, hdr,
                                                           40, NULL, nonce, d->key);
    else
        mac(d, nonce, hdr, in, len, trailer + 8);
}

int dpy_auth_open(dpy_auth_dir *d, int encrypt, const uint8_t hdr[40], uint8_t *data, size_t len,
                  const uint8_t trailer[DPY_TRAILER_BYTES]) {
    uint64_t seq = get64(trailer);
    if (seq < d->seq)
        return DPY_AUTH_REPLAYED;
    uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    nonce_of(seq, nonce);
    int ok;
    if (encrypt) {
        ok = crypto_aead_chacha20poly1305_ietf_decrypt_detached(data, NULL, data, len, trailer + 8,
                                                                hdr, 40, nonce, d->key) == 0;
    } else {
        uint8_t want[DPY_TAG_BYTES];
        mac(d, nonce, hdr, data, len, want);
        ok = crypto_verify_16(want, trailer + 8) == 0;
    }
    if (!ok)
        return DPY_AUTH_FORGED;
    d->seq = seq + 1;   /* tcp keeps order: a later packet has a higher number */
    return DPY_AUTH_OK;
}
