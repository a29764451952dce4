/*
** sparse.h: the wire codec of sparse vectors (k of n coordinates), and the few dense-vector
** helpers the sparsifying sharing rules need (top-k selection, seeded index sampling, scatter).
** Plain C on plain buffers (no Lua, no torch). Functions return 0 (or a size), or -1 with a
** message in err.
**
** Layout (little-endian), header 32 bytes:
**   "DPSP", u8 version (1), u8 value type (DPY_SPARSE_F32/F16/BF16), u8 index coding
**   (DPY_SPARSE_DELTAS: sorted indices as LEB128 deltas, the first from 0, the others from the
**   previous index, so every later delta is >= 1; DPY_SPARSE_IMPLICIT: no indices, the receiver
**   regenerates them), u8 zero, u64 n (dense length), u64 k (count), u64 index stream bytes,
**   then the index stream, then k values (4 or 2 bytes each).
** The decoder checks the whole header and the exact length before it decodes, and every index
** as it decodes it (overlong varint, duplicate, not increasing, out of range): a malformed
** payload gives a message, and nothing is written outside the caller's k slots.
*/
#ifndef DPY_SPARSE_H
#define DPY_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#define DPY_SPARSE_HEADER 32

enum { DPY_SPARSE_F32 = 1, DPY_SPARSE_F16 = 2, DPY_SPARSE_BF16 = 3 };
enum { DPY_SPARSE_DELTAS = 0, DPY_SPARSE_IMPLICIT = 1 };

/* What an encoding spends, in bytes. */
typedef struct {
    size_t header, indices, values;
} dpy_sparse_sizes;

/* What a checked header says. */
typedef struct {
    uint64_t n, k;
    int vtype, coding;
    size_t index_bytes;
} dpy_sparse_info;

size_t dpy_sparse_value_size(int vtype);   /* 4, 2, or 0 for an unknown type */
/* The largest encoding of k values (10 bytes per index at most). */
size_t dpy_sparse_bound(size_t k, int vtype, int coding);
/* Encodes k (index, value) pairs of an n-vector; idx strictly increasing and < n (NULL with
** DPY_SPARSE_IMPLICIT). Returns the size written (at most cap) or -1. sizes may be NULL. */
long long dpy_sparse_encode(uint8_t *out, size_t cap, uint64_t n, const int64_t *idx,
                            const float *val, size_t k, int vtype, int coding,
                            dpy_sparse_sizes *sizes, char *err, size_t errlen);
/* Checks the header and the exact length; the dense length must be at most max_n. */
int dpy_sparse_info_of(const uint8_t *in, size_t len, uint64_t max_n, dpy_sparse_info *info,
                       char *err, size_t errlen);
/* Decodes into idx (k slots; ignored, may be NULL, for DPY_SPARSE_IMPLICIT) and val (k slots),
** k from dpy_sparse_info_of. */
int dpy_sparse_decode(const uint8_t *in, size_t len, uint64_t max_n, int64_t *idx, float *val,
                      size_t k, char *err, size_t errlen);

/* Value conversions (round to nearest, ties to even; NaN stays NaN, overflow goes to Inf). */
uint16_t dpy_f32_to_f16(float f);
float dpy_f16_to_f32(uint16_t h);
uint16_t dpy_f32_to_bf16(float f);
float dpy_bf16_to_f32(uint16_t h);

/* The k indices (sorted ascending) of the k largest |x[i]| (NaN counts as largest; ties go to
** the lower index), k <= n. Returns 0, or -1 when out of memory. */
int dpy_sparse_topk(int64_t *idx, const float *x, size_t n, size_t k);
/* k distinct indices of 0..n-1, sorted, drawn uniformly over the k-subsets from the seed alone
** (a splitmix64 stream): the same on every machine. O(k) expected time and memory: selection
** sampling where k >= n/32 (the sequence of earlier builds), Floyd's algorithm below that.
** Returns 0, or -1 when out of memory. */
int dpy_sparse_sample(int64_t *idx, uint64_t seed, size_t n, size_t k);

#endif
