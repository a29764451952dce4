/* quantize.c: uniform asymmetric quantization of float vectors (see codec.h). */
#include <math.h>
#include <string.h>

#include "bytes.h"
#include "codec.h"
#include "dpy_core.h"

#define QUANT_HEADER 24

/* (n + chunk - 1) / chunk would wrap for a chunk near 2^64 and give 0 chunks */
static size_t chunks_of(size_t n, size_t chunk) {
    if (n == 0)
        return 0;
    if (chunk == 0 || chunk >= n)
        return 1;
    return n / chunk + (n % chunk != 0);
}

static size_t codes_size(size_t n, int bits) { return (n * (size_t)bits + 7) / 8; }

static int valid_bits(int bits) { return (bits >= 1 && bits <= 8) || bits == 16; }

size_t dpy_quant_size(size_t n, int bits, size_t chunk) {
    return QUANT_HEADER + chunks_of(n, chunk) * 8 + codes_size(n, bits);
}

/* The chunk's finite range, and whether it holds a NaN. */
static void range_of(const float *x, size_t n, float *lo, float *hi, int *nan) {
    float mn = INFINITY, mx = -INFINITY;
    int has_nan = 0;
    for (size_t i = 0; i < n; i++) {   /* NaN fails both comparisons */
        float v = x[i];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        has_nan |= v != v;
    }
    if (isinf(mn) || isinf(mx)) {      /* rare: look again, skipping the infinities */
        mn = INFINITY, mx = -INFINITY;
        for (size_t i = 0; i < n; i++)
            if (isfinite(x[i])) {
                mn = x[i] < mn ? x[i] : mn;
                mx = x[i] > mx ? x[i] : mx;
            }
        if (mn > mx)                   /* nothing finite: everything saturates to 0 */
            mn = mx = 0;
    }
    *lo = mn, *hi = mx, *nan = has_nan;
}

/* Packs codes LSB-first into a running bit stream. */
typedef struct { uint8_t *p; uint64_t acc; int nbits; } bitwriter;

static void quantize_chunk(bitwriter *w, const float *x, size_t n, int bits, float zero,
                           float inv) {
    const float top = (float)((1u << bits) - 1);
    for (size_t i = 0; i < n; i++) {
        float f = (x[i] - zero) * inv + 0.5f;
        f = !(f >= 0) ? 0 : (f > top ? top : f);   /* NaN -> 0 (its chunk decodes as NaN); +-Inf saturate */
        uint32_t q = (uint32_t)f;
        if (bits == 8) {
            *w->p++ = (uint8_t)q;
        } else if (bits == 16) {
            w->p[0] = (uint8_t)q, w->p[1] = (uint8_t)(q >> 8);
            w->p += 2;
        } else {
            w->acc |= (uint64_t)q << w->nbits;
            w->nbits += bits;
            while (w->nbits >= 8) {
                *w->p++ = (uint8_t)w->acc;
                w->acc >>= 8;
                w->nbits -= 8;
            }
        }
    }
}

int dpy_quant_encode(uint8_t *out, const float *x, size_t n, int bits, size_t chunk, char *err,
                     size_t errlen) {
    if (!valid_bits(bits))
        return dpy_fail(err, errlen, "quantization bits must be 1..8 or 16, got %d", bits);
    memcpy(out, "DPQ1", 4);
    out[4] = (uint8_t)bits;
    out[5] = out[6] = out[7] = 0;
    put64(out + 8, n);
    put64(out + 16, chunk);
    size_t nchunks = chunks_of(n, chunk), step = chunk ? chunk : n;
    uint8_t *params = out + QUANT_HEADER;
    bitwriter w = {params + nchunks * 8, 0, 0};
    for (size_t c = 0; c < nchunks; c++) {
        const float *xc = x + c * step;
        size_t m = c + 1 < nchunks ? step : n - c * step;
        float lo, hi;
        int nan;
        range_of(xc, m, &lo, &hi, &nan);
        float scale = (float)(((double)hi - lo) / ((1u << bits) - 1));
        float inv = scale > 0 ? 1.0f / scale : 0;
        if (nan)
            scale = NAN;
        memcpy(params + 8 * c, &scale, 4);
        memcpy(params + 8 * c + 4, &lo, 4);
        quantize_chunk(&w, xc, m, bits, lo, inv);
    }
    if (w.nbits > 0)
        *w.p = (uint8_t)w.acc;
    return 0;
}

int dpy_quant_count(const uint8_t *in, size_t len, size_t max, size_t *n, char *err,
                    size_t errlen) {
    if (len < QUANT_HEADER || memcmp(in, "DPQ1", 4) != 0)
        return dpy_fail(err, errlen, "not a quantized payload (%zu bytes, no DPQ1 header)", len);
    int bits = in[4];
    uint64_t count = get64(in + 8), chunk = get64(in + 16);
    if (!valid_bits(bits))
        return dpy_fail(err, errlen, "quantized payload: bad bit width %d", bits);
    if (count > len * 8)   /* at least one bit per value: rules out sizes that would overflow */
        return dpy_fail(err, errlen, "quantized payload: %llu values cannot fit in %zu bytes",
                        (unsigned long long)count, len);
    if (count > max)
        return dpy_fail(err, errlen, "quantized payload: %llu values exceed the limit of %zu",
                        (unsigned long long)count, max);
    if (dpy_quant_size(count, bits, chunk) != len)
        return dpy_fail(err, errlen,
                        "quantized payload: %zu bytes, but %llu values of %d bits take %zu",
                        len, (unsigned long long)count, bits, dpy_quant_size(count, bits, chunk));
    *n = count;
    return 0;
}

int dpy_quant_decode(float *out, size_t max, const uint8_t *in, size_t len, char *err,
                     size_t errlen) {
    size_t n, written = 0;
    if (dpy_quant_count(in, len, max, &n, err, errlen) != 0)
        return -1;
    int bits = in[4];
    size_t chunk = get64(in + 16), nchunks = chunks_of(n, chunk), step = chunk ? chunk : n;
    const uint8_t *params = in + QUANT_HEADER, *p = params + nchunks * 8;
    uint64_t acc = 0;
    int have = 0;
    const uint32_t mask = (1u << bits) - 1;
    for (size_t c = 0; c < nchunks; c++) {
        float scale, zero;
        memcpy(&scale, params + 8 * c, 4);
        memcpy(&zero, params + 8 * c + 4, 4);
        float *oc = out + c * step;
        size_t m = c + 1 < nchunks ? step : n - c * step;
        for (size_t i = 0; i < m; i++) {
            uint32_t q;
            if (bits == 8) {
                q = *p++;
            } else if (bits == 16) {
                q = (uint32_t)p[0] | (uint32_t)p[1] << 8;
                p += 2;
            } else {
                while (have < bits) {
                    acc |= (uint64_t)*p++ << have;
                    have += 8;
                }
                q = (uint32_t)acc & mask;
                acc >>= bits;
                have -= bits;
            }
            oc[i] = zero + (float)q * scale;   /* NaN scale: the chunk decodes as NaN */
        }
        written += m;
    }
    if (written != n)   /* the size check makes this impossible; never hand on unwritten memory */
        return dpy_fail(err, errlen, "quantized payload: %zu of %zu values decoded", written, n);
    return 0;
}
