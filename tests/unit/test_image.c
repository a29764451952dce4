/* test_image.c: PNG and JPEG decoding against the fixtures' expected pixels (tests/fixtures/
** images/gen.py), hostile bytes (every truncation, seeded byte flips) giving errors and never a
** crash, the per-channel statistics, and sorted directory listings. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data_image.h"

#define W 16
#define H 8

static const char *fixture(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/images/%s", DPY_FIXTURES, rel);
    return buf;
}

static size_t slurp(const char *path, uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* The decoder's output with channels 3 equals expected/<name>.rgb; with channels 1, PIL's luma of it. */
static void check_image(const char *split, const char *cls, const char *file, const char *expected) {
    char rel[512], exp_rel[512], err[512];
    snprintf(rel, sizeof rel, "folder/%s/%s/%s", split, cls, file);
    snprintf(exp_rel, sizeof exp_rel, "folder/expected/%s.rgb", expected);
    uint8_t want[3 * W * H], got[3 * W * H], grey[W * H];
    CHECK(slurp(fixture(exp_rel), want, sizeof want) == sizeof want);
    int rc = dpy_image_decode(fixture(rel), 3, H, W, got, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    CHECK(memcmp(got, want, sizeof want) == 0);
    CHECK(dpy_image_decode(fixture(rel), 1, H, W, grey, err, sizeof err) == 0);
    int same = 1;
    for (int q = 0; q < W * H; q++) {
        unsigned l = (want[q] * 19595u + want[W * H + q] * 38470u + want[2 * W * H + q] * 7471u +
                      32768u) >> 16;
        same &= grey[q] == l;
    }
    CHECK(same);
}

/* Every prefix of the file, and 300 seeded one-byte changes: each decodes or fails with a
** message, never crashes (run under ASan in CI). Returns how many prefixes failed. */
static int hostile(const char *rel) {
    static uint8_t data[1 << 16], copy[1 << 16];
    uint8_t out[3 * W * H];
    char err[512];
    size_t n = slurp(fixture(rel), data, sizeof data);
    CHECK(n > 0);
    int failed = 0;
    for (size_t len = 0; len < n; len++) {
        err[0] = 0;
        if (dpy_image_decode_mem(data, len, "cut", 3, H, W, out, err, sizeof err) != 0) {
            failed++;
            CHECK_CONTAINS(err, "cut");
        }
    }
    uint32_t s = 12345;
    for (int t = 0; t < 300; t++) {
        memcpy(copy, data, n);
        s = s * 1103515245u + 12345u;
        size_t at = (s >> 8) % n;
        s = s * 1103515245u + 12345u;
        copy[at] ^= (uint8_t)(1u + (s >> 16) % 255u);
        (void)dpy_image_decode_mem(copy, n, "flipped", 3, H, W, out, err, sizeof err);
    }
    return failed;
}

int main(void) {
    char err[512];
    check_image("train", "cat", "a.png", "train_cat_a.png");   /* RGB */
    check_image("train", "cat", "b.png", "train_cat_b.png");   /* palette with tRNS */
    check_image("train", "cat", "c.jpg", "train_cat_c.jpg");   /* colour JPEG */
    check_image("train", "dog", "d.png", "train_dog_d.png");   /* grey */
    check_image("train", "dog", "e.png", "train_dog_e.png");   /* grey + alpha */
    check_image("train", "dog", "f.png", "train_dog_f.png");   /* RGBA */
    check_image("train", "dog", "g.png", "train_dog_g.png");   /* 16-bit grey */
    check_image("train", "dog", "h.JPG", "train_dog_h.JPG");   /* grey JPEG */

    dpy_image_info info;
    CHECK(dpy_image_probe(fixture("folder/train/cat/a.png"), &info, err, sizeof err) == 0);
    CHECK(info.width == W && info.height == H && info.channels == 3);
    CHECK(dpy_image_probe(fixture("folder/train/dog/h.JPG"), &info, err, sizeof err) == 0);
    CHECK(info.width == W && info.height == H && info.channels == 1);
    CHECK(dpy_image_probe(fixture("folder/train/dog/e.png"), &info, err, sizeof err) == 0);
    CHECK(info.channels == 1);

    uint8_t out[3 * W * H];
    CHECK(dpy_image_decode(fixture("folder/train/cat/a.png"), 3, W, H, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "a.png: the image is 16x8 (width x height), expected 8x16");
    CHECK(dpy_image_decode(fixture("folder/train/cat/c.jpg"), 3, 8, 8, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "c.jpg: the image is 16x8");
    CHECK(dpy_image_decode(fixture("folder/train/dog/notes.txt"), 3, H, W, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "notes.txt: neither a PNG nor a JPEG file");
    CHECK(dpy_image_decode(fixture("folder/train/nothing.png"), 3, H, W, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot open");
    CHECK_CONTAINS(err, "nothing.png");
    CHECK(dpy_image_decode(fixture("folder/train"), 3, H, W, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "not a regular file");

    /* every cut of a PNG fails (the chunks run to IEND); a JPEG cut anywhere too */
    int png_cuts = hostile("folder/train/cat/a.png");
    CHECK(png_cuts > 0);
    static uint8_t buf[1 << 16];
    CHECK(png_cuts == (int)slurp(fixture("folder/train/cat/a.png"), buf, sizeof buf));
    int jpeg_cuts = hostile("folder/train/cat/c.jpg");
    CHECK(jpeg_cuts == (int)slurp(fixture("folder/train/cat/c.jpg"), buf, sizeof buf));
    hostile("folder/train/cat/b.png");
    hostile("folder/train/dog/h.JPG");
    size_t n = slurp(fixture("folder/train/cat/a.png"), buf, sizeof buf);
    CHECK(dpy_image_decode_mem(buf, n - 20, "a.png", 3, H, W, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "a.png: not a valid PNG file (");
    buf[40] ^= 0x55;   /* inside IDAT: its CRC no longer matches */
    CHECK(dpy_image_decode_mem(buf, n, "a.png", 3, H, W, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "not a valid PNG file");
    n = slurp(fixture("folder/train/cat/c.jpg"), buf, sizeof buf);
    CHECK(dpy_image_decode_mem(buf, n - 10, "c.jpg", 3, H, W, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "c.jpg: not a valid JPEG file (");

    /* statistics: channel 0 holds {0, 255, 255, 255}, channel 1 {10, 20, 30, 40} */
    const uint8_t px[8] = {0, 255, 10, 20, 255, 255, 30, 40};
    double mean[2], std[2];
    dpy_u8_channel_stats(px, 2, 2, 2, mean, std);
    CHECK(fabs(mean[0] - 0.75) < 1e-12 && fabs(std[0] - sqrt(0.1875)) < 1e-12);
    CHECK(fabs(mean[1] - 25.0 / 255) < 1e-12 && fabs(std[1] - sqrt(125.0) / 255) < 1e-12);

    /* listing: directories and files apart, each in byte order */
    dpy_names dirs, files;
    CHECK(dpy_dir_list(fixture("folder/train/dog"), &dirs, &files, err, sizeof err) == 0);
    CHECK(dirs.n == 1 && strcmp(dirs.names[0], "sub") == 0);
    CHECK(files.n == 6 && strcmp(files.names[0], "d.png") == 0 &&
          strcmp(files.names[4], "h.JPG") == 0 && strcmp(files.names[5], "notes.txt") == 0);
    dpy_names_free(&dirs);
    dpy_names_free(&files);
    CHECK(dpy_dir_list(fixture("folder/none"), &dirs, &files, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot open the directory");
    return check_report("image");
}
