/* inbox.c: a local node's inbox. Messages wait there until the node asks for its (channel,
** round, sender): a fast sender's next round simply waits, an earlier round's leftovers are
** discarded as stale (and counted: late messages), a delayed message waits for its time. A delivery wakes the node only when
** it is the message the node waits for. A message that came but was rejected (a checksum
** mismatch) is a marker holding the reason: the receiver is told at once, unless a good copy of
** the same message is there too. */
#include <stdlib.h>

#include "fabric_internal.h"

void dpy_inbox_init(inbox *in) {
    pthread_mutex_init(&in->mu, NULL);
    dpy_fabric_cond_init(&in->cv);
}

void dpy_inbox_destroy(inbox *in) {
    for (msg *m = in->head; m;) {
        msg *next = m->next;
        dpy_msg_free(m);
        m = next;
    }
    in->head = NULL;
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv);
}

void dpy_inbox_put(inbox *in, msg *m) {
    pthread_mutex_lock(&in->mu);
    m->next = NULL;
    msg **p = &in->head;
    while (*p)
        p = &(*p)->next;
    *p = m;
    int wanted = in->waiting && m->sender == in->want_sender && m->channel == in->want_channel &&
                 m->round == in->want_round;
    pthread_mutex_unlock(&in->mu);
    if (wanted)
        pthread_cond_signal(&in->cv);   /* after the unlock: the woken node needs the lock */
}

uint64_t dpy_inbox_discard_before(inbox *in, uint32_t before) {
    pthread_mutex_lock(&in->mu);
    for (msg **p = &in->head; *p;) {
        msg *m = *p;
        if (m->round < before) {
            *p = m->next;
            in->late += !m->rejected;
            dpy_msg_free(m);
        } else {
            p = &m->next;
        }
    }
    uint64_t late = in->late;
    pthread_mutex_unlock(&in->mu);
    return late;
}

void dpy_inbox_wake(inbox *in) {
    pthread_mutex_lock(&in->mu);
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
}

dpy_recv_status dpy_inbox_take(inbox *in, uint32_t sender, uint16_t channel, uint32_t round,
                               double timeout, dpy_inbox_gone_fn gone, void *ctx, payload **out,
                               uint32_t *encoding) {
    double deadline = timeout >= 0 ? dpy_fabric_now() + timeout : -1;
    pthread_mutex_lock(&in->mu);
    for (;;) {
        double wake = deadline;
        double t = dpy_fabric_now();
        int pending = 0;   /* a delayed message of this round: it arrives even if its sender left */
        msg **bad = NULL;  /* a rejected copy of this round: said only when no good one is there */
        for (msg **p = &in->head; *p;) {
            msg *m = *p;
            if (m->channel != channel || m->sender != sender) {
                p = &m->next;
                continue;
            }
            if (m->round < round) {   /* stale: its round is over for this receiver */
                *p = m->next;
                in->late += !m->rejected;   /* a rejected copy is counted as a rejection */
                dpy_msg_free(m);
                continue;
            }
            if (m->round == round) {
                if (m->rejected) {   /* made at once (deliver_at 0) */
                    if (!bad)
                        bad = p;
                    p = &m->next;
                    continue;
                }
                if (m->deliver_at <= t) {
                    *p = m->next;
                    /* counted when taken, so a round's bytes are that round's messages */
                    dpy_traffic_add(&in->traffic[channel], 0, m->p->len);
                    pthread_mutex_unlock(&in->mu);
                    *out = m->p;   /* no copy: the caller drops the reference */
                    if (encoding)
                        *encoding = m->encoding;
                    free(m);
                    return DPY_RECV_OK;
                }
                if (wake < 0 || m->deliver_at < wake)
                    wake = m->deliver_at;
                pending = 1;
            }
            p = &m->next;
        }
        if (bad) {   /* only a rejected copy came: the sender did send, and it is named */
            msg *m = *bad;
            *bad = m->next;
            pthread_mutex_unlock(&in->mu);
            *out = m->p;
            if (encoding)
                *encoding = 0;
            free(m);
            return DPY_RECV_MALFORMED;
        }
        if (!pending && gone(ctx, sender)) {
            pthread_mutex_unlock(&in->mu);
            return DPY_RECV_DEAD;
        }
        if (deadline >= 0 && t >= deadline) {
            pthread_mutex_unlock(&in->mu);
            return DPY_RECV_TIMEOUT;
        }
        in->waiting = 1;
        in->want_sender = sender;
        in->want_channel = channel;
        in->want_round = round;
        if (wake >= 0) {
            struct timespec ts = dpy_fabric_at(wake);
            pthread_cond_timedwait(&in->cv, &in->mu, &ts);
        } else {
            pthread_cond_wait(&in->cv, &in->mu);
        }
        in->waiting = 0;
    }
}
