// train_loop.cpp: the reference for bench/train_lua.lua: the same training loop (cnn on
// Fashion-MNIST, batch 32, SGD lr 0.01 momentum 0.9) written directly on libtorch, starting from
// the initial weights and batch order the Lua side wrote, so both do exactly the same
// computation. Prints "steps_per_second <x>" and "checksum <sum |w|>".
// usage: bench_train_cpp STEPS THREADS DIR
#include "fmnist.hpp"

#include <chrono>
#include <fstream>

static torch::Tensor load_pt(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return torch::pickle_load(bytes).toTensor();
}

int main(int argc, char **argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: bench_train_cpp STEPS THREADS DIR\n");
        return 2;
    }
    int steps = std::atoi(argv[1]), threads = std::atoi(argv[2]);
    std::string dir = argv[3];
    dpy_malloc_settings();
    const int64_t warmup = 20, batch = 32;
    at::set_num_threads(threads);
    at::set_num_interop_threads(1);
    auto images = fmnist_load("train-images-idx3-ubyte.gz", 1);
    auto labels = fmnist_load("train-labels-idx1-ubyte.gz", 0);
    auto model = fmnist_cnn();
    {
        torch::NoGradGuard no_grad;
        auto flat = load_pt(dir + "/init.pt");
        int64_t off = 0;
        for (auto &p : model->parameters()) {
            p.copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
            off += p.numel();
        }
    }
    auto order = load_pt(dir + "/order.pt");
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    auto mean = torch::full({1, 1, 1, 1}, 0.2860), stdv = torch::full({1, 1, 1, 1}, 0.3530);
    std::chrono::steady_clock::time_point t0;
    for (int64_t s = 0; s < warmup + steps; s++) {
        if (s == warmup)
            t0 = std::chrono::steady_clock::now();
        auto idx = order.narrow(0, s * batch, batch);
        auto x = images.index_select(0, idx).to(torch::kFloat32).div_(255.0).sub_(mean).div_(stdv);
        auto y = labels.index_select(0, idx).to(torch::kInt64);
        drop_grads(opt);
        auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
        loss.backward();
        opt.step();
        (void)loss.item<float>();   // the Lua loop reads every loss too
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("steps_per_second %.3f\n", steps / secs);
    double sum = 0;
    for (const auto &p : model->parameters())
        sum += p.abs().sum().item<double>();
    std::printf("checksum %.6f\n", sum);
    return 0;
}
