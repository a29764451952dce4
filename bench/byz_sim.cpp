// byz_sim.cpp: the reference for bench/byz_sim.lua: the Byzantine simulation's round written
// directly on libtorch — 10 workers of which 2 Byzantine (sign flip 1.5 of the honest mean), the
// cnn, batch 64, SGD momentum 0.9 with weight decay 1e-4, every honest worker aggregating its own
// model, both Byzantine ones and 5 other honest ones with the coordinate-wise median.
// Prints "rounds_per_second <x>".
// usage: bench_byz_sim ROUNDS
#include "fmnist.hpp"

#include <chrono>
#include <random>

int main(int argc, char **argv) {
    int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
    dpy_malloc_settings();
    at::set_num_threads(1);
    const int64_t n = 10, f = 2, h = n - f, batch = 64;
    const double lr = 0.05, beta = 0.9, wd = 1e-4;
    auto images = fmnist_load("train-images-idx3-ubyte.gz", 1).to(torch::kFloat32).div_(255);
    auto labels = fmnist_load("train-labels-idx1-ubyte.gz", 0).to(torch::kLong);
    torch::manual_seed(1);
    auto model = fmnist_cnn();
    auto params = model->parameters();
    std::vector<torch::Tensor> flat0;
    for (auto &p : params)
        flat0.push_back(p.detach().reshape(-1));
    auto w = torch::cat(flat0);
    int64_t d = w.numel();
    auto P = w.unsqueeze(0).expand({h, d}).clone(), M = torch::zeros({h, d});
    std::mt19937_64 rng(1);
    auto round = [&](int64_t r) {
        for (int64_t i = 0; i < h; i++) {
            {
                torch::NoGradGuard no_grad;
                int64_t off = 0;
                for (auto &p : params) {
                    p.copy_(P[i].narrow(0, off, p.numel()).view(p.sizes()));
                    off += p.numel();
                }
            }
            auto idx = torch::arange(batch) * h + i + (r * batch * h) % (60000 - batch * h);
            model->zero_grad();
            auto loss = torch::nn::functional::cross_entropy(model->forward(images.index_select(0, idx)),
                                                             labels.index_select(0, idx));
            loss.backward();
            std::vector<torch::Tensor> gs;
            for (auto &p : params)
                gs.push_back(p.grad().reshape(-1));
            auto g = torch::cat(gs).add_(P[i], wd);
            M[i].mul_(beta).add_(g);
        }
        auto L = P - M * lr;
        auto byz = L.mean(0).mul(-1.5);
        for (int64_t i = 0; i < h; i++) {
            std::vector<int64_t> others;
            for (int64_t j = 0; j < h; j++)
                if (j != i)
                    others.push_back(j);
            std::shuffle(others.begin(), others.end(), rng);
            std::vector<torch::Tensor> set = {L[i], byz, byz};
            for (int64_t j = 0; j < n - 2 * f - 1; j++)
                set.push_back(L[others[j]]);
            auto s = std::get<0>(torch::stack(set).sort(0));
            int64_t k = s.size(0);
            P[i].copy_(k % 2 ? s[k / 2] : (s[k / 2 - 1] + s[k / 2]) / 2);
        }
    };
    round(0);   // warm
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 1; r <= rounds; r++)
        round(r);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rounds_per_second %.4f\n", rounds / s);
    return 0;
}
