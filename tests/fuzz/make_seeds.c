/* make_seeds.c: writes the small valid inputs the codec and wire harnesses start from:
** make_seeds DIR writes DIR/<harness>/<name>. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "bytes.h"
#include "codec.h"
#include "ring.h"
#include "sparse.h"
#include "wire.h"

static void put(const char *dir, const char *harness, const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, harness, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char aerr[256];
    if (dpy_auth_init(aerr, sizeof aerr) != 0)
        return 1;
    float x[40];
    for (int i = 0; i < 40; i++)
        x[i] = (float)(i % 7) * 0.25f - 0.5f;
    x[5] = 1e30f;
    uint8_t buf[4096];
    char err[256], name[64];
    const int widths[] = {1, 3, 8, 16};
    for (int w = 0; w < 4; w++) {
        size_t chunk = w == 1 ? 16 : 0, len = dpy_quant_size(40, widths[w], chunk);
        dpy_quant_encode(buf, x, 40, widths[w], chunk, err, sizeof err);
        snprintf(name, sizeof name, "bits%d", widths[w]);
        put(dir, "quant", name, buf, len);
    }
    long long n = dpy_zstd_encode(buf, sizeof buf, x, sizeof x, 3, 4, err, sizeof err);
    put(dir, "zstd", "floats", buf, (size_t)n);
    n = dpy_fpzip_encode(buf, sizeof buf, x, 40, 0, err, sizeof err);
    put(dir, "fpzip", "lossless", buf, (size_t)n);
    n = dpy_fpzip_encode(buf, sizeof buf, x, 40, 12, err, sizeof err);
    put(dir, "fpzip", "prec12", buf, (size_t)n);
    /* a stream as a connection carries it (fuzz_wire.c; byte 0: bit 0 encrypt, bit 1 a Unix
    ** socket's, bit 2 a shared ring): a hello, then two data packets sealed under the harness's key
    ** (on a Unix socket: without trailers), the second one larger than a read; through the ring,
    ** in pieces: the first inline, the second half from the ring and half inline */
    static const char *const wire_seed[4] = {"hello_then_data", "hello_then_data_encrypted",
                                             "hello_then_data_unix", "hello_then_data_ring"};
    for (int kind = 0; kind <= 3; kind++) {
        int enc = kind == 1, unix_socket = kind >= 2, ring = kind == 3;
        static uint8_t pk[1 + 4 * DPY_WIRE_HEADER + 8 + 600 + 2 * DPY_TRAILER_BYTES + 3 * DPY_RING_WORD];
        size_t at = 0;
        pk[at++] = (uint8_t)(enc | unix_socket << 1 | ring << 2 | 0x58);
        dpy_header h = {.channel = DPY_CHANNEL_HELLO, .run_id = 0x1234, .sender = 1,
                        .length = dpy_wire_handshake_length(DPY_CHANNEL_HELLO)};
        dpy_wire_encode(pk + at, &h);
        at += DPY_WIRE_HEADER;
        memset(pk + at, 0x11, h.length);
        at += h.length;
        dpy_auth_dir tx = {{7}, 0};
        const size_t lens[2] = {8, 600};
        for (int i = 0; i < 2; i++) {
            uint8_t body[600];
            for (size_t j = 0; j < lens[i]; j++)
                body[j] = (uint8_t)(j * 3 + (size_t)i);
            h = (dpy_header){.channel = 0, .run_id = 0x1234, .sender = 2, .receiver = 3, .round = 7,
                             .length = (uint32_t)lens[i],
                             .flags = (uint8_t)(enc ? DPY_FLAG_ENCRYPTED : ring ? DPY_FLAG_RING : 0)};
            uint8_t *hdr = pk + at;
            dpy_wire_encode(hdr, &h);
            at += DPY_WIRE_HEADER;
            if (ring) {   /* the ring's half is zeros: the harness writes nothing into it */
                if (i == 1) {
                    put32(pk + at, 300);
                    put32(pk + at + 4, 0);   /* the ring's first bytes */
                    at += DPY_RING_WORD;
                    memset(body, 0, 300);
                }
                put32(pk + at, (uint32_t)(i == 1 ? 300 : lens[i]) | DPY_RING_INLINE);
                put32(pk + at + 4, i == 1 ? 300 : 0);
                at += DPY_RING_WORD;
                memcpy(pk + at, body + (i == 1 ? 300 : 0), i == 1 ? 300 : lens[i]);
                at += i == 1 ? 300 : lens[i];
                continue;
            }
            dpy_auth_seal(&tx, enc, hdr, body, pk + at, lens[i], pk + at + lens[i]);
            if (!enc)
                memcpy(pk + at, body, lens[i]);
            at += lens[i] + (unix_socket ? 0 : DPY_TRAILER_BYTES);
        }
        put(dir, "wire", wire_seed[kind], pk, at);
    }
    /* sparse: 6 of 300 values, indices as deltas (one of two bytes), each value type; and
    ** implicit indices */
    const int64_t at[6] = {0, 3, 130, 131, 299 - 40, 299};
    const char *const types[] = {"f32", "f16", "bf16"};
    for (int t = 0; t < 3; t++) {
        n = dpy_sparse_encode(buf, sizeof buf, 300, at, x, 6, t + 1, DPY_SPARSE_DELTAS, NULL, err,
                              sizeof err);
        snprintf(name, sizeof name, "deltas_%s", types[t]);
        put(dir, "sparse", name, buf, (size_t)n);
    }
    n = dpy_sparse_encode(buf, sizeof buf, 300, NULL, x, 6, DPY_SPARSE_F32, DPY_SPARSE_IMPLICIT,
                          NULL, err, sizeof err);
    put(dir, "sparse", "implicit", buf, (size_t)n);
    /* IDX: 3 images of 2 x 2 bytes (big-endian dims after the 0x0803 magic), and 3 labels */
    uint8_t idx[16 + 12] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
    for (int i = 0; i < 12; i++)
        idx[16 + i] = (uint8_t)(i * 20);
    put(dir, "idx", "images", idx, sizeof idx);
    uint8_t lab[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 0, 9};
    put(dir, "idx", "labels", lab, sizeof lab);
    /* CIFAR: one record of a label byte and 3072 pixels; even first byte: CIFAR-10's layout */
    static uint8_t rec[1 + 3072];
    for (int i = 0; i < (int)sizeof rec; i++)
        rec[i] = (uint8_t)(i * 7);
    rec[0] = 6;
    put(dir, "cifar", "one_record", rec, sizeof rec);
    return 0;
}
