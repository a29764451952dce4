/*
** dpy_torch.h: the plain C API over libtorch; the only header of host/torch that others include.
**
** Conventions (STYLE.md 4.4):
**   - every function that can fail returns dpy_err; results come back through out-parameters,
**     destination first; on failure *out is NULL and dpy_torch_errmsg() says why;
**   - every handle has exactly one owner; *_free functions are NULL-safe and never fail;
**   - no C++ exception ever leaves this API (each body runs inside dpy_guard);
**   - dims and indices are 0-based, negative dims count from the end (as in libtorch).
*/
#ifndef DPY_TORCH_H
#define DPY_TORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#  define DPY_API extern "C"
#  define DPY_NOEXCEPT noexcept
#else
#  define DPY_API extern
#  define DPY_NOEXCEPT
#endif

typedef struct dpy_tensor dpy_tensor;       /* one heap torch::Tensor */
typedef struct dpy_module dpy_module;       /* a torch::nn::Module and its forward */
typedef struct dpy_optim dpy_optim;         /* a torch::optim::Optimizer */
typedef struct dpy_generator dpy_generator; /* a seeded CPU random generator */

typedef enum { DPY_OK = 0, DPY_EINVAL, DPY_ENOMEM, DPY_ETORCH, DPY_EINTERNAL } dpy_err;

typedef enum {
    DPY_FLOAT32, DPY_FLOAT64, DPY_FLOAT16, DPY_BFLOAT16,
    DPY_INT64, DPY_INT32, DPY_INT8, DPY_UINT8, DPY_BOOL, DPY_NDTYPES
} dpy_dtype;

#define DPY_MAXDIM 16

/* {==== process ====} */

/* Sets libtorch's intra-op and inter-op thread counts (0: leave the default). Call once. */
DPY_API dpy_err dpy_torch_init(int threads) DPY_NOEXCEPT;
/* Message of this thread's last failed call; valid until its next failing call. */
DPY_API const char *dpy_torch_errmsg(void) DPY_NOEXCEPT;
/* DPY_EINVAL, naming the limit, when the threads libtorch's pools for `threads` start cannot start
** now (ulimit -u, a cgroup's pids.max): its pools would wait for them forever. */
DPY_API dpy_err dpy_torch_thread_room(int threads) DPY_NOEXCEPT;
/* Changes libtorch's intra-op thread count later on (e.g. to 1 when a process hosts many nodes). */
DPY_API dpy_err dpy_torch_set_threads(int threads) DPY_NOEXCEPT;
DPY_API const char *dpy_torch_version(void) DPY_NOEXCEPT;
DPY_API int dpy_torch_cuda_count(void) DPY_NOEXCEPT;
DPY_API int dpy_torch_num_threads(void) DPY_NOEXCEPT;
/* Thread-local autograd switch; returns the previous setting. Never fails. */
DPY_API int dpy_torch_set_grad_enabled(int on) DPY_NOEXCEPT;
DPY_API const char *dpy_dtype_name(dpy_dtype d) DPY_NOEXCEPT;
DPY_API size_t dpy_dtype_size(dpy_dtype d) DPY_NOEXCEPT;
/* Frees memory handed out by this API (dpy_optim_state_save). */
DPY_API void dpy_torch_free(void *p) DPY_NOEXCEPT;

/* {==== generators ====} */

DPY_API dpy_err dpy_generator_new(dpy_generator **out, uint64_t seed) DPY_NOEXCEPT;
DPY_API void dpy_generator_free(dpy_generator *g) DPY_NOEXCEPT;
DPY_API void dpy_generator_seed(dpy_generator *g, uint64_t seed) DPY_NOEXCEPT;
/* A fresh 64-bit draw (used to derive seeds); never fails. */
DPY_API uint64_t dpy_generator_draw(dpy_generator *g) DPY_NOEXCEPT;
/* The generator's whole state (libtorch's get_state: a uint8 cpu tensor), and back: set_state
** refuses a tensor that is not such a state (DPY_ETORCH names why). Checkpoints use them. */
DPY_API dpy_err dpy_generator_get_state(dpy_tensor **out, dpy_generator *g) DPY_NOEXCEPT;
DPY_API dpy_err dpy_generator_set_state(dpy_generator *g, const dpy_tensor *state) DPY_NOEXCEPT;

