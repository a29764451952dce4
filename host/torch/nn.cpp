// nn.cpp: layers, containers, parameter access and losses of dpy_torch.h.
#include "guard.hpp"
#include "initial_layers.hpp"
#include "mix.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>

namespace nn = torch::nn;

// Weight initialisation draws from libtorch's default generator; to make it follow a node's own
// seeded generator, construction reseeds the default under this lock.
static std::mutex g_init_lock;

struct layer_args {
    const double *v;
    int n;
    const char *kind;
    double operator()(int i, double dflt) const { return i < n ? v[i] : dflt; }
    int64_t i(int k, int64_t dflt) const { return integer((*this)(k, (double)dflt)); }
    int64_t req(int k) const {
        if (k >= n)
            dpy_invalid(std::string(kind) + " needs at least " + std::to_string(k + 1) +
                        " arguments");
        return integer(v[k]);
    }
    // sizes, strides and dims are integers: 2.5 was cut to 2, NaN and 2^63 became INT64_MIN
    static int64_t integer(double x) {
        if (!(x == std::floor(x) && std::fabs(x) <= 9007199254740992.0))
            dpy_invalid("sizes, strides and dims must be integers, got " + show(x));
        return (int64_t)x;
    }
    // eps and momentum: a NaN made every output NaN
    double positive(int k, double dflt, const char *what) const {
        double x = (*this)(k, dflt);
        if (!(std::isfinite(x) && x > 0))
            dpy_invalid(std::string(what) + " must be a finite number > 0, got " + show(x));
        return x;
    }
    static std::string show(double x) {
        std::ostringstream os;
        os << x;
        return os.str();
    }
};

static double momentum(double m) {
    if (!(m >= 0 && m <= 1))
        dpy_invalid("momentum must be in [0, 1], got " + layer_args::show(m));
    return m;
}

template <class Holder>
static dpy_module *wrap_layer(Holder h) {
    auto impl = h.ptr();
    return new dpy_module{impl, [impl](const torch::Tensor &x) { return impl->forward(x); }};
}

static dpy_module *wrap_fn(const char *name, std::function<torch::Tensor(const torch::Tensor &)> f) {
    return new dpy_module{std::make_shared<nn::Module>(name), std::move(f)};
}

