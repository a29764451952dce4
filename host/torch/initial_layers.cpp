// initial_layers.cpp: layers built alike are drawn once per process.
//
// Every node of a run builds the same model from the same seed, and a layer's initial values
// depend only on its kind, its arguments and the seed drawn for it (dpy_module_new). Drawing them
// (kaiming-uniform, one generator call a value, under the lock that the global generator needs)
// was 1.3 ms of each node's start for the cnn, serialized across threads: 10 s at 8,192 nodes.
// The first layer of a key is drawn and a private copy of its values kept; a later layer of that
// key is a copy-constructed module whose parameters lie in those values, lent: the same bytes, no
// draws and no copy (a copy of the cnn's values, and share_initial freeing it, were 8 % of a
// node's start at 8,192 nodes). A lent value is never written: the kept values' storage has a
// deleter of its own (dpy_is_lent, guard.hpp), by which dpy_module_reads_shared counts them as read
// by others, so every write through the bindings moves the parameters to values of their own first
// (own_buffer in l_nn.c), as for a model whose initial copy nodes share; an optimizer's step copies
// the lent parameters it holds first (dpy_optim_step).
#include "initial_layers.hpp"

#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

#include "guard.hpp"

void dpy_initial_lent_free(void *p) { free(p); }

namespace nn = torch::nn;

namespace {

// Module::parameters_ is protected: a member pointer named through a subclass reaches it on any
// module (the copy below must give the copy's dictionary tensors of its own).
struct parameter_access : nn::Module {
    static torch::OrderedDict<std::string, torch::Tensor> &of(nn::Module &m) {
        return m.*(&parameter_access::parameters_);
    }
};

struct kept {
    std::string key;
    std::shared_ptr<nn::Module> proto;   // never handed out: its values stay as drawn
    size_t bytes;
};

constexpr size_t KEPT_MAX = 32, KEPT_BYTES_MAX = size_t(64) << 20;
std::mutex mu;
std::list<kept> memo;   // most recent first
size_t memo_bytes;

// The Impl's own handles, pointed at its dictionary's tensors (weight and bias are both)
torch::Tensor entry(nn::Module &m, const char *name) {
    torch::Tensor *t = parameter_access::of(m).find(name);
    return t ? *t : torch::Tensor();
}
void relink(nn::LinearImpl &m) { m.weight = entry(m, "weight"), m.bias = entry(m, "bias"); }
void relink(nn::Conv2dImpl &m) { m.weight = entry(m, "weight"), m.bias = entry(m, "bias"); }
void relink(nn::EmbeddingImpl &m) { m.weight = entry(m, "weight"); }

// p's values in a storage of the memo's (its deleter marks it lent).
torch::Tensor kept_copy(const torch::Tensor &p) {
    size_t bytes = p.nbytes();
    void *buf = std::malloc(bytes ? bytes : 1);
    if (!buf)
        throw std::bad_alloc();
    c10::Storage st(c10::Storage::use_byte_size_t(), bytes,
                    c10::DataPtr(buf, buf, dpy_initial_lent_free, c10::Device(c10::kCPU)), nullptr, false);
    auto t = torch::empty({0}, p.options().requires_grad(false)).set_(st, 0, p.sizes());
    t.copy_(p.detach());
    return t;
}

// A tensor of its own (its own version counter: the nodes' optimizers step theirs apart) over p's
// storage.
torch::Tensor lent(const torch::Tensor &p) {
    return torch::empty({0}, p.options().requires_grad(false))
        .set_(p.storage(), p.storage_offset(), p.sizes(), p.strides());
}

// A copy of a layer whose parameters are new tensors: in the memo's storage (keep), or lent the
// values of a kept layer.
template <class Impl>
std::shared_ptr<nn::Module> copy_as(const Impl &from, bool keep) {
    auto m = std::make_shared<Impl>(from);   // options, and the dictionary's handles, shared
    torch::NoGradGuard no_grad;
    for (auto &item : parameter_access::of(*m)) {
        torch::Tensor &p = item.value();
        if (!p.defined())
            continue;
        bool grad = p.requires_grad();
        p = keep ? kept_copy(p) : lent(p);
        p.set_requires_grad(grad);
    }
    relink(*m);
    return m;
}

// The kinds whose construction draws; nullptr for the others.
std::shared_ptr<nn::Module> copy_layer(const nn::Module &from, bool keep) {
    if (auto *l = dynamic_cast<const nn::LinearImpl *>(&from))
        return copy_as(*l, keep);
    if (auto *c = dynamic_cast<const nn::Conv2dImpl *>(&from))
        return copy_as(*c, keep);
    if (auto *e = dynamic_cast<const nn::EmbeddingImpl *>(&from))
        return copy_as(*e, keep);
    return nullptr;
}

size_t values_bytes(nn::Module &m) {
    size_t n = 0;
    for (auto &item : parameter_access::of(m))
        if (item.value().defined())
            n += item.value().nbytes();
    return n;
}

}  // namespace

std::string initial_layer_key(const std::string &kind, const double *args, int nargs, uint64_t seed) {
    std::string key = kind;
    key.push_back('\0');
    key.append(reinterpret_cast<const char *>(args), sizeof(double) * (size_t)nargs);
    key.append(reinterpret_cast<const char *>(&seed), sizeof seed);
    return key;
}

std::shared_ptr<nn::Module> initial_layer_find(const std::string &key) {
    std::shared_ptr<nn::Module> proto;
    {
        std::lock_guard<std::mutex> lock(mu);
        for (auto it = memo.begin(); it != memo.end(); ++it)
            if (it->key == key) {
                proto = it->proto;
                memo.splice(memo.begin(), memo, it);
                break;
            }
    }
    // outside the lock: proto is never written
    return proto ? copy_layer(*proto, false) : nullptr;
}

void initial_layer_keep(const std::string &key, const std::shared_ptr<nn::Module> &made) noexcept try {
    std::shared_ptr<nn::Module> proto = copy_layer(*made, true);
    if (!proto)
        return;
    size_t bytes = values_bytes(*proto);
    if (bytes > KEPT_BYTES_MAX / 4)   // a huge layer: drawing it again is cheap beside its memory
        return;
    std::lock_guard<std::mutex> lock(mu);
    for (auto &k : memo)
        if (k.key == key)
            return;
    memo.push_front(kept{key, proto, bytes});
    memo_bytes += bytes;
    while (memo.size() > KEPT_MAX || memo_bytes > KEPT_BYTES_MAX) {
        memo_bytes -= memo.back().bytes;
        memo.pop_back();
    }
} catch (...) {   // out of memory: the next layer of this key is drawn again
}

void initial_layers_forget() {
    std::lock_guard<std::mutex> lock(mu);
    memo.clear();
    memo_bytes = 0;
}
