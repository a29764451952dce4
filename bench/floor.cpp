// floor.cpp: the compute floor of a decentralized round: the same training steps the nodes run
// (cnn on Fashion-MNIST, batch 32, SGD), back to back on libtorch in one process, on WORKERS
// threads of one intra-op thread each (the nodes' compute slots), with no Lua, no exchange.
// Prints "seconds_per_step <aggregate>".
// usage: bench_floor STEPS WORKERS
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <malloc.h>
#include <thread>

extern "C" {
#include "dpy_core.h"
}

static torch::Tensor load_idx(const std::string &path, int64_t channels) {
    dpy_idx x;
    char err[512];
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

int main(int argc, char **argv) {
    int steps = argc > 1 ? std::atoi(argv[1]) : 200;
    int workers = argc > 2 ? std::atoi(argv[2]) : 2;
    mallopt(M_MMAP_THRESHOLD, 64 << 20);   // the allocator settings of dpy-lua's main()
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    at::set_num_threads(1);
    const std::string data = "/usr/share/datasets/fashion-mnist";
    auto images = load_idx(data + "/train-images-idx3-ubyte.gz", 1);
    auto labels = load_idx(data + "/train-labels-idx1-ubyte.gz", 0);
    std::atomic<int> next{0};
    auto work = [&](int w) {
        namespace nn = torch::nn;
        torch::manual_seed(w);
        nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)), nn::ReLU(),
                             nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)),
                             nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(1568, 128),
                             nn::ReLU(), nn::Linear(128, 10));
        torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
        auto mean = torch::full({1, 1, 1, 1}, 0.2860), stdv = torch::full({1, 1, 1, 1}, 0.3530);
        auto perm = torch::randperm(images.size(0));
        for (int64_t s = w; next.fetch_add(1) < steps; s += workers) {
            auto idx = perm.narrow(0, (s * 32) % (images.size(0) - 32), 32);
            auto x = images.index_select(0, idx).to(torch::kFloat32).div_(255.0).sub_(mean).div_(stdv);
            auto y = labels.index_select(0, idx).to(torch::kInt64);
            opt.zero_grad();
            auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
            loss.backward();
            opt.step();
            (void)loss.item<float>();
        }
    };
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; w++)
        threads.emplace_back(work, w);
    for (auto &t : threads)
        t.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("seconds_per_step %.6f\n", secs / steps);
    return 0;
}