/*
** The layers and their numeric arguments (defaults after '='):
**   linear(in, out, bias=1)        conv2d(in, out, kernel, stride=1, padding=0, dilation=1,
**   embedding(count, dim)                 groups=1, bias=1)
**   maxpool2d(kernel, stride=kernel, padding=0)   avgpool2d(kernel, stride=kernel, padding=0)
**   adaptive_avgpool2d(h, w=h)     batchnorm2d(channels, eps=1e-5, momentum=0.1)
**   groupnorm(groups, channels, eps=1e-5)          layernorm(eps, size...)
**   dropout(p=0.5)                 flatten(start=1, end=-1)   softmax(dim)  log_softmax(dim)
**   relu  gelu  tanh  sigmoid  identity
*/
static dpy_module *make_layer(const std::string &kind, const layer_args &a,
                              c10::optional<at::Generator> gen) {
    if (kind == "linear")
        return wrap_layer(nn::Linear(nn::LinearOptions(a.req(0), a.req(1)).bias(a(2, 1) != 0)));
    if (kind == "conv2d") {
        auto o = nn::Conv2dOptions(a.req(0), a.req(1), a.req(2))
                     .stride(a.i(3, 1)).padding(a.i(4, 0)).dilation(a.i(5, 1))
                     .groups(a.i(6, 1)).bias(a(7, 1) != 0);
        return wrap_layer(nn::Conv2d(o));
    }
    if (kind == "embedding")
        return wrap_layer(nn::Embedding(a.req(0), a.req(1)));
    if (kind == "maxpool2d") {
        int64_t k = a.req(0);
        return wrap_layer(nn::MaxPool2d(nn::MaxPool2dOptions(k).stride(a.i(1, k)).padding(a.i(2, 0))));
    }
    if (kind == "avgpool2d") {
        int64_t k = a.req(0);
        return wrap_layer(nn::AvgPool2d(nn::AvgPool2dOptions(k).stride(a.i(1, k)).padding(a.i(2, 0))));
    }
    if (kind == "adaptive_avgpool2d") {
        int64_t h = a.req(0);
        return wrap_layer(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({h, a.i(1, h)})));
    }
    if (kind == "batchnorm2d")
        return wrap_layer(nn::BatchNorm2d(
            nn::BatchNorm2dOptions(a.req(0)).eps(a.positive(1, 1e-5, "eps"))
                .momentum(momentum(a(2, 0.1)))));
    if (kind == "groupnorm")
        return wrap_layer(nn::GroupNorm(nn::GroupNormOptions(a.req(0), a.req(1)).eps(a.positive(2, 1e-5, "eps"))));
    if (kind == "layernorm") {
        std::vector<int64_t> shape;
        for (int i = 1; i < a.n; i++)
            shape.push_back(layer_args::integer(a.v[i]));
        if (shape.empty())
            dpy_invalid("layernorm needs a normalized shape");
        return wrap_layer(nn::LayerNorm(nn::LayerNormOptions(shape).eps(a.positive(0, 1e-5, "eps"))));
    }
    if (kind == "dropout") {
        double p = a(0, 0.5);
        if (!(p >= 0 && p < 1))
            dpy_invalid("dropout probability must be in [0, 1)");
        auto d = nn::Dropout(p);
        if (!gen)
            return wrap_layer(d);
        at::Generator g = *gen;   // masks follow the node's generator, not the global one
        return new dpy_module{d.ptr(), [d, g, p](const torch::Tensor &x) {
                                  if (!d->is_training() || p == 0)
                                      return x;
                                  auto keep = torch::empty_like(x).bernoulli_(1 - p, g);
                                  return x * keep / (1 - p);
                              }};
    }
    if (kind == "flatten")
        return wrap_layer(nn::Flatten(nn::FlattenOptions().start_dim(a.i(0, 1)).end_dim(a.i(1, -1))));
    if (kind == "softmax") {
        int64_t d = a.req(0);
        return wrap_fn("Softmax", [d](const torch::Tensor &x) { return x.softmax(d); });
    }
    if (kind == "log_softmax") {
        int64_t d = a.req(0);
        return wrap_fn("LogSoftmax", [d](const torch::Tensor &x) { return x.log_softmax(d); });
    }
    if (kind == "relu")
        return wrap_layer(nn::ReLU());
    if (kind == "gelu")
        return wrap_layer(nn::GELU());
    if (kind == "tanh")
        return wrap_layer(nn::Tanh());
    if (kind == "sigmoid")
        return wrap_layer(nn::Sigmoid());
    if (kind == "identity")
        return wrap_layer(nn::Identity());
    dpy_invalid("unknown layer '" + kind + "'");
}

// The layers whose construction draws their initial values (initial_layers.cpp), and one of them
// as make_layer wraps it.
static bool draws_initial(const std::string &kind) {
    return kind == "linear" || kind == "conv2d" || kind == "embedding";
}

static dpy_module *wrap_drawn(const std::shared_ptr<nn::Module> &m) {
    if (auto l = std::dynamic_pointer_cast<nn::LinearImpl>(m))
        return wrap_layer(nn::Linear(l));
    if (auto c = std::dynamic_pointer_cast<nn::Conv2dImpl>(m))
        return wrap_layer(nn::Conv2d(c));
    return wrap_layer(nn::Embedding(std::dynamic_pointer_cast<nn::EmbeddingImpl>(m)));
}

