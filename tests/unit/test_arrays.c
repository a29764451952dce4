/*
** test_arrays.c: the NumPy, torch.save and CIFAR-pickle readers on the fixtures of
** tests/fixtures/datasets (written by make_fixtures.py from the formats' documentation), on
** hostile headers, and on every truncation and many single-byte corruptions of each fixture:
** always a value or a message, never a crash (run it under DPY_SANITIZE for the memory side).
*/
#include <math.h>
#include <unistd.h>

#include "check.h"
#include "dpy_arrays.h"

#ifndef DPY_FIXTURES
#error "DPY_FIXTURES: the fixtures directory"
#endif

static char dir[64];
static char err[512];

static const char *fixture(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", DPY_FIXTURES, name);
    return buf;
}

static const char *tmp(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}

static uint8_t *read_bytes(const char *path, size_t *len) {
    uint8_t *buf;
    if (dpy_read_file(path, 1 << 24, &buf, len, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return buf;
}

static int dims_are(const dpy_array *a, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    int64_t want[4] = {d0, d1, d2, d3};
    if (a->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (a->dims[i] != want[i])
            return 0;
    return 1;
}

static int u8_pattern(const dpy_array *a, int mul, int add) {
    for (size_t i = 0; i < a->nbytes; i++)
        if (((const uint8_t *)a->data)[i] != (uint8_t)((i * (size_t)mul + (size_t)add) % 256))
            return 0;
    return 1;
}

static const char *IMAGES[] = {"images", "x", "data"};
static const char *LABELS[] = {"labels", "y", "targets"};

static const char *npy_with(const char *name, const char *header, const void *data, size_t len);

static void test_numpy(void) {
    dpy_array a, b;
    CHECK(dpy_npy_read(fixture("numpy/train.npz"), IMAGES, 3, &a, err, sizeof err) == 0);
    CHECK(a.type == DPY_ARRAY_U8 && dims_are(&a, 4, 5, 3, 4, 2) && u8_pattern(&a, 7, 3));
    CHECK(strcmp(a.name, "images") == 0);
    CHECK(dpy_npy_read(fixture("numpy/train.npz"), LABELS, 3, &b, err, sizeof err) == 0);
    CHECK(b.type == DPY_ARRAY_I64 && dims_are(&b, 1, 5, 0, 0, 0) && ((int64_t *)b.data)[2] == 4);
    CHECK(dpy_dataset_arrays(&a, &b, DPY_LAYOUT_AUTO, "t", err, sizeof err) == 0);
    CHECK(dims_are(&a, 4, 5, 3, 4, 2));   /* dim 1 is 3: already N x C x H x W */
    double mean[16], std[16];
    CHECK(dpy_array_channel_stats(&a, mean, std, 16, err, sizeof err) == 0);
    /* channel 1 of image 0 is elements 8..15: the reference mean over all images, by hand */
    double sum = 0, sq = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 8; j++) {
            double v = (double)(((i * 24 + 8 + j) * 7 + 3) % 256) / 255.0;
            sum += v;
            sq += v * v;
        }
    CHECK(fabs(mean[1] - sum / 40) < 1e-12 && fabs(std[1] - sqrt(sq / 40 - (sum / 40) * (sum / 40))) < 1e-12);
    dpy_array_free(&a);
    dpy_array_free(&b);

    /* deflated members, float32 N x H x W x C images and uint8 N x 1 labels */
    CHECK(dpy_npy_read(fixture("numpy/test.npz"), IMAGES, 3, &a, err, sizeof err) == 0);
    CHECK(a.type == DPY_ARRAY_F32 && dims_are(&a, 4, 3, 4, 2, 3) && strcmp(a.name, "x") == 0);
    CHECK(dpy_npy_read(fixture("numpy/test.npz"), LABELS, 3, &b, err, sizeof err) == 0);
    CHECK(b.type == DPY_ARRAY_U8 && dims_are(&b, 2, 3, 1, 0, 0));
    CHECK(dpy_dataset_arrays(&a, &b, DPY_LAYOUT_AUTO, "t", err, sizeof err) == 0);
    CHECK(dims_are(&a, 4, 3, 3, 4, 2) && b.type == DPY_ARRAY_I64 && b.ndim == 1);
    /* NCHW element (n, c, h, w) was NHWC element n*24 + (h*2 + w)*3 + c, value (index % 11) / 10 */
    const float *x = a.data;
    int good = 1;
    for (int n = 0; n < 3; n++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 8; p++)
                good &= x[(n * 3 + c) * 8 + p] == (float)((n * 24 + p * 3 + c) % 11 / 10.0);
    CHECK(good);
    CHECK(((int64_t *)b.data)[2] == 5);
    dpy_array_free(&a);
    dpy_array_free(&b);

    CHECK(dpy_npy_read(fixture("numpy/x_train.npy"), NULL, 0, &a, err, sizeof err) == 0);
    CHECK(a.type == DPY_ARRAY_U8 && dims_are(&a, 3, 4, 3, 3, 0) && u8_pattern(&a, 7, 3));
    CHECK(dpy_npy_read(fixture("numpy/y_train.npy"), NULL, 0, &b, err, sizeof err) == 0);
    CHECK(b.type == DPY_ARRAY_I32 && ((int32_t *)b.data)[3] == 1);
    CHECK(dpy_dataset_arrays(&a, &b, DPY_LAYOUT_AUTO, "t", err, sizeof err) == 0);
    CHECK(dims_are(&a, 4, 4, 1, 3, 3));
    dpy_array_free(&a);
    dpy_array_free(&b);
    /* empty images are refused, not wrapped */
    CHECK(dpy_npy_read(npy_with("e.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 0, 3), }",
                                "", 0), NULL, 0, &a, err, sizeof err) == 0);
    CHECK(dpy_npy_read(fixture("numpy/y_train.npy"), NULL, 0, &b, err, sizeof err) == 0);
    CHECK(dpy_dataset_arrays(&a, &b, DPY_LAYOUT_AUTO, "t", err, sizeof err) == -1);
    CHECK_CONTAINS(err, "t: images are 4 x 1 x 0 x 3: empty");
    dpy_array_free(&a);
    dpy_array_free(&b);
    /* float images that are not finite numbers, or a float64 past float32's range, are refused,
    ** naming the sample: they were trained on as inf and NaN */
    {
        double big[8] = {0, 0.5, 0, 0, 0, 0, 1e39, 0};
        float nan[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        nan[5] = NAN;
        struct { const char *descr; const void *data; size_t len; const char *msg; } bad[] = {
            {"<f8", big, sizeof big, "t: image 1 holds 1e+39 (its value 2 in C x H x W order), past float32's range"},
            {"<f4", nan, sizeof nan, "t: image 1 holds nan (its value 1 in C x H x W order), not a finite number"},
        };
        for (int k = 0; k < 2; k++) {
            char header[128];
            snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (2, 2, 2), }",
                     bad[k].descr);
            CHECK(dpy_npy_read(npy_with("f.npy", header, bad[k].data, bad[k].len), NULL, 0, &a, err,
                               sizeof err) == 0);
            uint8_t two[2] = {0, 1};
            CHECK(dpy_npy_read(npy_with("l.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }",
                                        two, 2), NULL, 0, &b, err, sizeof err) == 0);
            CHECK(dpy_dataset_arrays(&a, &b, DPY_LAYOUT_AUTO, "t", err, sizeof err) == -1);
            CHECK_CONTAINS(err, bad[k].msg);
            dpy_array_free(&a);
            dpy_array_free(&b);
        }
    }
    /* N x H x W images have no channel dim to move, whatever the layout says */
    CHECK(dpy_npy_read(fixture("numpy/x_train.npy"), NULL, 0, &a, err, sizeof err) == 0);
    CHECK(dpy_npy_read(fixture("numpy/y_train.npy"), NULL, 0, &b, err, sizeof err) == 0);
    CHECK(dpy_dataset_arrays(&a, &b, DPY_LAYOUT_NHWC, "t", err, sizeof err) == 0);
    CHECK(dims_are(&a, 4, 4, 1, 3, 3) && u8_pattern(&a, 7, 3));
    dpy_array_free(&a);
    dpy_array_free(&b);

    const char *xs[] = {"x", "x_test"};
    CHECK(dpy_npy_read(fixture("numpy/keras.npz"), xs, 2, &a, err, sizeof err) == 0);
    CHECK(strcmp(a.name, "x_test") == 0 && ((uint8_t *)a.data)[0] == 9);
    dpy_array_free(&a);
    CHECK(dpy_npy_read(fixture("numpy/keras.npz"), IMAGES, 3, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "no member named images, x, data (it holds: x_train, y_train, x_test, y_test)");
}

/* A .npy file of the given header text (padded as numpy pads it) and data. */
static const char *npy_with(const char *name, const char *header, const void *data, size_t len) {
    uint8_t buf[512];
    size_t h = strlen(header), total = 10 + h + 1;
    size_t pad = (64 - total % 64) % 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)((h + pad + 1) & 0xff);
    buf[9] = (uint8_t)((h + pad + 1) >> 8);
    memcpy(buf + 10, header, h);
    memset(buf + 10 + h, ' ', pad);
    buf[10 + h + pad] = '\n';
    memcpy(buf + total + pad, data, len);
    write_bytes(tmp(name), buf, total + pad + len);
    return tmp(name);
}

static void npy_fails(const char *header, const void *data, size_t len, const char *message) {
    dpy_array a;
    CHECK(dpy_npy_read(npy_with("bad.npy", header, data, len), NULL, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, message);
}

static void test_npy_hostile(void) {
    uint8_t six[6] = {1, 2, 3, 4, 5, 6};
    dpy_array a;
    CHECK(dpy_npy_read(npy_with("ok.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }",
                                six, 6), NULL, 0, &a, err, sizeof err) == 0);
    CHECK(dims_are(&a, 2, 2, 3, 0, 0) && ((uint8_t *)a.data)[5] == 6);
    dpy_array_free(&a);
    npy_fails("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 4), }", six, 6,
              "promises 8 bytes of data (2 x 4, |u1) but the file holds 6");
    npy_fails("{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
              six, 6, "the shape is too large");
    npy_fails("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", six, 6, "Fortran order");
    npy_fails("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", six, 6, "object array");
    npy_fails("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", six, 4, "big-endian dtype '>f4'");
    npy_fails("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", six, 6, "dtype '<f2' is not supported");
    npy_fails("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", six, 4, "structured dtype");
    npy_fails("{'descr': '|u1', 'shape': (6,), }", six, 6, "bad .npy header");
    npy_fails("{'descr': '|u1', 'fortran_order': False, 'shape': (6,), 'x': 1}", six, 6, "bad .npy header");
    npy_fails("{'descr': '|u1', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", six, 1,
              "more than 8 dimensions");
    uint8_t huge_len[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0x7f};
    write_bytes(tmp("len.npy"), huge_len, sizeof huge_len);
    CHECK(dpy_npy_read(tmp("len.npy"), NULL, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "truncated .npy header");
    write_bytes(tmp("junk.npy"), "hello world", 11);
    CHECK(dpy_npy_read(tmp("junk.npy"), NULL, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "neither a .npy file nor an .npz archive");
    CHECK(dpy_npy_read(tmp("absent.npy"), NULL, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot open");
}

static void test_torch(void) {
    dpy_array a, b;
    CHECK(dpy_torch_read(fixture("torch/train.pt"), IMAGES, 3, 0, &a, err, sizeof err) == 0);
    CHECK(a.type == DPY_ARRAY_U8 && dims_are(&a, 4, 5, 1, 4, 4) && u8_pattern(&a, 7, 3));
    CHECK(dpy_torch_read(fixture("torch/train.pt"), LABELS, 3, 1, &b, err, sizeof err) == 0);
    CHECK(b.type == DPY_ARRAY_I64 && dims_are(&b, 1, 5, 0, 0, 0) && ((int64_t *)b.data)[4] == 5);
    dpy_array_free(&a);
    dpy_array_free(&b);
    CHECK(dpy_torch_read(fixture("torch/test.pt"), IMAGES, 3, 0, &a, err, sizeof err) == 0);
    CHECK(a.type == DPY_ARRAY_F32 && dims_are(&a, 4, 3, 1, 4, 4) && ((float *)a.data)[12] == 0.1f);
    CHECK(strcmp(a.name, "images") == 0);
    dpy_array_free(&a);
    CHECK(dpy_torch_read(fixture("torch/test.pt"), (const char *[]){"inputs"}, 1, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "the dict has no key inputs (its keys: images, labels)");
    CHECK(dpy_torch_read(fixture("torch/images.pt"), NULL, 0, 0, &a, err, sizeof err) == 0);
    CHECK(dims_are(&a, 4, 5, 1, 4, 4) && u8_pattern(&a, 7, 3));
    dpy_array_free(&a);
    /* views: an offset into a storage, and an N x H x W x C permutation of an N x C x H x W block */
    CHECK(dpy_torch_read(fixture("torch/views.pt"), LABELS, 3, 0, &b, err, sizeof err) == 0);
    CHECK(b.nbytes == 16 && ((int64_t *)b.data)[0] == 1 && ((int64_t *)b.data)[1] == 0);
    CHECK(dpy_torch_read(fixture("torch/views.pt"), IMAGES, 3, 0, &a, err, sizeof err) == 0);
    CHECK(dims_are(&a, 4, 2, 2, 2, 3));
    CHECK(dpy_dataset_arrays(&a, &b, DPY_LAYOUT_AUTO, "t", err, sizeof err) == 0);
    CHECK(dims_are(&a, 4, 2, 3, 2, 2) && u8_pattern(&a, 7, 3));   /* back to the block */
    dpy_array_free(&a);
    dpy_array_free(&b);
    CHECK(dpy_torch_read(fixture("torch/half.pt"), NULL, 0, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "float16 tensors are not supported");
    CHECK(dpy_torch_read(fixture("numpy/train.npz"), NULL, 0, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "without the data.pkl of a torch.save file");
    CHECK(dpy_torch_read(fixture("torch/past_end.pt"), NULL, 0, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "a tensor that reaches past the end of its storage");
    CHECK(dpy_torch_read(fixture("torch/huge.pt"), NULL, 0, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "a tensor whose size is too large");
    CHECK(dpy_torch_read(fixture("torch/evil.pt"), NULL, 0, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "global 'posix.system' is not allowed");
    write_bytes(tmp("legacy.pt"), "\x80\x02\x8a\x0a", 4);
    CHECK(dpy_torch_read(tmp("legacy.pt"), NULL, 0, 0, &a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "legacy torch.save format");
}

static void test_cifar(void) {
    dpy_cifar c;
    const char *files[] = {"cifar-10-batches-py/data_batch_1", "cifar-10-batches-py/data_batch_5",
                           "cifar-10-batches-py/test_batch"};
    int seeds[] = {1, 5, 6};
    for (int k = 0; k < 3; k++) {
        CHECK(dpy_cifar_py_read(fixture(files[k]), "labels", &c, err, sizeof err) == 0);
        CHECK(c.n == 3 && c.labels[0] == seeds[k] % 10 && c.labels[2] == (seeds[k] + 2) % 10);
        int good = 1;
        for (int i = 0; i < 3 * 3072; i++)
            good &= c.images[i] == (uint8_t)((seeds[k] * 31 + i * 7) % 256);
        CHECK(good);
        dpy_cifar_free(&c);
    }
    /* re-saved with pickle protocol 5: numpy's _frombuffer over a BYTEARRAY8 */
    CHECK(dpy_cifar_py_read(fixture("cifar-py-protocol5/data_batch_1"), "labels", &c, err, sizeof err) == 0);
    CHECK(c.n == 2 && c.labels[0] == 7 && c.labels[1] == 3);
    int same = 1;
    for (int i = 0; i < 2 * 3072; i++)
        same &= c.images[i] == (uint8_t)((9 * 31 + i * 7) % 256);
    CHECK(same);
    dpy_cifar_free(&c);
    CHECK(dpy_cifar_py_read(fixture("cifar-100-python/train"), "coarse_labels", &c, err, sizeof err) == 0);
    CHECK(c.n == 4 && c.labels[1] == 14);
    dpy_cifar_free(&c);
    CHECK(dpy_cifar_py_read(fixture("cifar-100-python/train"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not a CIFAR batch (no 'labels' entry)");
    CHECK(dpy_cifar_py_read(fixture("cifar-10-batches-py/batches.meta"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "no 'data' entry");
    /* a pickle that would run code in Python is refused at its global */
    static const char evil[] = "\x80\x02" "cos\nsystem\n" "X\x02\x00\x00\x00ls\x85R.";
    write_bytes(tmp("evil"), evil, sizeof evil - 1);
    CHECK(dpy_cifar_py_read(tmp("evil"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "global 'os.system' is not allowed");
    /* re-saved batches torchvision reads: labels a NumPy array, data N x 3 x 32 x 32, protocols 1, 0 */
    const char *resaved[] = {"labels_int64", "labels_int32", "labels_uint8", "data_4d", "protocol1",
                             "protocol0"};
    for (int k = 0; k < 6; k++) {
        char name[64];
        snprintf(name, sizeof name, "cifar-py-resaved/%s", resaved[k]);
        int rc = dpy_cifar_py_read(fixture(name), "labels", &c, err, sizeof err);
        CHECK(rc == 0);
        if (rc != 0) {
            fprintf(stderr, "  %s: %s\n", resaved[k], err);
            continue;
        }
        CHECK(c.n == 2 && c.labels[0] == 7 && c.labels[1] == 3);
        same = 1;
        for (int i = 0; i < 2 * 3072; i++)
            same &= c.images[i] == (uint8_t)((13 * 31 + i * 7) % 256);
        CHECK(same);
        dpy_cifar_free(&c);
    }
    CHECK(dpy_cifar_py_read(fixture("cifar-py-resaved/labels_big_endian"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "'labels' is a big-endian NumPy array");
    CHECK(dpy_cifar_py_read(fixture("cifar-py-resaved/labels_out_of_range"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "'labels' is not a list or NumPy array of 2 labels in 0..255 (entry 1 is 300)");
    CHECK(dpy_cifar_py_read(fixture("cifar-py-resaved/data_4d_wrong"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "'data' is not an n x 3072 or n x 3 x 32 x 32 array (2 x 3 x 16 x 64)");
    write_bytes(tmp("p0"), "(dp0\n.", 6);   /* protocol 0: an empty dict */
    CHECK(dpy_cifar_py_read(tmp("p0"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not a CIFAR batch (no 'data' entry)");
    write_bytes(tmp("p0bad"), "(dp0\nVa\\u00\np1\n.", 17);   /* a \u escape cut short */
    CHECK(dpy_cifar_py_read(tmp("p0bad"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "a \\u escape without its 4 hex digits");
    write_bytes(tmp("text"), "hello\n", 6);
    CHECK(dpy_cifar_py_read(tmp("text"), "labels", &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not a pickle");
}

typedef int (*reader)(const char *path);

static int read_npz_images(const char *p) {
    dpy_array a;
    int rc = dpy_npy_read(p, IMAGES, 3, &a, err, sizeof err);
    if (rc == 0) {
        CHECK(a.nbytes == (size_t)a.dims[0] * (size_t)(a.ndim > 1 ? a.dims[1] : 1) *
                              (size_t)(a.ndim > 2 ? a.dims[2] : 1) * (size_t)(a.ndim > 3 ? a.dims[3] : 1) *
                              dpy_array_elsize(a.type));
        dpy_array_free(&a);
    }
    return rc;
}

static int read_pt_images(const char *p) {
    dpy_array a;
    int rc = dpy_torch_read(p, IMAGES, 3, 0, &a, err, sizeof err);
    dpy_array_free(&a);
    return rc;
}

static int read_pt_labels(const char *p) {
    dpy_array a;
    int rc = dpy_torch_read(p, LABELS, 3, 1, &a, err, sizeof err);
    dpy_array_free(&a);
    return rc;
}

static int read_cifar_py(const char *p) {
    dpy_cifar c;
    int rc = dpy_cifar_py_read(p, "labels", &c, err, sizeof err);
    dpy_cifar_free(&c);
    return rc;
}

/* Every truncation fails with a message; single-byte corruptions give a value or a message.
** Large files are cut and corrupted every step bytes (and at each of their last 64). */
static void test_damage(const char *name, reader read, int step) {
    size_t len;
    uint8_t *orig = read_bytes(fixture(name), &len);
    const char *p = tmp("damaged");
    int truncated_ok = 1, messages = 1;
    for (size_t cut = 0; cut < len; cut += cut + 64 >= len ? 1 : (size_t)step) {
        write_bytes(p, orig, cut);
        err[0] = '\0';
        truncated_ok &= read(p) == -1;
        messages &= err[0] != '\0';
    }
    CHECK(truncated_ok && messages);
    for (size_t at = 0; at < len; at += at + 64 >= len ? 1 : (size_t)step) {
        for (int v = 0; v < 3; v++) {
            uint8_t old = orig[at];
            orig[at] = v == 0 ? (uint8_t)~old : v == 1 ? 0 : 0xff;
            write_bytes(p, orig, len);
            err[0] = '\0';
            messages &= read(p) == 0 || err[0] != '\0';
            orig[at] = old;
        }
    }
    CHECK(messages);
    free(orig);
}

int main(void) {
    /* thousands of small files: in memory where there is a tmpfs */
    snprintf(dir, sizeof dir, "%s/dpy_test_arrays_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    test_numpy();
    test_npy_hostile();
    test_torch();
    test_cifar();
    test_damage("numpy/train.npz", read_npz_images, 1);
    test_damage("numpy/test.npz", read_npz_images, 1);
    test_damage("numpy/x_train.npy", read_npz_images, 1);
    test_damage("torch/train.pt", read_pt_images, 1);
    test_damage("torch/test.pt", read_pt_labels, 1);
    test_damage("torch/views.pt", read_pt_images, 1);
    test_damage("cifar-10-batches-py/data_batch_1", read_cifar_py, 7);
    test_damage("cifar-10-batches-py/test_batch", read_cifar_py, 7);
    test_damage("cifar-py-protocol5/data_batch_1", read_cifar_py, 7);
    test_damage("cifar-py-resaved/protocol0", read_cifar_py, 7);
    test_damage("cifar-py-resaved/protocol1", read_cifar_py, 7);
    test_damage("cifar-py-resaved/labels_int64", read_cifar_py, 7);
    test_damage("cifar-py-resaved/data_4d", read_cifar_py, 7);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return check_report("arrays");
}
