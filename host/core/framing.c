/* framing.c: header, payload and trailer of each packet of a byte stream (see framing.h). */
#include "framing.h"

#include <stdio.h>
#include <stdlib.h>

#include "bytes.h"

#include "fabric_internal.h"

static size_t tag_len(const dpy_frame *fr) {
    return fr->untagged || dpy_wire_handshake(fr->h.channel) ? 0 : DPY_TRAILER_BYTES;
}

static int complete(const dpy_frame *fr) {
    return fr->hdr_got == DPY_WIRE_HEADER && fr->got == fr->h.length && fr->tag_got == tag_len(fr);
}

size_t dpy_frame_want(dpy_frame *fr, uint8_t **at) {
    if (fr->hdr_got < DPY_WIRE_HEADER) {
        *at = fr->hdr + fr->hdr_got;
        return DPY_WIRE_HEADER - fr->hdr_got;
    }
    if (fr->got < fr->h.length) {
        if (fr->ringed && fr->inline_left == 0) {
            *at = fr->word + fr->word_got;
            return sizeof fr->word - fr->word_got;
        }
        size_t n = fr->h.length - fr->got;
        *at = fr->pending->data + fr->got;
        return fr->ringed && fr->inline_left < n ? fr->inline_left : n;
    }
    *at = fr->tag + fr->tag_got;
    return tag_len(fr) - fr->tag_got;
}

/* n more bytes of a piece's word: once whole, its bytes are copied from the ring, or are next. */
static int piece_word(dpy_frame *fr, size_t n, char *why, size_t whylen) {
    fr->word_got += n;
    if (fr->word_got < sizeof fr->word)
        return DPY_FRAME_MORE;
    fr->word_got = 0;
    uint32_t w = get32(fr->word), len = w & ~DPY_RING_INLINE, at = get32(fr->word + 4);
    if (len == 0 || len > fr->h.length - fr->got) {
        snprintf(why, whylen, "a piece of %u bytes where %u remain", len, (uint32_t)(fr->h.length - fr->got));
        return DPY_FRAME_BAD_HEADER;
    }
    if (at != (uint32_t)fr->ring.pos) {   /* a writer and reader out of step: never stale bytes */
        snprintf(why, whylen, "a piece written at byte %u of the shared ring, read at %u", at,
                 (uint32_t)fr->ring.pos);
        return DPY_FRAME_BAD_HEADER;
    }
    if (w & DPY_RING_INLINE) {
        fr->inline_left = len;
        return DPY_FRAME_MORE;
    }
    if (len > dpy_ring_to_end(&fr->ring)) {   /* a piece never wraps round */
        snprintf(why, whylen, "a piece of %u bytes past the shared ring's end", len);
        return DPY_FRAME_BAD_HEADER;
    }
    dpy_ring_get(&fr->ring, fr->pending->data + fr->got, len);
    fr->got += len;
    return complete(fr) ? DPY_FRAME_PACKET : DPY_FRAME_MORE;
}

int dpy_frame_got(dpy_frame *fr, size_t n, const dpy_frame_rules *r, char *why, size_t whylen) {
    if (fr->hdr_got == DPY_WIRE_HEADER) {
        if (fr->got < fr->h.length) {
            if (fr->ringed && fr->inline_left == 0)
                return piece_word(fr, n, why, whylen);
            fr->inline_left -= fr->ringed ? n : 0;
            fr->got += n;
            if (tag_len(fr))   /* checked while the rest travels, in cache */
                dpy_auth_open_upto(&fr->rs, fr->pending->data, fr->got);
        } else {
            fr->tag_got += n;
        }
        return complete(fr) ? DPY_FRAME_PACKET : DPY_FRAME_MORE;
    }
    fr->hdr_got += n;
    if (fr->hdr_got < DPY_WIRE_HEADER)
        return DPY_FRAME_MORE;
    if (dpy_wire_decode(fr->hdr, &fr->h, r->run_id, r->nodes, r->max_payload, why, whylen) != 0)
        return DPY_FRAME_BAD_HEADER;
    int handshake = dpy_wire_handshake(fr->h.channel);
    if (!r->ready && !handshake)   /* before allocating anything */
        return DPY_FRAME_EARLY;
    fr->ringed = (fr->h.flags & DPY_FLAG_RING) != 0;
    if (fr->ringed && (!fr->untagged || !fr->ring.map || handshake)) {
        snprintf(why, whylen, "a packet through a shared ring where there is none");
        return DPY_FRAME_BAD_HEADER;
    }
    fr->got = fr->tag_got = fr->word_got = fr->inline_left = 0;
    if (tag_len(fr) && dpy_auth_begin(r->rx, r->encrypt, fr->hdr, fr->h.length, &fr->rs) != 0)
        return DPY_FRAME_MEMORY;
    fr->pending = dpy_payload_new(fr->h.length, 1);   /* at most max_payload */
    if (!fr->pending)
        return DPY_FRAME_MEMORY;
    return complete(fr) ? DPY_FRAME_PACKET : DPY_FRAME_MORE;
}

payload *dpy_frame_take(dpy_frame *fr) {
    payload *p = fr->pending;
    fr->pending = NULL;
    fr->hdr_got = 0;
    return p;
}

void dpy_frame_clear(dpy_frame *fr) {
    dpy_auth_stream_free(&fr->rs);
    free(fr->pending);
    fr->pending = NULL;
    fr->hdr_got = 0;
    dpy_ring_free(&fr->ring);
}