// The float32 values a layer of these arguments allocates (its parameters; batchnorm's running
// statistics too), held to the tensor size cap as a tensor constructor is: nn.linear(1e6, 1e6)
// took its 4 TB, or the OOM killer ended the run. A size <= 0 is left to libtorch, which names it.
static void check_size(const std::string &kind, const layer_args &a) {
    uint64_t n = 0;
    bool over = false;
    auto add = [&](std::initializer_list<int64_t> dims) {
        uint64_t p = 1;
        for (int64_t d : dims) {
            if (d <= 0)
                return;
            if (__builtin_mul_overflow(p, (uint64_t)d, &p)) {
                over = true;
                return;
            }
        }
        over = over || __builtin_add_overflow(n, p, &n);
    };
    const char *what = "parameters";
    if (kind == "linear") {
        add({a.req(0), a.req(1)});
        if (a(2, 1) != 0)
            add({a.req(1)});
    } else if (kind == "conv2d") {
        int64_t groups = a.i(6, 1);
        if (groups <= 0)
            return;
        add({a.req(1), a.req(0) / groups, a.req(2), a.req(2)});
        if (a(7, 1) != 0)
            add({a.req(1)});
    } else if (kind == "embedding") {
        add({a.req(0), a.req(1)});
    } else if (kind == "batchnorm2d") {
        add({4, a.req(0)});
        what = "parameters and running statistics";
    } else if (kind == "groupnorm") {
        add({2, a.req(1)});
    } else if (kind == "layernorm") {
        uint64_t p = 2;
        for (int i = 1; i < a.n && !over; i++) {
            int64_t d = layer_args::integer(a.v[i]);
            if (d <= 0)
                return;
            over = __builtin_mul_overflow(p, (uint64_t)d, &p);
        }
        n = p;
    } else {
        return;
    }
    uint64_t bytes = 0, cap = dpy_tensor_max_bytes();
    over = over || __builtin_mul_overflow(n, (uint64_t)4, &bytes);
    if (over || bytes > cap)
        dpy_invalid((over ? std::string("its float32 ") + what + " take over 2^64 bytes"
                          : std::to_string(n) + " float32 " + what + " take " + std::to_string(bytes) + " bytes") +
                    ", over the cap of " + std::to_string(cap) + " bytes (tensor.set_max_bytes)");
}

dpy_err dpy_module_new(dpy_module **out, const char *kind, const double *args, int nargs,
                       dpy_generator *gen) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        layer_args a{args, nargs, kind};
        check_size(kind, a);
        c10::optional<at::Generator> g;
        uint64_t seed = 0;
        std::string key;   // a layer drawn from a node's generator: its values may be kept
        if (gen) {
            g = gen->g;
            seed = dpy_generator_draw(gen);
            if (draws_initial(kind)) {
                key = initial_layer_key(kind, args, nargs, seed);
                if (auto m = initial_layer_find(key))
                    *out = wrap_drawn(m);
            }
        }
        if (!*out) {
            {
                std::lock_guard<std::mutex> lock(g_init_lock);
                if (gen)
                    torch::manual_seed(seed);
                *out = make_layer(kind, a, g);
            }
            if (!key.empty())
                initial_layer_keep(key, (*out)->m);
        }
        (*out)->kind = kind;
    });
}

void dpy_module_forget_initial(void) noexcept { initial_layers_forget(); }

dpy_err dpy_module_container(dpy_module **out, const char *const *names,
                             dpy_module *const *children, size_t n, int sequential) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        auto m = std::make_shared<nn::Module>(sequential ? "Sequential" : "Module");
        std::vector<std::function<torch::Tensor(const torch::Tensor &)>> fwds;
        for (size_t i = 0; i < n; i++) {
            m->register_module(names[i], children[i]->m);
            if (sequential && !children[i]->forward)
                dpy_invalid(std::string("child '") + names[i] + "' has no C forward");
            fwds.push_back(children[i]->forward);
        }
        std::function<torch::Tensor(const torch::Tensor &)> f;
        if (sequential)
            f = [fwds](const torch::Tensor &x) {
                torch::Tensor h = x;
                for (const auto &fw : fwds)
                    h = fw(h);
                return h;
            };
        *out = new dpy_module{m, f, "", {}};
        if (sequential)
            for (size_t i = 0; i < n; i++)
                (*out)->layers.push_back(*children[i]);
    });
}

void dpy_module_free(dpy_module *m) noexcept { delete m; }

int dpy_module_has_forward(const dpy_module *m) noexcept { return (bool)m->forward; }

dpy_err dpy_module_forward(dpy_tensor **out, dpy_module *m, const dpy_tensor *x) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        if (!m->forward)
            dpy_invalid("this module's forward is written in Lua");
        *out = dpy_wrap(m->forward(x->v));
    });
}

