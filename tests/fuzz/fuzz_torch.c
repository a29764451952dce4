/* torch.save files (zip archives holding a pickle and the storages). */
#include "dpy_arrays.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512] = "";
    int fd = fuzz_file(data, size, path, sizeof path);
    const char *names[] = {"images", "x"};
    dpy_array a;
    memset(&a, 0, sizeof a);
    int rc = dpy_torch_read(path, names, 2, 0, &a, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc == 0)
        dpy_array_free(&a);
    close(fd);
    return 0;
}
