/* test_sparse.c: the sparse codec's byte layout, round trips in every value type, float16 and
** bfloat16 rounding against known values, every malformed stream refused with its reason, top-k
** against a brute-force selection, and seeded sampling. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "sparse.h"
#include "wavelet.h"

static char err[256];

/* float16 bits of float32 values, from Python's struct.pack('<e', x) (IEEE binary16, round half
** to even); 65520 (the tie between 65504 and 65536) is IEEE's Inf, which struct refuses to pack */
static const struct { float f; uint16_t h; } F16[] = {
    {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.5f, 0xc100}, {65504.0f, 0x7bff},
    {65519.98828125f, 0x7bff}, {65520.0f, 0x7c00}, {1e6f, 0x7c00},
    {5.960464477539063e-08f, 0x0001}, {2.9802322387695312e-08f, 0x0000},
    {2.980232949312267e-08f, 0x0001}, {8.940696716308594e-08f, 0x0002},
    {6.103515625e-05f, 0x0400}, {6.0999998822808266e-05f, 0x03ff}, {0.3333333432674408f, 0x3555},
    {0.10000000149011612f, 0x2e66}, {-1.0000000116860974e-07f, 0x8002}, {3.0517578125e-05f, 0x0200},
    {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}, {1.0009765625f, 0x3c01}, {1.00048828125f, 0x3c00},
    {1.00146484375f, 0x3c02}, {1.0000000031710769e-30f, 0x0000},
};

/* bfloat16: the top 16 bits of float32, rounded half to even (worked by hand) */
static const struct { float f; uint16_t h; } BF16[] = {
    {1.0f, 0x3f80}, {-2.0f, 0xc000}, {1.00390625f, 0x3f80} /* tie: even */,
    {1.01171875f, 0x3f82} /* tie: even */, {1.00390720f, 0x3f81} /* above the tie */,
    {3.4e38f, 0x7f80} /* rounds past the largest: Inf */, {INFINITY, 0x7f80},
};

static void test_conversions(void) {
    for (size_t i = 0; i < sizeof F16 / sizeof *F16; i++) {
        uint16_t h = dpy_f32_to_f16(F16[i].f);
        CHECK(h == F16[i].h);
        if (h != F16[i].h)
            fprintf(stderr, "  f16(%.9g) = 0x%04x, want 0x%04x\n", (double)F16[i].f, h, F16[i].h);
    }
    /* every finite float16 survives the trip back and forth */
    for (uint32_t h = 0; h < 65536; h++)
        if ((h & 0x7c00) != 0x7c00 && dpy_f32_to_f16(dpy_f16_to_f32((uint16_t)h)) != h) {
            CHECK(!"f16 round trip");
            fprintf(stderr, "  0x%04x\n", h);
            break;
        }
    CHECK(isnan(dpy_f16_to_f32(dpy_f32_to_f16(NAN))));
    CHECK(dpy_f16_to_f32(0x0001) == 0x1p-24f && dpy_f16_to_f32(0x7bff) == 65504.0f);
    for (size_t i = 0; i < sizeof BF16 / sizeof *BF16; i++) {
        uint16_t h = dpy_f32_to_bf16(BF16[i].f);
        CHECK(h == BF16[i].h);
        if (h != BF16[i].h)
            fprintf(stderr, "  bf16(%.9g) = 0x%04x, want 0x%04x\n", (double)BF16[i].f, h, BF16[i].h);
    }
    CHECK(isnan(dpy_bf16_to_f32(dpy_f32_to_bf16(NAN))));
    CHECK(dpy_bf16_to_f32(0x3f81) == 1.0078125f);
}

