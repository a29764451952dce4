/* fpzip payloads (codec.h), bounded as a receiver expecting 2^16 values bounds them. */
#include "codec.h"
#include "codec_internal.h"
#include "fuzz.h"

/* without the bounded decoder every stream would be refused unread: nothing would be fuzzed */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (!dpy_fpzip_guarded()) {
        fprintf(stderr, "fuzz_fpzip: libfpzip's decoder is not the bounded one (fpzip_guard.c)\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256] = "";
    size_t n;
    int rc = dpy_fpzip_count(data, size, 1 << 16, &n, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc != 0)
        return 0;
    float *out = malloc((n ? n : 1) * sizeof *out);
    err[0] = '\0';
    fuzz_answer(dpy_fpzip_decode(out, n, data, size, err, sizeof err), err);
    free(out);
    return 0;
}
