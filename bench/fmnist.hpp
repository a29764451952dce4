// fmnist.hpp: what the C++ references of the benchmarks share: Fashion-MNIST as uint8 tensors,
// the cnn, and dpy-lua's allocator settings.
#pragma once

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <malloc.h>
#include <string>

extern "C" {
#include "dpy_core.h"
}

// N x 1 x H x W images (channels = 1) or N labels (channels = 0), from the Debian package.
static inline torch::Tensor fmnist_load(const std::string &name, int64_t channels) {
    dpy_idx x;
    char err[512];
    std::string path = "/usr/share/datasets/fashion-mnist/" + name;
    if (dpy_idx_read(path.c_str(), &x, err, sizeof err) != 0) {
        std::fprintf(stderr, "%s\n", err);
        std::exit(1);
    }
    std::vector<int64_t> shape(x.dims, x.dims + x.ndim);
    if (channels)
        shape.insert(shape.begin() + 1, channels);
    auto t = torch::from_blob(x.data, shape, torch::kUInt8).clone();
    dpy_idx_free(&x);
    return t;
}

// The cnn of lua/dpy/models/cnn.lua.
static inline torch::nn::Sequential fmnist_cnn() {
    namespace nn = torch::nn;
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)), nn::ReLU(),
                          nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)),
                          nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(1568, 128),
                          nn::ReLU(), nn::Linear(128, 10));
}

// Drops the gradients, as dpy-lua's optimizers' zero_grad does (PyTorch's set_to_none).
static inline void drop_grads(torch::optim::Optimizer &opt) {
    for (auto &group : opt.param_groups())
        for (auto &p : group.params())
            p.mutable_grad().reset();
}

// The allocator settings of dpy-lua's main().
static inline void dpy_malloc_settings() {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}
