// per_sample.cpp: per-sample gradients for DP-SGD. For a native sequential of linear and conv2d
// layers (and parameter-free ones between them) they are computed for the whole batch at once,
// from one forward and one backward to the layers' outputs, as in Opacus: a linear layer's
// per-sample weight gradient is the outer product of the gradient at its output and its input; a
// conv2d's is that gradient correlated with the input, all samples in one grouped convolution
// (Rochette et al. 2019). On the cnn, on an Intel CPU with AVX-512, that is 1.5-1.9x faster than
// the input's patches times the gradient by a batched matmul (small BLAS products) and 2.2-2.5x
// faster than libtorch's unfold; on an AMD machine under load it was 1.15-1.25x slower than the
// patches (bench/per_sample_conv.cpp).
// Any other module gets one small forward and backward per sample, still in one C++ call.
#include "guard.hpp"

namespace nn = torch::nn;

namespace {

bool parameter_free(const std::string &k) {
    return k == "relu" || k == "gelu" || k == "tanh" || k == "sigmoid" || k == "identity" ||
           k == "maxpool2d" || k == "avgpool2d" || k == "adaptive_avgpool2d" || k == "flatten" ||
           k == "dropout" || k == "softmax" || k == "log_softmax";
}

bool conv_ok(const dpy_module &l) {
    auto c = std::dynamic_pointer_cast<nn::Conv2dImpl>(l.m);
    return c && c10::get_if<torch::ExpandingArray<2>>(&c->options.padding()) &&
           c10::get_if<torch::enumtype::kZeros>(&c->options.padding_mode());
}

// Whether every layer is one the batched path knows.
bool batched_ok(const dpy_module *m) {
    if (m->layers.empty())
        return false;
    for (const auto &l : m->layers)
        if (l.kind != "linear" && !(l.kind == "conv2d" && conv_ok(l)) && !parameter_free(l.kind))
            return false;
    return true;
}

// A conv2d's per-sample weight gradients, n x (out x in/groups x kh x kw), from its input x
// (n x in x h x w) and the gradient g at its output (n x out x ho x wo): one convolution of the
// input's channels as a batch (in x n x h x w) with the samples' output gradients as n x out
// kernels in n groups (Rochette et al. 2019). The layer's stride becomes the kernels' dilation,
// and its dilation their stride; with groups, the pairs of channels across groups are computed
// and dropped.
torch::Tensor conv_weight_grads(const nn::Conv2dImpl &c, const torch::Tensor &x,
                                const torch::Tensor &g) {
    const auto &o = c.options;
    auto pad = *c10::get_if<torch::ExpandingArray<2>>(&o.padding());
    auto k = o.kernel_size(), s = o.stride(), d = o.dilation();
    int64_t n = x.size(0), cin = x.size(1), cout = g.size(1), groups = o.groups();
    auto kernels = g.reshape({n * cout, 1, g.size(2), g.size(3)});
    auto r = torch::conv2d(x.transpose(0, 1), kernels, {}, {d->at(0), d->at(1)},
                           {pad->at(0), pad->at(1)}, {s->at(0), s->at(1)}, n)
                 .narrow(2, 0, k->at(0))   // in x n*out x kh x kw (a stride that does not divide
                 .narrow(3, 0, k->at(1));  // the padded input leaves more rows: unused)
    auto per = r.view({cin, n, cout, k->at(0), k->at(1)}).permute({1, 2, 0, 3, 4});
    if (groups > 1)   // n x G x out/G x G x in/G x kh x kw: the blocks where the two G agree
        per = torch::diagonal(per.reshape({n, groups, cout / groups, groups, cin / groups, k->at(0), k->at(1)}),
                              0, 1, 3)
                  .permute({0, 5, 1, 2, 3, 4});
    return per.reshape({n, -1});
}

// One forward and one backward to the outputs of the layers with parameters: each layer's input
// and the gradient at its output, for the whole batch.
struct layer_grads {
    std::vector<const dpy_module *> layers;
    std::vector<torch::Tensor> inputs, grads;
};

layer_grads forward_backward(dpy_module *m, dpy_loss_kind kind, const torch::Tensor &x,
                             const torch::Tensor &y, torch::Tensor &losses) {
    layer_grads r;
    std::vector<torch::Tensor> outputs;
    torch::Tensor h = x;
    for (const auto &l : m->layers) {
        torch::Tensor out = l.forward(h);
        if (!parameter_free(l.kind)) {
            r.inputs.push_back(h.detach());
            outputs.push_back(out);
            r.layers.push_back(&l);
        }
        h = out;
    }
    // summed, each sample's own loss: its gradient at a layer's output is that sample's row
    auto per = dpy_loss_of(kind, h, y, at::Reduction::None);
    if (per.dim() > 1)
        per = per.reshape({per.size(0), -1}).mean(1);
    losses = per.detach();
    r.grads = torch::autograd::grad({per.sum()}, outputs);
    return r;
}

// A linear layer's input and output gradient as n x tokens x features.
torch::Tensor tokens(const torch::Tensor &t) {
    return t.reshape({t.size(0), -1, t.size(-1)});
}

// Layer i's per-sample gradients, n x numel each, appended to parts (weight, then bias).
void layer_per_sample(const layer_grads &r, size_t i, std::vector<torch::Tensor> &parts) {
    int64_t n = r.inputs[i].size(0);
    if (auto conv = std::dynamic_pointer_cast<nn::Conv2dImpl>(r.layers[i]->m)) {
        parts.push_back(conv_weight_grads(*conv, r.inputs[i], r.grads[i]));
        if (conv->options.bias())
            parts.push_back(r.grads[i].sum({2, 3}));
        return;
    }
    auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(r.layers[i]->m);
    auto g = tokens(r.grads[i]), a = tokens(r.inputs[i]);
    parts.push_back(torch::bmm(g.transpose(1, 2), a).reshape({n, -1}));   // out x in
    if (lin->options.bias())
        parts.push_back(g.sum(1));
}

// The batched path: n x numel gradients in parameter order (each layer's weight, then bias).
torch::Tensor batched(dpy_module *m, dpy_loss_kind kind, const torch::Tensor &x,
                      const torch::Tensor &y, torch::Tensor &losses) {
    auto r = forward_backward(m, kind, x, y, losses);
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < r.layers.size(); i++)
        layer_per_sample(r, i, parts);
    return torch::cat(parts, 1);
}

