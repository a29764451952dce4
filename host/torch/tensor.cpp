// tensor.cpp: the process-wide settings, generators and every tensor entry point of dpy_torch.h.
#include "guard.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ScalarOps.h>
#include <torch/serialize.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

static thread_local char g_errmsg[1024];

dpy_err dpy_set_error(dpy_err code, const char *msg) noexcept {
    std::snprintf(g_errmsg, sizeof g_errmsg, "%s", msg ? msg : "(no message)");
    return code;
}

const char *dpy_torch_errmsg(void) noexcept { return g_errmsg; }
const char *dpy_torch_version(void) noexcept { return TORCH_VERSION; }
void dpy_torch_free(void *p) noexcept { std::free(p); }

static void *wait_for_close(void *fd) {
    char c;
    while (read(*(int *)fd, &c, 1) < 0 && errno == EINTR) {
    }
    return nullptr;
}

/* libtorch's pools for n threads start 2 (n - 1) besides the caller (pthreadpool's, then OpenMP's),
** and pthreadpool waits for each it started without looking whether it did: under a limit on
** threads (ulimit -u, a cgroup's pids.max) below that, the process hung at start-up. So as many
** are tried first, each waiting for the pipe to close, all at once. */
dpy_err dpy_torch_thread_room(int threads) noexcept {
    int need = threads > 1 ? 2 * (threads - 1) : 0, fds[2];
    if (need == 0 || pipe(fds) != 0)
        return DPY_OK;   /* none needed, or nothing to tell by */
    pthread_t *t = (pthread_t *)std::malloc((size_t)need * sizeof *t);
    int started = 0, err = 0;
    while (t && started < need && (err = pthread_create(&t[started], nullptr, wait_for_close, &fds[0])) == 0)
        started++;   /* default stacks, as the pools' (libtorch's thread-local data needs more than a small one) */
    close(fds[1]);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], nullptr);
    close(fds[0]);
    std::free(t);
    if (started == need || !t)
        return DPY_OK;
    char msg[400];
    std::snprintf(msg, sizeof msg,
                  "libtorch's %d threads (DPY_THREADS, or the config's threads; else one per core) need %d more "
                  "threads, and %d could start (%s): a limit on threads is lower (ulimit -u, or the cgroup's "
                  "pids.max); set DPY_THREADS (or threads) to %d or fewer",
                  threads, need, started, std::strerror(err), started / 2 + 1);
    return dpy_set_error(DPY_EINVAL, msg);
}

dpy_err dpy_torch_init(int threads) noexcept {
    if (dpy_torch_thread_room(threads) != DPY_OK)
        return DPY_EINVAL;
    return dpy_guard([&] {
        if (threads > 0) {
            at::set_num_threads(threads);
            at::set_num_interop_threads(1);   // nodes bring their own parallelism
        }
    });
}

dpy_err dpy_torch_set_threads(int threads) noexcept {
    return dpy_guard([&] {
        if (threads < 1)
            dpy_invalid("threads must be >= 1");
        at::set_num_threads(threads);
    });
}

int dpy_torch_cuda_count(void) noexcept {
    try {
        return (int)torch::cuda::device_count();
    } catch (...) {
        return 0;
    }
}

int dpy_torch_num_threads(void) noexcept { return at::get_num_threads(); }

int dpy_torch_set_grad_enabled(int on) noexcept {
    bool was = at::GradMode::is_enabled();
    at::GradMode::set_enabled(on != 0);
    return was;
}

/* {==== dtypes and options ====} */

static const struct {
    torch::ScalarType type;
    const char *name;
} DTYPES[DPY_NDTYPES] = {
    {torch::kFloat32, "float32"}, {torch::kFloat64, "float64"}, {torch::kFloat16, "float16"},
    {torch::kBFloat16, "bfloat16"}, {torch::kInt64, "int64"}, {torch::kInt32, "int32"},
    {torch::kInt8, "int8"}, {torch::kUInt8, "uint8"}, {torch::kBool, "bool"},
};

torch::ScalarType dpy_scalar_type(dpy_dtype d) {
    if ((unsigned)d >= DPY_NDTYPES)
        dpy_invalid("unknown dtype " + std::to_string((int)d));
    return DTYPES[d].type;
}

dpy_dtype dpy_from_scalar_type(torch::ScalarType t) {
    for (int i = 0; i < DPY_NDTYPES; i++)
        if (DTYPES[i].type == t)
            return (dpy_dtype)i;
    return DPY_NDTYPES;
}

