/* NumPy: .npy images in memory, and .npy/.npz files. */
#include "dpy_arrays.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512] = "";
    dpy_array a;
    size_t off;
    memset(&a, 0, sizeof a);
    fuzz_answer(dpy_npy_parse(data, size, "input", &a, &off, err, sizeof err), err);
    int fd = fuzz_file(data, size, path, sizeof path);
    const char *names[] = {"x_train", "arr_0"};
    memset(&a, 0, sizeof a);
    err[0] = '\0';
    int rc = dpy_npy_read(path, names, 2, &a, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc == 0)
        dpy_array_free(&a);
    close(fd);
    return 0;
}