// The scale that clips each row of norms to clip, as privacy.privatize computes it.
torch::Tensor clip_scale(const torch::Tensor &norms, double clip) {
    return (clip / (norms + 1e-6)).clamp_max(1.0);
}

// The batched path's clipped sum, without the n x numel matrix: a linear layer applied to one
// token per sample has per-sample gradients g_i a_i^T, of norm |g_i| |a_i| and clipped sum
// (c g)^T a, one matrix product (Goodfellow 2015; Li et al. 2022's ghost clipping); the others'
// (conv2d: n x 13k values on the cnn, against 200k for its first linear layer) are formed.
torch::Tensor batched_clipped_sum(dpy_module *m, dpy_loss_kind kind, const torch::Tensor &x,
                                  const torch::Tensor &y, double clip, torch::Tensor &losses) {
    auto r = forward_backward(m, kind, x, y, losses);
    int64_t n = x.size(0);
    auto sq = torch::zeros({n});
    std::vector<std::vector<torch::Tensor>> formed(r.layers.size());
    for (size_t i = 0; i < r.layers.size(); i++) {
        if (r.layers[i]->kind == "linear" && r.inputs[i].dim() == 2) {
            sq.add_(r.grads[i].square().sum(1) * (r.inputs[i].square().sum(1) + 1));
            if (!std::dynamic_pointer_cast<nn::LinearImpl>(r.layers[i]->m)->options.bias())
                sq.sub_(r.grads[i].square().sum(1));
            continue;
        }
        layer_per_sample(r, i, formed[i]);
        for (const auto &t : formed[i])
            sq.add_(t.square().sum(1));
    }
    auto c = clip_scale(sq.sqrt(), clip);
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < r.layers.size(); i++) {
        if (formed[i].empty()) {
            auto cg = r.grads[i] * c.unsqueeze(1);
            parts.push_back(torch::mm(cg.t(), r.inputs[i]).reshape(-1));
            if (std::dynamic_pointer_cast<nn::LinearImpl>(r.layers[i]->m)->options.bias())
                parts.push_back(cg.sum(0));
            continue;
        }
        for (const auto &t : formed[i])
            parts.push_back(torch::mv(t.t(), c));
    }
    return torch::cat(parts);
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

dpy_err dpy_module_private_grad(dpy_tensor **grad, dpy_tensor **losses, dpy_module *m,
                                dpy_loss_kind kind, const dpy_tensor *x, const dpy_tensor *y,
                                double clip, double sigma, dpy_generator *gen,
                                int batched_path) noexcept {
    *grad = *losses = nullptr;
    return dpy_guard([&] {
        if (!m->forward)
            dpy_invalid("private_grad needs a module with a C forward (nn.sequential of built-in "
                        "layers)");
        if (y->v.size(0) != x->v.size(0))
            dpy_invalid("private_grad: " + std::to_string(x->v.size(0)) + " inputs but " +
                        std::to_string(y->v.size(0)) + " targets");
        if (!(clip > 0) || !(sigma >= 0))
            dpy_invalid("private_grad: clip must be > 0 and sigma >= 0");
        torch::Tensor l, sum;
        if (batched_path && batched_ok(m)) {
            sum = batched_clipped_sum(m, kind, x->v, y->v, clip, l);
        } else {   // privacy.privatize's steps
            auto g = one_by_one(m, kind, x->v, y->v, l);
            g.mul_(clip_scale(g.norm(2, 1), clip).unsqueeze(1));
            sum = g.sum(0);
        }
        if (sigma > 0)   // the draw privacy.privatize makes: the same generator gives the same noise
            sum.add_(torch::randn({sum.numel()}, gen->g, torch::kFloat32), sigma * clip);
        sum.div_(x->v.size(0));
        *grad = dpy_wrap(sum.to(torch::kFloat32).contiguous());
        *losses = dpy_wrap(l.to(torch::kFloat32));
    });
}
