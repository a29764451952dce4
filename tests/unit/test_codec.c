/* test_codec.c: quantization error bounds and packing, NaN/Inf handling, zstd and fpzip round
** trips, and malformed payloads refused with a message. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "codec.h"

static float *random_floats(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand() / RAND_MAX * 4.0f - 1.5f;
    return x;
}

/* Every decoded value within half a step of its chunk (plus float rounding), for every width. */
static void test_quant_error_bound(void) {
    const size_t n = 1001;
    float *x = random_floats(n, 7), *y = malloc(n * sizeof *y);
    char err[256];
    const int widths[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
    const size_t chunks[] = {0, 64, 1000};
    for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
        for (size_t c = 0; c < 3; c++) {
            int bits = widths[w];
            size_t chunk = chunks[c], len = dpy_quant_size(n, bits, chunk);
            uint8_t *buf = malloc(len);
            CHECK(dpy_quant_encode(buf, x, n, bits, chunk, err, sizeof err) == 0);
            size_t got = 0;
            CHECK(dpy_quant_count(buf, len, n, &got, err, sizeof err) == 0 && got == n);
            CHECK(dpy_quant_decode(y, n, buf, len, err, sizeof err) == 0);
            size_t step = chunk ? chunk : n, bad = 0;
            for (size_t s = 0; s < n; s += step) {
                size_t m = s + step < n ? step : n - s;
                float lo = x[s], hi = x[s];
                for (size_t i = s; i < s + m; i++)
                    lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
                double half = (hi - lo) / ((1u << bits) - 1) / 2;
                for (size_t i = s; i < s + m; i++)
                    bad += fabs((double)y[i] - x[i]) > half * (1 + 1e-5) + 1e-6;
            }
            CHECK(bad == 0);
            if (bad)
                fprintf(stderr, "  bits %d chunk %zu: %zu values off by more than half a step\n",
                        bits, chunk, bad);
            free(buf);
        }
    }
    /* tight packing: 1001 values of 3 bits take 376 bytes of codes */
    CHECK(dpy_quant_size(n, 3, 0) == 24 + 8 + 376);
    CHECK(dpy_quant_size(n, 8, 0) == 24 + 8 + 1001);
    CHECK(dpy_quant_size(n, 16, 100) == 24 + 11 * 8 + 2002);
    free(x);
    free(y);
}