/* The bytes of a small encoding, worked by hand: indices 3, 130, 131 of 300 as deltas 3, 127,
** 1 (127 fits one LEB128 byte), values 1, -2, 0.5 as float32. */
static void test_layout(void) {
    int64_t idx[3] = {3, 130, 131};
    float val[3] = {1.0f, -2.0f, 0.5f};
    uint8_t buf[128];
    dpy_sparse_sizes s;
    long long n = dpy_sparse_encode(buf, sizeof buf, 300, idx, val, 3, DPY_SPARSE_F32,
                                    DPY_SPARSE_DELTAS, &s, err, sizeof err);
    CHECK(n == 32 + 3 + 12);
    CHECK(s.header == 32 && s.indices == 3 && s.values == 12);
    static const uint8_t head[] = {'D', 'P', 'S', 'P', 1, 1, 0, 0, 0x2c, 1, 0, 0, 0, 0, 0, 0,
                                   3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3, 127, 1,
                                   0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0x3f};
    CHECK(memcmp(buf, head, sizeof head) == 0);
    /* a delta of 128 takes two bytes: 0x80 0x01 */
    int64_t idx2[2] = {0, 128};
    n = dpy_sparse_encode(buf, sizeof buf, 300, idx2, val, 2, DPY_SPARSE_F16, DPY_SPARSE_DELTAS,
                          &s, err, sizeof err);
    CHECK(n == 32 + 3 + 4 && s.indices == 3 && s.values == 4);
    CHECK(buf[32] == 0 && buf[33] == 0x80 && buf[34] == 0x01);
    CHECK(buf[35] == 0x00 && buf[36] == 0x3c);   /* 1.0 as float16 */
}

static void test_round_trip(void) {
    const size_t n = 100000, k = 1000;
    int64_t *idx = malloc(k * sizeof *idx), *got = malloc(k * sizeof *got);
    float *val = malloc(k * sizeof *val), *out = malloc(k * sizeof *out);
    dpy_sparse_sample(idx, 42, n, k);
    for (size_t i = 0; i < k; i++)
        val[i] = (float)((double)i * 0.37 - 150.0);
    idx[k - 1] = (int64_t)n - 1;   /* the last index, to reach the bound */
    const int types[] = {DPY_SPARSE_F32, DPY_SPARSE_F16, DPY_SPARSE_BF16};
    for (int t = 0; t < 3; t++)
        for (int coding = 0; coding < 2; coding++) {
            size_t cap = dpy_sparse_bound(k, types[t], coding);
            uint8_t *buf = malloc(cap);
            long long len = dpy_sparse_encode(buf, cap, n, coding == DPY_SPARSE_DELTAS ? idx : NULL,
                                              val, k, types[t], coding, NULL, err, sizeof err);
            CHECK(len > 0);
            dpy_sparse_info info;
            CHECK(dpy_sparse_info_of(buf, (size_t)len, n, &info, err, sizeof err) == 0);
            CHECK(info.n == n && info.k == k && info.vtype == types[t] && info.coding == coding);
            CHECK(dpy_sparse_decode(buf, (size_t)len, n, got, out, k, err, sizeof err) == 0);
            size_t bad = 0;
            for (size_t i = 0; i < k; i++) {
                float want = types[t] == DPY_SPARSE_F32   ? val[i]
                             : types[t] == DPY_SPARSE_F16 ? dpy_f16_to_f32(dpy_f32_to_f16(val[i]))
                                                          : dpy_bf16_to_f32(dpy_f32_to_bf16(val[i]));
                bad += out[i] != want || (coding == DPY_SPARSE_DELTAS && got[i] != idx[i]);
            }
            CHECK(bad == 0);
            free(buf);
        }
    /* no values at all */
    uint8_t buf[64];
    long long len = dpy_sparse_encode(buf, sizeof buf, 10, NULL, NULL, 0, DPY_SPARSE_F32,
                                      DPY_SPARSE_DELTAS, NULL, err, sizeof err);
    CHECK(len == 32 && dpy_sparse_decode(buf, 32, 10, NULL, NULL, 0, err, sizeof err) == 0);
    free(idx), free(got), free(val), free(out);
}