/* {==== tensors: creation ====} */

typedef enum { DPY_RAND, DPY_RANDN, DPY_RANDINT, DPY_RANDPERM, DPY_BERNOULLI } dpy_random_kind;

/* device: "cpu", "cuda", "cuda:1", or NULL for cpu. */
DPY_API dpy_err dpy_tensor_full(dpy_tensor **out, const int64_t *shape, int ndim, double value,
                                dpy_dtype dtype, const char *device) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_empty(dpy_tensor **out, const int64_t *shape, int ndim,
                                 dpy_dtype dtype, const char *device) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_eye(dpy_tensor **out, int64_t n, int64_t m, dpy_dtype dtype,
                               const char *device) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_arange(dpy_tensor **out, double start, double end, double step,
                                  dpy_dtype dtype, const char *device) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_linspace(dpy_tensor **out, double start, double end, int64_t steps,
                                    dpy_dtype dtype, const char *device) DPY_NOEXCEPT;
/* rand: U[0,1); randn: N(0,1); randint: integers in [low, high); randperm: shape[0] = n;
** bernoulli: each element 1 with probability low. gen may be NULL (libtorch's default). */
DPY_API dpy_err dpy_tensor_random(dpy_tensor **out, dpy_random_kind kind, const int64_t *shape,
                                  int ndim, double low, double high, dpy_dtype dtype,
                                  const char *device, dpy_generator *gen) DPY_NOEXCEPT;
/* Copies nbytes of raw data (native byte order) into a new cpu tensor of that dtype and shape;
** nbytes must equal numel * dtype size. */
DPY_API dpy_err dpy_tensor_from_data(dpy_tensor **out, const void *data, size_t nbytes,
                                     dpy_dtype dtype, const int64_t *shape, int ndim) DPY_NOEXCEPT;
/* Wraps data (nbytes, cpu) without copying: release(data) runs when the last tensor on it goes.
** On failure nothing is released: the caller keeps data. */
typedef void (*dpy_release_fn)(void *data);
DPY_API dpy_err dpy_tensor_wrap(dpy_tensor **out, void *data, size_t nbytes, dpy_dtype dtype,
                                const int64_t *shape, int ndim,
                                dpy_release_fn release) DPY_NOEXCEPT;
/* The cap on a new tensor's bytes (default: the machine's physical memory): full, empty, eye, arange,
** linspace and random refuse a larger shape (DPY_EINVAL, naming the shape and the cap). */
DPY_API uint64_t dpy_tensor_max_bytes(void) DPY_NOEXCEPT;
/* 0: back to the default */
DPY_API void dpy_tensor_set_max_bytes(uint64_t cap) DPY_NOEXCEPT;
/* Shallow clone: a second owner-handle on the same storage. */
DPY_API dpy_err dpy_tensor_share(dpy_tensor **out, const dpy_tensor *t) DPY_NOEXCEPT;
/* The real FFT of a 1-d tensor of n values: n/2 + 1 complex coefficients as 2 (n/2 + 1) float32
** (re, im interleaved); irfft: the n values of such coefficients. */
DPY_API dpy_err dpy_tensor_rfft(dpy_tensor **out, const dpy_tensor *x) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_irfft(dpy_tensor **out, const dpy_tensor *c, int64_t n) DPY_NOEXCEPT;
DPY_API void dpy_tensor_free(dpy_tensor *t) DPY_NOEXCEPT;

/* {==== tensors: facts (never fail) ====} */

