/* shamir.c: Shamir secret sharing over GF(2^61 - 1); see shamir.h. */
#include "shamir.h"

#include <stdio.h>

#define P DPY_SHAMIR_PRIME

/* a mod p for any 64-bit a (2^61 = 1 mod p). */
static uint64_t reduce(uint64_t a) {
    a = (a & P) + (a >> 61);
    return a >= P ? a - P : a;
}

static uint64_t add(uint64_t a, uint64_t b) {
    uint64_t s = a + b;   /* a, b < 2^61: no overflow */
    return s >= P ? s - P : s;
}

static uint64_t sub(uint64_t a, uint64_t b) { return a >= b ? a - b : a + P - b; }

static uint64_t mul(uint64_t a, uint64_t b) {
    unsigned __int128 m = (unsigned __int128)a * b;   /* < 2^122 */
    uint64_t lo = (uint64_t)m & P, hi = (uint64_t)(m >> 61);
    return reduce(lo + hi);   /* hi < 2^61, lo < 2^61 */
}

/* a^(p-2): the inverse of a nonzero a (Fermat). */
static uint64_t inverse(uint64_t a) {
    uint64_t r = 1, e = P - 2;
    while (e) {
        if (e & 1)
            r = mul(r, a);
        a = mul(a, a);
        e >>= 1;
    }
    return r;
}

static int fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* Checks the holders' xs: nonzero, below p, distinct. */
static int check_xs(const uint64_t *xs, size_t n, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (xs[i] == 0 || xs[i] >= P) {
            snprintf(err, errlen, "holder %zu's x = %llu is not in 1 .. 2^61 - 2", i + 1,
                     (unsigned long long)xs[i]);
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (xs[j] == xs[i]) {
                snprintf(err, errlen, "holders %zu and %zu share x = %llu", j + 1, i + 1,
                         (unsigned long long)xs[i]);
                return -1;
            }
        }
    }
    return 0;
}

int dpy_shamir_split(const uint8_t *secret, size_t len, uint32_t t, const uint64_t *xs, size_t n,
                     const uint64_t *random, uint64_t *shares, char *err, size_t errlen) {
    if (len == 0 || len % 4 != 0)
        return fail(err, errlen, "the secret's length must be a positive multiple of 4 bytes");
    if (t < 1 || t > n)
        return fail(err, errlen, "the threshold must be in 1 .. the number of holders");
    if (check_xs(xs, n, err, errlen) != 0)
        return -1;
    size_t words = len / 4;
    for (size_t w = 0; w < words; w++) {
        const uint8_t *s = secret + 4 * w;
        uint64_t a0 = (uint64_t)s[0] | (uint64_t)s[1] << 8 | (uint64_t)s[2] << 16 |
                      (uint64_t)s[3] << 24;
        for (size_t i = 0; i < n; i++) {
            /* Horner, from the highest coefficient down to a0 */
            uint64_t y = 0;
            for (uint32_t c = t - 1; c >= 1; c--)
                y = add(mul(y, xs[i]), reduce(random[(c - 1) * words + w]));
            shares[i * words + w] = add(mul(y, xs[i]), a0);
        }
    }
    return 0;
}

int dpy_shamir_combine(const uint64_t *xs, const uint64_t *shares, size_t k, size_t len,
                       uint8_t *secret, char *err, size_t errlen) {
    if (len == 0 || len % 4 != 0)
        return fail(err, errlen, "the secret's length must be a positive multiple of 4 bytes");
    if (k == 0)
        return fail(err, errlen, "no shares");
    if (check_xs(xs, k, err, errlen) != 0)
        return -1;
    size_t words = len / 4;
    for (size_t i = 0; i < k * words; i++)
        if (shares[i] >= P)
            return fail(err, errlen, "a share's value is not a field element (>= 2^61 - 1)");
    for (size_t w = 0; w < words; w++) {
        /* Lagrange at 0: sum_i y_i prod_{j != i} x_j / (x_j - x_i) */
        uint64_t s = 0;
        for (size_t i = 0; i < k; i++) {
            uint64_t num = 1, den = 1;
            for (size_t j = 0; j < k; j++) {
                if (j == i)
                    continue;
                num = mul(num, xs[j]);
                den = mul(den, sub(xs[j], xs[i]));
            }
            s = add(s, mul(shares[i * words + w], mul(num, inverse(den))));
        }
        if (s >> 32)
            return fail(err, errlen, "inconsistent shares (too few, or of different secrets)");
        uint8_t *o = secret + 4 * w;
        o[0] = (uint8_t)s, o[1] = (uint8_t)(s >> 8), o[2] = (uint8_t)(s >> 16), o[3] = (uint8_t)(s >> 24);
    }
    return 0;
}
