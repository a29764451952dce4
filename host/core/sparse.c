/* sparse.c: the sparse-vector wire codec, top-k selection and seeded sampling (see sparse.h). */
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "dpy_core.h"
#include "sparse.h"

#define VERSION 1
#define MAX_VARINT 10   /* a u64 in LEB128 */

size_t dpy_sparse_value_size(int vtype) {
    return vtype == DPY_SPARSE_F32 ? 4 : (vtype == DPY_SPARSE_F16 || vtype == DPY_SPARSE_BF16) ? 2 : 0;
}

size_t dpy_sparse_bound(size_t k, int vtype, int coding) {
    return DPY_SPARSE_HEADER + (coding == DPY_SPARSE_DELTAS ? k * MAX_VARINT : 0) +
           k * dpy_sparse_value_size(vtype);
}

/* {==== value conversions ====} */

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t dpy_f32_to_f16(float f) {
    uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax > 0x7f800000)                 /* NaN: quiet, keeping the payload's top bits */
        return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000)                /* 65520 and up round to Inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax >= 0x38800000)                /* normal: rebias the exponent, round the mantissa */
        return (uint16_t)(sign | ((ax - 0x38000000 + 0xfff + ((ax >> 13) & 1)) >> 13));
    uint32_t e = ax >> 23;
    if (e < 102)                         /* below half the smallest subnormal (2^-25): zero */
        return (uint16_t)sign;
    uint32_t m = (ax & 0x7fffff) | 0x800000, shift = 126 - e;   /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    q += rem > half || (rem == half && (q & 1));
    return (uint16_t)(sign | q);
}

