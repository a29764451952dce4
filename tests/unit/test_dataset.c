/* test_dataset.c: the IDX and CIFAR readers on small files written here, good and corrupt. */
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "dpy_core.h"

static char dir[] = "/tmp/dpy_test_dataset_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void write_file(const char *name, const void *data, size_t len, int gz) {
    if (gz) {
        gzFile f = gzopen(path_of(name), "wb");
        gzwrite(f, data, (unsigned)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path_of(name), "wb");
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

/* 2 images of 2 x 3, values 0..11 */
static const unsigned char IDX[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3,
                                    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

static void test_idx(void) {
    char err[512];
    dpy_idx x;
    for (int gz = 0; gz <= 1; gz++) {
        write_file("a.idx", IDX, sizeof IDX, gz);
        CHECK(dpy_idx_read(path_of("a.idx"), &x, err, sizeof err) == 0);
        CHECK(x.ndim == 3 && x.dims[0] == 2 && x.dims[1] == 2 && x.dims[2] == 3);
        CHECK(x.len == 12 && x.data[0] == 0 && x.data[11] == 11);
        dpy_idx_free(&x);
    }
    write_file("short.idx", IDX, sizeof IDX - 1, 0);
    CHECK(dpy_idx_read(path_of("short.idx"), &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "truncated or corrupt");

    unsigned char bad[sizeof IDX];
    memcpy(bad, IDX, sizeof IDX);
    bad[0] = 7;
    write_file("magic.idx", bad, sizeof bad, 0);
    CHECK(dpy_idx_read(path_of("magic.idx"), &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "bad magic");

    memcpy(bad, IDX, sizeof IDX);
    bad[2] = 0x0D;   /* float elements */
    write_file("type.idx", bad, sizeof bad, 0);
    CHECK(dpy_idx_read(path_of("type.idx"), &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "0x0d is not supported");

    /* a header that promises 4 G elements must not allocate them */
    unsigned char huge[] = {0, 0, 8, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1, 2, 3};
    write_file("huge.idx", huge, sizeof huge, 0);
    CHECK(dpy_idx_read(path_of("huge.idx"), &x, err, sizeof err) == -1);
    /* 2^31 x 4 x 2^31 is 2^64, 0 in 64 bits: an empty body must not pass for it */
    unsigned char wrap[] = {0, 0, 8, 3, 0x80, 0, 0, 0, 0, 0, 0, 4, 0x80, 0, 0, 0};
    write_file("wrap.idx", wrap, sizeof wrap, 0);
    CHECK(dpy_idx_read(path_of("wrap.idx"), &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "too large");

    CHECK(dpy_idx_read(path_of("missing.idx"), &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot open");
}

/* Mapped: a plain file directly, a gzipped one through its copy in the cache directory. */
static void test_idx_map(void) {
    char err[512], cache[300];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    dpy_idx x;
    for (int gz = 0; gz <= 1; gz++) {
        write_file("m.idx", IDX, sizeof IDX, gz);
        CHECK(dpy_idx_map(path_of("m.idx"), cache, &x, err, sizeof err) == 0);
        CHECK(x.mapped && x.ndim == 3 && x.dims[2] == 3);
        CHECK(x.len == 12 && x.data[0] == 0 && x.data[11] == 11);
        dpy_idx_free(&x);
    }
    CHECK(dpy_idx_map(path_of("m.idx"), NULL, &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "no cache directory");
    write_file("short.idx", IDX, sizeof IDX - 1, 1);
    CHECK(dpy_idx_map(path_of("short.idx"), cache, &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "truncated or corrupt");
    write_file("m.idx", IDX, sizeof IDX, 1);
    snprintf(cache, sizeof cache, "%s/a.idx/cache", dir);   /* under a file: cannot be made */
    CHECK(dpy_idx_map(path_of("m.idx"), cache, &x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot");
}

static void test_cifar(void) {
    char err[512];
    dpy_cifar c;
    /* CIFAR-100 layout: coarse, fine, 3072 pixels; two records */
    size_t rec = 2 + 3072;
    unsigned char *buf = calloc(2, rec);
    buf[0] = 3;
    buf[1] = 42;
    buf[2] = 200;            /* first red pixel of image 0 */
    buf[rec + 1] = 7;
    buf[rec + 2 + 3071] = 9; /* last blue pixel of image 1 */
    write_file("c100.bin", buf, 2 * rec, 0);
    CHECK(dpy_cifar_read(path_of("c100.bin"), 2, 1, &c, err, sizeof err) == 0);
    CHECK(c.n == 2 && c.labels[0] == 42 && c.labels[1] == 7);
    CHECK(c.images[0] == 200 && c.images[3072 + 3071] == 9);
    dpy_cifar_free(&c);
    CHECK(dpy_cifar_read(path_of("c100.bin"), 2, 0, &c, err, sizeof err) == 0);
    CHECK(c.labels[0] == 3);
    dpy_cifar_free(&c);
    /* read as CIFAR-10 (1 label byte) the size is not a whole number of records */
    CHECK(dpy_cifar_read(path_of("c100.bin"), 1, 0, &c, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not a whole number");
    free(buf);
}

int main(void) {
    if (!mkdtemp(dir))
        return 1;
    test_idx();
    test_idx_map();
    test_cifar();
    return check_report("dataset");
}
