/*
** data_image.c: PNG (libpng) and JPEG (libjpeg-turbo) files decoded into uint8 planes.
** Both libraries report errors by longjmp: each decoder keeps everything it must free in a job
** struct that lives in its caller's frame (so no local of the function calling setjmp changes
** between setjmp and longjmp), and turns a jump into -1 and a message naming the file.
*/
#define _POSIX_C_SOURCE 200809L
#include "data_image.h"
#include "dpy_core.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>   /* before jpeglib.h, which uses FILE */
#include <jpeglib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* An image file is read whole; none of the formats' files is anywhere near this. */
#define IMAGE_FILE_LIMIT ((size_t)1 << 28)

static int read_file(const char *path, uint8_t **out, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return dpy_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return dpy_fail(err, errlen, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size > IMAGE_FILE_LIMIT) {
        fclose(f);
        return dpy_fail(err, errlen, "%s: %lld bytes is too large for an image file", path,
                        (long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return dpy_fail(err, errlen, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, n, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(buf);
        return dpy_fail(err, errlen, "cannot read %s", path);
    }
    *out = buf;
    *len = n;
    return 0;
}

/* Writes a decoded row (width pixels of fc interleaved channels) into the c planes of out. */
static void put_row(uint8_t *out, int c, int height, int width, int y, const uint8_t *row, int fc) {
    size_t plane = (size_t)height * (size_t)width, at = (size_t)y * (size_t)width;
    for (int x = 0; x < width; x++) {
        const uint8_t *p = row + (size_t)x * (size_t)fc;
        if (c == fc) {
            for (int k = 0; k < c; k++)
                out[k * plane + at + (size_t)x] = p[k];
        } else if (c == 3) {   /* grey to RGB */
            out[at + (size_t)x] = out[plane + at + (size_t)x] = out[2 * plane + at + (size_t)x] = p[0];
        } else {               /* RGB to grey: PIL's ITU-R 601-2 luma, in its integer form */
            out[at + (size_t)x] =
                (uint8_t)(((uint32_t)p[0] * 19595u + (uint32_t)p[1] * 38470u +
                           (uint32_t)p[2] * 7471u + 0x8000u) >> 16);
        }
    }
}

static int size_mismatch(const char *name, int w, int h, int width, int height, char *err,
                         size_t errlen) {
    return dpy_fail(err, errlen, "%s: the image is %dx%d (width x height), expected %dx%d", name,
                    w, h, width, height);
}

/* {==== PNG ====} */

typedef struct {
    png_structp png;
    png_infop info;
    const uint8_t *data;
    size_t len, pos;
    uint8_t *pixels;          /* the decoded image, rows of rowbytes */
    png_bytep *rows;
    uint8_t *rgb;             /* a palette image's row, looked up */
    char msg[200];
} png_job;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_job *j = png_get_error_ptr(png);
    snprintf(j->msg, sizeof j->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;   /* an ancillary chunk's bad CRC and the like: the image itself is whole */
    (void)msg;
}

static void png_read_mem(png_structp png, png_bytep out, size_t n) {
    png_job *j = png_get_io_ptr(png);
    if (j->len - j->pos < n)
        png_error(png, "the file ends early (truncated)");
    memcpy(out, j->data + j->pos, n);
    j->pos += n;
}

/* Decodes into out (NULL: only fills *info). Returns 0, 1 (size mismatch) or -1 (libpng's error
** in j->msg); may longjmp only into its own setjmp. */
static int png_run(png_job *j, dpy_image_info *info, int channels, int height, int width,
                   uint8_t *out) {
    if (setjmp(png_jmpbuf(j->png)))
        return -1;
    png_set_user_limits(j->png, DPY_IMAGE_MAX_SIDE, DPY_IMAGE_MAX_SIDE);
    png_set_read_fn(j->png, j, png_read_mem);
    png_read_info(j->png, j->info);
    /* A palette image is read as indices and looked up here: libpng's own expansion makes an
    ** index past PLTE's colours black without a word (PIL makes it grey); neither is the image. */
    png_colorp plte = NULL;
    int ncolours = 0;
    int palette = png_get_color_type(j->png, j->info) == PNG_COLOR_TYPE_PALETTE;
    if (palette) {
        if (!png_get_PLTE(j->png, j->info, &plte, &ncolours))
            png_error(j->png, "a palette image without PLTE");
        png_set_packing(j->png);     /* indices under 8 bits to a byte each */
    } else {
        png_set_expand(j->png);      /* grey under 8 bits to 8, tRNS to alpha... */
    }
    png_set_strip_alpha(j->png);     /* ...which goes, as PIL's convert('RGB') drops it */
    png_set_strip_16(j->png);
    png_set_interlace_handling(j->png);
    png_read_update_info(j->png, j->info);
    info->width = (int)png_get_image_width(j->png, j->info);
    info->height = (int)png_get_image_height(j->png, j->info);
    int fc = png_get_channels(j->png, j->info);
    if (fc != 1 && fc != 3)
        png_error(j->png, "unexpected channel count after expansion");
    info->channels = palette ? 3 : fc;
    if (!out)
        return 0;
    if (info->width != width || info->height != height)
        return 1;
    size_t rowbytes = png_get_rowbytes(j->png, j->info);
    if (rowbytes != (size_t)width * (size_t)fc)
        png_error(j->png, "unexpected row size after expansion");
    j->pixels = malloc(rowbytes * (size_t)height);
    j->rows = malloc(sizeof *j->rows * (size_t)height);
    if (!j->pixels || !j->rows)
        png_error(j->png, "out of memory");
    for (int y = 0; y < height; y++)
        j->rows[y] = j->pixels + (size_t)y * rowbytes;
    png_read_image(j->png, j->rows);
    png_read_end(j->png, NULL);      /* the chunks after the image data, to IEND: a cut is an error */
    if (palette && !(j->rgb = malloc((size_t)width * 3)))
        png_error(j->png, "out of memory");
    for (int y = 0; y < height; y++) {
        const uint8_t *row = j->rows[y];
        if (palette) {
            for (int x = 0; x < width; x++) {
                if (row[x] >= ncolours) {
                    char msg[100];
                    snprintf(msg, sizeof msg, "a palette index past the %d colours of PLTE (%d, at x %d, y %d)",
                             ncolours, row[x], x, y);
                    png_error(j->png, msg);
                }
                j->rgb[3 * x] = plte[row[x]].red;
                j->rgb[3 * x + 1] = plte[row[x]].green;
                j->rgb[3 * x + 2] = plte[row[x]].blue;
            }
            row = j->rgb;
        }
        put_row(out, channels, height, width, y, row, palette ? 3 : fc);
    }
    return 0;
}

static int png_decode(const uint8_t *data, size_t len, const char *name, dpy_image_info *info,
                      int channels, int height, int width, uint8_t *out, char *err, size_t errlen) {
    png_job j;
    memset(&j, 0, sizeof j);
    j.data = data;
    j.len = len;
    j.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, png_on_error, png_on_warning);
    j.info = j.png ? png_create_info_struct(j.png) : NULL;
    int rc = j.info ? png_run(&j, info, channels, height, width, out) : -1;
    if (!j.info)
        snprintf(j.msg, sizeof j.msg, "out of memory");
    png_destroy_read_struct(&j.png, &j.info, NULL);
    free(j.pixels);
    free(j.rows);
    free(j.rgb);
    if (rc == 1)
        return size_mismatch(name, info->width, info->height, width, height, err, errlen);
    if (rc != 0)
        return dpy_fail(err, errlen, "%s: not a valid PNG file (%s)", name, j.msg);
    return 0;
}

/* {==== JPEG ====} */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

typedef struct {
    struct jpeg_decompress_struct cinfo;
    jpeg_err jerr;
    uint8_t *row;
    int created;
} jpeg_job;

static void jpeg_on_error(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jump, 1);
}

/* libjpeg only warns about corrupt data (a cut file, bad Huffman codes) and fills what is missing
** with grey: that is garbage handed on, so a warning is an error here. Traces (level > 0) pass. */
static void jpeg_on_message(j_common_ptr c, int level) {
    if (level < 0)
        jpeg_on_error(c);
}

static int jpeg_run(jpeg_job *j, const uint8_t *data, size_t len, dpy_image_info *info,
                    int channels, int height, int width, uint8_t *out) {
    j->cinfo.err = jpeg_std_error(&j->jerr.pub);
    j->jerr.pub.error_exit = jpeg_on_error;
    j->jerr.pub.emit_message = jpeg_on_message;
    if (setjmp(j->jerr.jump))
        return -1;
    jpeg_create_decompress(&j->cinfo);
    j->created = 1;
    jpeg_mem_src(&j->cinfo, data, (unsigned long)len);
    jpeg_read_header(&j->cinfo, TRUE);
    J_COLOR_SPACE cs = j->cinfo.jpeg_color_space;
    if (cs == JCS_CMYK || cs == JCS_YCCK) {
        snprintf(j->jerr.msg, sizeof j->jerr.msg, "CMYK JPEG files are not supported");
        return -1;
    }
    if (j->cinfo.image_width > DPY_IMAGE_MAX_SIDE || j->cinfo.image_height > DPY_IMAGE_MAX_SIDE) {
        snprintf(j->jerr.msg, sizeof j->jerr.msg, "%ux%u is larger than %d on a side",
                 j->cinfo.image_width, j->cinfo.image_height, DPY_IMAGE_MAX_SIDE);
        return -1;
    }
    int fc = cs == JCS_GRAYSCALE ? 1 : 3;
    info->width = (int)j->cinfo.image_width;
    info->height = (int)j->cinfo.image_height;
    info->channels = fc;
    if (!out)
        return 0;
    if (info->width != width || info->height != height)
        return 1;
    j->cinfo.out_color_space = fc == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&j->cinfo);
    if ((int)j->cinfo.output_components != fc || (int)j->cinfo.output_width != width ||
        (int)j->cinfo.output_height != height) {
        snprintf(j->jerr.msg, sizeof j->jerr.msg, "unexpected output layout");
        return -1;
    }
    j->row = malloc((size_t)width * (size_t)fc);
    if (!j->row) {
        snprintf(j->jerr.msg, sizeof j->jerr.msg, "out of memory");
        return -1;
    }
    while (j->cinfo.output_scanline < j->cinfo.output_height) {
        int y = (int)j->cinfo.output_scanline;
        JSAMPROW rows[1] = {j->row};
        if (jpeg_read_scanlines(&j->cinfo, rows, 1) != 1) {
            snprintf(j->jerr.msg, sizeof j->jerr.msg, "the image data ends early");
            return -1;
        }
        put_row(out, channels, height, width, y, j->row, fc);
    }
    jpeg_finish_decompress(&j->cinfo);
    return 0;
}

