// initial_layers.cpp: layers built alike are drawn once per process.
//
// Every node of a run builds the same model from the same seed, and a layer's initial values
// depend only on its kind, its arguments and the seed drawn for it (dpy_module_new). Drawing them
// (kaiming-uniform, one generator call a value, under the lock that the global generator needs)
// was 1.3 ms of each node's start for the cnn, serialized across threads: 10 s at 8,192 nodes.
// The first layer of a key is drawn and a private copy of its values kept; a later layer of that
// key is a copy-constructed module with its own copies of those values: the same bytes, no draws.
#include "initial_layers.hpp"

#include <cstring>
#include <list>
#include <mutex>

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

// A copy of a layer whose parameters are fresh tensors of its values.
template <class Impl>
std::shared_ptr<nn::Module> copy_as(const Impl &from) {
    auto m = std::make_shared<Impl>(from);   // options, and the dictionary's handles, shared
    for (auto &item : parameter_access::of(*m)) {
        torch::Tensor &p = item.value();
        if (!p.defined())
            continue;
        bool grad = p.requires_grad();
        p = p.detach().clone();
        p.set_requires_grad(grad);
    }
    relink(*m);
    return m;
}

// The kinds whose construction draws; nullptr for the others.
std::shared_ptr<nn::Module> copy_layer(const nn::Module &from) {
    if (auto *l = dynamic_cast<const nn::LinearImpl *>(&from))
        return copy_as(*l);
    if (auto *c = dynamic_cast<const nn::Conv2dImpl *>(&from))
        return copy_as(*c);
    if (auto *e = dynamic_cast<const nn::EmbeddingImpl *>(&from))
        return copy_as(*e);
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
    // the copy outside the lock: proto is never written
    return proto ? copy_layer(*proto) : nullptr;
}

void initial_layer_keep(const std::string &key, const std::shared_ptr<nn::Module> &made) noexcept try {
    std::shared_ptr<nn::Module> proto = copy_layer(*made);
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