DPY_API int dpy_tensor_dim(const dpy_tensor *t) DPY_NOEXCEPT;
DPY_API int64_t dpy_tensor_size(const dpy_tensor *t, int dim) DPY_NOEXCEPT;
DPY_API int64_t dpy_tensor_numel(const dpy_tensor *t) DPY_NOEXCEPT;
DPY_API dpy_dtype dpy_tensor_dtype(const dpy_tensor *t) DPY_NOEXCEPT;
DPY_API size_t dpy_tensor_nbytes(const dpy_tensor *t) DPY_NOEXCEPT;
/* The bytes that freeing t would free: its nbytes, unless t is a view or another handle holds t
** too (a cache, another box), then 0. */
DPY_API size_t dpy_tensor_own_bytes(const dpy_tensor *t) DPY_NOEXCEPT;
DPY_API int dpy_tensor_is_cuda(const dpy_tensor *t) DPY_NOEXCEPT;
/* Writes "cpu" or "cuda:N" into buf. */
DPY_API void dpy_tensor_device(const dpy_tensor *t, char *buf, size_t len) DPY_NOEXCEPT;
DPY_API int dpy_tensor_requires_grad(const dpy_tensor *t) DPY_NOEXCEPT;
/* Whether a and b share storage (a view, or the tensor itself: detach, to the same dtype). */
DPY_API int dpy_tensor_shares(const dpy_tensor *a, const dpy_tensor *b) DPY_NOEXCEPT;
/* Data pointer of a contiguous cpu tensor, else NULL; a loan valid while t lives unresized. */
DPY_API const void *dpy_tensor_data(const dpy_tensor *t) DPY_NOEXCEPT;

/* {==== tensors: values out ====} */

/* The single value of a one-element tensor, as double and (for integer dtypes) as int64. */
DPY_API dpy_err dpy_tensor_item(const dpy_tensor *t, double *d, int64_t *i) DPY_NOEXCEPT;
/* A contiguous cpu copy (or share, when t already is one) of t, optionally converted. */
DPY_API dpy_err dpy_tensor_cpu_contiguous(dpy_tensor **out, const dpy_tensor *t,
                                          int convert, dpy_dtype dtype) DPY_NOEXCEPT;
/* Human-readable rendering (libtorch's printer) into buf, truncated to len. */
DPY_API dpy_err dpy_tensor_format(const dpy_tensor *t, char *buf, size_t len) DPY_NOEXCEPT;
/* Files readable by PyTorch's torch.load (pickle format of torch::pickle_save). */
DPY_API dpy_err dpy_tensor_save(const dpy_tensor *t, const char *path) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_load(dpy_tensor **out, const char *path) DPY_NOEXCEPT;
/* A dict {names[i]: ts[i]} (insertion order kept; cpu copies) as the bytes of a file torch.load
** reads (torch::pickle_save); *buf is freed with dpy_torch_free. */
DPY_API dpy_err dpy_pickle_tensors(char **buf, size_t *len, const char *const *names,
                                   const dpy_tensor *const *ts, size_t n) DPY_NOEXCEPT;
/* The inverse: *names (n strings) and *ts (n tensors) in the dict's order; the arrays and the
** names are freed with dpy_torch_free, the tensors with dpy_tensor_free. DPY_ETORCH when buf
** is not such a file (a dict of string keys and tensor values). */
DPY_API dpy_err dpy_unpickle_tensors(char ***names, dpy_tensor ***ts, size_t *n, const char *buf,
                                     size_t len) DPY_NOEXCEPT;

/* {==== tensors: operations ====} */

typedef enum {
    DPY_NEG, DPY_ABS, DPY_SQRT, DPY_EXP, DPY_LOG, DPY_LOG1P, DPY_SIGN, DPY_FLOOR, DPY_CEIL,
    DPY_ROUND, DPY_SIN, DPY_COS, DPY_RECIPROCAL, DPY_SQUARE, DPY_RELU, DPY_GELU, DPY_SIGMOID,
    DPY_TANH, DPY_ISNAN, DPY_ISINF, DPY_LOGICAL_NOT, DPY_CLONE, DPY_CONTIGUOUS, DPY_DETACH,
    DPY_EIGVALSH, DPY_NUNARY
} dpy_unary_op;

typedef enum {
    DPY_ADD, DPY_SUB, DPY_MUL, DPY_DIV, DPY_REM, DPY_POW, DPY_EQ, DPY_NE, DPY_LT, DPY_LE,
    DPY_GT, DPY_GE, DPY_MAXIMUM, DPY_MINIMUM, DPY_MATMUL, DPY_COPY, DPY_NBINARY
} dpy_binary_op;

typedef enum {
    DPY_SUM, DPY_MEAN, DPY_STD, DPY_VAR, DPY_PROD, DPY_NORM, DPY_MIN, DPY_MAX, DPY_ARGMIN,
    DPY_ARGMAX, DPY_MEDIAN, DPY_ALL, DPY_ANY, DPY_CUMSUM, DPY_SOFTMAX, DPY_LOG_SOFTMAX,
    DPY_NREDUCE
} dpy_reduce_op;