static int jpeg_decode(const uint8_t *data, size_t len, const char *name, dpy_image_info *info,
                       int channels, int height, int width, uint8_t *out, char *err,
                       size_t errlen) {
    jpeg_job j;
    memset(&j, 0, sizeof j);
    int rc = jpeg_run(&j, data, len, info, channels, height, width, out);
    if (j.created)
        jpeg_destroy_decompress(&j.cinfo);
    free(j.row);
    if (rc == 1)
        return size_mismatch(name, info->width, info->height, width, height, err, errlen);
    if (rc != 0)
        return dpy_fail(err, errlen, "%s: not a valid JPEG file (%s)", name, j.jerr.msg);
    return 0;
}

/* {==== the format, told by the first bytes ====} */

static int dispatch(const uint8_t *data, size_t len, const char *name, dpy_image_info *info,
                    int channels, int height, int width, uint8_t *out, char *err, size_t errlen) {
    static const uint8_t PNG_SIG[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (out && channels != 1 && channels != 3)
        return dpy_fail(err, errlen, "%s: channels must be 1 or 3, got %d", name, channels);
    if (len >= 8 && memcmp(data, PNG_SIG, 8) == 0)
        return png_decode(data, len, name, info, channels, height, width, out, err, errlen);
    if (len >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        return jpeg_decode(data, len, name, info, channels, height, width, out, err, errlen);
    if (len == 0)
        return dpy_fail(err, errlen, "%s: empty file, not an image", name);
    return dpy_fail(err, errlen, "%s: neither a PNG nor a JPEG file (unknown first bytes)", name);
}

int dpy_image_decode_mem(const uint8_t *data, size_t len, const char *name, int channels,
                         int height, int width, uint8_t *out, char *err, size_t errlen) {
    dpy_image_info info;
    return dispatch(data, len, name, &info, channels, height, width, out, err, errlen);
}

int dpy_image_decode(const char *path, int channels, int height, int width, uint8_t *out,
                     char *err, size_t errlen) {
    uint8_t *data;
    size_t len;
    if (read_file(path, &data, &len, err, errlen) != 0)
        return -1;
    int rc = dpy_image_decode_mem(data, len, path, channels, height, width, out, err, errlen);
    free(data);
    return rc;
}

int dpy_image_probe(const char *path, dpy_image_info *info, char *err, size_t errlen) {
    uint8_t *data;
    size_t len;
    if (read_file(path, &data, &len, err, errlen) != 0)
        return -1;
    int rc = dispatch(data, len, path, info, 0, 0, 0, NULL, err, errlen);
    free(data);
    return rc;
}

/* A histogram per channel: exact sums whatever n is, in one pass over the bytes. */
void dpy_u8_channel_stats(const uint8_t *data, int64_t n, int channels, int64_t plane,
                          double *mean, double *std) {
    for (int k = 0; k < channels; k++) {
        uint64_t hist[256] = {0};
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *p = data + ((size_t)i * (size_t)channels + (size_t)k) * (size_t)plane;
            for (int64_t q = 0; q < plane; q++)
                hist[p[q]]++;
        }
        double count = (double)n * (double)plane, s = 0, s2 = 0;
        for (int v = 0; v < 256; v++) {
            s += (double)hist[v] * v;
            s2 += (double)hist[v] * v * v;
        }
        double m = count > 0 ? s / count : 0, var = count > 0 ? s2 / count - m * m : 0;
        mean[k] = m / 255.0;
        std[k] = (var > 0 ? sqrt(var) : 0) / 255.0;
    }
}