const char *dpy_dtype_name(dpy_dtype d) noexcept {
    return (unsigned)d < DPY_NDTYPES ? DTYPES[d].name : "unknown";
}

size_t dpy_dtype_size(dpy_dtype d) noexcept {
    return (unsigned)d < DPY_NDTYPES ? c10::elementSize(DTYPES[d].type) : 0;
}

torch::TensorOptions dpy_options(dpy_dtype dtype, const char *device) {
    auto o = torch::TensorOptions().dtype(dpy_scalar_type(dtype));
    return device ? o.device(torch::Device(device)) : o;
}

std::vector<int64_t> dpy_shape_vec(const int64_t *shape, int ndim) {
    if (ndim < 0 || ndim > DPY_MAXDIM)
        dpy_invalid("at most " + std::to_string(DPY_MAXDIM) + " dimensions");
    return std::vector<int64_t>(shape, shape + ndim);
}

/* {==== the size cap ====} */

// 0: not set, the machine's physical memory (a larger tensor can only end in swapping or the
// OOM killer; under overcommit the allocation itself succeeds and filling it eats RAM).
static std::atomic<uint64_t> max_bytes{0};

uint64_t dpy_tensor_max_bytes(void) noexcept {
    // read once: each sysconf(_SC_PHYS_PAGES) is a system call (sysinfo), made at every layer and
    // tensor a node's start builds (5-8 a node)
    static const uint64_t physical = [] {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : (uint64_t)1 << 40;
    }();
    uint64_t cap = max_bytes.load();
    return cap != 0 ? cap : physical;
}

void dpy_tensor_set_max_bytes(uint64_t cap) noexcept { max_bytes.store(cap); }

// The shape as a vector, after checking that numel elements of dtype stay under the cap (with
// overflow-checked arithmetic: a product past 2^64 is over any cap).
static std::vector<int64_t> capped(const int64_t *shape, int ndim, dpy_dtype dtype) {
    auto v = dpy_shape_vec(shape, ndim);
    uint64_t bytes = dpy_dtype_size(dtype), cap = dpy_tensor_max_bytes();
    bool over = false;
    for (int64_t d : v) {
        if (d < 0)
            return v;                 // libtorch names the negative size
        if (d == 0)
            return v;
        if (bytes > UINT64_MAX / (uint64_t)d)
            over = true;
        else
            bytes *= (uint64_t)d;
    }
    if (over || bytes > cap) {
        std::string dims;
        for (size_t i = 0; i < v.size(); i++)
            dims += (i ? " x " : "") + std::to_string(v[i]);
        dpy_invalid("a " + dims + " " + dpy_dtype_name(dtype) + " tensor takes " +
                    (over ? std::string("over 2^64") : std::to_string(bytes)) +
                    " bytes, over the cap of " + std::to_string(cap) +
                    " bytes (tensor.set_max_bytes)");
    }
    return v;
}

/* {==== generators ====} */

dpy_err dpy_generator_new(dpy_generator **out, uint64_t seed) noexcept {
    *out = nullptr;
    return dpy_guard([&] { *out = new dpy_generator{at::make_generator<at::CPUGeneratorImpl>(seed)}; });
}

void dpy_generator_free(dpy_generator *g) noexcept { delete g; }

void dpy_generator_seed(dpy_generator *g, uint64_t seed) noexcept {
    std::lock_guard<std::mutex> lock(g->g.mutex());
    g->g.set_current_seed(seed);
}

uint64_t dpy_generator_draw(dpy_generator *g) noexcept {
    std::lock_guard<std::mutex> lock(g->g.mutex());
    return g->g.get<at::CPUGeneratorImpl>()->random64();
}

dpy_err dpy_generator_get_state(dpy_tensor **out, dpy_generator *g) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        std::lock_guard<std::mutex> lock(g->g.mutex());
        *out = dpy_wrap(g->g.get_state());
    });
}

dpy_err dpy_generator_set_state(dpy_generator *g, const dpy_tensor *state) noexcept {
    return dpy_guard([&] {
        auto t = state->v.detach().to(torch::kCPU).contiguous();
        if (t.scalar_type() != torch::kUInt8)
            dpy_invalid("a generator state is a uint8 tensor, got " + std::string(c10::toString(t.scalar_type())));
        std::lock_guard<std::mutex> lock(g->g.mutex());
        g->g.set_state(t);
    });
}

static c10::optional<at::Generator> gen_of(dpy_generator *g) {
    return g ? c10::optional<at::Generator>(g->g) : c10::nullopt;
}

/* {==== creation ====} */

