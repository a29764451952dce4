/*
** codec.h: the state transforms that make payloads smaller, on plain buffers (no Lua, no torch):
** uniform asymmetric quantization, zstd and fpzip. Every encoded buffer starts with a small
** header that its decoder checks in full before it writes a byte, so a malformed payload gives a
** message, never garbage. Functions return 0 (or a size), or -1 with a message in err.
*/
#ifndef DPY_CODEC_H
#define DPY_CODEC_H

#include <stddef.h>
#include <stdint.h>

/*
** Quantization of n floats to b bits (1..8 or 16) with a scale and a zero point (the value of
** code 0) per chunk of `chunk` values (0: one chunk). x -> round((x - zero) / scale), packed
** LSB-first; decoding gives zero + code * scale, at most half a step from x.
** Non-finite values: +-Inf saturate to the chunk's largest / smallest finite value; a chunk holding
** a NaN decodes as all NaN (a diverged model stays visibly diverged).
** Layout: "DPQ1", u8 bits, 3 zero bytes, u64 n, u64 chunk, then per chunk f32 scale, f32 zero,
** then the packed codes.
*/
size_t dpy_quant_size(size_t n, int bits, size_t chunk);
int dpy_quant_encode(uint8_t *out, const float *x, size_t n, int bits, size_t chunk,
                     char *err, size_t errlen);
/* The number of values an encoded buffer holds (at most max), after checking its header and
** length. */
int dpy_quant_count(const uint8_t *in, size_t len, size_t max, size_t *n, char *err,
                    size_t errlen);
/* Decodes into out, which has room for max values; every one of the count values is written. */
int dpy_quant_decode(float *out, size_t max, const uint8_t *in, size_t len, char *err,
                     size_t errlen);

/* zstd: "DPZ1", u8 the element size of the original bytes, 3 zero bytes, then one zstd frame
** (which records the content size). */
size_t dpy_zstd_bound(size_t len);
/* Returns the encoded size or -1. */
long long dpy_zstd_encode(uint8_t *out, size_t cap, const void *in, size_t len, int level,
                          int elem_size, char *err, size_t errlen);
/* The decoded size (at most max) and element size, after checking the header. */
int dpy_zstd_size(const uint8_t *in, size_t len, size_t max, size_t *size, int *elem_size,
                  char *err, size_t errlen);
/* Decodes into out (size bytes, from dpy_zstd_size): exactly size bytes, or an error; decoding
** stops at size, whatever the frames say. */
int dpy_zstd_decode(void *out, size_t size, const uint8_t *in, size_t len, char *err,
                    size_t errlen);

/* fpzip (lossless, or keeping `precision` bits of each float: 2..32, 0 = all): "DPF1", u32 zero,
** u64 n, u64 stream bytes, then the fpzip stream (whose own header must say n x 1 x 1 x 1 floats).
** The decoder never reads past the stream, and a stream no encoder wrote is refused (libfpzip's
** decoder is bounded by fpzip_guard.c). */
size_t dpy_fpzip_bound(size_t n);
long long dpy_fpzip_encode(uint8_t *out, size_t cap, const float *x, size_t n, int precision,
                           char *err, size_t errlen);
/* The number of values (at most max), after checking the header and length. */
int dpy_fpzip_count(const uint8_t *in, size_t len, size_t max, size_t *n, char *err,
                    size_t errlen);
/* Decodes into out, which has room for max values. */
int dpy_fpzip_decode(float *out, size_t max, const uint8_t *in, size_t len, char *err,
                     size_t errlen);

#endif