typedef enum {
    DPY_RESHAPE, DPY_VIEW, DPY_FLATTEN, DPY_TRANSPOSE, DPY_PERMUTE, DPY_SQUEEZE, DPY_UNSQUEEZE,
    DPY_NARROW, DPY_SELECT, DPY_EXPAND, DPY_NSHAPE
} dpy_shape_op;

typedef enum { DPY_INDEX_SELECT, DPY_MASKED_SELECT, DPY_GATHER, DPY_NINDEX } dpy_index_op;
typedef enum { DPY_KTHVALUE, DPY_TOPK, DPY_SORT } dpy_order_op;

DPY_API dpy_err dpy_tensor_unary(dpy_tensor **out, dpy_unary_op op,
                                 const dpy_tensor *a) DPY_NOEXCEPT;
/* out = a op b; alpha scales b for ADD and SUB. With out == NULL the op is in place on a
** (ADD, SUB, MUL, DIV, COPY). */
DPY_API dpy_err dpy_tensor_binary(dpy_tensor **out, dpy_binary_op op, dpy_tensor *a,
                                  const dpy_tensor *b, double alpha) DPY_NOEXCEPT;
/* out = a op s, or s op a when reversed; s promotes as a Python number would (the integer
** *integer when not NULL: every int64 exactly, where s rounds past 2^53). out == NULL: in place on
** a (ADD, SUB, MUL, DIV, COPY meaning fill). */
DPY_API dpy_err dpy_tensor_scalar(dpy_tensor **out, dpy_binary_op op, dpy_tensor *a, double s,
                                  const int64_t *integer, int reversed) DPY_NOEXCEPT;
/* Reductions; dim < -DPY_MAXDIM means over all elements. idx receives the indices for MIN, MAX
** and MEDIAN along a dim (may be NULL). p is the order of NORM, the correction of STD/VAR. */
DPY_API dpy_err dpy_tensor_reduce(dpy_tensor **out, dpy_tensor **idx, dpy_reduce_op op,
                                  const dpy_tensor *a, int64_t dim, int keepdim,
                                  double p) DPY_NOEXCEPT;
#define DPY_ALLDIMS (-(DPY_MAXDIM + 1))
DPY_API dpy_err dpy_tensor_order(dpy_tensor **values, dpy_tensor **indices, dpy_order_op op,
                                 const dpy_tensor *a, int64_t k, int64_t dim,
                                 int flag) DPY_NOEXCEPT;
/* Shape operations take their integer arguments as a list (see dpy_shape_op's doc in
** tensor.cpp); views share storage with a. */
DPY_API dpy_err dpy_tensor_shape(dpy_tensor **out, dpy_shape_op op, const dpy_tensor *a,
                                 const int64_t *args, int nargs) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_index(dpy_tensor **out, dpy_index_op op, const dpy_tensor *a,
                                 int64_t dim, const dpy_tensor *index) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_cat(dpy_tensor **out, const dpy_tensor *const *ts, size_t n,
                               int64_t dim, int stack) DPY_NOEXCEPT;
DPY_API dpy_err dpy_tensor_where(dpy_tensor **out, const dpy_tensor *cond, const dpy_tensor *a,
                                 const dpy_tensor *b) DPY_NOEXCEPT;
/* NaN bounds mean "no bound". */
DPY_API dpy_err dpy_tensor_clamp(dpy_tensor **out, const dpy_tensor *a, double lo,
                                 double hi) DPY_NOEXCEPT;
/* dtype < 0 keeps the dtype; device NULL keeps the device. */
DPY_API dpy_err dpy_tensor_to(dpy_tensor **out, const dpy_tensor *a, int dtype,
                              const char *device) DPY_NOEXCEPT;
/* Image batch from a dataset: images[idx] (N x C x H x W) as float32, scaled to [0,1] when they
** are uint8, then (x - mean[c]) / std[c] (nchan 0: no normalization); labels[idx] as int64. */
DPY_API dpy_err dpy_tensor_batch(dpy_tensor **x, dpy_tensor **y, const dpy_tensor *images,
                                 const dpy_tensor *labels, const dpy_tensor *idx,
                                 const double *mean, const double *std, int nchan) DPY_NOEXCEPT;