dpy_err dpy_tensor_full(dpy_tensor **out, const int64_t *shape, int ndim, double value,
                        dpy_dtype dtype, const char *device) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        *out = dpy_wrap(torch::full(capped(shape, ndim, dtype), value, dpy_options(dtype, device)));
    });
}

dpy_err dpy_tensor_empty(dpy_tensor **out, const int64_t *shape, int ndim, dpy_dtype dtype,
                         const char *device) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        *out = dpy_wrap(torch::empty(capped(shape, ndim, dtype), dpy_options(dtype, device)));
    });
}

dpy_err dpy_tensor_eye(dpy_tensor **out, int64_t n, int64_t m, dpy_dtype dtype,
                       const char *device) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        int64_t shape[2] = {n, m};
        capped(shape, 2, dtype);
        *out = dpy_wrap(torch::eye(n, m, dpy_options(dtype, device)));
    });
}

dpy_err dpy_tensor_arange(dpy_tensor **out, double start, double end, double step,
                          dpy_dtype dtype, const char *device) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        double n = std::ceil((end - start) / step);   // libtorch's count; it refuses the others
        if (std::isfinite(n) && n > 0 && n < 9e18) {
            int64_t k = (int64_t)n;
            capped(&k, 1, dtype);
        }
        *out = dpy_wrap(torch::arange(start, end, step, dpy_options(dtype, device)));
    });
}

dpy_err dpy_tensor_linspace(dpy_tensor **out, double start, double end, int64_t steps,
                            dpy_dtype dtype, const char *device) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        capped(&steps, 1, dtype);
        *out = dpy_wrap(torch::linspace(start, end, steps, dpy_options(dtype, device)));
    });
}

dpy_err dpy_tensor_random(dpy_tensor **out, dpy_random_kind kind, const int64_t *shape, int ndim,
                          double low, double high, dpy_dtype dtype, const char *device,
                          dpy_generator *gen) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        auto size = capped(shape, ndim, dtype);
        auto opts = dpy_options(dtype, device);
        auto g = gen_of(gen);
        torch::Tensor t;
        switch (kind) {
        case DPY_RAND: t = torch::rand(size, g, opts); break;
        case DPY_RANDN: t = torch::randn(size, g, opts); break;
        case DPY_RANDINT:
            t = torch::randint((int64_t)low, (int64_t)high, size, g, opts);
            break;
        case DPY_RANDPERM:
            if (size.size() != 1)
                dpy_invalid("randperm takes one size");
            t = torch::randperm(size[0], g, opts);
            break;
        case DPY_BERNOULLI:
            if (!(low >= 0 && low <= 1))
                dpy_invalid("bernoulli probability must be in [0, 1]");
            t = torch::empty(size, opts).bernoulli_(low, g);
            break;
        default: dpy_invalid("unknown random kind");
        }
        *out = dpy_wrap(std::move(t));
    });
}

dpy_err dpy_tensor_from_data(dpy_tensor **out, const void *data, size_t nbytes, dpy_dtype dtype,
                             const int64_t *shape, int ndim) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        // the size is checked before anything is allocated: 8 bytes as 2^32 values took 16 GiB
        uint64_t need = dpy_dtype_size(dtype);
        bool over = false;
        for (int i = 0; i < ndim; i++)
            if (shape[i] < 0)
                dpy_invalid("invalid shape dimension " + std::to_string(shape[i]));
        for (int i = 0; i < ndim && need; i++) {   // a 0 anywhere: no values
            over = over || (shape[i] && need > UINT64_MAX / (uint64_t)shape[i]);
            need *= (uint64_t)shape[i];
        }
        if (over && std::find(shape, shape + ndim, 0) != shape + ndim)
            over = false, need = 0;
        if (over || need != nbytes)
            dpy_invalid("got " + std::to_string(nbytes) + " bytes, but " +
                        (over ? std::string("over 2^64") : std::to_string(need)) +
                        " are needed for that dtype and shape");
        auto t = torch::empty(dpy_shape_vec(shape, ndim), dpy_options(dtype, nullptr));
        if (nbytes)
            std::memcpy(t.data_ptr(), data, nbytes);
        *out = dpy_wrap(std::move(t));
    });
}