float dpy_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float v = (float)m * 0x1p-24f;   /* subnormal (or zero): exact */
        return sign ? -v : v;
    }
    if (e == 31)
        return float_of(sign | 0x7f800000 | (m << 13));
    return float_of(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t dpy_f32_to_bf16(float f) {
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);   /* NaN stays NaN (quiet), even if rounding would clear it */
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

float dpy_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

/* {==== the codec ====} */

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

long long dpy_sparse_encode(uint8_t *out, size_t cap, uint64_t n, const int64_t *idx,
                            const float *val, size_t k, int vtype, int coding,
                            dpy_sparse_sizes *sizes, char *err, size_t errlen) {
    size_t vs = dpy_sparse_value_size(vtype);
    if (vs == 0)
        return dpy_fail(err, errlen, "sparse: unknown value type %d", vtype);
    if (coding != DPY_SPARSE_DELTAS && coding != DPY_SPARSE_IMPLICIT)
        return dpy_fail(err, errlen, "sparse: unknown index coding %d", coding);
    if (k > n)
        return dpy_fail(err, errlen, "sparse: %zu values for a vector of %llu", k,
                        (unsigned long long)n);
    if (cap < dpy_sparse_bound(k, vtype, coding))
        return dpy_fail(err, errlen, "sparse: %zu bytes of room, %zu needed", cap,
                        dpy_sparse_bound(k, vtype, coding));
    uint8_t *p = out + DPY_SPARSE_HEADER;
    if (coding == DPY_SPARSE_DELTAS) {
        uint64_t prev = 0;
        for (size_t i = 0; i < k; i++) {
            if (idx[i] < 0 || (uint64_t)idx[i] >= n)
                return dpy_fail(err, errlen, "sparse: index %lld (entry %zu) outside 0..%llu",
                                (long long)idx[i], i, (unsigned long long)n - 1);
            if (i > 0 && (uint64_t)idx[i] <= prev)
                return dpy_fail(err, errlen, "sparse: indices must be strictly increasing, but "
                                "entry %zu is %lld after %llu", i, (long long)idx[i],
                                (unsigned long long)prev);
            p = put_varint(p, (uint64_t)idx[i] - prev);
            prev = (uint64_t)idx[i];
        }
    }
    size_t index_bytes = (size_t)(p - out) - DPY_SPARSE_HEADER;
    if (vtype == DPY_SPARSE_F32) {
        for (size_t i = 0; i < k; i++, p += 4)
            put32(p, bits_of(val[i]));
    } else {
        uint16_t (*conv)(float) = vtype == DPY_SPARSE_F16 ? dpy_f32_to_f16 : dpy_f32_to_bf16;
        for (size_t i = 0; i < k; i++, p += 2)
            put16(p, conv(val[i]));
    }
    memcpy(out, "DPSP", 4);
    out[4] = VERSION, out[5] = (uint8_t)vtype, out[6] = (uint8_t)coding, out[7] = 0;
    put64(out + 8, n);
    put64(out + 16, k);
    put64(out + 24, index_bytes);
    if (sizes)
        *sizes = (dpy_sparse_sizes){DPY_SPARSE_HEADER, index_bytes, k * vs};
    return (long long)(p - out);
}

int dpy_sparse_info_of(const uint8_t *in, size_t len, uint64_t max_n, dpy_sparse_info *info,
                       char *err, size_t errlen) {
    if (len < DPY_SPARSE_HEADER || memcmp(in, "DPSP", 4) != 0)
        return dpy_fail(err, errlen, "not a sparse payload (%zu bytes, no DPSP header)", len);
    if (in[4] != VERSION)
        return dpy_fail(err, errlen, "sparse payload: version %d, this build reads %d", in[4], VERSION);
    int vtype = in[5], coding = in[6];
    size_t vs = dpy_sparse_value_size(vtype);
    if (vs == 0)
        return dpy_fail(err, errlen, "sparse payload: unknown value type %d", vtype);
    if (coding != DPY_SPARSE_DELTAS && coding != DPY_SPARSE_IMPLICIT)
        return dpy_fail(err, errlen, "sparse payload: unknown index coding %d", coding);
    if (in[7] != 0)
        return dpy_fail(err, errlen, "sparse payload: reserved byte 7 is %d, not 0", in[7]);
    uint64_t n = get64(in + 8), k = get64(in + 16), ib = get64(in + 24);
    if (n > max_n)
        return dpy_fail(err, errlen, "sparse payload: a vector of %llu values exceeds the limit of %llu",
                        (unsigned long long)n, (unsigned long long)max_n);
    if (k > n)
        return dpy_fail(err, errlen, "sparse payload: %llu values for a vector of %llu",
                        (unsigned long long)k, (unsigned long long)n);
    /* each value takes vs bytes and each index at least one: bounds k before any product */
    if (k > len)
        return dpy_fail(err, errlen, "sparse payload: %llu values cannot fit in %zu bytes",
                        (unsigned long long)k, len);
    if (coding == DPY_SPARSE_IMPLICIT ? ib != 0 : (ib < k || ib > k * MAX_VARINT))
        return dpy_fail(err, errlen, "sparse payload: an index stream of %llu bytes cannot hold "
                        "%llu %s", (unsigned long long)ib, (unsigned long long)k,
                        coding == DPY_SPARSE_IMPLICIT ? "implicit indices" : "indices");
    size_t want = DPY_SPARSE_HEADER + (size_t)ib + (size_t)k * vs;
    if (len < want)
        return dpy_fail(err, errlen, "sparse payload: truncated (%zu bytes, the header says %zu)",
                        len, want);
    if (len > want)
        return dpy_fail(err, errlen, "sparse payload: oversized (%zu bytes, the header says %zu)",
                        len, want);
    *info = (dpy_sparse_info){n, k, vtype, coding, (size_t)ib};
    return 0;
}

int dpy_sparse_decode(const uint8_t *in, size_t len, uint64_t max_n, int64_t *idx, float *val,
                      size_t k, char *err, size_t errlen) {
    dpy_sparse_info info;
    if (dpy_sparse_info_of(in, len, max_n, &info, err, errlen) != 0)
        return -1;
    if (info.k != k)
        return dpy_fail(err, errlen, "sparse payload: %llu values, room for %zu",
                        (unsigned long long)info.k, k);
    const uint8_t *p = in + DPY_SPARSE_HEADER, *end = p + info.index_bytes;
    if (info.coding == DPY_SPARSE_DELTAS) {
        uint64_t prev = 0;
        for (size_t i = 0; i < k; i++) {
            uint64_t d = 0;
            int shift = 0;
            for (;;) {
                if (p == end)
                    return dpy_fail(err, errlen, "sparse payload: the index stream ends inside "
                                    "entry %zu of %zu", i, k);
                uint8_t b = *p++;
                if (shift == 63 && b > 1)
                    return dpy_fail(err, errlen, "sparse payload: entry %zu's delta overflows 64 bits", i);
                d |= (uint64_t)(b & 0x7f) << shift;
                if (!(b & 0x80)) {
                    if (b == 0 && shift > 0)
                        return dpy_fail(err, errlen, "sparse payload: entry %zu's delta is an "
                                        "overlong varint", i);
                    break;
                }
                shift += 7;
            }
            if (i > 0 && d == 0)
                return dpy_fail(err, errlen, "sparse payload: duplicate index %llu (entry %zu)",
                                (unsigned long long)prev, i);
            uint64_t at = prev + d;
            if (at < prev)
                return dpy_fail(err, errlen, "sparse payload: indices not increasing (entry "
                                "%zu's delta wraps past 2^64)", i);
            if (at >= info.n)
                return dpy_fail(err, errlen, "sparse payload: index %llu (entry %zu) outside "
                                "0..%llu", (unsigned long long)at, i,
                                (unsigned long long)info.n - 1);
            idx[i] = (int64_t)at;
            prev = at;
        }
        if (p != end)
            return dpy_fail(err, errlen, "sparse payload: %zu bytes left after the %zu indices",
                            (size_t)(end - p), k);
    }
    if (info.vtype == DPY_SPARSE_F32) {
        for (size_t i = 0; i < k; i++, p += 4)
            val[i] = float_of(get32(p));
    } else {
        float (*conv)(uint16_t) = info.vtype == DPY_SPARSE_F16 ? dpy_f16_to_f32 : dpy_bf16_to_f32;
        for (size_t i = 0; i < k; i++, p += 2)
            val[i] = conv(get16(p));
    }
    return 0;
}

/* {==== top-k and sampling ====} */

/* |x| as an integer that orders like the magnitude (NaN above Inf). */
static inline uint32_t key_of(float f) { return bits_of(f) & 0x7fffffff; }

/* Radix selection of the k-th largest key (two 16-bit passes), then one pass in index order:
** three reads of x, no sort, no copy. */
int dpy_sparse_topk(int64_t *idx, const float *x, size_t n, size_t k) {
    if (k == 0)
        return 0;
    if (k >= n) {
        for (size_t i = 0; i < n; i++)
            idx[i] = (int64_t)i;
        return 0;
    }
    size_t *count = calloc(65536, sizeof *count);
    if (!count)
        return -1;
    for (size_t i = 0; i < n; i++)
        count[key_of(x[i]) >> 16]++;
    size_t above = 0;   /* keys in higher bins */
    uint32_t hi = 65535;
    while (above + count[hi] < k)
        above += count[hi--];
    memset(count, 0, 65536 * sizeof *count);
    for (size_t i = 0; i < n; i++) {
        uint32_t key = key_of(x[i]);
        if (key >> 16 == hi)
            count[key & 0xffff]++;
    }
    uint32_t lo = 65535;
    while (above + count[lo] < k)
        above += count[lo--];
    free(count);
    uint32_t t = hi << 16 | lo;
    size_t ties = k - above, m = 0;   /* keys equal to t to take, lowest indices first */
    for (size_t i = 0; i < n && m < k; i++) {
        uint32_t key = key_of(x[i]);
        if (key > t || (key == t && ties > 0)) {
            ties -= key == t;
            idx[m++] = (int64_t)i;
        }
    }
    return 0;
}

static inline uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in 0..bound-1 (bound >= 1): Lemire's multiply-shift, rejecting the few products that
** would bias it (no modulo bias). */
static uint64_t below(uint64_t *s, uint64_t bound) {
    __uint128_t m = (__uint128_t)splitmix64(s) * bound;
    if ((uint64_t)m < bound) {
        uint64_t least = -bound % bound;   /* 2^64 mod bound */
        while ((uint64_t)m < least)
            m = (__uint128_t)splitmix64(s) * bound;
    }
    return (uint64_t)(m >> 64);
}

/* Where value v goes in an open-addressed set of cap (a power of two) slots. */
static size_t slot_of(uint64_t v, size_t cap) {
    return (size_t)((v * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

/* Floyd's algorithm (Bentley and Floyd, CACM 1987): for j = n-k .. n-1 take a uniform t in 0..j,
** or j itself when t is taken already: every k-subset equally likely, k draws. Then sorted by a
** bucket pass (value v to bucket v*k/n: O(1) values a bucket, expected) and an insertion sort
** that has little left to do. O(k) expected time and memory. */
static int floyd(int64_t *idx, uint64_t seed, size_t n, size_t k) {
    size_t cap = 4;
    while (cap < 2 * k)
        cap <<= 1;
    uint64_t *set = calloc(cap, sizeof *set);   /* value + 1; 0: an empty slot */
    size_t *start = calloc(k + 1, sizeof *start);
    if (!set || !start) {
        free(set), free(start);
        return -1;
    }
    uint64_t s = seed;
    for (size_t j = n - k; j < n; j++) {
        uint64_t t = below(&s, (uint64_t)j + 1);
        size_t at = slot_of(t, cap);
        while (set[at] && set[at] != t + 1)
            at = (at + 1) & (cap - 1);
        if (set[at]) {   /* taken: j is not (every earlier value is below j) */
            t = j;
            at = slot_of(t, cap);
            while (set[at])
                at = (at + 1) & (cap - 1);
        }
        set[at] = t + 1;
    }
#define BUCKET(v) ((size_t)(((__uint128_t)(v) * k) / n))
    for (size_t i = 0; i < cap; i++)
        if (set[i])
            start[BUCKET(set[i] - 1) + 1]++;
    for (size_t b = 0; b < k; b++)
        start[b + 1] += start[b];
    for (size_t i = 0; i < cap; i++)
        if (set[i])
            idx[start[BUCKET(set[i] - 1)]++] = (int64_t)(set[i] - 1);
#undef BUCKET
    for (size_t i = 1; i < k; i++) {
        int64_t v = idx[i];
        size_t p = i;
        for (; p > 0 && idx[p - 1] > v; p--)
            idx[p] = idx[p - 1];
        idx[p] = v;
    }
    free(set), free(start);
    return 0;
}

/* Where k is at least n/32, Knuth's selection sampling (TAOCP 3.4.2, algorithm S: index i is
** taken with probability (still needed) / (still left), which yields exactly k, in order), at most
** 32 draws per index taken: the sequence of every earlier build, so runs with those sizes keep
** their results. Below it, Floyd's algorithm above, whose cost does not grow with n. */
int dpy_sparse_sample(int64_t *idx, uint64_t seed, size_t n, size_t k) {
    if (k == 0)
        return 0;
    if (n / 32 > k)
        return floyd(idx, seed, n, k);
    uint64_t s = seed;
    size_t m = 0;
    for (size_t i = 0; i < n && m < k; i++)
        if (splitmix64(&s) % (n - i) < k - m)
            idx[m++] = (int64_t)i;
    return 0;
}
