/* wire.c: encoding and checking packet headers (see wire.h). */
#include "wire.h"

#include <stdio.h>

#include "auth.h"
#include "bytes.h"

uint32_t dpy_wire_handshake_length(uint16_t channel) {
    switch (channel) {
    case DPY_CHANNEL_HELLO: return DPY_NONCE_BYTES;
    case DPY_CHANNEL_CHALLENGE: return DPY_NONCE_BYTES + DPY_PROOF_BYTES;
    case DPY_CHANNEL_PROOF: return DPY_PROOF_BYTES;
    default: return 0;
    }
}

void dpy_wire_encode(uint8_t out[DPY_WIRE_HEADER], const dpy_header *h) {
    put32(out, DPY_WIRE_MAGIC);
    out[4] = DPY_WIRE_VERSION;
    out[5] = h->flags;
    put16(out + 6, h->channel);
    put64(out + 8, h->run_id);
    put32(out + 16, h->sender);
    put32(out + 20, h->receiver);
    put32(out + 24, h->round);
    put32(out + 28, h->length);
    put32(out + 32, h->checksum);
    put32(out + 36, h->encoding);
}

int dpy_wire_decode(const uint8_t in[DPY_WIRE_HEADER], dpy_header *h, uint64_t run_id,
                    uint32_t nodes, uint32_t max_len, char *why, size_t whylen) {
    uint32_t magic = get32(in);
    if (magic != DPY_WIRE_MAGIC) {
        snprintf(why, whylen, "bad magic 0x%08x", magic);
        return -1;
    }
    h->version = in[4];
    if (h->version != DPY_WIRE_VERSION) {
        snprintf(why, whylen, "wire version %u, expected %u", h->version, DPY_WIRE_VERSION);
        return -1;
    }
    h->flags = in[5];
    h->channel = get16(in + 6);
    h->run_id = get64(in + 8);
    h->sender = get32(in + 16);
    h->receiver = get32(in + 20);
    h->round = get32(in + 24);
    h->length = get32(in + 28);
    h->checksum = get32(in + 32);
    h->encoding = get32(in + 36);
    if (h->run_id != run_id) {
        snprintf(why, whylen, "run id %016llx is not this run's %016llx",
                 (unsigned long long)h->run_id, (unsigned long long)run_id);
        return -1;
    }
    if (dpy_wire_handshake(h->channel)) {
        if (h->length != dpy_wire_handshake_length(h->channel)) {
            snprintf(why, whylen, "handshake packet of %u bytes, expected %u", h->length,
                     dpy_wire_handshake_length(h->channel));
            return -1;
        }
        return 0;   /* sender and receiver are process indices: tcp.c checks them */
    }
    if (h->sender >= nodes || h->receiver >= nodes) {
        snprintf(why, whylen, "unknown node (sender %u, receiver %u, %u nodes)", h->sender,
                 h->receiver, nodes);
        return -1;
    }
    if (h->length > max_len) {
        snprintf(why, whylen, "payload of %u bytes exceeds the limit of %u", h->length, max_len);
        return -1;
    }
    return 0;
}
