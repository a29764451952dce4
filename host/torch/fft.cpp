// fft.cpp: the real FFT of a 1-d float vector as plain float32 coefficients (the fft sharing rule).
#include "guard.hpp"

#include <torch/fft.h>

dpy_err dpy_tensor_rfft(dpy_tensor **out, const dpy_tensor *x) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        if (x->v.dim() != 1)
            dpy_invalid("rfft: a 1-d tensor expected");
        auto c = torch::fft::rfft(x->v.to(torch::kFloat32));   // n/2 + 1 complex values
        *out = dpy_wrap(torch::view_as_real(c).reshape({-1}).contiguous());
    });
}

dpy_err dpy_tensor_irfft(dpy_tensor **out, const dpy_tensor *c, int64_t n) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        if (c->v.dim() != 1 || c->v.numel() != 2 * (n / 2 + 1))
            dpy_invalid("irfft: " + std::to_string(n) + " values take " + std::to_string(2 * (n / 2 + 1)) +
                        " coefficients (re, im interleaved), not " + std::to_string(c->v.numel()));
        auto z = torch::view_as_complex(c->v.to(torch::kFloat32).reshape({-1, 2}).contiguous());
        *out = dpy_wrap(torch::fft::irfft(z, n).contiguous());
    });
}
