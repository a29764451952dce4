/* accounting.c: what the fabric counts. Traffic per node and channel (messages, payload and
** header bytes), kept in the node's inbox under its lock; and the packets this process rejected,
** with the reason of the last one, counted by kind and logged once per peer. */
#include <stdio.h>
#include <string.h>

#include "fabric_internal.h"

void dpy_traffic_add(dpy_traffic *t, int sent, size_t payload_len) {
    if (sent) {
        t->sent_msgs++;
        t->sent_payload += payload_len;
        t->sent_header += DPY_WIRE_HEADER;
    } else {
        t->recv_msgs++;
        t->recv_payload += payload_len;
        t->recv_header += DPY_WIRE_HEADER;
    }
}

void dpy_traffic_sent(inbox *in, uint16_t channel, size_t payload_len) {
    pthread_mutex_lock(&in->mu);
    dpy_traffic_add(&in->traffic[channel], 1, payload_len);
    pthread_mutex_unlock(&in->mu);
}

void dpy_traffic_read(inbox *in, unsigned channel, dpy_traffic *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&in->mu);
    for (unsigned c = 0; c < DPY_MAX_CHANNELS; c++) {
        if (channel < DPY_MAX_CHANNELS && c != channel)
            continue;
        const dpy_traffic *t = &in->traffic[c];
        out->sent_msgs += t->sent_msgs;
        out->sent_payload += t->sent_payload;
        out->sent_header += t->sent_header;
        out->recv_msgs += t->recv_msgs;
        out->recv_payload += t->recv_payload;
        out->recv_header += t->recv_header;
    }
    pthread_mutex_unlock(&in->mu);
}

const char *const dpy_reject_names[DPY_REJECT_KINDS] = {
    "header", "hello", "duplicate_hello", "auth", "checksum", "misaddressed", "connection_cap",
    "idle", "memory"};

void dpy_rejects_init(rejects *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
}

void dpy_rejects_destroy(rejects *r) { pthread_mutex_destroy(&r->mu); }

void dpy_rejects_add(rejects *r, dpy_reject_kind kind, const char *peer, const char *why) {
    pthread_mutex_lock(&r->mu);
    r->count++;
    r->by[kind]++;
    snprintf(r->last, sizeof r->last, "%s", why);
    int first = peer != NULL;
    for (int i = 0; i < r->nlogged && first; i++)
        first = strcmp(r->logged[i], peer) != 0;
    if (first && r->nlogged < DPY_REJECT_LOGGED)
        snprintf(r->logged[r->nlogged++], sizeof r->logged[0], "%s", peer);
    else
        first = 0;
    pthread_mutex_unlock(&r->mu);
    if (first)
        fprintf(stderr, "dpy-lua: process %d rejected %s from %s: %s (more from it are counted, "
                "not logged)\n", r->process, kind == DPY_REJECT_CAP || kind == DPY_REJECT_IDLE ? "a connection" : "a packet",
                peer, why);
}

void dpy_rejects_by(rejects *r, uint64_t counts[DPY_REJECT_KINDS]) {
    pthread_mutex_lock(&r->mu);
    memcpy(counts, r->by, sizeof r->by);
    pthread_mutex_unlock(&r->mu);
}

uint64_t dpy_rejects_read(rejects *r, char *last, size_t len) {
    pthread_mutex_lock(&r->mu);
    uint64_t n = r->count;
    if (last)
        snprintf(last, len, "%s", r->last);
    pthread_mutex_unlock(&r->mu);
    return n;
}
