/* Dequantization (codec.h), bounded as a receiver expecting 2^16 values bounds it. */
#include "codec.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256] = "";
    size_t n;
    int rc = dpy_quant_count(data, size, 1 << 16, &n, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc != 0)
        return 0;
    float *out = malloc((n ? n : 1) * sizeof *out);
    err[0] = '\0';
    fuzz_answer(dpy_quant_decode(out, n, data, size, err, sizeof err), err);
    free(out);
    return 0;
}