/* A payload with the given index bytes and k float32 zero values; returns its length. */
static size_t forge(uint8_t *buf, uint64_t n, uint64_t k, const uint8_t *stream, size_t ib) {
    memcpy(buf, "DPSP\1\1\0\0", 8);
    for (int i = 0; i < 8; i++) {
        buf[8 + i] = (uint8_t)(n >> 8 * i);
        buf[16 + i] = (uint8_t)(k >> 8 * i);
        buf[24 + i] = (uint8_t)((uint64_t)ib >> 8 * i);
    }
    memcpy(buf + 32, stream, ib);
    memset(buf + 32 + ib, 0, (k < 64 ? k : 64) * 4);   /* the buffers hold 64 values at most */
    return 32 + ib + k * 4;
}

static void refuses(const uint8_t *buf, size_t len, uint64_t max_n, const char *why) {
    int64_t idx[64];
    float val[64];
    err[0] = '\0';
    dpy_sparse_info info;
    size_t k = dpy_sparse_info_of(buf, len, max_n, &info, err, sizeof err) == 0 ? info.k : 0;
    CHECK(k <= 64 && dpy_sparse_decode(buf, len, max_n, idx, val, k, err, sizeof err) != 0);
    CHECK_CONTAINS(err, why);
}

static void test_malformed(void) {
    uint8_t buf[512];
    const uint8_t ok[] = {3, 127, 1};
    size_t len = forge(buf, 300, 3, ok, 3);
    int64_t idx[3];
    float val[3];
    CHECK(dpy_sparse_decode(buf, len, 300, idx, val, 3, err, sizeof err) == 0);
    CHECK(idx[0] == 3 && idx[1] == 130 && idx[2] == 131);
    for (size_t cut = 0; cut < len; cut++)   /* every truncation is refused */
        refuses(buf, cut, 300, cut < 32 ? "no DPSP header" : "truncated");
    buf[len] = 0;
    refuses(buf, len + 1, 300, "oversized");
    refuses(buf, len, 299 /* the receiver's size */, "exceeds the limit of 299");
    const uint8_t out_of_range[] = {3, 127, 0xaa, 0x01};   /* 130 + 170 = 300, one past the end */
    refuses(buf, forge(buf, 300, 3, out_of_range, 4), 300, "index 300 (entry 2) outside 0..299");
    const uint8_t duplicate[] = {3, 0, 1};
    refuses(buf, forge(buf, 300, 3, duplicate, 3), 300, "duplicate index 3 (entry 1)");
    /* a decreasing index can only be written as a delta that wraps past 2^64 */
    const uint8_t wraps[] = {5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    refuses(buf, forge(buf, 300, 2, wraps, sizeof wraps), 300, "not increasing");
    const uint8_t too_long[] = {5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    refuses(buf, forge(buf, 300, 2, too_long, sizeof too_long), 300, "overflows 64 bits");
    const uint8_t overlong[] = {0x83, 0x00, 1};
    refuses(buf, forge(buf, 300, 2, overlong, 3), 300, "overlong varint");
    const uint8_t unfinished[] = {3, 0x80, 0x80};
    refuses(buf, forge(buf, 300, 2, unfinished, 3), 300, "ends inside entry 1");
    const uint8_t trailing[] = {3, 1, 1};
    refuses(buf, forge(buf, 300, 2, trailing, 3), 300, "1 bytes left after the 2 indices");
    refuses(buf, forge(buf, 300, 3, ok, 2), 300, "cannot hold 3 indices");
    refuses(buf, forge(buf, 2, 3, ok, 3), 300, "3 values for a vector of 2");
    forge(buf, 1u << 20, 1u << 20, ok, 3);
    refuses(buf, 35, 1u << 20, "cannot fit");   /* a header promising 2^20 values in 35 bytes */
    len = forge(buf, 300, 3, ok, 3);
    buf[4] = 2;
    refuses(buf, len, 300, "version 2");
    buf[4] = 1, buf[5] = 9;
    refuses(buf, len, 300, "unknown value type 9");
    buf[5] = 1, buf[6] = 5;
    refuses(buf, len, 300, "unknown index coding 5");
    buf[6] = 1;   /* implicit indices, but an index stream */
    refuses(buf, len, 300, "implicit indices");
    /* the encoder refuses what it could not write */
    int64_t unsorted[3] = {5, 4, 9}, big[1] = {300};
    CHECK(dpy_sparse_encode(buf, sizeof buf, 300, unsorted, val, 3, DPY_SPARSE_F32,
                            DPY_SPARSE_DELTAS, NULL, err, sizeof err) < 0);
    CHECK_CONTAINS(err, "strictly increasing, but entry 1 is 4 after 5");
    CHECK(dpy_sparse_encode(buf, sizeof buf, 300, big, val, 1, DPY_SPARSE_F32, DPY_SPARSE_DELTAS,
                            NULL, err, sizeof err) < 0);
    CHECK_CONTAINS(err, "index 300 (entry 0) outside 0..299");
    CHECK(dpy_sparse_encode(buf, 40, 300, idx, val, 3, DPY_SPARSE_F32, DPY_SPARSE_DELTAS, NULL,
                            err, sizeof err) < 0);
    CHECK_CONTAINS(err, "bytes of room");
}

/* top-k against a brute force: |x| descending, ties by lower index, then sorted by index */
static int by_magnitude(const void *a, const void *b, const float *x) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    float u = fabsf(x[i]), v = fabsf(x[j]);
    return u != v ? (u < v ? 1 : -1) : (i > j) - (i < j);
}
static const float *sort_x;
static int cmp_mag(const void *a, const void *b) { return by_magnitude(a, b, sort_x); }
static int cmp_idx(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    return (i > j) - (i < j);
}

static void test_topk(void) {
    const size_t n = 5000;
    float *x = malloc(n * sizeof *x);
    int64_t *all = malloc(n * sizeof *all), *got = malloc(n * sizeof *got);
    srand(3);
    for (size_t i = 0; i < n; i++)   /* few distinct magnitudes: many ties, both signs */
        x[i] = (float)(rand() % 200 - 100) * 0.125f;
    x[17] = NAN;
    for (size_t i = 0; i < n; i++)
        all[i] = (int64_t)i;
    sort_x = x;
    /* NaN sorts as largest in the brute force too */
    float saved = x[17];
    x[17] = INFINITY;
    qsort(all, n, sizeof *all, cmp_mag);
    x[17] = saved;
    const size_t ks[] = {0, 1, 7, 50, 333, 4999, 5000};
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        size_t k = ks[t];
        CHECK(dpy_sparse_topk(got, x, n, k) == 0);
        int64_t *want = malloc((k ? k : 1) * sizeof *want);
        memcpy(want, all, k * sizeof *want);
        qsort(want, k, sizeof *want, cmp_idx);
        CHECK(memcmp(got, want, k * sizeof *want) == 0);
        free(want);
    }
    free(x), free(all), free(got);
}

