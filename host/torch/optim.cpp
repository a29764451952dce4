// optim.cpp: the optimizers of dpy_torch.h (SGD, Adam, AdamW over shared parameter tensors).
#include "guard.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>

struct dpy_optim {
    std::unique_ptr<torch::optim::Optimizer> o;
    dpy_optim_kind kind;
};

dpy_err dpy_optim_new(dpy_optim **out, dpy_optim_kind kind, const dpy_tensor *const *params,
                      size_t n, const dpy_optim_opts *x) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        std::vector<torch::Tensor> ps;
        for (size_t i = 0; i < n; i++)
            ps.push_back(params[i]->v);
        if (!(x->lr >= 0))
            dpy_invalid("learning rate must be >= 0");
        std::unique_ptr<torch::optim::Optimizer> o;
        switch (kind) {
        case DPY_SGD:
            o.reset(new torch::optim::SGD(ps, torch::optim::SGDOptions(x->lr)
                                                  .momentum(x->momentum)
                                                  .dampening(x->dampening)
                                                  .weight_decay(x->weight_decay)
                                                  .nesterov(x->nesterov != 0)));
            break;
        case DPY_ADAM:
            o.reset(new torch::optim::Adam(ps, torch::optim::AdamOptions(x->lr)
                                                   .betas({x->beta1, x->beta2})
                                                   .eps(x->eps)
                                                   .weight_decay(x->weight_decay)
                                                   .amsgrad(x->amsgrad != 0)));
            break;
        case DPY_ADAMW:
            o.reset(new torch::optim::AdamW(ps, torch::optim::AdamWOptions(x->lr)
                                                    .betas({x->beta1, x->beta2})
                                                    .eps(x->eps)
                                                    .weight_decay(x->weight_decay)
                                                    .amsgrad(x->amsgrad != 0)));
            break;
        default: dpy_invalid("unknown optimizer");
        }
        *out = new dpy_optim{std::move(o), kind};
    });
}

void dpy_optim_free(dpy_optim *o) noexcept { delete o; }

int dpy_optim_reads_shared(const dpy_optim *o, dpy_release_fn release, int (*shared)(const void *)) noexcept {
    try {
        for (const auto &g : o->o->param_groups())
            for (const auto &p : g.params())
                if (dpy_in_shared(p, release, shared))   // not lent ones: a step copies those
                    return 1;
        return 0;
    } catch (...) {
        return 0;
    }
}

// A parameter still on the values the process lends (an optimizer built on a model drawn alike
// before, never written since) gets values of its own before its first step.
dpy_err dpy_optim_step(dpy_optim *o) noexcept {
    return dpy_guard([&] {
        torch::NoGradGuard no_grad;
        for (auto &g : o->o->param_groups())
            for (auto &p : g.params())
                dpy_own_if_lent(p);
        o->o->step();
    });
}

// Drops the gradients, as PyTorch >= 2.0's zero_grad(set_to_none=True) does: the next backward
// hands its gradients over instead of adding them into zeroed buffers, and between rounds a
// node holds no gradient memory.
dpy_err dpy_optim_zero_grad(dpy_optim *o) noexcept {
    return dpy_guard([&] {
        for (auto &group : o->o->param_groups())
            for (auto &p : group.params())
                p.mutable_grad().reset();
    });
}

double dpy_optim_lr(const dpy_optim *o) noexcept {
    const auto &groups = o->o->param_groups();
    return groups.empty() ? 0.0 : groups[0].options().get_lr();
}

void dpy_optim_set_lr(dpy_optim *o, double lr) noexcept {
    for (auto &g : o->o->param_groups())
        g.options().set_lr(lr);
}

// Drops the per-parameter state (momentum buffers, Adam's moments and step counts), as
// DecentralizePy's reset_optimizer re-creates the optimizer; the learning rate stays.
void dpy_optim_reset(dpy_optim *o) noexcept { o->o->state().clear(); }

const char *dpy_optim_kind_name(const dpy_optim *o) noexcept {
    switch (o->kind) {
    case DPY_SGD: return "sgd";
    case DPY_ADAM: return "adam";
    case DPY_ADAMW: return "adamw";
    }
    return "?";
}

dpy_err dpy_optim_state_save(const dpy_optim *o, char **buf, size_t *len) noexcept {
    *buf = nullptr;
    *len = 0;
    return dpy_guard([&] {
        torch::serialize::OutputArchive ar;
        o->o->save(ar);
        std::ostringstream os;
        ar.save_to(os);
        std::string s = os.str();
        char *p = (char *)std::malloc(s.size() ? s.size() : 1);
        if (!p)
            throw std::bad_alloc();
        std::memcpy(p, s.data(), s.size());
        *buf = p;
        *len = s.size();
    });
}

dpy_err dpy_optim_state_load(dpy_optim *o, const char *buf, size_t len) noexcept {
    return dpy_guard([&] {
        std::istringstream is(std::string(buf, len));
        torch::serialize::InputArchive ar;
        ar.load_from(is);
        o->o->load(ar);
    });
}
