// train_loop.cpp: the reference for bench/train_overhead.lua: the same training loop as
// dpy.trainer (cnn on Fashion-MNIST, batch 32, SGD lr 0.01 momentum 0.9), written directly on
// libtorch. Prints "steps_per_second <x>".
// usage: bench_train_cpp STEPS THREADS SEED
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

extern "C" {
#include "dpy_core.h"
}

static torch::Tensor load(const char *path, int64_t channels) {
    dpy_idx x;
    char err[512];
    if (dpy_idx_read(path, &x, err, sizeof err) != 0) {
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

int main(int argc, char **argv) {
    int steps = argc > 1 ? std::atoi(argv[1]) : 300;
    int threads = argc > 2 ? std::atoi(argv[2]) : 1;
    uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
    at::set_num_threads(threads);
    torch::manual_seed(seed);
    const char *dir = "/usr/share/datasets/fashion-mnist";
    auto images = load((std::string(dir) + "/train-images-idx3-ubyte.gz").c_str(), 1);
    auto labels = load((std::string(dir) + "/train-labels-idx1-ubyte.gz").c_str(), 0);
    namespace nn = torch::nn;
    nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)), nn::ReLU(),
                         nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)),
                         nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(1568, 128),
                         nn::ReLU(), nn::Linear(128, 10));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto mean = torch::full({1, 1, 1, 1}, 0.2860), stdv = torch::full({1, 1, 1, 1}, 0.3530);
    int64_t n = images.size(0), batch = 32, warmup = 20;
    auto perm = torch::randperm(n, gen);
    std::chrono::steady_clock::time_point t0;
    for (int64_t s = 0; s < warmup + steps; s++) {
        if (s == warmup)
            t0 = std::chrono::steady_clock::now();
        auto idx = perm.narrow(0, (s * batch) % (n - batch), batch);
        auto x = images.index_select(0, idx).to(torch::kFloat32).div_(255.0).sub_(mean).div_(stdv);
        auto y = labels.index_select(0, idx).to(torch::kInt64);
        opt.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
        loss.backward();
        opt.step();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("steps_per_second %.3f\n", steps / secs);
    return 0;
}
