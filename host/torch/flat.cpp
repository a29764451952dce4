// flat.cpp: a model's parameters as one flat float32 vector (dpy_torch.h): copied out and in,
// mixed with others' (gossip averaging), and lent to receivers without a copy.
#include "guard.hpp"
#include "mix.hpp"

// Each parameter (or its gradient, zeros where none) as a flat view, in parameter order.
static std::vector<torch::Tensor> flat_parts(const dpy_module *m, int grads) {
    std::vector<torch::Tensor> parts;
    for (const auto &p : m->m->parameters()) {
        torch::Tensor v = grads ? p.grad() : p;
        parts.push_back(v.defined() ? v.detach().reshape(-1) : torch::zeros({p.numel()}));
    }
    return parts;
}

// The parameters (or gradients) as one new float32 cpu vector.
static torch::Tensor flat_copy(const dpy_module *m, int grads) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    for (const auto &v : flat_parts(m, grads))
        parts.push_back(v.to(torch::kCPU, torch::kFloat32));
    return parts.empty() ? torch::empty({0}) : torch::cat(parts);
}

dpy_err dpy_module_get_flat(dpy_tensor **out, const dpy_module *m, int grads) noexcept {
    *out = nullptr;
    return dpy_guard([&] { *out = dpy_wrap(flat_copy(m, grads)); });
}

dpy_err dpy_module_flat_into(const dpy_module *m, dpy_tensor *dst) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto &d = dst->v;
        auto parts = flat_parts(m, 0);
        int64_t total = 0;
        for (const auto &v : parts)
            total += v.numel();
        if (d.dim() != 1 || d.numel() != total || d.scalar_type() != torch::kFloat32)
            dpy_invalid("flat_into: needs a float32 vector of " + std::to_string(total) +
                        " values");
        int64_t off = 0;
        for (const auto &v : parts) {
            d.narrow(0, off, v.numel()).copy_(v);   // one copy, converting device and dtype
            off += v.numel();
        }
    });
}

// Raises unless t is a flat vector of every parameter's values (what get_flat returns).
static void check_flat(const std::vector<torch::Tensor> &params, const torch::Tensor &t,
                       const char *what) {
    int64_t total = 0;
    for (const auto &p : params)
        total += p.numel();
    if (t.dim() != 1 || t.numel() != total)
        dpy_invalid(std::string(what) + " needs 1-d tensors of " + std::to_string(total) +
                    " values, got shape " + c10::str(t.sizes()));
}

static bool plain_floats(const torch::Tensor &t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

// {==== lending: the parameters' own buffer sent without a copy ====}

// The context of a flat buffer's storage: once lent, receivers read it, and it is never written
// again (the model moves to a fresh buffer to change).
struct flat_buffer {
    void *data;
    void (*release)(void *);
    bool lent;
};

static void free_flat_buffer(void *ctx) {
    auto *b = static_cast<flat_buffer *>(ctx);
    b->release(b->data);
    delete b;
}

static flat_buffer *buffer_of(const torch::Tensor &t) {
    if (!t.defined() || !t.has_storage())
        return nullptr;
    const auto &ptr = t.storage().data_ptr();
    return ptr.get_deleter() == &free_flat_buffer ? static_cast<flat_buffer *>(ptr.get_context())
                                                  : nullptr;
}

bool dpy_is_lent(const torch::Tensor &t) {
    auto *b = buffer_of(t);
    return b && b->lent;
}

static bool is_lent(const dpy_module *m) { return dpy_is_lent(m->flat); }

// A float32 vector of n values in a fresh buffer from m's allocator.
static torch::Tensor new_flat(const dpy_module *m, int64_t n) {
    size_t bytes = (size_t)n * sizeof(float);
    void *data = m->alloc(bytes);
    if (!data)
        throw std::bad_alloc();
    flat_buffer *ctx;
    try {
        ctx = new flat_buffer{data, m->release, false};
    } catch (...) {
        m->release(data);
        throw;
    }
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                         c10::DataPtr(data, ctx, &free_flat_buffer, c10::Device(c10::kCPU)),
                         nullptr, false);
    return torch::empty({0}, torch::kFloat32).set_(storage, 0, {n}, {1});
}

// True when the parameters lie end to end in m->flat.
static bool laid_out(const dpy_module *m, const std::vector<torch::Tensor> &params) {
    if (!m->flat.defined())
        return false;
    const float *at = m->flat.data_ptr<float>();
    for (const auto &p : params) {
        if (!plain_floats(p) || p.data_ptr<float>() != at)
            return false;
        at += p.numel();
    }
    return at == m->flat.data_ptr<float>() + m->flat.numel();
}