dpy_err dpy_tensor_wrap(dpy_tensor **out, void *data, size_t nbytes, dpy_dtype dtype,
                        const int64_t *shape, int ndim, dpy_release_fn release) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        auto sizes = dpy_shape_vec(shape, ndim);
        auto opts = dpy_options(dtype, nullptr);
        int64_t numel = 1;
        for (auto s : sizes)
            numel *= s;
        if ((size_t)numel * c10::elementSize(opts.dtype().toScalarType()) != nbytes)
            dpy_invalid("got " + std::to_string(nbytes) + " bytes for " + std::to_string(numel) +
                        " elements of that dtype");
        auto holder = std::make_unique<dpy_tensor>();   // allocated before the deleter owns data
        holder->v = torch::from_blob(data, sizes, [release](void *p) { release(p); }, opts);
        *out = holder.release();
    });
}

dpy_err dpy_tensor_share(dpy_tensor **out, const dpy_tensor *t) noexcept {
    *out = nullptr;
    return dpy_guard([&] { *out = dpy_wrap(t->v); });
}

void dpy_tensor_free(dpy_tensor *t) noexcept { delete t; }

/* {==== facts ====} */

int dpy_tensor_dim(const dpy_tensor *t) noexcept { return (int)t->v.dim(); }
int64_t dpy_tensor_size(const dpy_tensor *t, int dim) noexcept { return t->v.sizes()[dim]; }
int64_t dpy_tensor_numel(const dpy_tensor *t) noexcept { return t->v.numel(); }
dpy_dtype dpy_tensor_dtype(const dpy_tensor *t) noexcept {
    return dpy_from_scalar_type(t->v.scalar_type());
}
size_t dpy_tensor_nbytes(const dpy_tensor *t) noexcept { return t->v.nbytes(); }
size_t dpy_tensor_own_bytes(const dpy_tensor *t) noexcept {
    // another handle of t's impl: a cache's, another box's; a view: of a base that holds it too.
    // An output autograd keeps for the backward pass is t's alone once the graph is freed.
    return t->v.defined() && t->v.use_count() == 1 && !t->v.is_view() ? t->v.nbytes() : 0;
}
int dpy_tensor_is_cuda(const dpy_tensor *t) noexcept { return t->v.is_cuda(); }
int dpy_tensor_requires_grad(const dpy_tensor *t) noexcept { return t->v.requires_grad(); }

int dpy_tensor_shares(const dpy_tensor *a, const dpy_tensor *b) noexcept {
    return a->v.defined() && b->v.defined() && a->v.is_alias_of(b->v);
}

void dpy_tensor_device(const dpy_tensor *t, char *buf, size_t len) noexcept {
    try {
        std::snprintf(buf, len, "%s", t->v.device().str().c_str());
    } catch (...) {
        std::snprintf(buf, len, "?");
    }
}

const void *dpy_tensor_data(const dpy_tensor *t) noexcept {
    if (!t->v.defined() || t->v.is_cuda() || !t->v.is_contiguous())
        return nullptr;
    return t->v.data_ptr();
}

/* {==== values out ====} */

dpy_err dpy_tensor_item(const dpy_tensor *t, double *d, int64_t *i) noexcept {
    return dpy_guard([&] {
        if (t->v.numel() != 1)
            dpy_invalid("item() needs a tensor of one element, got " +
                        std::to_string(t->v.numel()));
        auto s = t->v.item();
        *d = s.toDouble();
        *i = s.isIntegral(true) ? s.toLong() : (int64_t)*d;
    });
}

dpy_err dpy_tensor_cpu_contiguous(dpy_tensor **out, const dpy_tensor *t, int convert,
                                  dpy_dtype dtype) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        auto v = t->v.detach().to(torch::kCPU);
        if (convert)
            v = v.to(dpy_scalar_type(dtype));
        *out = dpy_wrap(v.contiguous());
    });
}

dpy_err dpy_tensor_format(const dpy_tensor *t, char *buf, size_t len) noexcept {
    return dpy_guard([&] {
        std::ostringstream os;
        os << t->v.detach();
        std::string s = os.str();
        auto tail = s.rfind("\n[ ");          // drop libtorch's "[ CPUFloatType{2,3} ]" line
        if (tail != std::string::npos)
            s.erase(tail);
        std::snprintf(buf, len, "%s", s.c_str());
    });
}

dpy_err dpy_tensor_save(const dpy_tensor *t, const char *path) noexcept {
    return dpy_guard([&] {
        auto bytes = torch::pickle_save(t->v.detach().to(torch::kCPU));
        std::ofstream f(path, std::ios::binary);
        if (!f)
            throw std::runtime_error(std::string("cannot open ") + path + " for writing");
        f.write(bytes.data(), (std::streamsize)bytes.size());
        f.close();
        if (!f)
            throw std::runtime_error(std::string("cannot write ") + path);
    });
}

