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

/* Opens and reads path's cache file under key into a and b (4 and 3 bytes): dpy_cache_open's
** answer, or -1 when the read fails; 0 only with every byte as written. */
static int cache_load(const char *key, unsigned char *a, unsigned char *b, char *err, size_t errlen) {
    dpy_cache_file f;
    int rc = dpy_cache_open(path_of("c.cache"), key, strlen(key), &f, err, errlen);
    if (rc != 0)
        return rc;
    if (f.n != 2 || strcmp(f.meta, "meta") != 0 || f.arrays[0].nbytes != 4 || f.arrays[1].nbytes != 3) {
        dpy_cache_close(&f);
        return -2;
    }
    void *pa = dpy_cache_map(&f, 0, err, errlen);
    void *pb = pa ? dpy_cache_map(&f, 1, err, errlen) : NULL;
    rc = pb ? dpy_cache_check(&f, err, errlen) : -1;
    if (rc == 0) {
        memcpy(a, pa, 4);
        memcpy(b, pb, 3);
    }
    if (pa)
        dpy_cache_unmap(pa);
    if (pb)
        dpy_cache_unmap(pb);
    dpy_cache_close(&f);
    return rc;
}

static void test_cache(void) {
    char err[512];
    const unsigned char A[4] = {1, 2, 3, 4}, B[3] = {9, 8, 7};
    dpy_cache_array arrays[2] = {{.name = "a", .code = 0, .ndim = 2, .dims = {2, 2}, .nbytes = 4},
                                 {.name = "b", .code = 1, .ndim = 1, .dims = {3}, .nbytes = 3}};
    const void *data[2] = {A, B};
    unsigned char a[4], b[3];
    CHECK(cache_load("k", a, b, err, sizeof err) == 1);   /* no file */
    CHECK(dpy_cache_write(path_of("c.cache"), "k", 1, "meta", 4, arrays, data, 2, err, sizeof err) == 0);
    CHECK(cache_load("k", a, b, err, sizeof err) == 0);
    CHECK(memcmp(a, A, 4) == 0 && memcmp(b, B, 3) == 0);
    CHECK(cache_load("other", a, b, err, sizeof err) == 1);   /* made under another key */
    /* every byte flipped, every length cut short: never read as good. The zeros before each
    ** array's 64 KiB boundary (and its length) are read by no one: a flip there changes nothing,
    ** and a read that passes must still give the bytes written. */
    FILE *f = fopen(path_of("c.cache"), "rb");
    static unsigned char whole[1 << 18];
    size_t len = fread(whole, 1, sizeof whole, f);
    fclose(f);
    CHECK(len == 2 * 65536 + 3 + 8);   /* a at 64 KiB, b at 128 KiB, then the checksum */
    int wrong = 0, said = 0, passed = 0;
    for (size_t i = 0; i < len; i++) {
        int gap = (i >= 93 && i < 65536 - 8)   /* the header: 45 + 28 + 20 bytes */
                   || (i >= 65536 + 4 && i < 2 * 65536 - 8);
        if (gap && i % 101 != 0)
            continue;   /* a sample of the gaps */
        whole[i] ^= 0x10;
        write_file("c.cache", whole, len, 0);
        memset(a, 0, sizeof a);
        memset(b, 0, sizeof b);
        int rc = cache_load("k", a, b, err, sizeof err);
        if (rc == 0 && (!gap || memcmp(a, A, 4) != 0 || memcmp(b, B, 3) != 0)) {
            fprintf(stderr, "flip at %zu read as good\n", i);
            wrong++;
        }
        passed += rc == 0;
        said += rc == -1 && strstr(err, "c.cache") != NULL;
        whole[i] ^= 0x10;
    }
    CHECK(wrong == 0);
    CHECK(passed > 0 && said > 0);
    for (size_t cut = 0; cut < len; cut += cut < 200 || cut > len - 200 ? 1 : 97) {
        write_file("c.cache", whole, cut, 0);
        int rc = cache_load("k", a, b, err, sizeof err);
        wrong += rc == 0;
    }
    CHECK(wrong == 0);
    write_file("c.cache", whole, len - 1, 0);
    CHECK(cache_load("k", a, b, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "truncated or corrupt");
    whole[len - 9] ^= 1;   /* b's last byte, just before the checksum */
    write_file("c.cache", whole, len, 0);
    CHECK(cache_load("k", a, b, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "checksum mismatch");
    /* a folder that cannot hold it: an error naming the file, nothing left behind */
    CHECK(dpy_cache_write(path_of("none/c.cache"), "k", 1, "", 0, arrays, data, 2, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "none/c.cache");
}

int main(void) {
    if (!mkdtemp(dir))
        return 1;
    test_idx();
    test_idx_map();
    test_cifar();
    test_cache();
    return check_report("dataset");
}
