/* The packet header (wire.h), then what the framing does with the bytes after it. */
#include "fuzz.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char why[256] = "";
    dpy_header h;
    /* a stream of packets as tcp.c frames them: header, length bytes, next header */
    while (size >= DPY_WIRE_HEADER) {
        uint64_t run_id = 0;
        memcpy(&run_id, data + 8, 8);   /* the right run id half the time: get past that check */
        if (data[5] & 1)
            run_id ^= 1;
        why[0] = '\0';
        int rc = dpy_wire_decode(data, &h, run_id, 16, 1 << 16, why, sizeof why);
        fuzz_answer(rc, why);
        if (rc != 0)
            return 0;                   /* framing lost: the connection goes */
        data += DPY_WIRE_HEADER, size -= DPY_WIRE_HEADER;
        if (h.length > size)
            return 0;                   /* the rest has not arrived */
        (void)dpy_wire_checksum(data, h.length);
        data += h.length, size -= h.length;
    }
    return 0;
}