dpy_err dpy_tensor_load(dpy_tensor **out, const char *path) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        std::ifstream f(path, std::ios::binary);
        if (!f)
            throw std::runtime_error(std::string("cannot open ") + path);
        std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        auto v = torch::pickle_load(bytes);
        if (!v.isTensor())
            throw std::runtime_error(std::string(path) + " does not hold a tensor");
        *out = dpy_wrap(v.toTensor());
    });
}

dpy_err dpy_pickle_tensors(char **buf, size_t *len, const char *const *names,
                           const dpy_tensor *const *ts, size_t n) noexcept {
    *buf = nullptr;
    *len = 0;
    return dpy_guard([&] {
        c10::Dict<std::string, torch::Tensor> d;
        for (size_t i = 0; i < n; i++) {
            if (d.contains(names[i]))
                dpy_invalid(std::string("the name '") + names[i] + "' twice");
            auto t = ts[i]->v.detach().to(torch::kCPU);
            // a view (a parameter of a model's flat buffer) is written as a tensor of its own, as
            // torch.save would write a clone: the file holds each tensor's values alone
            if (t.storage().nbytes() != t.nbytes() || !t.is_contiguous())
                t = t.clone(at::MemoryFormat::Contiguous);
            d.insert(names[i], t);
        }
        auto bytes = torch::pickle_save(d);
        *buf = static_cast<char *>(std::malloc(bytes.size() ? bytes.size() : 1));
        if (!*buf)
            throw std::bad_alloc();
        std::memcpy(*buf, bytes.data(), bytes.size());
        *len = bytes.size();
    });
}

dpy_err dpy_unpickle_tensors(char ***names, dpy_tensor ***ts, size_t *n, const char *buf,
                             size_t len) noexcept {
    *names = nullptr;
    *ts = nullptr;
    *n = 0;
    std::vector<std::string> keys;
    std::vector<torch::Tensor> values;
    dpy_err e = dpy_guard([&] {
        auto v = torch::pickle_load(std::vector<char>(buf, buf + len));
        if (!v.isGenericDict())
            throw std::runtime_error("not a dict of tensors (a " + v.tagKind() + ")");
        for (const auto &kv : v.toGenericDict()) {
            if (!kv.key().isString())
                throw std::runtime_error("a key of the dict is not a string");
            if (!kv.value().isTensor())
                throw std::runtime_error("the value of '" + kv.key().toStringRef() + "' is not a tensor");
            keys.push_back(kv.key().toStringRef());
            values.push_back(kv.value().toTensor());
        }
    });
    if (e != DPY_OK)
        return e;
    return dpy_guard([&] {
        size_t k = keys.size();
        char **nm = static_cast<char **>(std::calloc(k ? k : 1, sizeof *nm));
        dpy_tensor **tv = static_cast<dpy_tensor **>(std::calloc(k ? k : 1, sizeof *tv));
        if (!nm || !tv) {
            std::free(nm);
            std::free(tv);
            throw std::bad_alloc();
        }
        try {
            for (size_t i = 0; i < k; i++) {
                nm[i] = static_cast<char *>(std::malloc(keys[i].size() + 1));
                if (!nm[i])
                    throw std::bad_alloc();
                std::memcpy(nm[i], keys[i].c_str(), keys[i].size() + 1);
                tv[i] = dpy_wrap(values[i]);
            }
        } catch (...) {
            for (size_t i = 0; i < k; i++) {
                std::free(nm[i]);
                delete tv[i];
            }
            std::free(nm);
            std::free(tv);
            throw;
        }
        *names = nm;
        *ts = tv;
        *n = k;
    });
}

/* {==== operations ====} */

