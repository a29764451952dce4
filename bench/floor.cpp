// floor.cpp: the compute floor of a decentralized round: the same training steps the nodes run
// (one cnn per node on Fashion-MNIST, batch 32, SGD), back to back on libtorch in one process,
// with no Lua and no exchange: WORKERS threads of one intra-op thread each (the run's compute
// slots) take the MODELS models in turn, LOCAL_STEPS steps each per round.
// With DEGREE > 0, each model also does what gossip averaging cannot avoid: before its steps it
// mixes in DEGREE other models' copies from the previous round (equal weights, dpy-lua's mix
// loop), and after them copies its parameters once into its own copy for the next round. That
// splits a run's overhead into the algorithm's memory traffic and the runtime's own.
// Prints "seconds_per_round <x>" (the mean round after the first) and "median_round <x>".
// usage: bench_floor MODELS LOCAL_STEPS ROUNDS WORKERS [DEGREE]
#include "fmnist.hpp"
#include "mix.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace nn = torch::nn;

struct replica {
    nn::Sequential model;
    std::unique_ptr<torch::optim::SGD> opt;
    torch::Tensor perm;
    int64_t pos = 0;
    torch::Tensor sent[2];   // the parameters as sent in even and odd rounds
};

// Model m's parameters <- the mean of its own and `degree` others' copies from round - 1.
static void gossip_mix(std::vector<replica> &reps, int m, int degree, int round) {
    torch::NoGradGuard no_grad;
    int models = (int)reps.size();
    std::vector<const float *> xs(degree);
    std::vector<float> w(degree, 1.0f / (degree + 1));
    int64_t off = 0;
    for (auto &p : reps[m].model->parameters()) {
        for (int k = 0; k < degree; k++)   // spread over the ring, as a random graph's would be
            xs[k] = reps[(m + 1 + k * models / degree) % models].sent[(round + 1) % 2]
                        .data_ptr<float>() + off;
        dpy_mix_floats(p.data_ptr<float>(), xs.data(), w.data(), degree, p.numel(), w[0]);
        off += p.numel();
    }
}

// One copy of model m's parameters into its copy for this round.
static void gossip_send(replica &r, int round) {
    torch::NoGradGuard no_grad;
    auto &out = r.sent[round % 2];
    int64_t off = 0;
    for (auto &p : r.model->parameters()) {
        out.narrow(0, off, p.numel()).copy_(p.view(-1));
        off += p.numel();
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: bench_floor MODELS LOCAL_STEPS ROUNDS WORKERS [DEGREE]\n");
        return 2;
    }
    int models = std::atoi(argv[1]), steps = std::atoi(argv[2]), rounds = std::atoi(argv[3]);
    int workers = std::atoi(argv[4]), degree = argc > 5 ? std::atoi(argv[5]) : 0;
    if (degree >= models)
        degree = models - 1;
    dpy_malloc_settings();
    at::set_num_threads(1);
    auto images = fmnist_load("train-images-idx3-ubyte.gz", 1);
    auto labels = fmnist_load("train-labels-idx1-ubyte.gz", 0);
    auto mean = torch::full({1, 1, 1, 1}, 0.2860), stdv = torch::full({1, 1, 1, 1}, 0.3530);
    std::vector<replica> reps(models);
    for (auto &r : reps) {
        r.model = fmnist_cnn();
        r.opt = std::make_unique<torch::optim::SGD>(r.model->parameters(),
                                                    torch::optim::SGDOptions(0.05).momentum(0.9));
        r.perm = torch::randperm(images.size(0));
        int64_t size = 0;
        for (auto &p : r.model->parameters())
            size += p.numel();
        for (auto &t : r.sent)
            t = torch::zeros({size});
    }
    std::vector<double> times;
    for (int round = 0; round < rounds; round++) {
        auto t0 = std::chrono::steady_clock::now();
        std::atomic<int> next{0};
        auto work = [&] {
            at::set_num_threads(1);   // per thread: OpenMP starts each new thread at every core
            for (int m; (m = next.fetch_add(1)) < models;) {
                auto &r = reps[m];
                if (degree > 0 && round > 0)
                    gossip_mix(reps, m, degree, round);
                for (int s = 0; s < steps; s++) {
                    auto idx = r.perm.narrow(0, (r.pos++ * 32) % (images.size(0) - 32), 32);
                    auto x = images.index_select(0, idx).to(torch::kFloat32).div_(255.0).sub_(mean).div_(stdv);
                    auto y = labels.index_select(0, idx).to(torch::kInt64);
                    drop_grads(*r.opt);
                    auto loss = torch::nn::functional::cross_entropy(r.model->forward(x), y);
                    loss.backward();
                    r.opt->step();
                    (void)loss.item<float>();
                }
                if (degree > 0)
                    gossip_send(r, round);
            }
        };
        std::vector<std::thread> threads;
        for (int w = 0; w < workers; w++)
            threads.emplace_back(work);
        for (auto &t : threads)
            t.join();
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // the mean round after the first: the statistic bench/round_time.lua takes of a run (its
    // elapsed time over its rounds), so that a round's spikes weigh the same on both sides
    size_t first = rounds > 1 ? 1 : 0;
    double sum = 0;
    for (size_t i = first; i < times.size(); i++)
        sum += times[i];
    std::printf("seconds_per_round %.6f\n", sum / (double)(times.size() - first));
    std::sort(times.begin() + (long)first, times.end());
    std::printf("median_round %.6f\n", times[first + (times.size() - first - 1) / 2]);
    return 0;
}