/* {==== autograd ====} */

DPY_API dpy_err dpy_tensor_set_requires_grad(dpy_tensor *t, int on) DPY_NOEXCEPT;
/* *out is NULL (and DPY_OK) when t has no gradient. */
DPY_API dpy_err dpy_tensor_grad(dpy_tensor **out, const dpy_tensor *t) DPY_NOEXCEPT;
/* grad may be NULL for a scalar t. */
DPY_API dpy_err dpy_tensor_backward(const dpy_tensor *t, const dpy_tensor *grad) DPY_NOEXCEPT;

/* {==== nn ====} */

/* Builds a layer by kind with numeric arguments (documented in nn.cpp's layer table). gen seeds
** the initial weights and, for dropout, the masks; NULL uses libtorch's default generator. */
DPY_API dpy_err dpy_module_new(dpy_module **out, const char *kind, const double *args, int nargs,
                               dpy_generator *gen) DPY_NOEXCEPT;
/* Lets go of the layers' initial values kept for the next layer built alike (the nodes are built). */
DPY_API void dpy_module_forget_initial(void) DPY_NOEXCEPT;
/* A container of named children. sequential: forward runs them in order (every child must have
** a forward of its own); otherwise the container has no forward (a Lua module supplies it).
** Children are shared, not moved: the caller keeps its handles. */
DPY_API dpy_err dpy_module_container(dpy_module **out, const char *const *names,
                                     dpy_module *const *children, size_t n,
                                     int sequential) DPY_NOEXCEPT;
DPY_API void dpy_module_free(dpy_module *m) DPY_NOEXCEPT;
DPY_API int dpy_module_has_forward(const dpy_module *m) DPY_NOEXCEPT;
DPY_API dpy_err dpy_module_forward(dpy_tensor **out, dpy_module *m,
                                   const dpy_tensor *x) DPY_NOEXCEPT;
DPY_API size_t dpy_module_nparams(const dpy_module *m) DPY_NOEXCEPT;
/* The i-th parameter (a handle sharing its storage) and its dotted name (valid until this
** thread's next call of dpy_module_param). */
DPY_API dpy_err dpy_module_param(dpy_tensor **out, const char **name, const dpy_module *m,
                                 size_t i) DPY_NOEXCEPT;
/* All parameters (grads = 0) or their gradients (grads = 1, zeros where none) as one flat
** float32 cpu tensor, in parameter order. */
DPY_API dpy_err dpy_module_get_flat(dpy_tensor **out, const dpy_module *m,
                                    int grads) DPY_NOEXCEPT;
/* The parameters into dst, a float32 cpu vector of dpy_module_numel values (one copy). */
DPY_API dpy_err dpy_module_flat_into(const dpy_module *m, dpy_tensor *dst) DPY_NOEXCEPT;
/* The inverse: parameters (grads = 0) or their gradients (grads = 1) from one flat vector. */
DPY_API dpy_err dpy_module_set_flat(dpy_module *m, const dpy_tensor *flat,
                                    int grads) DPY_NOEXCEPT;
/* Averaging in place, without a copy of the model: every parameter p becomes
** self_weight * p + sum_j weights[j] * (its slice of xs[j]), each xs[j] a flat vector of
** dpy_module_numel values (parameter order, as dpy_module_get_flat). */
DPY_API dpy_err dpy_module_mix(dpy_module *m, double self_weight, const dpy_tensor *const *xs,
                               const double *weights, size_t n) DPY_NOEXCEPT;
/* Whether every parameter is a contiguous float32 cpu tensor (what a flat buffer can hold). */
DPY_API int dpy_module_plain(const dpy_module *m) DPY_NOEXCEPT;
/* The parameters become views of buf (nbytes: 4 x dpy_module_numel, plain parameters only), in
** parameter order (the layout of dpy_module_get_flat), their values copied in (copy = 1) or left
** to the caller (copy = 0: the caller fills buf at once); release(buf) runs when the last view
** is gone, or at once when the call fails (the parameters then unchanged). The mix variant writes its weighted sum into buf instead of in place, the parameters'
** current values as the own term: a model whose buffer others still read moves to a new one. */
DPY_API dpy_err dpy_module_adopt_flat(dpy_module *m, void *buf, size_t nbytes, int copy,
                                      dpy_release_fn release) DPY_NOEXCEPT;