dpy_err dpy_tensor_unary(dpy_tensor **out, dpy_unary_op op, const dpy_tensor *a) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        const auto &x = a->v;
        torch::Tensor r;
        switch (op) {
        case DPY_NEG: r = x.neg(); break;
        case DPY_ABS: r = x.abs(); break;
        case DPY_SQRT: r = x.sqrt(); break;
        case DPY_EXP: r = x.exp(); break;
        case DPY_LOG: r = x.log(); break;
        case DPY_LOG1P: r = x.log1p(); break;
        case DPY_SIGN: r = x.sign(); break;
        case DPY_FLOOR: r = x.floor(); break;
        case DPY_CEIL: r = x.ceil(); break;
        case DPY_ROUND: r = x.round(); break;
        case DPY_SIN: r = x.sin(); break;
        case DPY_COS: r = x.cos(); break;
        case DPY_RECIPROCAL: r = x.reciprocal(); break;
        case DPY_SQUARE: r = x.square(); break;
        case DPY_RELU: r = x.relu(); break;
        case DPY_GELU: r = torch::gelu(x); break;
        case DPY_SIGMOID: r = x.sigmoid(); break;
        case DPY_TANH: r = x.tanh(); break;
        case DPY_ISNAN: r = x.isnan(); break;
        case DPY_ISINF: r = x.isinf(); break;
        case DPY_LOGICAL_NOT: r = x.logical_not(); break;
        case DPY_EIGVALSH: r = torch::linalg_eigvalsh(x); break;   /* LAPACK: a symmetric matrix's, ascending */
        case DPY_CLONE: r = x.clone(); break;
        case DPY_CONTIGUOUS: r = x.contiguous(); break;
        case DPY_DETACH: r = x.detach(); break;
        default: dpy_invalid("unknown unary op");
        }
        *out = dpy_wrap(std::move(r));
    });
}

// An integral alpha as an integer Scalar: integer tensors refuse a floating one.
static c10::Scalar alpha_of(double alpha) {
    if (alpha == (double)(int64_t)alpha)
        return c10::Scalar((int64_t)alpha);
    return c10::Scalar(alpha);
}

static torch::Tensor binary(dpy_binary_op op, const torch::Tensor &x, const torch::Tensor &y,
                            double alpha) {
    switch (op) {
    case DPY_ADD: return torch::add(x, y, alpha_of(alpha));
    case DPY_SUB: return torch::sub(x, y, alpha_of(alpha));
    case DPY_MUL: return torch::mul(x, y);
    case DPY_DIV: return torch::div(x, y);
    case DPY_REM: return torch::remainder(x, y);   // floored, as Lua's %
    case DPY_POW: return torch::pow(x, y);
    case DPY_EQ: return torch::eq(x, y);
    case DPY_NE: return torch::ne(x, y);
    case DPY_LT: return torch::lt(x, y);
    case DPY_LE: return torch::le(x, y);
    case DPY_GT: return torch::gt(x, y);
    case DPY_GE: return torch::ge(x, y);
    case DPY_MAXIMUM: return torch::maximum(x, y);
    case DPY_MINIMUM: return torch::minimum(x, y);
    case DPY_MATMUL: return torch::matmul(x, y);
    default: dpy_invalid("this op has no out-of-place form");
    }
}

static void binary_inplace(dpy_binary_op op, torch::Tensor &x, const torch::Tensor &y,
                           double alpha) {
    switch (op) {
    case DPY_ADD: x.add_(y, alpha_of(alpha)); break;
    case DPY_SUB: x.sub_(y, alpha_of(alpha)); break;
    case DPY_MUL: x.mul_(y); break;
    case DPY_DIV: x.div_(y); break;
    case DPY_COPY: x.copy_(y); break;
    default: dpy_invalid("this op has no in-place form");
    }
}

dpy_err dpy_tensor_binary(dpy_tensor **out, dpy_binary_op op, dpy_tensor *a, const dpy_tensor *b,
                          double alpha) noexcept {
    if (out)
        *out = nullptr;
    return dpy_guard([&] {
        if (out)
            *out = dpy_wrap(binary(op, a->v, b->v, alpha));
        else
            binary_inplace(op, a->v, b->v, alpha);
    });
}

dpy_err dpy_tensor_scalar(dpy_tensor **out, dpy_binary_op op, dpy_tensor *a, double s,
                          const int64_t *integer, int reversed) noexcept {
    if (out)
        *out = nullptr;
    return dpy_guard([&] {
        c10::Scalar sc = integer ? c10::Scalar(*integer) : c10::Scalar(s);
        if (!out) {
            if (op == DPY_COPY)
                a->v.fill_(sc);
            else
                binary_inplace(op, a->v, at::native::wrapped_scalar_tensor(sc), 1.0);
            return;
        }
        // A wrapped number promotes as a Python scalar does: int64 * 2 stays int64.
        auto w = at::native::wrapped_scalar_tensor(sc, a->v.device());
        *out = dpy_wrap(reversed ? binary(op, w, a->v, 1.0) : binary(op, a->v, w, 1.0));
    });
}

