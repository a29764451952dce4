// mix.hpp: the weighted sum at the heart of gossip averaging, over raw floats, shared by the
// host (nn.cpp) and the benchmark that measures its cost (bench/floor.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

// d[i] <- s[i] * scale + w[0] x[0][i] + ... + w[k-1] x[k-1][i] for k <= 4, summed left to right
// (s == d: in place).
static inline void dpy_mix_terms(float *d, const float *s, int64_t len, float scale,
                                 const float *const *x, const float *w, size_t k) {
    switch (k) {
    case 0:
        for (int64_t i = 0; i < len; i++)
            d[i] = s[i] * scale;
        break;
    case 1:
        for (int64_t i = 0; i < len; i++)
            d[i] = s[i] * scale + w[0] * x[0][i];
        break;
    case 2:
        for (int64_t i = 0; i < len; i++)
            d[i] = s[i] * scale + w[0] * x[0][i] + w[1] * x[1][i];
        break;
    case 3:
        for (int64_t i = 0; i < len; i++)
            d[i] = s[i] * scale + w[0] * x[0][i] + w[1] * x[1][i] + w[2] * x[2][i];
        break;
    default:
        for (int64_t i = 0; i < len; i++)
            d[i] = s[i] * scale + w[0] * x[0][i] + w[1] * x[1][i] + w[2] * x[2][i] + w[3] * x[3][i];
    }
}

// p <- w0 p + sum_j w_j x_j over float values, the same sum in the same order as one term at a
// time (so the same bits), but four terms per pass over a block that stays in L1: each value of
// p is loaded and stored once per four terms, and memory sees each byte once (one libtorch op per
// term would read p n + 1 times from memory). A D-PSGD node does this every round. Written into d
// (d != p: p only read), or in place.
static inline void dpy_mix_floats_into(float *d, const float *p, const float *const *xs,
                                       const float *w, size_t n, int64_t len, float w0) {
    constexpr int64_t block = 2048;
    const float *x[4];
    for (int64_t s = 0; s < len; s += block) {
        int64_t k = std::min(block, len - s);
        size_t j = 0;
        do {
            size_t terms = std::min<size_t>(4, n - j);
            for (size_t t = 0; t < terms; t++)
                x[t] = xs[j + t] + s;
            // the first pass reads p, the next ones what it wrote; * 1.0f is exact
            dpy_mix_terms(d + s, (j == 0 ? p : d) + s, k, j == 0 ? w0 : 1.0f, x, w + j, terms);
            j += terms;
        } while (j < n);
    }
}

// The same in place.
static inline void dpy_mix_floats(float *p, const float *const *xs, const float *w, size_t n,
                                  int64_t len, float w0) {
    dpy_mix_floats_into(p, p, xs, w, n, len, w0);
}