DPY_API dpy_err dpy_module_mix_into(dpy_module *m, void *buf, size_t nbytes, dpy_release_fn release,
                                    double self_weight, const dpy_tensor *const *xs,
                                    const double *weights, size_t n) DPY_NOEXCEPT;
/* Whether a parameter lies in a buffer adopted with release that shared(buffer) says another reads
** (the module's own flat buffer, or its parent's: a child module's parameters lie there too), or,
** with lent, in the values the process lends to layers drawn alike (initial_layers.cpp). */
DPY_API int dpy_module_reads_shared(const dpy_module *m, dpy_release_fn release,
                                    int (*shared)(const void *), int lent) DPY_NOEXCEPT;
/* Gives each parameter that lies in lent values values of its own (a model whose parameters are
** not all plain float32: no flat buffer holds them). */
DPY_API dpy_err dpy_module_own_lent(dpy_module *m) DPY_NOEXCEPT;
/* Whether the parameters, in parameter order, are byte for byte the nbytes of buf (plain ones only). */
DPY_API int dpy_module_flat_equals(const dpy_module *m, const void *buf, size_t nbytes) DPY_NOEXCEPT;
/* The buffer of the last adoption while the parameters are still exactly its views, else NULL. */
DPY_API void *dpy_module_flat_buffer(const dpy_module *m) DPY_NOEXCEPT;
/* A float32 vector over that buffer (the parameters themselves, no copy); NULL when there is none. */
DPY_API dpy_err dpy_module_flat_view(dpy_tensor **out, const dpy_module *m) DPY_NOEXCEPT;
DPY_API int64_t dpy_module_numel(const dpy_module *m) DPY_NOEXCEPT;
/* The buffers (batchnorm's running statistics), as dpy_module_nparams / dpy_module_param. */
DPY_API size_t dpy_module_nbuffers(const dpy_module *m) DPY_NOEXCEPT;
DPY_API dpy_err dpy_module_buffer(dpy_tensor **out, const char **name, const dpy_module *m,
                                  size_t i) DPY_NOEXCEPT;
DPY_API void dpy_module_train(dpy_module *m, int on) DPY_NOEXCEPT;
DPY_API int dpy_module_is_training(const dpy_module *m) DPY_NOEXCEPT;
DPY_API dpy_err dpy_module_to(dpy_module *m, int dtype, const char *device) DPY_NOEXCEPT;
DPY_API dpy_err dpy_module_zero_grad(dpy_module *m) DPY_NOEXCEPT;
/* Parameters and buffers, in libtorch's archive format. */
DPY_API dpy_err dpy_module_save(const dpy_module *m, const char *path) DPY_NOEXCEPT;
DPY_API dpy_err dpy_module_load(dpy_module *m, const char *path) DPY_NOEXCEPT;
DPY_API dpy_err dpy_module_format(const dpy_module *m, char *buf, size_t len) DPY_NOEXCEPT;

typedef enum { DPY_CROSS_ENTROPY, DPY_NLL, DPY_MSE, DPY_BCE_WITH_LOGITS, DPY_NLOSS } dpy_loss_kind;
typedef enum { DPY_REDUCE_MEAN, DPY_REDUCE_SUM, DPY_REDUCE_NONE } dpy_reduction;
DPY_API dpy_err dpy_loss(dpy_tensor **out, dpy_loss_kind kind, const dpy_tensor *input,
                         const dpy_tensor *target, dpy_reduction reduction) DPY_NOEXCEPT;
/* Per-sample gradients of the loss (DP-SGD): *grads is n x numel (float32, parameter order, as
** dpy_module_get_flat), *losses n; the parameters' .grad are left untouched. batched: from one
** forward and backward when the module is a native sequential of linear/conv2d layers (and
** parameter-free ones), else (or with batched = 0) one small pass per sample. */
DPY_API dpy_err dpy_module_per_sample_grads(dpy_tensor **grads, dpy_tensor **losses,
                                            dpy_module *m, dpy_loss_kind kind,
                                            const dpy_tensor *x, const dpy_tensor *y,
                                            int batched) DPY_NOEXCEPT;
