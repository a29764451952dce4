/* zstd payloads (codec.h), bounded at 1 MiB decoded. */
#include "codec.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256] = "";
    size_t n;
    int es;
    int rc = dpy_zstd_size(data, size, 1 << 20, &n, &es, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc != 0)
        return 0;
    void *out = malloc(n ? n : 1);
    err[0] = '\0';
    fuzz_answer(dpy_zstd_decode(out, n, data, size, err, sizeof err), err);
    free(out);
    return 0;
}
