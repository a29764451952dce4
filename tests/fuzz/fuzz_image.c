/* PNG and JPEG files: the header probe, then decoding at the size it found (when small). */
#include "data_image.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512] = "";
    int fd = fuzz_file(data, size, path, sizeof path);
    dpy_image_info info;
    int rc = dpy_image_probe(path, &info, err, sizeof err);
    fuzz_answer(rc, err);
    close(fd);
    if (rc != 0 || (int64_t)info.width * info.height > 1 << 20)
        return 0;
    int channels = size & 1 ? 3 : 1;
    uint8_t *out = malloc((size_t)info.width * info.height * 3 + 1);
    err[0] = '\0';
    fuzz_answer(dpy_image_decode_mem(data, size, "input", channels, info.height, info.width, out,
                                     err, sizeof err), err);
    free(out);
    return 0;
}
