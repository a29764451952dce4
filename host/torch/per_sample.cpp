// per_sample.cpp: per-sample gradients for DP-SGD. For a native sequential of linear layers (and
// parameter-free ones between them) they are computed for the whole batch at once, from one
// forward and one backward: a layer's per-sample weight gradient is the outer product of the
// gradient at its output and its input, as in Opacus (2x faster than per-sample passes for an
// MLP). Any other module — convolutions included: libtorch 1.13's unfold made the batched form
// 2.5-3x slower than per-sample passes on the cnn — gets one small forward and backward per
// sample, still in one C++ call.
#include "guard.hpp"

namespace nn = torch::nn;

namespace {

bool parameter_free(const std::string &k) {
    return k == "relu" || k == "gelu" || k == "tanh" || k == "sigmoid" || k == "identity" ||
           k == "maxpool2d" || k == "avgpool2d" || k == "adaptive_avgpool2d" || k == "flatten" ||
           k == "dropout" || k == "softmax" || k == "log_softmax";
}

// Whether every layer is one the batched path knows.
bool batched_ok(const dpy_module *m) {
    if (m->layers.empty())
        return false;
    for (const auto &l : m->layers)
        if (l.kind != "linear" && !parameter_free(l.kind))
            return false;
    return true;
}

// The batched path: n x numel gradients in parameter order (each layer's weight, then bias).
torch::Tensor batched(dpy_module *m, dpy_loss_kind kind, const torch::Tensor &x,
                      const torch::Tensor &y, torch::Tensor &losses) {
    std::vector<torch::Tensor> inputs, outputs;
    std::vector<const dpy_module *> with_params;
    torch::Tensor h = x;
    for (const auto &l : m->layers) {
        torch::Tensor out = l.forward(h);
        if (!parameter_free(l.kind)) {
            inputs.push_back(h.detach());
            outputs.push_back(out);
            with_params.push_back(&l);
        }
        h = out;
    }
    // summed, each sample's own loss: its gradient at a layer's output is that sample's row
    auto per = dpy_loss_of(kind, h, y, at::Reduction::None);
    if (per.dim() > 1)
        per = per.reshape({per.size(0), -1}).mean(1);
    losses = per.detach();
    auto grads = torch::autograd::grad({per.sum()}, outputs);
    int64_t n = x.size(0);
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < with_params.size(); i++) {
        auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(with_params[i]->m);
        auto g = grads[i].reshape({n, -1, grads[i].size(-1)});
        auto a = inputs[i].reshape({n, -1, inputs[i].size(-1)});
        parts.push_back(torch::bmm(g.transpose(1, 2), a).reshape({n, -1}));   // out x in
        if (lin->options.bias())
            parts.push_back(g.sum(1));
    }
    return torch::cat(parts, 1);
}

// The fallback: one forward and backward per sample.
torch::Tensor one_by_one(dpy_module *m, dpy_loss_kind kind, const torch::Tensor &x,
                         const torch::Tensor &y, torch::Tensor &losses) {
    auto params = m->m->parameters();
    int64_t n = x.size(0), d = 0;
    for (const auto &p : params)
        d += p.numel();
    auto g = torch::empty({n, d});
    losses = torch::empty({n});
    for (int64_t i = 0; i < n; i++) {
        auto loss = dpy_loss_of(kind, m->forward(x.narrow(0, i, 1)), y.narrow(0, i, 1),
                                at::Reduction::Mean);
        auto gi = torch::autograd::grad({loss}, params, {}, false, false, true);
        int64_t off = 0;
        for (size_t j = 0; j < params.size(); j++) {
            auto row = g[i].narrow(0, off, params[j].numel());
            if (gi[j].defined())
                row.copy_(gi[j].reshape(-1));
            else
                row.zero_();
            off += params[j].numel();
        }
        losses[i] = loss.item<float>();
    }
    return g;
}

}  // namespace

dpy_err dpy_module_per_sample_grads(dpy_tensor **grads, dpy_tensor **losses, dpy_module *m,
                                    dpy_loss_kind kind, const dpy_tensor *x, const dpy_tensor *y,
                                    int batched_path) noexcept {
    *grads = *losses = nullptr;
    return dpy_guard([&] {
        if (!m->forward)
            dpy_invalid("per-sample gradients need a module with a C forward (nn.sequential "
                        "of built-in layers)");
        if (y->v.size(0) != x->v.size(0))
            dpy_invalid("per_sample_grads: " + std::to_string(x->v.size(0)) + " inputs but " +
                        std::to_string(y->v.size(0)) + " targets");
        torch::Tensor l;
        auto g = batched_path && batched_ok(m) ? batched(m, kind, x->v, y->v, l)
                                               : one_by_one(m, kind, x->v, y->v, l);
        *grads = dpy_wrap(g.to(torch::kFloat32).contiguous());
        *losses = dpy_wrap(l.to(torch::kFloat32));
    });
}
