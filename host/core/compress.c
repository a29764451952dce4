/* compress.c: zstd and fpzip stream transforms (see codec.h). */
#include <fpzip.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "bytes.h"
#include "codec.h"
#include "codec_internal.h"
#include "dpy_core.h"

#define ZSTD_HEADER 8
#define FPZIP_HEADER 24

/* {==== zstd ====} */

size_t dpy_zstd_bound(size_t len) { return ZSTD_HEADER + ZSTD_compressBound(len); }

long long dpy_zstd_encode(uint8_t *out, size_t cap, const void *in, size_t len, int level,
                          int elem_size, char *err, size_t errlen) {
    if (cap < ZSTD_HEADER)
        return dpy_fail(err, errlen, "zstd: output buffer too small");
    memcpy(out, "DPZ1", 4);
    out[4] = (uint8_t)elem_size;
    out[5] = out[6] = out[7] = 0;
    ZSTD_CCtx *cx = ZSTD_createCCtx();
    if (!cx)
        return dpy_fail(err, errlen, "zstd: out of memory");
    /* the frame's own checksum: a damaged frame is refused rather than decoded */
    size_t r = ZSTD_CCtx_setParameter(cx, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(cx, ZSTD_c_checksumFlag, 1);
    if (!ZSTD_isError(r))
        r = ZSTD_compress2(cx, out + ZSTD_HEADER, cap - ZSTD_HEADER, in, len);
    ZSTD_freeCCtx(cx);
    if (ZSTD_isError(r))
        return dpy_fail(err, errlen, "zstd: %s", ZSTD_getErrorName(r));
    return (long long)(ZSTD_HEADER + r);
}

int dpy_zstd_size(const uint8_t *in, size_t len, size_t max, size_t *size, int *elem_size,
                  char *err, size_t errlen) {
    if (len < ZSTD_HEADER || memcmp(in, "DPZ1", 4) != 0)
        return dpy_fail(err, errlen, "not a zstd payload (%zu bytes, no DPZ1 header)", len);
    unsigned long long n = ZSTD_getFrameContentSize(in + ZSTD_HEADER, len - ZSTD_HEADER);
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN)
        return dpy_fail(err, errlen, "zstd payload: not a frame with a known content size");
    if (n > max)
        return dpy_fail(err, errlen, "zstd payload: %llu bytes decoded exceed the limit of %zu", n,
                        max);
    int es = in[4];
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return dpy_fail(err, errlen, "zstd payload: bad element size %d", es);
    if (n % (unsigned long long)es != 0)
        return dpy_fail(err, errlen, "zstd payload: %llu bytes are not whole elements of %d", n, es);
    *size = (size_t)n;
    *elem_size = es;
    return 0;
}

int dpy_zstd_decode(void *out, size_t size, const uint8_t *in, size_t len, char *err,
                    size_t errlen) {
    size_t r = ZSTD_decompress(out, size, in + ZSTD_HEADER, len - ZSTD_HEADER);
    if (ZSTD_isError(r))
        return dpy_fail(err, errlen, "zstd payload: %s", ZSTD_getErrorName(r));
    if (r != size)
        return dpy_fail(err, errlen, "zstd payload: %zu bytes decoded, the frame said %zu", r, size);
    return 0;
}

/* {==== fpzip ====} */

/* fpzip's own header plus, at worst, a little more than the raw floats. */
size_t dpy_fpzip_bound(size_t n) { return FPZIP_HEADER + 1024 + n * sizeof(float) * 5 / 4; }

long long dpy_fpzip_encode(uint8_t *out, size_t cap, const float *x, size_t n, int precision,
                           char *err, size_t errlen) {
    if (precision != 0 && (precision < 2 || precision > 32))
        return dpy_fail(err, errlen, "fpzip precision must be 2..32 bits (0: lossless), got %d",
                        precision);
    if (n > (size_t)1 << 30)
        return dpy_fail(err, errlen, "fpzip: %zu values exceed its limit of 2^30", n);
    if (cap < FPZIP_HEADER)
        return dpy_fail(err, errlen, "fpzip: output buffer too small");
    FPZ *z = fpzip_write_to_buffer(out + FPZIP_HEADER, cap - FPZIP_HEADER);
    if (!z)
        return dpy_fail(err, errlen, "fpzip: out of memory");
    z->type = FPZIP_TYPE_FLOAT;
    z->prec = precision;
    z->nx = (int)n, z->ny = z->nz = z->nf = 1;
    size_t r = fpzip_write_header(z) ? fpzip_write(z, x) : 0;
    fpzip_write_close(z);
    if (r == 0)
        return dpy_fail(err, errlen, "fpzip: %s", fpzip_errstr[fpzip_errno]);
    memcpy(out, "DPF1", 4);
    memset(out + 4, 0, 4);
    put64(out + 8, n);
    put64(out + 16, r);
    return (long long)(FPZIP_HEADER + r);
}

