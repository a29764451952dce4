/* CIFAR's Python pickle batches. */
#include "dpy_arrays.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512] = "";
    int fd = fuzz_file(data, size, path, sizeof path);
    dpy_cifar c;
    int rc = dpy_cifar_py_read(path, size & 1 ? "fine_labels" : "labels", &c, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc == 0)
        dpy_cifar_free(&c);
    close(fd);
    return 0;
}