size_t dpy_module_nparams(const dpy_module *m) noexcept {
    try {
        return m->m->parameters().size();
    } catch (...) {
        return 0;
    }
}

dpy_err dpy_module_param(dpy_tensor **out, const char **name, const dpy_module *m,
                         size_t i) noexcept {
    *out = nullptr;
    *name = nullptr;
    return dpy_guard([&] {
        // Names must outlive this call: keep one copy per module, keyed by the parameter list.
        static thread_local std::string last;
        auto np = m->m->named_parameters();
        if (i >= np.size())
            dpy_invalid("parameter index out of range");
        last = np[i].key();
        *name = last.c_str();
        *out = dpy_wrap(np[i].value());
    });
}

size_t dpy_module_nbuffers(const dpy_module *m) noexcept {
    try {
        return m->m->buffers().size();
    } catch (...) {
        return 0;
    }
}

dpy_err dpy_module_buffer(dpy_tensor **out, const char **name, const dpy_module *m,
                          size_t i) noexcept {
    *out = nullptr;
    *name = nullptr;
    return dpy_guard([&] {
        static thread_local std::string last;
        auto nb = m->m->named_buffers();
        if (i >= nb.size())
            dpy_invalid("buffer index out of range");
        last = nb[i].key();
        *name = last.c_str();
        *out = dpy_wrap(nb[i].value());
    });
}

int64_t dpy_module_numel(const dpy_module *m) noexcept {
    int64_t n = 0;
    try {
        for (const auto &p : m->m->parameters())
            n += p.numel();
    } catch (...) {
    }
    return n;
}

// Each parameter (or its gradient, zeros where none) as a flat view, in parameter order.
static std::vector<torch::Tensor> flat_parts(const dpy_module *m, int grads) {
    std::vector<torch::Tensor> parts;
    for (const auto &p : m->m->parameters()) {
        torch::Tensor v = grads ? p.grad() : p;
        parts.push_back(v.defined() ? v.detach().reshape(-1) : torch::zeros({p.numel()}));
    }
    return parts;
}

dpy_err dpy_module_get_flat(dpy_tensor **out, const dpy_module *m, int grads) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> parts;
        for (const auto &v : flat_parts(m, grads))
            parts.push_back(v.to(torch::kCPU, torch::kFloat32));
        *out = dpy_wrap(parts.empty() ? torch::empty({0}) : torch::cat(parts));
    });
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

dpy_err dpy_module_set_flat(dpy_module *m, const dpy_tensor *flat, int grads) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto params = m->m->parameters();
        const auto &f = flat->v;
        check_flat(params, f, grads ? "set_grad_flat" : "set_flat");
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


static bool plain_floats(const torch::Tensor &t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

// The parameters become views of flat, in parameter order, and the module keeps its storage.
static void repoint(dpy_module *m, std::vector<torch::Tensor> &params, const torch::Tensor &flat) {
    int64_t off = 0;
    for (auto &p : params) {
        p.set_data(flat.narrow(0, off, p.numel()).view(p.sizes()));
        off += p.numel();
    }
    m->flat = flat.storage();
}

// A float32 vector over buf (nbytes), released with its storage's last reference; released at
// once when it cannot hold the parameters. Either way buf is no longer the caller's.
static torch::Tensor over(void *buf, size_t nbytes, const std::vector<torch::Tensor> &params,
                          dpy_release_fn release) {
    try {
        int64_t total = 0;
        for (const auto &p : params) {
            if (!plain_floats(p))
                dpy_invalid("a flat buffer holds contiguous float32 cpu parameters only");
            total += p.numel();
        }
        if (nbytes != (size_t)total * sizeof(float))
            dpy_invalid("a flat buffer of " + std::to_string(nbytes) + " bytes for " +
                        std::to_string(total) + " parameters");
        // release is the storage's own deleter (not a wrapped function): dpy_in_shared knows the
        // buffer by it, from any tensor that lies in it
        c10::Storage st(c10::Storage::use_byte_size_t(), nbytes,
                        c10::DataPtr(buf, buf, release, c10::Device(c10::kCPU)), nullptr, false);
        return torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat32)).set_(st, 0, {total}, {1});
    } catch (...) {
        release(buf);
        throw;
    }
}

