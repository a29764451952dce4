/* The fabric's framing of a byte stream (framing.h: header checks, payload allocation, the tag
** computed as the payload comes) fed the input as tcp.c feeds it a socket, in reads of varied
** sizes. Byte 0: bit 0 encrypt, bit 1 a Unix socket's stream (no trailers), bit 2 with it a
** shared ring (packets in pieces: words, inline bytes, bytes from the ring), the rest seeds the
** read sizes. The key is make_seeds'. */
#include "fabric_internal.h"
#include "framing.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int started;
    static dpy_ring writer, reader;   /* one ring for every input: making one is a memfd and a mapping */
    char why[256];
    if (!started && dpy_auth_init(why, sizeof why) == 0) {
        int fd = dpy_ring_create(&writer, DPY_RING_PIECE);
        started = fd >= 0 && dpy_ring_adopt(&reader, fd, DPY_RING_PIECE, why, sizeof why) == 0;
    }
    if (size < 1)
        return 0;
    dpy_auth_dir rx = {{7}, 0};
    dpy_frame_rules r = {.run_id = 0x1234, .nodes = 16, .max_payload = 1 << 16, .encrypt = data[0] & 1,
                         .rx = &rx};
    uint32_t k = data[0] >> 3;
    dpy_frame fr;
    memset(&fr, 0, sizeof fr);
    fr.untagged = data[0] >> 1 & 1;
    if (fr.untagged && data[0] >> 2 & 1) {
        fr.ring = reader;
        fr.ring.pos = 0;
    }
    data++, size--;
    for (size_t off = 0; off < size;) {
        uint8_t *at;
        size_t want = dpy_frame_want(&fr, &at);
        k = k * 1103515245u + 12345u;
        size_t n = (k >> 16) & 1 ? want : 1 + (k >> 17) % want;   /* whole, or a part */
        if (n > size - off)
            n = size - off;
        memcpy(at, data + off, n);
        off += n;
        why[0] = '\0';
        int ev = dpy_frame_got(&fr, n, &r, why, sizeof why);
        if (ev == DPY_FRAME_PACKET) {
            payload *p = dpy_frame_take(&fr);
            if (dpy_wire_handshake(fr.h.channel))
                r.ready = 1;   /* as once the handshake is done */
            else if (!fr.untagged)
                (void)dpy_auth_open_end(&rx, &fr.rs, p->data, fr.tag);
            free(p);
        } else if (ev != DPY_FRAME_MORE) {
            fuzz_answer(ev == DPY_FRAME_BAD_HEADER ? -1 : 0, ev == DPY_FRAME_BAD_HEADER ? why : "");
            break;   /* framing lost: the connection goes */
        }
    }
    fr.ring.map = NULL;   /* the ring stays for the next input */
    dpy_frame_clear(&fr);
    return 0;
}