// Points the parameters at consecutive slices of flat, which becomes m's buffer.
static void rebind(dpy_module *m, std::vector<torch::Tensor> &params, torch::Tensor flat) {
    int64_t off = 0;
    for (auto &p : params) {
        p.set_data(flat.narrow(0, off, p.numel()).view(p.sizes()));
        off += p.numel();
    }
    m->flat = std::move(flat);
}

// Moves a lent model to a fresh buffer, with its values when copy (else the caller writes them).
static void move_off(dpy_module *m, std::vector<torch::Tensor> &params, bool copy) {
    auto fresh = new_flat(m, m->flat.numel());
    if (copy)
        fresh.copy_(m->flat);
    rebind(m, params, std::move(fresh));
}

dpy_err dpy_module_lend_flat(dpy_tensor **out, int *lent, dpy_module *m, void *(*alloc)(size_t),
                             void (*release)(void *)) noexcept {
    *out = nullptr;
    *lent = 0;
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto params = m->m->parameters();
        bool plain = true;
        for (const auto &p : params)
            plain = plain && p.device().is_cpu() && p.scalar_type() == torch::kFloat32;
        if (!plain) {
            *out = dpy_wrap(flat_copy(m, 0));
            return;
        }
        if (!is_lent(m) && !laid_out(m, params)) {   // the first lend, or moved since (to, load)
            m->alloc = alloc;
            m->release = release;
            auto flat = new_flat(m, dpy_module_numel(m));
            int64_t off = 0;
            for (const auto &p : params) {
                flat.narrow(0, off, p.numel()).view(p.sizes()).copy_(p);
                off += p.numel();
            }
            rebind(m, params, std::move(flat));
        }
        buffer_of(m->flat)->lent = true;
        *out = dpy_wrap(m->flat);
        *lent = 1;
    });
}

dpy_err dpy_module_unlend(dpy_module *m) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        if (is_lent(m)) {
            auto params = m->m->parameters();
            move_off(m, params, true);
        }
    });
}

dpy_err dpy_module_set_flat(dpy_module *m, const dpy_tensor *flat, int grads) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto params = m->m->parameters();
        const auto &f = flat->v;
        check_flat(params, f, grads ? "set_grad_flat" : "set_flat");
        if (!grads && is_lent(m))
            move_off(m, params, false);   // every value is written below
        int64_t off = 0;
        for (auto &p : params) {
            auto part = f.narrow(0, off, p.numel()).view(p.sizes());
            if (!grads)
                p.copy_(part);
            else if (p.grad().defined())
                p.mutable_grad().copy_(part);
            else
                p.mutable_grad() = part.to(p.options()).clone();
            off += p.numel();
        }
    });
}

dpy_err dpy_module_mix(dpy_module *m, double self_weight, const dpy_tensor *const *xs,
                       const double *weights, size_t n) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto params = m->m->parameters();
        bool fast = true;
        for (size_t j = 0; j < n; j++) {
            check_flat(params, xs[j]->v, "mix");
            fast = fast && plain_floats(xs[j]->v);
        }
        for (const auto &p : params)
            fast = fast && plain_floats(p);
        // A lent model mixes into a fresh buffer: no copy first, and the lent one stays as sent.
        torch::Tensor fresh;
        if (is_lent(m) && fast)
            fresh = new_flat(m, m->flat.numel());
        else if (is_lent(m))
            move_off(m, params, true);
        std::vector<const float *> x(n);
        std::vector<float> w(weights, weights + n);
        int64_t off = 0;
        for (auto &p : params) {   // parameter by parameter: p stays in cache while it mixes
            if (fast) {
                for (size_t j = 0; j < n; j++)
                    x[j] = xs[j]->v.data_ptr<float>() + off;
                float *d = fresh.defined() ? fresh.data_ptr<float>() + off : p.data_ptr<float>();
                dpy_mix_floats(d, p.data_ptr<float>(), x.data(), w.data(), n, p.numel(),
                               (float)self_weight);
                p.unsafeGetTensorImpl()->bump_version();   // as an in-place op would
            } else {
                p.mul_(self_weight);
                for (size_t j = 0; j < n; j++)
                    p.add_(xs[j]->v.narrow(0, off, p.numel()).view(p.sizes()), weights[j]);
            }
            off += p.numel();
        }
        if (fresh.defined())
            rebind(m, params, std::move(fresh));
    });
}