dpy_err dpy_tensor_reduce(dpy_tensor **out, dpy_tensor **idx, dpy_reduce_op op,
                          const dpy_tensor *a, int64_t dim, int keepdim, double p) noexcept {
    *out = nullptr;
    if (idx)
        *idx = nullptr;
    return dpy_guard([&] {
        const auto &x = a->v;
        bool all = dim == DPY_ALLDIMS;
        bool kd = keepdim != 0;
        torch::Tensor r, i;
        auto need_dim = [&](const char *name) {
            if (all)
                dpy_invalid(std::string(name) + " needs a dim");
        };
        switch (op) {
        case DPY_SUM: r = all ? x.sum() : x.sum(dim, kd); break;
        case DPY_MEAN: r = all ? x.mean() : x.mean(dim, kd); break;
        case DPY_STD: r = all ? x.std(p != 0) : x.std(dim, p != 0, kd); break;
        case DPY_VAR: r = all ? x.var(p != 0) : x.var(dim, p != 0, kd); break;
        case DPY_PROD: r = all ? x.prod() : x.prod(dim, kd); break;
        case DPY_NORM: r = all ? x.norm(p) : x.norm(p, {dim}, kd); break;
        case DPY_MIN:
            if (all) r = x.min(); else std::tie(r, i) = x.min(dim, kd);
            break;
        case DPY_MAX:
            if (all) r = x.max(); else std::tie(r, i) = x.max(dim, kd);
            break;
        case DPY_MEDIAN:
            if (all) r = x.median(); else std::tie(r, i) = x.median(dim, kd);
            break;
        case DPY_ARGMIN: r = all ? x.argmin() : x.argmin(dim, kd); break;
        case DPY_ARGMAX: r = all ? x.argmax() : x.argmax(dim, kd); break;
        case DPY_ALL: r = all ? x.all() : x.all(dim, kd); break;
        case DPY_ANY: r = all ? x.any() : x.any(dim, kd); break;
        case DPY_CUMSUM: need_dim("cumsum"); r = x.cumsum(dim); break;
        case DPY_SOFTMAX: need_dim("softmax"); r = x.softmax(dim); break;
        case DPY_LOG_SOFTMAX: need_dim("log_softmax"); r = x.log_softmax(dim); break;
        default: dpy_invalid("unknown reduction");
        }
        *out = dpy_wrap(std::move(r));
        if (idx && i.defined())
            *idx = dpy_wrap(std::move(i));
    });
}

dpy_err dpy_tensor_order(dpy_tensor **values, dpy_tensor **indices, dpy_order_op op,
                         const dpy_tensor *a, int64_t k, int64_t dim, int flag) noexcept {
    *values = *indices = nullptr;
    return dpy_guard([&] {
        torch::Tensor v, i;
        switch (op) {
        case DPY_KTHVALUE: std::tie(v, i) = a->v.kthvalue(k, dim); break;
        case DPY_TOPK: std::tie(v, i) = a->v.topk(k, dim, flag != 0, true); break;
        case DPY_SORT: std::tie(v, i) = a->v.sort(dim, flag != 0); break;
        default: dpy_invalid("unknown order op");
        }
        auto vh = std::unique_ptr<dpy_tensor>(dpy_wrap(std::move(v)));
        *indices = dpy_wrap(std::move(i));
        *values = vh.release();
    });
}

/*
** Arguments of the shape ops: RESHAPE, VIEW, EXPAND, PERMUTE (the sizes or dims); FLATTEN (start,
** end); TRANSPOSE (d0, d1); SQUEEZE () or (dim); UNSQUEEZE (dim); NARROW (dim, start, length);
** SELECT (dim, index).
*/
dpy_err dpy_tensor_shape(dpy_tensor **out, dpy_shape_op op, const dpy_tensor *a,
                         const int64_t *args, int nargs) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        const auto &x = a->v;
        auto list = dpy_shape_vec(args, nargs);
        auto need = [&](int n, const char *name) {
            if (nargs != n)
                dpy_invalid(std::string(name) + " takes " + std::to_string(n) + " arguments");
        };
        torch::Tensor r;
        switch (op) {
        case DPY_RESHAPE: r = x.reshape(list); break;
        case DPY_VIEW: r = x.view(list); break;
        case DPY_EXPAND: r = x.expand(list); break;
        case DPY_PERMUTE: r = x.permute(list); break;
        case DPY_FLATTEN: need(2, "flatten"); r = x.flatten(args[0], args[1]); break;
        case DPY_TRANSPOSE: need(2, "transpose"); r = x.transpose(args[0], args[1]); break;
        case DPY_SQUEEZE: r = nargs == 0 ? x.squeeze() : x.squeeze(args[0]); break;
        case DPY_UNSQUEEZE: need(1, "unsqueeze"); r = x.unsqueeze(args[0]); break;
        case DPY_NARROW: need(3, "narrow"); r = x.narrow(args[0], args[1], args[2]); break;
        case DPY_SELECT: need(2, "select"); r = x.select(args[0], args[1]); break;
        default: dpy_invalid("unknown shape op");
        }
        *out = dpy_wrap(std::move(r));
    });
}