static void test_sample(void) {
    const size_t n = 1000, k = 100;
    int64_t a[100], b[100], c[100];
    dpy_sparse_sample(a, 7, n, k);
    dpy_sparse_sample(b, 7, n, k);
    dpy_sparse_sample(c, 8, n, k);
    CHECK(memcmp(a, b, sizeof a) == 0);   /* the seed alone decides */
    CHECK(memcmp(a, c, sizeof a) != 0);
    int sorted = 1;
    for (size_t i = 0; i < k; i++)
        sorted &= a[i] >= 0 && a[i] < (int64_t)n && (i == 0 || a[i] > a[i - 1]);
    CHECK(sorted);
    /* uniform: over many seeds each index is taken about k/n of the time */
    static unsigned hits[1000];
    for (uint64_t s = 0; s < 2000; s++) {
        dpy_sparse_sample(a, s, n, k);
        for (size_t i = 0; i < k; i++)
            hits[a[i]]++;
    }
    unsigned lo = 2000, hi = 0;
    for (size_t i = 0; i < n; i++)
        lo = hits[i] < lo ? hits[i] : lo, hi = hits[i] > hi ? hits[i] : hi;
    CHECK(lo > 140 && hi < 260);   /* mean 200, sd about 13.4 */
    int64_t all[5];
    dpy_sparse_sample(all, 1, 5, 5);
    CHECK(all[0] == 0 && all[4] == 4);
    /* k < n/32: Floyd's algorithm, k draws whatever n (a pass over 2^50 would not end) */
    CHECK(dpy_sparse_sample(a, 7, (size_t)1 << 50, k) == 0);
    sorted = 1;
    for (size_t i = 0; i < k; i++)
        sorted &= a[i] >= 0 && a[i] < (int64_t)1 << 50 && (i == 0 || a[i] > a[i - 1]);
    CHECK(sorted);
    memset(hits, 0, sizeof hits);
    for (uint64_t s = 0; s < 20000; s++) {   /* 10 of 1000: each index about 200 times */
        sorted &= dpy_sparse_sample(a, s, n, 10) == 0;
        for (size_t i = 0; i < 10; i++)
            hits[a[i]]++, sorted &= i == 0 || a[i] > a[i - 1];
    }
    CHECK(sorted);
    lo = 20000, hi = 0;
    for (size_t i = 0; i < n; i++)
        lo = hits[i] < lo ? hits[i] : lo, hi = hits[i] > hi ? hits[i] : hi;
    CHECK(lo > 140 && hi < 260);
}

