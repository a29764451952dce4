// mix.hpp: the weighted sum at the heart of gossip averaging, over raw floats, shared by the
// host (nn.cpp) and the benchmark that measures its cost (bench/floor.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

// p <- w0 p + sum_j w_j x_j over float values, a block at a time: the block stays in L1 while
// every term is added, so each value is read and written once (one libtorch op per term would
// read p n + 1 times). A D-PSGD node does this every round.
static inline void dpy_mix_floats(float *p, const float *const *xs, const float *w, size_t n,
                                  int64_t len, float w0) {
    constexpr int64_t block = 2048;
    for (int64_t s = 0; s < len; s += block) {
        int64_t k = std::min(block, len - s);
        float *d = p + s;
        for (int64_t i = 0; i < k; i++)
            d[i] *= w0;
        for (size_t j = 0; j < n; j++) {
            const float *x = xs[j] + s;
            for (int64_t i = 0; i < k; i++)
                d[i] += w[j] * x[i];
        }
    }
}