dpy_err dpy_tensor_index(dpy_tensor **out, dpy_index_op op, const dpy_tensor *a, int64_t dim,
                         const dpy_tensor *index) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        torch::Tensor r;
        switch (op) {
        case DPY_INDEX_SELECT: r = a->v.index_select(dim, index->v); break;
        case DPY_MASKED_SELECT: r = a->v.masked_select(index->v); break;
        case DPY_GATHER: r = a->v.gather(dim, index->v); break;
        default: dpy_invalid("unknown index op");
        }
        *out = dpy_wrap(std::move(r));
    });
}

dpy_err dpy_tensor_cat(dpy_tensor **out, const dpy_tensor *const *ts, size_t n, int64_t dim,
                       int stack) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        std::vector<torch::Tensor> list;
        list.reserve(n);
        for (size_t i = 0; i < n; i++)
            list.push_back(ts[i]->v);
        *out = dpy_wrap(stack ? torch::stack(list, dim) : torch::cat(list, dim));
    });
}

dpy_err dpy_tensor_where(dpy_tensor **out, const dpy_tensor *cond, const dpy_tensor *a,
                         const dpy_tensor *b) noexcept {
    *out = nullptr;
    return dpy_guard([&] { *out = dpy_wrap(torch::where(cond->v, a->v, b->v)); });
}

dpy_err dpy_tensor_clamp(dpy_tensor **out, const dpy_tensor *a, double lo, double hi) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        c10::optional<c10::Scalar> l, h;
        if (!std::isnan(lo))
            l = lo;
        if (!std::isnan(hi))
            h = hi;
        *out = dpy_wrap(a->v.clamp(l, h));
    });
}

dpy_err dpy_tensor_to(dpy_tensor **out, const dpy_tensor *a, int dtype, const char *device) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        auto r = a->v;
        if (device)
            r = r.to(torch::Device(device));
        if (dtype >= 0)
            r = r.to(dpy_scalar_type((dpy_dtype)dtype));
        *out = dpy_wrap(std::move(r));
    });
}

dpy_err dpy_tensor_batch(dpy_tensor **x, dpy_tensor **y, const dpy_tensor *images,
                         const dpy_tensor *labels, const dpy_tensor *idx, const double *mean,
                         const double *std, int nchan) noexcept {
    *x = *y = nullptr;
    return dpy_guard([&] {
        // uint8 pixels are scaled to [0, 1]; float images (NumPy, torch.save datasets) are as given
        auto xb = images->v.index_select(0, idx->v).to(torch::kFloat32);
        if (images->v.scalar_type() == torch::kByte)
            xb.div_(255.0);
        if (nchan > 0) {
            if (xb.dim() != 4 || xb.size(1) != nchan)
                dpy_invalid("normalization has " + std::to_string(nchan) +
                            " channels, but the images are " + c10::str(xb.sizes()));
            auto opts = torch::TensorOptions().dtype(torch::kFloat64);
            auto m = torch::from_blob((void *)mean, {1, nchan, 1, 1}, opts).to(torch::kFloat32);
            auto s = torch::from_blob((void *)std, {1, nchan, 1, 1}, opts).to(torch::kFloat32);
            xb.sub_(m).div_(s);
        }
        auto yb = labels->v.index_select(0, idx->v).to(torch::kInt64);
        auto xh = std::unique_ptr<dpy_tensor>(dpy_wrap(std::move(xb)));
        *y = dpy_wrap(std::move(yb));
        *x = xh.release();
    });
}

/* {==== autograd ====} */

dpy_err dpy_tensor_set_requires_grad(dpy_tensor *t, int on) noexcept {
    return dpy_guard([&] { t->v.requires_grad_(on != 0); });
}

dpy_err dpy_tensor_grad(dpy_tensor **out, const dpy_tensor *t) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        const auto &g = t->v.grad();
        if (g.defined())
            *out = dpy_wrap(g);
    });
}

dpy_err dpy_tensor_backward(const dpy_tensor *t, const dpy_tensor *grad) noexcept {
    return dpy_guard([&] {
        if (grad)
            t->v.backward(grad->v);
        else
            t->v.backward();
    });
}
