/* IDX files (MNIST's format, gzipped or not). */
#include "dpy_core.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512] = "";
    int fd = fuzz_file(data, size, path, sizeof path);
    dpy_idx x;
    int rc = dpy_idx_read(path, &x, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc == 0)
        dpy_idx_free(&x);
    close(fd);
    return 0;
}