/* Haar on 1 2 3 4 by hand (orthonormal: pairs (a + b) / sqrt 2, (a - b) / sqrt 2, then the same
** on the sums): 5, -2, -1/sqrt 2, -1/sqrt 2; Daubechies 4 keeps the energy (Parseval) and
** inverts; padding to a power of two; a member GSL does not have is an error, not an abort. */
static void test_wavelet(void) {
    const float x[4] = {1, 2, 3, 4};
    float c[4], y[4];
    CHECK(dpy_wavelet_forward(c, x, 4, DPY_WAVELET_HAAR, 2, err, sizeof err) == 0);
    const float want[4] = {5.0f, -2.0f, -0.70710678f, -0.70710678f};
    for (int i = 0; i < 4; i++)
        CHECK(fabsf(c[i] - want[i]) < 1e-6f);
    if (fabsf(c[1] - want[1]) > 1e-6f)
        fprintf(stderr, "  haar: %g %g %g %g\n", (double)c[0], (double)c[1], (double)c[2], (double)c[3]);
    const size_t n = 1000, m = dpy_wavelet_size(n);
    CHECK(m == 1024 && dpy_wavelet_size(1024) == 1024 && dpy_wavelet_size(0) == 1);
    float *v = malloc(n * sizeof *v), *co = malloc(m * sizeof *co), *back = malloc(n * sizeof *back);
    double e1 = 0, e2 = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        v[i] = (float)sin((double)i * 0.05) + (float)(i % 7) * 0.1f, e1 += (double)v[i] * v[i];
    CHECK(dpy_wavelet_forward(co, v, n, DPY_WAVELET_DAUBECHIES, 4, err, sizeof err) == 0);
    for (size_t i = 0; i < m; i++)
        e2 += (double)co[i] * co[i];
    CHECK(fabs(e1 - e2) < 1e-5 * e1);
    CHECK(dpy_wavelet_inverse(back, n, co, DPY_WAVELET_DAUBECHIES, 4, err, sizeof err) == 0);
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)back[i] - v[i]));
    CHECK(worst < 1e-5);
    CHECK(dpy_wavelet_inverse(y, 4, c, DPY_WAVELET_HAAR, 2, err, sizeof err) == 0);
    CHECK(fabsf(y[0] - 1) < 1e-6f && fabsf(y[3] - 4) < 1e-6f);
    CHECK(dpy_wavelet_forward(c, x, 4, DPY_WAVELET_DAUBECHIES, 5, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "has no member 5");
    free(v), free(co), free(back);
}

int main(void) {
    test_wavelet();
    test_conversions();
    test_layout();
    test_round_trip();
    test_malformed();
    test_topk();
    test_sample();
    return check_report("test_sparse");
}
