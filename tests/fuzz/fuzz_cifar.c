/* CIFAR binary batches (CIFAR-10's one label byte, and CIFAR-100's two). */
#include "dpy_core.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512] = "";
    int fd = fuzz_file(data, size, path, sizeof path);
    int two = size > 0 && (data[0] & 1);
    dpy_cifar c;
    int rc = dpy_cifar_read(path, two ? 2 : 1, two, &c, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc == 0)
        dpy_cifar_free(&c);
    close(fd);
    return 0;
}