// self_weight * (p, from `from`'s parameters) + sum_j w_j x_j into `into`'s parameters (the same
// tensors, or the same shapes in a new buffer), parameter by parameter: p stays in cache while
// it mixes.
static void mix(std::vector<torch::Tensor> &from, std::vector<torch::Tensor> *into, double self_weight,
                const dpy_tensor *const *xs, const double *weights, size_t n) {
    bool fast = true;
    // in place, an x that shares the parameters' storage (the model's own share_flat()) would be
    // read after the passes before it wrote there (a fifth term, or any on the slow path): a copy
    std::vector<torch::Tensor> xv(n);
    for (size_t j = 0; j < n; j++) {
        check_flat(from, xs[j]->v, "mix");
        xv[j] = xs[j]->v;
        if (!into)
            for (const auto &p : from)
                if (xv[j].is_alias_of(p)) {
                    xv[j] = xv[j].clone();
                    break;
                }
        fast = fast && plain_floats(xv[j]);
    }
    for (const auto &p : from)
        fast = fast && plain_floats(p);
    std::vector<const float *> x(n);
    std::vector<float> w(weights, weights + n);
    int64_t off = 0;
    for (size_t i = 0; i < from.size(); i++) {
        auto &p = from[i];
        auto &d = into ? (*into)[i] : p;
        if (fast) {
            for (size_t j = 0; j < n; j++)
                x[j] = xv[j].data_ptr<float>() + off;
            dpy_mix_floats_into(d.data_ptr<float>(), p.data_ptr<float>(), x.data(), w.data(), n,
                                p.numel(), (float)self_weight);
            d.unsafeGetTensorImpl()->bump_version();   // as an in-place op would
        } else {
            if (into)
                d.copy_(p);
            d.mul_(self_weight);
            for (size_t j = 0; j < n; j++)
                d.add_(xv[j].narrow(0, off, p.numel()).view(p.sizes()), weights[j]);
        }
        off += p.numel();
    }
}

dpy_err dpy_module_mix(dpy_module *m, double self_weight, const dpy_tensor *const *xs,
                       const double *weights, size_t n) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto params = m->m->parameters();
        mix(params, nullptr, self_weight, xs, weights, n);
    });
}

int dpy_module_plain(const dpy_module *m) noexcept {
    try {
        for (const auto &p : m->m->parameters())
            if (!plain_floats(p))
                return 0;
        return 1;
    } catch (...) {
        return 0;
    }
}

dpy_err dpy_module_adopt_flat(dpy_module *m, void *buf, size_t nbytes, int copy,
                              dpy_release_fn release) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto params = m->m->parameters();
        auto flat = over(buf, nbytes, params, release);
        if (copy) {
            int64_t off = 0;
            for (const auto &p : params) {
                flat.narrow(0, off, p.numel()).copy_(p.reshape(-1));
                off += p.numel();
            }
        }
        repoint(m, params, flat);
    });
}

dpy_err dpy_module_mix_into(dpy_module *m, void *buf, size_t nbytes, dpy_release_fn release,
                            double self_weight, const dpy_tensor *const *xs, const double *weights,
                            size_t n) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        auto params = m->m->parameters();
        auto flat = over(buf, nbytes, params, release);
        std::vector<torch::Tensor> into;
        int64_t off = 0;
        for (const auto &p : params) {
            into.push_back(flat.narrow(0, off, p.numel()).view(p.sizes()));
            off += p.numel();
        }
        mix(params, &into, self_weight, xs, weights, n);
        repoint(m, params, flat);
    });
}

dpy_err dpy_module_own_lent(dpy_module *m) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        for (auto &p : m->m->parameters())
            dpy_own_if_lent(p);
    });
}

int dpy_module_reads_shared(const dpy_module *m, dpy_release_fn release, int (*shared)(const void *),
                            int lent) noexcept {
    try {
        for (const auto &p : m->m->parameters())
            if (dpy_in_shared(p, release, shared) || (lent && dpy_is_lent(p)))
                return 1;
        return 0;
    } catch (...) {
        return 0;
    }
}

