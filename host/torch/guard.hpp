// guard.hpp: what the shim's .cpp files share: handle structs, the exception guard, converters.
// Never included outside host/torch.
#pragma once

#include <torch/torch.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dpy_torch.h"

struct dpy_tensor {
    torch::Tensor v;
};

struct dpy_generator {
    at::Generator g;
};

// The deleter of the layers' initial values the process keeps and lends (initial_layers.cpp).
void dpy_initial_lent_free(void *p);

// Whether t lies in a buffer handed over with release (its storage's deleter, see over() in
// nn.cpp) that shared says someone else still reads: a child module's parameters, or a tied one,
// lie in their model's buffer without being the module's own flat views.
inline bool dpy_in_shared(const torch::Tensor &t, dpy_release_fn release, int (*shared)(const void *)) {
    if (!t.defined() || !t.has_storage())
        return false;
    const c10::DataPtr &d = t.storage().data_ptr();
    return d.get_deleter() == release && d.get_context() && shared(d.get_context());
}

// Whether t lies in values the process lends (a layer drawn alike before, initial_layers.cpp).
inline bool dpy_is_lent(const torch::Tensor &t) {
    return t.defined() && t.has_storage() && t.storage().data_ptr().get_deleter() == dpy_initial_lent_free;
}

// Gives a lent parameter values of its own (under NoGradGuard), in place: its holders see them.
inline void dpy_own_if_lent(torch::Tensor &p) {
    if (dpy_is_lent(p))
        p.set_data(p.detach().clone());
}

struct dpy_module {
    std::shared_ptr<torch::nn::Module> m;
    // Empty for a container whose forward lives in Lua.
    std::function<torch::Tensor(const torch::Tensor &)> forward;
    std::string kind = {};            // a layer's kind ("linear", ...); empty for containers
    std::vector<dpy_module> layers = {};   // a native sequential's children, in order
    // The buffer dpy_module_adopt_flat made the parameters views of (kept, so that its address
    // names it until the next adoption, even once the parameters have moved elsewhere).
    c10::Storage flat = {};
};

// The loss of dpy_loss (reduction as at::Reduction).
torch::Tensor dpy_loss_of(dpy_loss_kind kind, const torch::Tensor &x, const torch::Tensor &y,
                          int64_t reduction);

// Records the message for dpy_torch_errmsg() and returns code. Never throws.
dpy_err dpy_set_error(dpy_err code, const char *msg) noexcept;

// Runs body; converts every exception into a code + message. Nothing escapes.
template <class Body>
static inline dpy_err dpy_guard(Body &&body) noexcept {
    try {
        body();
        return DPY_OK;
    } catch (const c10::Error &e) {
        return dpy_set_error(DPY_ETORCH, e.what_without_backtrace());
    } catch (const std::bad_alloc &) {
        return dpy_set_error(DPY_ENOMEM, "out of memory");
    } catch (const std::invalid_argument &e) {
        return dpy_set_error(DPY_EINVAL, e.what());
    } catch (const std::exception &e) {
        return dpy_set_error(DPY_ETORCH, e.what());
    } catch (...) {
        return dpy_set_error(DPY_EINTERNAL, "unknown C++ exception");
    }
}

// Misuse detected by the shim itself (bad argument counts, unknown kinds).
[[noreturn]] static inline void dpy_invalid(const std::string &msg) {
    throw std::invalid_argument(msg);
}

torch::ScalarType dpy_scalar_type(dpy_dtype d);
dpy_dtype dpy_from_scalar_type(torch::ScalarType t);
torch::TensorOptions dpy_options(dpy_dtype dtype, const char *device);
std::vector<int64_t> dpy_shape_vec(const int64_t *shape, int ndim);

static inline dpy_tensor *dpy_wrap(torch::Tensor t) { return new dpy_tensor{std::move(t)}; }
