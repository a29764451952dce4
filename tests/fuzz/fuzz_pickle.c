/* Python pickles (the strict reader behind the torch.save and CIFAR-pickle readers). */
#include "fuzz.h"
#include "pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const globals[] = {"collections.OrderedDict", "_codecs.encode",
                                          "torch._utils._rebuild_tensor_v2", "torch.FloatStorage",
                                          "numpy.core.multiarray._reconstruct", "numpy.ndarray",
                                          "numpy.dtype"};
    char err[512] = "";
    pk_doc doc;
    memset(&doc, 0, sizeof doc);
    int rc = pk_parse(&doc, data, size, globals, 7, "input", err, sizeof err);
    fuzz_answer(rc, err);
    if (rc == 0)
        (void)pk_at(&doc, doc.root);
    pk_free(&doc);
    return 0;
}