int dpy_module_flat_equals(const dpy_module *m, const void *buf, size_t nbytes) noexcept {
    try {
        auto bytes = static_cast<const char *>(buf);
        size_t off = 0;
        for (const auto &p : m->m->parameters()) {
            size_t len = (size_t)p.numel() * sizeof(float);
            if (!plain_floats(p) || len > nbytes - off || memcmp(p.data_ptr<float>(), bytes + off, len) != 0)
                return 0;
            off += len;
        }
        return off == nbytes;
    } catch (...) {
        return 0;
    }
}

void *dpy_module_flat_buffer(const dpy_module *m) noexcept {
    try {
        if (!m->flat)
            return nullptr;
        auto base = static_cast<float *>(m->flat.data());
        int64_t off = 0;
        for (const auto &p : m->m->parameters()) {
            if (!plain_floats(p) || !p.storage().is_alias_of(m->flat) || p.data_ptr<float>() != base + off)
                return nullptr;
            off += p.numel();
        }
        return (size_t)off * sizeof(float) == m->flat.nbytes() ? base : nullptr;
    } catch (...) {
        return nullptr;
    }
}

dpy_err dpy_module_flat_view(dpy_tensor **out, const dpy_module *m) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        if (!dpy_module_flat_buffer(m))
            dpy_invalid("flat_view: the parameters are not views of one flat buffer");
        auto opts = torch::TensorOptions().dtype(torch::kFloat32);
        *out = dpy_wrap(torch::empty({0}, opts).set_(m->flat, 0,
                                                     {(int64_t)(m->flat.nbytes() / sizeof(float))}, {1}));
    });
}

void dpy_module_train(dpy_module *m, int on) noexcept { m->m->train(on != 0); }
int dpy_module_is_training(const dpy_module *m) noexcept { return m->m->is_training(); }

dpy_err dpy_module_to(dpy_module *m, int dtype, const char *device) noexcept {
    return dpy_guard([&] {
        if (device)
            m->m->to(torch::Device(device));
        if (dtype >= 0)
            m->m->to(dpy_scalar_type((dpy_dtype)dtype));
    });
}

dpy_err dpy_module_zero_grad(dpy_module *m) noexcept {
    return dpy_guard([&] { m->m->zero_grad(); });
}

dpy_err dpy_module_save(const dpy_module *m, const char *path) noexcept {
    return dpy_guard([&] {
        torch::serialize::OutputArchive ar;
        m->m->save(ar);
        ar.save_to(path);
    });
}

dpy_err dpy_module_load(dpy_module *m, const char *path) noexcept {
    return dpy_guard([&] {
        torch::serialize::InputArchive ar;
        ar.load_from(path);
        m->m->load(ar);
    });
}

dpy_err dpy_module_format(const dpy_module *m, char *buf, size_t len) noexcept {
    return dpy_guard([&] {
        std::ostringstream os;
        os << *m->m;
        std::snprintf(buf, len, "%s", os.str().c_str());
    });
}

dpy_err dpy_loss(dpy_tensor **out, dpy_loss_kind kind, const dpy_tensor *input,
                 const dpy_tensor *target, dpy_reduction reduction) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        int64_t red = reduction == DPY_REDUCE_SUM    ? at::Reduction::Sum
                      : reduction == DPY_REDUCE_NONE ? at::Reduction::None
                                                     : at::Reduction::Mean;
        *out = dpy_wrap(dpy_loss_of(kind, input->v, target->v, red));
    });
}

torch::Tensor dpy_loss_of(dpy_loss_kind kind, const torch::Tensor &x, const torch::Tensor &y,
                          int64_t red) {
    switch (kind) {
    case DPY_CROSS_ENTROPY: return at::cross_entropy_loss(x, y, {}, red);
    case DPY_NLL: return at::nll_loss(x, y, {}, red);
    case DPY_MSE: return at::mse_loss(x, y, red);
    case DPY_BCE_WITH_LOGITS: return at::binary_cross_entropy_with_logits(x, y, {}, {}, red);
    default: dpy_invalid("unknown loss");
    }
}
