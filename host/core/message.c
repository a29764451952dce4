/* message.c: the bytes of a send, shared by every local receiver, and the messages that carry
** them to inboxes (see fabric_internal.h). */
#include <stdlib.h>

#include "fabric_internal.h"

payload *dpy_payload_new(size_t len, int refs) {
    payload *p = malloc(sizeof *p + (len ? len : 1));
    if (p) {
        atomic_init(&p->refs, refs);
        p->len = len;
    }
    return p;
}

void dpy_payload_release(payload *p) {
    if (p && atomic_fetch_sub(&p->refs, 1) == 1)
        free(p);
}

msg *dpy_msg_new(uint32_t sender, uint16_t channel, uint32_t round, uint32_t encoding, payload *p) {
    msg *m = malloc(sizeof *m);
    if (m) {
        m->sender = sender;
        m->channel = channel;
        m->round = round;
        m->encoding = encoding;
        m->deliver_at = 0;
        m->rejected = 0;
        m->p = p;
    }
    return m;
}

void dpy_msg_free(msg *m) {
    dpy_payload_release(m->p);
    free(m);
}
