/* test_shamir.c: Shamir sharing over GF(2^61 - 1) against shares computed independently
** (tests/fixtures/secagg/reference.py, pure Python), and its refusals. */
#include <stdint.h>

#include "check.h"
#include "shamir.h"

#define WORDS 8

/* reference.py: P = 2**61 - 1; a_0 = the secret's little-endian words (bytes 1 .. 32), a_c = random
** word (c - 1) * 8 + w mod P; share = sum a_c x^c mod P. */
static const uint64_t RANDOM[2 * WORDS] = {
    UINT64_C(0x9e3779b97f4a7c15), UINT64_C(0x3c6ef372fe94f8aa), UINT64_C(0xdaa66d2c7ddf753f),
    UINT64_C(0x78dde6e5fd29f1d4), UINT64_C(0x1715609f7c746e69), UINT64_C(0xb54cda58fbbeeafe),
    UINT64_C(0x538454127b096793), UINT64_C(0xf1bbcdcbfa53e328), UINT64_C(0x8ff34785799e58bd),
    UINT64_C(0x2e2ac13ef8e8dc52), UINT64_C(0xcc623af8783351e7), UINT64_C(0x6a99b4b1f77dd57c),
    UINT64_C(0x08d12e6b76c84b11), UINT64_C(0xa708a824f612cfa6), UINT64_C(0x454021de755d423b),
    UINT64_C(0xe3779b97f4a7c6d0)};
static const uint64_t XS[4] = {1, 2, 5, 9};
static const uint64_t EXPECTED[4][WORDS] = {
    {UINT64_C(0x0e2ac13efcebd6dc), UINT64_C(0x0a99b4b1ff84db04), UINT64_C(0x0708a825021dd13c),
     UINT64_C(0x03779b9804b6d564), UINT64_C(0x1fe68f0b074fcb8b), UINT64_C(0x1c55827e09e8d0c3),
     UINT64_C(0x18c475f10c81c3eb), UINT64_C(0x153369640f1ac823)},
    {UINT64_C(0x1c3c1188e9115d3a), UINT64_C(0x1188ebe1e8d468aa), UINT64_C(0x06d5c63ae8973c4a),
     UINT64_C(0x1c22a093e85a47b9), UINT64_C(0x116f7aece81d1b29), UINT64_C(0x06bc5545e7e02ac9),
     UINT64_C(0x1c092f9ee7a2f238), UINT64_C(0x115609f7e765ffd8)},
    {UINT64_C(0x05d75ca860ee1968), UINT64_C(0x1057a0654fad6586), UINT64_C(0x1ad7e4223e6b5494),
     UINT64_C(0x055827df2d2aa0b3), UINT64_C(0x0fd86b9c1be88ed1), UINT64_C(0x1a58af590aa7f4df),
     UINT64_C(0x04d8f315f96597fe), UINT64_C(0x0f5936d2e824f90c)},
    {UINT64_C(0x1bece8c0f8bb7423), UINT64_C(0x1b6db3f7bcf17a76), UINT64_C(0x1aee7f2e81231599),
     UINT64_C(0x1a6f4a6545591bec), UINT64_C(0x19f0159c098ab43f), UINT64_C(0x1970e0d2cdc10e62),
     UINT64_C(0x18f1ac0991f1b3b5), UINT64_C(0x18727740562804d8)}};

static uint8_t SECRET[4 * WORDS];

static void test_split_matches_reference(void) {
    uint64_t shares[4 * WORDS];
    char err[128];
    CHECK(dpy_shamir_split(SECRET, sizeof SECRET, 3, XS, 4, RANDOM, shares, err, sizeof err) == 0);
    CHECK(memcmp(shares, EXPECTED, sizeof shares) == 0);
}

/* Any 3 of the 4 shares, and all 4, give the secret; 2 do not. */
static void test_combine(void) {
    static const int SUBSETS[][4] = {{0, 1, 2, -1}, {0, 1, 3, -1}, {1, 2, 3, -1}, {3, 0, 2, -1},
                                     {0, 1, 2, 3}};
    char err[128];
    for (size_t s = 0; s < sizeof SUBSETS / sizeof SUBSETS[0]; s++) {
        uint64_t xs[4], ys[4 * WORDS];
        size_t k = 0;
        for (int i = 0; i < 4 && SUBSETS[s][i] >= 0; i++, k++) {
            xs[k] = XS[SUBSETS[s][i]];
            memcpy(ys + k * WORDS, EXPECTED[SUBSETS[s][i]], sizeof EXPECTED[0]);
        }
        uint8_t out[4 * WORDS] = {0};
        CHECK(dpy_shamir_combine(xs, ys, k, sizeof out, out, err, sizeof err) == 0);
        CHECK(memcmp(out, SECRET, sizeof out) == 0);
    }
    uint8_t out[4 * WORDS];
    CHECK(dpy_shamir_combine(XS, &EXPECTED[0][0], 2, sizeof out, out, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "inconsistent shares");
}

/* Threshold 1: every share is the secret itself; a round trip at the largest x. */
static void test_edges(void) {
    char err[128];
    uint64_t x = DPY_SHAMIR_PRIME - 1, share[WORDS];
    CHECK(dpy_shamir_split(SECRET, sizeof SECRET, 1, &x, 1, NULL, share, err, sizeof err) == 0);
    for (int w = 0; w < WORDS; w++)
        CHECK(share[w] == (uint64_t)SECRET[4 * w] + ((uint64_t)SECRET[4 * w + 1] << 8) +
                              ((uint64_t)SECRET[4 * w + 2] << 16) + ((uint64_t)SECRET[4 * w + 3] << 24));
    uint8_t out[4 * WORDS];
    CHECK(dpy_shamir_combine(&x, share, 1, sizeof out, out, err, sizeof err) == 0);
    CHECK(memcmp(out, SECRET, sizeof out) == 0);
}

static void test_refusals(void) {
    char err[128];
    uint64_t shares[4 * WORDS], dup[2] = {3, 3}, zero[2] = {0, 1}, big[1] = {DPY_SHAMIR_PRIME};
    CHECK(dpy_shamir_split(SECRET, 6, 1, XS, 1, RANDOM, shares, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "multiple of 4");
    CHECK(dpy_shamir_split(SECRET, 32, 5, XS, 4, RANDOM, shares, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "threshold");
    CHECK(dpy_shamir_split(SECRET, 32, 0, XS, 4, RANDOM, shares, err, sizeof err) == -1);
    CHECK(dpy_shamir_split(SECRET, 32, 2, dup, 2, RANDOM, shares, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "share x = 3");
    CHECK(dpy_shamir_split(SECRET, 32, 1, zero, 2, RANDOM, shares, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "holder 1's x = 0");
    CHECK(dpy_shamir_combine(big, shares, 1, 32, SECRET, err, sizeof err) == -1);
    uint64_t bad[WORDS] = {DPY_SHAMIR_PRIME};
    CHECK(dpy_shamir_combine(XS, bad, 1, 32, SECRET, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not a field element");
    CHECK(dpy_shamir_combine(XS, shares, 0, 32, SECRET, err, sizeof err) == -1);
}

int main(void) {
    for (int i = 0; i < 4 * WORDS; i++)
        SECRET[i] = (uint8_t)(i + 1);
    test_split_matches_reference();
    test_combine();
    test_edges();
    test_refusals();
    return check_report("shamir");
}