static void test_quant_special_values(void) {
    float x[8] = {0.0f, 1.0f, INFINITY, -INFINITY, 0.5f, 0.25f, 2.0f, -1.0f};
    float y[8];
    char err[256];
    uint8_t buf[128];
    size_t len = dpy_quant_size(8, 8, 4);
    CHECK(dpy_quant_encode(buf, x, 8, 8, 4, err, sizeof err) == 0);
    CHECK(dpy_quant_decode(y, 8, buf, len, err, sizeof err) == 0);
    CHECK(y[2] == 1.0f && y[3] == 0.0f);   /* Inf saturates to the chunk's finite range */
    CHECK(y[6] == 2.0f && y[7] == -1.0f);
    x[5] = NAN;                             /* a NaN marks its whole chunk */
    CHECK(dpy_quant_encode(buf, x, 8, 8, 4, err, sizeof err) == 0);
    CHECK(dpy_quant_decode(y, 8, buf, len, err, sizeof err) == 0);
    CHECK(y[0] == 0.0f && isnan(y[4]) && isnan(y[7]));
    float c[3] = {2.5f, 2.5f, 2.5f};       /* a constant chunk decodes exactly */
    CHECK(dpy_quant_encode(buf, c, 3, 4, 0, err, sizeof err) == 0);
    CHECK(dpy_quant_decode(y, 8, buf, dpy_quant_size(3, 4, 0), err, sizeof err) == 0);
    CHECK(y[0] == 2.5f && y[2] == 2.5f);
    CHECK(dpy_quant_encode(buf, c, 3, 12, 0, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "bits must be 1..8 or 16, got 12");
}

static void test_quant_malformed(void) {
    float x[100] = {0}, y[100];
    char err[256];
    uint8_t buf[256];
    size_t len = dpy_quant_size(100, 8, 0);
    CHECK(dpy_quant_encode(buf, x, 100, 8, 0, err, sizeof err) == 0);
    size_t n;
    CHECK(dpy_quant_count(buf, len - 1, 100, &n, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "but 100 values of 8 bits take");
    buf[8] = 0xff, buf[15] = 0x7f;          /* an absurd count cannot overflow the size check */
    CHECK(dpy_quant_count(buf, len, (size_t)-1, &n, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot fit");
    buf[0] = 'X';
    CHECK(dpy_quant_decode(y, 100, buf, len, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not a quantized payload");
    /* the receiver's bound: a payload of more values than it expects is refused */
    CHECK(dpy_quant_encode(buf, x, 100, 8, 0, err, sizeof err) == 0);
    CHECK(dpy_quant_count(buf, len, 99, &n, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "100 values exceed the limit of 99");
}

/* A chunk size near 2^64 once wrapped the chunk count to 0: nothing decoded, success returned. */
static void test_quant_huge_chunk(void) {
    float x[100], y[100];
    char err[256];
    for (int i = 0; i < 100; i++)
        x[i] = (float)i;
    uint8_t buf[256];
    CHECK(dpy_quant_encode(buf, x, 100, 8, 0, err, sizeof err) == 0);
    /* the same header with chunk = 2^64 - 1 and no room for its one chunk's parameters */
    uint8_t forged[24 + 100];
    memcpy(forged, buf, 16);
    memset(forged + 16, 0xff, 8);
    memcpy(forged + 24, buf + 32, 100);
    for (int i = 0; i < 100; i++)
        y[i] = -7.0f;
    int rc = dpy_quant_decode(y, 100, forged, sizeof forged, err, sizeof err);
    size_t unwritten = 0;
    for (int i = 0; i < 100; i++)
        unwritten += y[i] == -7.0f;
    CHECK(rc == -1 || unwritten == 0);
    CHECK(rc == -1);
    /* a chunk larger than n is one chunk: the honest encoding of it decodes */
    CHECK(dpy_quant_size(100, 8, (size_t)-1) == 24 + 8 + 100);
    CHECK(dpy_quant_encode(buf, x, 100, 8, (size_t)-1, err, sizeof err) == 0);
    CHECK(dpy_quant_decode(y, 100, buf, 132, err, sizeof err) == 0 && y[99] == 99.0f);
}

/* A deterministic generator for the mutation tests (not rand(): the same on every libc). */
static uint32_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* Corrupt fpzip streams once crashed inside libfpzip (its symbol tables indexed unchecked):
** every mutation of a valid payload decodes or is refused, and the process lives. */
static void test_fpzip_corrupt(void) {
    enum { N = 64 };
    float x[N], y[N];
    char err[256];
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 0.37f - 3;
    uint8_t buf[4096], m[4096];
    long long len = dpy_fpzip_encode(buf, sizeof buf, x, N, 0, err, sizeof err);
    CHECK(len > 24);
    uint64_t seed = 17;
    int refused = 0;
    for (int it = 0; it < 60000; it++) {
        memcpy(m, buf, (size_t)len);
        int k = 1 + (int)(lcg(&seed) % 4);
        for (int j = 0; j < k; j++)
            m[24 + lcg(&seed) % (uint32_t)(len - 24)] = (uint8_t)lcg(&seed);
        refused += dpy_fpzip_decode(y, N, m, (size_t)len, err, sizeof err) != 0;
    }
    CHECK(refused > 0);
}

static void test_zstd(void) {
    const size_t n = 5000;
    float *x = random_floats(n, 3), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i += 2)
        x[i] = 0;                           /* something to compress */
    char err[256];
    size_t cap = dpy_zstd_bound(n * 4);
    uint8_t *buf = malloc(cap);
    long long len = dpy_zstd_encode(buf, cap, x, n * 4, 3, 4, err, sizeof err);
    CHECK(len > 0 && (size_t)len < n * 4);
    size_t size;
    int es;
    CHECK(dpy_zstd_size(buf, (size_t)len, 1 << 20, &size, &es, err, sizeof err) == 0);
    CHECK(size == n * 4 && es == 4);
    CHECK(dpy_zstd_decode(y, size, buf, (size_t)len, err, sizeof err) == 0);
    CHECK(memcmp(x, y, n * 4) == 0);
    CHECK(dpy_zstd_size(buf, (size_t)len, 1000, &size, &es, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "exceed the limit of 1000");
    buf[len / 2] ^= 0xff;                   /* a damaged frame: an error, not garbage */
    CHECK(dpy_zstd_decode(y, size, buf, (size_t)len, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "zstd payload: ");
    free(x), free(y), free(buf);
}

static void test_fpzip(void) {
    const size_t n = 4096;
    float *x = random_floats(n, 5), *y = malloc(n * sizeof *y);
    char err[256];
    size_t cap = dpy_fpzip_bound(n);
    uint8_t *buf = malloc(cap);
    long long len = dpy_fpzip_encode(buf, cap, x, n, 0, err, sizeof err);
    CHECK(len > 0);
    size_t got;
    CHECK(dpy_fpzip_count(buf, (size_t)len, n, &got, err, sizeof err) == 0 && got == n);
    CHECK(dpy_fpzip_decode(y, n, buf, (size_t)len, err, sizeof err) == 0);
    CHECK(memcmp(x, y, n * 4) == 0);        /* lossless */
    /* 20 bits: sign, 8 exponent bits and 11 of the 23 mantissa bits */
    long long lossy = dpy_fpzip_encode(buf, cap, x, n, 20, err, sizeof err);
    CHECK(lossy > 0 && lossy < len);
    CHECK(dpy_fpzip_decode(y, n, buf, (size_t)lossy, err, sizeof err) == 0);
    size_t far = 0;
    for (size_t i = 0; i < n; i++)
        far += fabsf(y[i] - x[i]) > fabsf(x[i]) * 0x1p-11f;
    CHECK(far == 0);
    CHECK(dpy_fpzip_encode(buf, cap, x, n, 40, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "precision must be 2..32");
    CHECK(dpy_fpzip_count(buf, (size_t)lossy - 1, n, &got, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "the header says");
    /* the receiver's bound comes first: more values than it expects are refused */
    CHECK(dpy_fpzip_count(buf, (size_t)lossy, n - 1, &got, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "4096 values exceed the limit of 4095");
    CHECK(dpy_fpzip_decode(y, n - 1, buf, (size_t)lossy, err, sizeof err) == -1);
    /* a DPF1 header promising 2^30 values over a stream of a few bytes: refused by the bound,
    ** not a 2^30-value decode (nor, as once, a 10 GB padded copy of the stream) */
    uint8_t tiny[64] = "DPF1";
    tiny[8 + 3] = 0x40;                     /* n = 2^30 */
    tiny[16] = 40;                          /* 40 stream bytes */
    CHECK(dpy_fpzip_decode(y, n, tiny, 64, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "1073741824 values exceed the limit of 4096");
    /* a valid stream whose own header says other dims than the payload's: refused */
    float sq[16] = {0};
    long long sl = dpy_fpzip_encode(buf, cap, sq, 16, 0, err, sizeof err);
    CHECK(sl > 0);
    buf[8] = 8;                             /* the DPF1 header says 8 values, the stream 16 */
    CHECK(dpy_fpzip_decode(y, n, buf, (size_t)sl, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not 8");
    free(x), free(y), free(buf);
}

int main(void) {
    test_quant_error_bound();
    test_quant_special_values();
    test_quant_malformed();
    test_quant_huge_chunk();
    test_zstd();
    test_fpzip();
    test_fpzip_corrupt();
    return check_report("codec");
}