/* DP-SGD's gradient in one call: the per-sample gradients of dpy_module_per_sample_grads, each
** clipped to L2 norm clip, summed, N(0, (sigma clip)^2) noise from gen added, divided by n (as
** privacy.privatize; the same generator state gives the same noise). *grad is numel float32,
** *losses n. On the batched path the n x numel matrix is never formed (linear layers' norms and
** clipped sums come from their inputs and output gradients). */
DPY_API dpy_err dpy_module_private_grad(dpy_tensor **grad, dpy_tensor **losses, dpy_module *m,
                                        dpy_loss_kind kind, const dpy_tensor *x,
                                        const dpy_tensor *y, double clip, double sigma,
                                        dpy_generator *gen, int batched) DPY_NOEXCEPT;

/* {==== robust aggregation (aggregate.cpp) ====} */

typedef struct {
    int f;                      /* Byzantine inputs to tolerate */
    int m;                      /* multi_krum: rows averaged (0: n - f) */
    int max_iter;               /* geometric_median: Weiszfeld iterations at most */
    double tol, eps;            /* geometric_median: relative tolerance, smallest distance */
    double radius;              /* centered_clipping: tau; static_clipping: the norm bound */
    int iterations;             /* centered_clipping: L */
    int bucket;                 /* bucketing: rows per bucket */
    uint64_t seed;              /* bucketing: the shuffle */
    const dpy_tensor *center;   /* centered_clipping: where to start (NULL: zeros) */
} dpy_agg_opts;

/* Aggregates the rows of x (n x d): rule "mean", "median", "trimmed_mean", "krum", "multi_krum",
** "geometric_median", "centered_clipping", "bulyan", "meamed" or "mda" give a d vector; the
** pre-aggregations "nnm", "bucketing" and "static_clipping" give rows again. DPY_EINVAL names an
** (n, f) outside what the rule tolerates. */
DPY_API dpy_err dpy_aggregate(dpy_tensor **out, const char *rule, const dpy_tensor *x,
                              const dpy_agg_opts *o) DPY_NOEXCEPT;

/* {==== optim ====} */

typedef enum { DPY_SGD, DPY_ADAM, DPY_ADAMW } dpy_optim_kind;

typedef struct {
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
    int nesterov, amsgrad;
} dpy_optim_opts;

/* The optimizer shares the given parameter tensors (the caller keeps its handles). */
DPY_API dpy_err dpy_optim_new(dpy_optim **out, dpy_optim_kind kind,
                              const dpy_tensor *const *params, size_t n,
                              const dpy_optim_opts *opts) DPY_NOEXCEPT;
DPY_API void dpy_optim_free(dpy_optim *o) DPY_NOEXCEPT;
DPY_API dpy_err dpy_optim_step(dpy_optim *o) DPY_NOEXCEPT;
/* dpy_module_reads_shared for the optimizer's parameters (its step writes them in place), lent
** values left out: its step copies those first. */
DPY_API int dpy_optim_reads_shared(const dpy_optim *o, dpy_release_fn release,
                                   int (*shared)(const void *)) DPY_NOEXCEPT;
DPY_API dpy_err dpy_optim_zero_grad(dpy_optim *o) DPY_NOEXCEPT;
DPY_API double dpy_optim_lr(const dpy_optim *o) DPY_NOEXCEPT;
DPY_API void dpy_optim_set_lr(dpy_optim *o, double lr) DPY_NOEXCEPT;
DPY_API void dpy_optim_reset(dpy_optim *o) DPY_NOEXCEPT;   /* drops the state, keeps the lr */
DPY_API const char *dpy_optim_kind_name(const dpy_optim *o) DPY_NOEXCEPT;
/* The optimizer's state (momentum buffers, moments, step counts) as bytes in libtorch's archive
** format; *buf is freed with dpy_torch_free. */
DPY_API dpy_err dpy_optim_state_save(const dpy_optim *o, char **buf, size_t *len) DPY_NOEXCEPT;
DPY_API dpy_err dpy_optim_state_load(dpy_optim *o, const char *buf, size_t len) DPY_NOEXCEPT;

#endif
