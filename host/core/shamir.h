/*
** shamir.h: Shamir's t-out-of-n secret sharing (Shamir 1979) over the prime field GF(p),
** p = 2^61 - 1, for secure aggregation's dropout recovery (Bonawitz et al. 2017). A secret of
** len bytes (a multiple of 4) is cut into len / 4 little-endian 32-bit words; each word is the
** constant term of its own random polynomial of degree t - 1, evaluated at every holder's
** nonzero x. A share is then len / 4 field elements. Any t shares give the secret back; fewer
** give nothing about it. The randomness comes from the caller (a CSPRNG's bytes).
*/
#ifndef DPY_SHAMIR_H
#define DPY_SHAMIR_H

#include <stddef.h>
#include <stdint.h>

#define DPY_SHAMIR_PRIME ((UINT64_C(1) << 61) - 1)

/* Splits secret (len bytes, len a positive multiple of 4) among n holders at xs (distinct, in
** 1 .. p - 1) with threshold t (1 <= t <= n). random holds (t - 1) * (len / 4) words (any 64-bit
** values: reduced mod p). shares receives n * (len / 4) words, holder i's at i * (len / 4).
** Returns 0, or -1 with a reason in err. */
int dpy_shamir_split(const uint8_t *secret, size_t len, uint32_t t, const uint64_t *xs, size_t n,
                     const uint64_t *random, uint64_t *shares, char *err, size_t errlen);

/* Recovers the secret (len bytes) from k shares (k * (len / 4) words, share i at i * (len / 4))
** of the holders at xs (distinct, nonzero). With fewer than the threshold, or shares of
** different secrets, the words come out as random field elements: a word >= 2^32 is reported as
** inconsistent shares (-1 and a reason), which catches such a mix with probability 1 - 2^-29 per
** word. Returns 0 or -1. */
int dpy_shamir_combine(const uint64_t *xs, const uint64_t *shares, size_t k, size_t len,
                       uint8_t *secret, char *err, size_t errlen);

#endif
