/* The sparse codec's decoder (sparse.h), bounded as a receiver of a 2^16-value model bounds it;
** what it decodes must satisfy its contract: indices strictly increasing and below n. */
#include "fuzz.h"
#include "sparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256] = "";
    dpy_sparse_info info;
    int rc = dpy_sparse_info_of(data, size, 1 << 16, &info, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc != 0)
        return 0;
    size_t k = (size_t)info.k;
    int64_t *idx = malloc((k ? k : 1) * sizeof *idx);
    float *val = malloc((k ? k : 1) * sizeof *val);
    err[0] = '\0';
    rc = dpy_sparse_decode(data, size, 1 << 16, idx, val, k, err, sizeof err);
    fuzz_answer(rc, err);
    if (rc == 0 && info.coding == DPY_SPARSE_DELTAS)
        for (size_t i = 0; i < k; i++)
            if (idx[i] < 0 || (uint64_t)idx[i] >= info.n || (i > 0 && idx[i] <= idx[i - 1])) {
                fprintf(stderr, "decoded index %lld at entry %zu breaks the contract\n",
                        (long long)idx[i], i);
                abort();
            }
    free(idx);
    free(val);
    return 0;
}
