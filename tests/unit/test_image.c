/* test_image.c: PNG and JPEG decoding against the fixtures' expected pixels (tests/fixtures/
** images/gen.py), hostile bytes (every truncation, seeded byte flips) giving errors and never a
** crash, the per-channel statistics, and sorted directory listings. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

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

static size_t put_chunk(uint8_t *at, const char *kind, const uint8_t *body, uint32_t len) {
    at[0] = (uint8_t)(len >> 24), at[1] = (uint8_t)(len >> 16), at[2] = (uint8_t)(len >> 8), at[3] = (uint8_t)len;
    memcpy(at + 4, kind, 4);
    if (len)
        memcpy(at + 8, body, len);
    uint32_t crc = (uint32_t)crc32(crc32(0, NULL, 0), at + 4, len + 4);
    uint8_t *c = at + 8 + len;
    c[0] = (uint8_t)(crc >> 24), c[1] = (uint8_t)(crc >> 16), c[2] = (uint8_t)(crc >> 8), c[3] = (uint8_t)crc;
    return 12 + len;
}

/* A W x H 8-bit palette PNG of 4 colours whose pixel (x, y) has index idx(x, y) into buf. */
static size_t palette_png(uint8_t *buf, int bad_index) {
    uint8_t raw[H * (W + 1)], z[1024], ihdr[13] = {0, 0, 0, W, 0, 0, 0, H, 8, 3, 0, 0, 0};
    const uint8_t plte[12] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120};
    for (int y = 0; y < H; y++) {
        raw[y * (W + 1)] = 0;
        for (int x = 0; x < W; x++)
            raw[y * (W + 1) + 1 + x] = (uint8_t)((x + y) % 4);
    }
    if (bad_index)
        raw[1 + 5] = 9;   /* past the 4 entries of PLTE */
    uLongf zlen = sizeof z;
    CHECK(compress2(z, &zlen, raw, sizeof raw, 9) == Z_OK);
    size_t n = 8;
    memcpy(buf, "\x89PNG\r\n\x1a\n", 8);
    n += put_chunk(buf + n, "IHDR", ihdr, 13);
    n += put_chunk(buf + n, "PLTE", plte, 12);
    n += put_chunk(buf + n, "IDAT", z, (uint32_t)zlen);
    n += put_chunk(buf + n, "IEND", NULL, 0);
    return n;
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

    /* a palette index past PLTE's entries: libpng makes it black and only warns (PIL makes it
    ** grey); neither is the image, so it is an error */
    n = palette_png(buf, 0);
    CHECK(dpy_image_decode_mem(buf, n, "p.png", 3, H, W, out, err, sizeof err) == 0);
    CHECK(out[0] == 10 && out[W * H] == 20 && out[2 * W * H] == 30 && out[1] == 40);
    n = palette_png(buf, 1);
    CHECK(dpy_image_decode_mem(buf, n, "p.png", 3, H, W, out, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "p.png: not a valid PNG file (a palette index past the 4 colours of PLTE (9, at x 5, y 0))");

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