int dpy_fpzip_count(const uint8_t *in, size_t len, size_t max, size_t *n, char *err,
                    size_t errlen) {
    if (len < FPZIP_HEADER || memcmp(in, "DPF1", 4) != 0)
        return dpy_fail(err, errlen, "not an fpzip payload (%zu bytes, no DPF1 header)", len);
    uint64_t count = get64(in + 8), stream = get64(in + 16);
    if (stream != len - FPZIP_HEADER)
        return dpy_fail(err, errlen, "fpzip payload: %zu stream bytes, the header says %llu",
                        len - FPZIP_HEADER, (unsigned long long)stream);
    if (count > (uint64_t)1 << 30)
        return dpy_fail(err, errlen, "fpzip payload: %llu values exceed its limit of 2^30",
                        (unsigned long long)count);
    if (count > max)
        return dpy_fail(err, errlen, "fpzip payload: %llu values exceed the limit of %zu",
                        (unsigned long long)count, max);
    *n = (size_t)count;
    return 0;
}

int dpy_fpzip_decode(float *out, size_t max, const uint8_t *in, size_t len, char *err,
                     size_t errlen) {
    size_t n;
    if (dpy_fpzip_count(in, len, max, &n, err, errlen) != 0)
        return -1;
    if (!dpy_fpzip_guarded())
        return dpy_fail(err, errlen, "fpzip payload: this libfpzip (%s) has no bounded decoder, "
                        "so received streams are not decoded", fpzip_version_string);
    size_t stream = len - FPZIP_HEADER;
    if (stream < 28)   /* fpzip's own header and the range coder's first 4 bytes */
        return dpy_fail(err, errlen, "fpzip payload: a stream of %zu bytes is too short", stream);
    /* fpzip's memory reader takes no length; its file reader stops at the end of the stream */
    FILE *fp = fmemopen((void *)(in + FPZIP_HEADER), stream, "rb");
    if (!fp)
        return dpy_fail(err, errlen, "fpzip payload: out of memory");
    FPZ *z = fpzip_read_from_file(fp);
    int rc = 0;
    if (!z) {
        rc = dpy_fail(err, errlen, "fpzip payload: out of memory");
    } else if (!fpzip_read_header(z)) {
        rc = dpy_fail(err, errlen, "fpzip payload: %s", fpzip_errstr[fpzip_errno]);
    } else if (z->type != FPZIP_TYPE_FLOAT || (z->prec != 0 && (z->prec < 2 || z->prec > 32))) {
        rc = dpy_fail(err, errlen, "fpzip payload: the stream is not float32 values (type %d, "
                      "precision %d)", z->type, z->prec);
    } else if ((size_t)(unsigned)z->nx != n || z->ny != 1 || z->nz != 1 || z->nf != 1) {
        /* only n x 1 x 1 x 1: other dims size fpzip's buffers by their product, unchecked */
        rc = dpy_fail(err, errlen, "fpzip payload: the stream holds %u x %u x %u x %u values, "
                      "not %zu", (unsigned)z->nx, (unsigned)z->ny, (unsigned)z->nz,
                      (unsigned)z->nf, n);
    } else {
        dpy_fpzip_forged_reset();
        size_t r = fpzip_read(z, out);
        if (dpy_fpzip_forged())
            rc = dpy_fail(err, errlen, "fpzip payload: the stream is not an fpzip encoding of %zu "
                          "values", n);
        else if (r == 0)
            rc = dpy_fail(err, errlen, "fpzip payload: %s", fpzip_errstr[fpzip_errno]);
        else if (r != stream)
            rc = dpy_fail(err, errlen, "fpzip payload: %zu of its %zu stream bytes decoded", r,
                          stream);
    }
    if (z)
        fpzip_read_close(z);
    fclose(fp);
    return rc;
}
