// per_sample_conv.cpp: the batched forms of a conv2d's per-sample weight gradients, on the cnn's
// two convolutions (batch 32), against the per-sample passes (one forward and backward each):
//   strided:  im2col by a strided view of the padded input, one copy, one batched matmul
//   grouped:  the input as Cin x B x H x W convolved with the output gradients as B*Cout kernels,
//             groups = B (Rochette, Manoel, Tramel 2019; what host/torch/per_sample.cpp does)
//   unfold:   torch's unfold (im2col), then a batched matmul (Opacus)
// Each is checked against the passes (within 1e-5 of their largest value). CPU time, median of 7.
// usage: bench_per_sample_conv [THREADS = 1]
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <vector>

namespace F = torch::nn::functional;
using T = torch::Tensor;

static double cpu() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

template <class Fn> static double ms(Fn f) {
    f();
    std::vector<double> v;
    for (int i = 0; i < 7; i++) {
        double t0 = cpu();
        f();
        v.push_back((cpu() - t0) * 1e3);
    }
    std::sort(v.begin(), v.end());
    return v[3];
}

static T strided(const T &x, const T &g, int64_t k, int64_t p) {
    int64_t n = x.size(0), cin = x.size(1), ho = g.size(2), wo = g.size(3);
    auto xp = torch::constant_pad_nd(x, {p, p, p, p}).contiguous();
    auto u = xp.as_strided({n, cin, k, k, ho, wo}, {xp.stride(0), xp.stride(1), xp.stride(2), 1,
                                                    xp.stride(2), 1})
                 .reshape({n, cin * k * k, ho * wo});
    return torch::bmm(g.reshape({n, g.size(1), -1}), u.transpose(1, 2)).reshape({n, -1});
}

static T grouped(const T &x, const T &g, int64_t k, int64_t p) {
    int64_t n = x.size(0), cin = x.size(1), cout = g.size(1);
    auto w = g.reshape({n * cout, 1, g.size(2), g.size(3)});
    auto r = torch::conv2d(x.transpose(0, 1), w, {}, 1, p, 1, n);   // cin x n*cout x k x k
    return r.view({cin, n, cout, k, k}).permute({1, 2, 0, 3, 4}).reshape({n, -1});
}

static T unfolded(const T &x, const T &g, int64_t k, int64_t p) {
    int64_t n = x.size(0);
    auto u = F::unfold(x, F::UnfoldFuncOptions(k).padding(p));   // n x cin*k*k x L
    return torch::bmm(g.reshape({n, g.size(1), -1}), u.transpose(1, 2)).reshape({n, -1});
}

int main(int argc, char **argv) {
    torch::set_num_threads(argc > 1 ? std::atoi(argv[1]) : 1);
    torch::manual_seed(1);
    torch::nn::Conv2d c1(torch::nn::Conv2dOptions(1, 16, 5).padding(2));
    torch::nn::Conv2d c2(torch::nn::Conv2dOptions(16, 32, 5).padding(2));
    int64_t n = 32;
    auto x = torch::randn({n, 1, 28, 28});
    auto h = torch::max_pool2d(torch::relu(c1(x)), 2).detach();
    std::printf("per-sample conv2d weight gradients, batch %lld, %d thread(s), CPU ms\n",
                (long long)n, torch::get_num_threads());
    std::printf("%-26s %9s %9s %9s %9s\n", "layer", "passes", "strided", "grouped", "unfold");
    struct { const char *name; torch::nn::Conv2d c; T in; } layers[] = {
        {"conv 1->16 5x5, 28x28", c1, x}, {"conv 16->32 5x5, 14x14", c2, h}};
    for (auto &l : layers) {
        auto out = l.c(l.in);
        auto g = torch::randn_like(out);
        auto grads = torch::autograd::grad({out}, {out}, {g})[0];
        auto passes = [&] {
            std::vector<T> rows;
            for (int64_t i = 0; i < n; i++) {
                auto o = l.c(l.in.narrow(0, i, 1));
                rows.push_back(torch::autograd::grad({o}, {l.c->weight}, {g.narrow(0, i, 1)})[0].reshape(-1));
            }
            return torch::stack(rows);
        };
        auto ref = passes();
        // the sums differ in order only: within float32 rounding of the largest value
        double tol = 1e-5 * ref.abs().max().item<double>();
        for (auto f : {strided, grouped, unfolded}) {
            double diff = (f(l.in, grads, 5, 2) - ref).abs().max().item<double>();
            if (!(diff <= tol)) {
                std::fprintf(stderr, "%s: a batched form is %g off the passes\n", l.name, diff);
                return 1;
            }
        }
        std::printf("%-26s %9.2f %9.2f %9.2f %9.2f\n", l.name, ms(passes),
                    ms([&] { strided(l.in, grads, 5, 2); }), ms([&] { grouped(l.in, grads, 5, 2); }),
                    ms([&] { unfolded(l.in, grads, 5, 2); }));
    }
}
