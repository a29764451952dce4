/* test_shim.c: the C API over libtorch: results, and errors coming back as codes + messages
** (never as an abort). */
#include <math.h>

#include "check.h"
#include "dpy_torch.h"

static void test_errors(void) {
    int64_t s2[] = {2}, s3[] = {3};
    dpy_tensor *a, *b, *r;
    CHECK(dpy_tensor_full(&a, s2, 1, 1.0, DPY_FLOAT32, NULL) == DPY_OK);
    CHECK(dpy_tensor_full(&b, s3, 1, 1.0, DPY_FLOAT32, NULL) == DPY_OK);
    CHECK(dpy_tensor_binary(&r, DPY_ADD, a, b, 1.0) == DPY_ETORCH);
    CHECK(r == NULL);
    CHECK_CONTAINS(dpy_torch_errmsg(), "must match the size");
    float data[3] = {1, 2, 3};
    CHECK(dpy_tensor_from_data(&r, data, sizeof data, DPY_FLOAT32, s2, 1) == DPY_EINVAL);
    CHECK_CONTAINS(dpy_torch_errmsg(), "12 bytes");
    int64_t args[2] = {0, 5};
    CHECK(dpy_tensor_shape(&r, DPY_SELECT, a, args, 2) == DPY_ETORCH);
    CHECK_CONTAINS(dpy_torch_errmsg(), "out of range");
    CHECK(dpy_tensor_full(&r, s2, 1, 0, DPY_FLOAT32, "tpu") != DPY_OK);
    dpy_tensor_free(a);
    dpy_tensor_free(b);
    dpy_tensor_free(NULL);   /* NULL-safe */
}

static void test_values(void) {
    int64_t s[] = {2, 2};
    double v[] = {1, 2, 3, 4};
    dpy_tensor *a, *m, *sum;
    CHECK(dpy_tensor_from_data(&a, v, sizeof v, DPY_FLOAT64, s, 2) == DPY_OK);
    CHECK(dpy_tensor_binary(&m, DPY_MATMUL, a, a, 1.0) == DPY_OK);   /* [[7,10],[15,22]] */
    CHECK(dpy_tensor_reduce(&sum, NULL, DPY_SUM, m, DPY_ALLDIMS, 0, 0) == DPY_OK);
    double d;
    int64_t i;
    CHECK(dpy_tensor_item(sum, &d, &i) == DPY_OK && d == 54);
    dpy_tensor_free(a);
    dpy_tensor_free(m);
    dpy_tensor_free(sum);
}

/* One SGD step with momentum 0.9 on a linear layer, checked by hand: w' = w - lr * g. */
static void test_module_and_sgd(void) {
    dpy_generator *g;
    CHECK(dpy_generator_new(&g, 1) == DPY_OK);
    double args[] = {3, 1, 0};   /* linear 3 -> 1, no bias */
    dpy_module *lin;
    CHECK(dpy_module_new(&lin, "linear", args, 3, g) == DPY_OK);
    CHECK(dpy_module_numel(lin) == 3);
    float w[] = {1, 2, 3};
    int64_t s3[] = {3};
    dpy_tensor *flat;
    CHECK(dpy_tensor_from_data(&flat, w, sizeof w, DPY_FLOAT32, s3, 1) == DPY_OK);
    CHECK(dpy_module_set_flat(lin, flat, 0) == DPY_OK);
    int64_t s4[] = {4};
    dpy_tensor *bad;
    CHECK(dpy_tensor_full(&bad, s4, 1, 0, DPY_FLOAT32, NULL) == DPY_OK);
    CHECK(dpy_module_set_flat(lin, bad, 0) == DPY_EINVAL);
    CHECK_CONTAINS(dpy_torch_errmsg(), "3 values");

    dpy_tensor *p;
    const char *name;
    CHECK(dpy_module_param(&p, &name, lin, 0) == DPY_OK);
    CHECK(strcmp(name, "weight") == 0);
    const dpy_tensor *ps[] = {p};
    dpy_optim_opts o = {.lr = 0.1, .momentum = 0.9};
    dpy_optim *opt;
    CHECK(dpy_optim_new(&opt, DPY_SGD, ps, 1, &o) == DPY_OK);

    float x[] = {1, 1, 1};
    int64_t sx[] = {1, 3};
    dpy_tensor *xt, *y, *loss;
    CHECK(dpy_tensor_from_data(&xt, x, sizeof x, DPY_FLOAT32, sx, 2) == DPY_OK);
    CHECK(dpy_module_forward(&y, lin, xt) == DPY_OK);
    CHECK(dpy_tensor_reduce(&loss, NULL, DPY_SUM, y, DPY_ALLDIMS, 0, 0) == DPY_OK);
    CHECK(dpy_tensor_backward(loss, NULL) == DPY_OK);   /* d loss / d w = x = 1 */
    CHECK(dpy_optim_step(opt) == DPY_OK);
    dpy_tensor *after;
    CHECK(dpy_module_get_flat(&after, lin, 0) == DPY_OK);
    const float *a = dpy_tensor_data(after);
    CHECK(a && fabsf(a[0] - 0.9f) < 1e-6 && fabsf(a[2] - 2.9f) < 1e-6);

    dpy_tensor *wrong;   /* forward with the wrong feature count: an error, not an abort */
    int64_t s22[] = {2, 2};
    CHECK(dpy_tensor_full(&wrong, s22, 2, 1, DPY_FLOAT32, NULL) == DPY_OK);
    CHECK(dpy_module_forward(&y, lin, wrong) == DPY_ETORCH);
    CHECK_CONTAINS(dpy_torch_errmsg(), "shapes cannot be multiplied");
    CHECK(dpy_module_new(&lin, "transformer", args, 0, g) == DPY_EINVAL);
    CHECK_CONTAINS(dpy_torch_errmsg(), "unknown layer");
}

int main(void) {
    CHECK(dpy_torch_init(1) == DPY_OK);
    test_errors();
    test_values();
    test_module_and_sgd();
    return check_report("shim");
}
