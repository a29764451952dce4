// op_call.cpp: the reference for the call-overhead figure of bench/op_overhead.lua: a + b on
// two 4-element float32 tensors, from C++. Prints "us_per_call <x>".
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <malloc.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? std::atoi(argv[1]) : 200000;
    at::set_num_threads(1);
    mallopt(M_MMAP_THRESHOLD, 64 << 20);   // the allocator settings of dpy-lua's main()
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    auto a = torch::ones({4}), b = torch::ones({4});
    for (int i = 0; i < 1000; i++)
        (void)(a + b);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) {
        auto c = a + b;
        (void)c;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("us_per_call %.3f\n", secs / n * 1e6);
    return 0;
}
