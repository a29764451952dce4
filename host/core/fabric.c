/* fabric.c: the public API (see fabric.h), tying the parts together: a send asks faults.c each
** message's fate, counts it (accounting.c), and hands it to tcp.c or to a local inbox (inbox.c);
** a receive waits on the node's inbox. What the parts share: fabric_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpy_core.h"
#include "fabric_internal.h"

int dpy_fabric_is_local(dpy_fabric *f, uint32_t node) { return dpy_fabric_local(f, node); }

/* {==== who is still there ====} */

static void wake_all(dpy_fabric *f) {
    for (uint32_t u = 0; u < f->o.nodes; u++)
        if (dpy_fabric_local(f, u))
            dpy_inbox_wake(&f->inboxes[u]);
}

void dpy_fabric_process_gone(dpy_fabric *f, int process) {
    pthread_mutex_lock(&f->mu);
    int was = f->peers[process].alive;
    f->peers[process].alive = 0;
    pthread_mutex_unlock(&f->mu);
    if (was)
        wake_all(f);
}

int dpy_fabric_alive(dpy_fabric *f, int process) {
    if (process == f->o.process)
        return 1;
    pthread_mutex_lock(&f->mu);
    int a = f->peers[process].alive;
    pthread_mutex_unlock(&f->mu);
    return a;
}

static int node_gone(dpy_fabric *f, uint32_t node) {
    pthread_mutex_lock(&f->mu);
    int g = f->gone[node] || f->interrupted;
    pthread_mutex_unlock(&f->mu);
    return g;
}

void dpy_fabric_mark_gone(dpy_fabric *f, uint32_t node, const char *why, size_t len) {
    if (node >= f->o.nodes)
        return;
    if (len > 1000)   /* a reason, not a payload */
        len = 1000;
    char *copy = malloc(len + 1);
    if (copy) {
        memcpy(copy, why, len);
        copy[len] = '\0';
    }
    pthread_mutex_lock(&f->mu);
    f->gone[node] = 1;
    if (!f->gone_why[node]) {   /* the first word stays: a later one is an echo of it */
        f->gone_why[node] = copy;
        copy = NULL;
    }
    pthread_mutex_unlock(&f->mu);
    free(copy);
    wake_all(f);
}

void dpy_fabric_node_gone(dpy_fabric *f, uint32_t node, const char *why) {
    if (!dpy_fabric_local(f, node))
        return;
    if (!why)
        why = "";
    size_t len = strcspn(why, "\n");   /* the message, not its traceback */
    dpy_fabric_mark_gone(f, node, why, len);
    char line[1001];
    snprintf(line, sizeof line, "%.*s", (int)(len < 1000 ? len : 1000), why);
    for (int p = 0; p < f->o.processes; p++)   /* the other processes' waits end at once too */
        if (p != f->o.process && dpy_fabric_alive(f, p))
            dpy_tcp_notice(f, p, node, line);
}

void dpy_fabric_interrupt(dpy_fabric *f) {
    pthread_mutex_lock(&f->mu);
    f->interrupted = 1;
    pthread_mutex_unlock(&f->mu);
    wake_all(f);
}

int dpy_fabric_gone_reason(dpy_fabric *f, uint32_t node, char *buf, size_t len) {
    if (node >= f->o.nodes)
        return 0;
    pthread_mutex_lock(&f->mu);
    const char *why = f->gone_why[node];
    if (why)
        snprintf(buf, len, "%s", why);
    pthread_mutex_unlock(&f->mu);
    return why != NULL;
}

/* Leaves receiver a marker of a rejected message (counted by the caller), so that its wait ends at
** once with "malformed" and the reason. */
void dpy_fabric_reject(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                       uint32_t round, const char *why) {
    if (!dpy_fabric_local(f, receiver) || channel >= DPY_MAX_CHANNELS)
        return;
    size_t len = strlen(why);
    payload *p = dpy_payload_new(len, 1);
    msg *m = p ? dpy_msg_new(sender, channel, round, 0, p) : NULL;
    if (!m) {   /* out of memory: the receiver waits, as it would have */
        dpy_payload_release(p);
        return;
    }
    memcpy(p->data, why, len);
    m->rejected = 1;
    dpy_inbox_put(&f->inboxes[receiver], m);
}

/* {==== sending ====} */

void *dpy_fabric_buffer(size_t len) {
    payload *p = dpy_payload_new(len, 1);
    return p ? p->data : NULL;
}

int dpy_fabric_buffer_shared(const void *buffer) {
    return atomic_load(&dpy_payload_of(buffer)->refs) > 1;
}

void dpy_fabric_retain(void *buffer) {
    atomic_fetch_add(&dpy_payload_of(buffer)->refs, 1);
}

int dpy_fabric_send(dpy_fabric *f, uint32_t sender, uint32_t receiver, uint16_t channel,
                    uint32_t round, const void *data, size_t len, char *err, size_t errlen) {
    return dpy_fabric_send_many(f, sender, &receiver, 1, channel, round, 0, data, len, err, errlen);
}

/* given: the payload that holds data, shared as it is, or NULL: local receivers share a copy */
static int send_many(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                     uint16_t channel, uint32_t round, uint32_t encoding, const void *data,
                     size_t len, payload *given, char *err, size_t errlen) {
    if (!dpy_fabric_local(f, sender))
        return dpy_fail(err, errlen, "node %u is not hosted by this process", sender);
    if (channel >= DPY_MAX_CHANNELS)
        return dpy_fail(err, errlen, "channel %u out of range (0..%d)", channel, DPY_MAX_CHANNELS - 1);
    if (len > f->o.max_payload)
        return dpy_fail(err, errlen, "payload of %zu bytes exceeds the limit of %u", len, f->o.max_payload);
    for (size_t i = 0; i < n; i++)
        if (receivers[i] >= f->o.nodes)
            return dpy_fail(err, errlen, "no node %u (the run has %u)", receivers[i], f->o.nodes);
    payload *shared = given;   /* one copy of the bytes for every local receiver */
    if (shared)
        atomic_fetch_add(&shared->refs, 1);   /* as a copy's: dropped below */
    /* every receiver gets its copy: one that is gone (a dead process) fails alone, and the
    ** first failure is the one reported */
    int failed = 0;
    char why[320];
    for (size_t i = 0; i < n; i++) {
        uint32_t receiver = receivers[i];
        fate d = dpy_faults_decide(&f->faults, len);
        dpy_traffic_sent(&f->inboxes[sender], channel, len);
        if (!dpy_fabric_local(f, receiver)) {
            char *e = failed ? why : err;
            size_t elen = failed ? sizeof why : errlen;
            if (d.copies > 0 && dpy_tcp_send(f, sender, receiver, channel, round, encoding, data, len, d,
                                             e, elen) != 0) {
                char said[256];   /* the true reason, when its notice came before the close */
                int told = dpy_fabric_gone_reason(f, receiver, said, sizeof said);
                /* a receiver that finished reads nothing more, here as in its own process (where
                ** the message waits unread): a message too late for it is no failure */
                if (told && !said[0]) {
                    e[0] = '\0';
                    continue;
                }
                failed++;
                if (told)
                    snprintf(e, elen, "peer %u failed: %s", receiver, said);
            }
            continue;
        }
        for (int c = 0; c < d.copies; c++) {
            if (d.corrupt) {   /* what a receiver's checksum catches: counted, logged, named */
                char bad[128];
                snprintf(bad, sizeof bad, "checksum mismatch from node %u (round %u)", sender, round);
                dpy_rejects_add(&f->rejects, DPY_REJECT_CHECKSUM, NULL, bad);
                dpy_fabric_reject(f, sender, receiver, channel, round, bad);
                continue;
            }
            if (!shared) {
                shared = dpy_payload_new(len, 1);   /* the sender's own reference, dropped below */
                if (!shared) {
                    if (!failed++)
                        dpy_fail(err, errlen, "out of memory queueing %zu bytes", len);
                    break;
                }
                if (len)
                    memcpy(shared->data, data, len);
            }
            msg *m = dpy_msg_new(sender, channel, round, encoding, shared);
            if (!m) {
                if (!failed++)
                    dpy_fail(err, errlen, "out of memory queueing a message");
                break;
            }
            atomic_fetch_add(&shared->refs, 1);
            double wait = d.delay + dpy_faults_link_wait(&f->faults, sender, receiver, len);
            m->deliver_at = wait > 0 ? dpy_fabric_now() + wait : 0;
            dpy_inbox_put(&f->inboxes[receiver], m);
        }
    }
    dpy_payload_release(shared);
    if (failed > 1) {
        size_t used = strlen(err);
        snprintf(err + used, errlen - used, " (and %d more of %zu receivers)", failed - 1, n);
    }
    return failed ? -1 : 0;
}

int dpy_fabric_send_many(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                         uint16_t channel, uint32_t round, uint32_t encoding, const void *data,
                         size_t len, char *err, size_t errlen) {
    return send_many(f, sender, receivers, n, channel, round, encoding, data, len, NULL, err,
                     errlen);
}

int dpy_fabric_send_buffer(dpy_fabric *f, uint32_t sender, const uint32_t *receivers, size_t n,
                           uint16_t channel, uint32_t round, uint32_t encoding,
                           const void *buffer, char *err, size_t errlen) {
    payload *p = dpy_payload_of(buffer);
    return send_many(f, sender, receivers, n, channel, round, encoding, buffer, p->len, p, err,
                     errlen);
}

/* {==== receiving ====} */

/* dpy_inbox_take's question: the sender's process is gone, or the sender finished. */
static int sender_gone(void *ctx, uint32_t sender) {
    dpy_fabric *f = ctx;
    int process = sender < f->o.nodes ? f->node_process[sender] : -1;
    return process < 0 || !dpy_fabric_alive(f, process) || node_gone(f, sender);
}

dpy_recv_status dpy_fabric_recv(dpy_fabric *f, uint32_t receiver, uint32_t sender,
                                uint16_t channel, uint32_t round, double timeout,
                                void **data, size_t *len, uint32_t *encoding) {
    *data = NULL;
    *len = 0;
    payload *p;
    dpy_recv_status s = dpy_inbox_take(&f->inboxes[receiver], sender, channel, round, timeout,
                                       sender_gone, f, &p, encoding);
    if (s == DPY_RECV_OK || s == DPY_RECV_MALFORMED) {
        *len = p->len;
        *data = p->data;   /* no copy: dpy_fabric_release drops the reference */
    }
    return s;
}

void dpy_fabric_release(void *data) {
    if (data)
        dpy_payload_release(dpy_payload_of(data));
}

/* {==== accounting ====} */

double dpy_fabric_link_latency(const dpy_fabric *f, uint32_t from, uint32_t to) {
    return dpy_faults_link_latency(&f->faults, from, to);
}

double dpy_fabric_link_bandwidth(const dpy_fabric *f, uint32_t from, uint32_t to) {
    return dpy_faults_link_bandwidth(&f->faults, from, to);
}

uint64_t dpy_fabric_late(dpy_fabric *f, uint32_t node, uint32_t before) {
    if (!dpy_fabric_local(f, node))
        return 0;
    return dpy_inbox_discard_before(&f->inboxes[node], before);
}

void dpy_fabric_traffic(dpy_fabric *f, uint32_t node, unsigned channel, dpy_traffic *out) {
    if (!dpy_fabric_local(f, node)) {
        memset(out, 0, sizeof *out);
        return;
    }
    dpy_traffic_read(&f->inboxes[node], channel, out);
}

uint64_t dpy_fabric_rejected(dpy_fabric *f, char *last, size_t len) {
    return dpy_rejects_read(&f->rejects, last, len);
}

void dpy_fabric_rejected_by(dpy_fabric *f, uint64_t counts[DPY_REJECT_KINDS]) {
    dpy_rejects_by(&f->rejects, counts);
}

/* {==== open and close ====} */

int dpy_fabric_open(dpy_fabric **out, const dpy_fabric_opts *o, char *err, size_t errlen) {
    *out = NULL;
    if (o->nodes == 0 || o->processes < 1 || o->process < 0 || o->process >= o->processes)
        return dpy_fail(err, errlen, "bad fabric layout (%u nodes, process %d of %d)", o->nodes,
                    o->process, o->processes);
    if (o->processes > 1 && !o->addresses)
        return dpy_fail(err, errlen, "%d processes need tcp addresses", o->processes);
    if (o->processes > 1 && !o->key)
        return dpy_fail(err, errlen, "%d processes need the run key", o->processes);
    for (uint32_t u = 0; u < o->nodes; u++)
        if (o->node_process[u] < 0 || o->node_process[u] >= o->processes)
            return dpy_fail(err, errlen, "node %u is mapped to process %d of %d", u,
                        o->node_process[u], o->processes);
    dpy_fabric *f = calloc(1, sizeof *f);
    if (!f)
        return dpy_fail(err, errlen, "out of memory");
    f->o = *o;
    f->listen_fd = f->unix_fd = f->epfd = f->wake[0] = f->wake[1] = -1;
    f->node_process = malloc(o->nodes * sizeof *f->node_process);
    f->inboxes = calloc(o->nodes, sizeof *f->inboxes);
    f->peers = calloc((size_t)o->processes, sizeof *f->peers);
    f->gone = calloc(o->nodes, 1);
    f->gone_why = calloc(o->nodes, sizeof *f->gone_why);
    if (!f->node_process || !f->inboxes || !f->peers || !f->gone || !f->gone_why) {
        free(f->gone_why);
        free(f->gone);
        free(f->node_process);
        free(f->inboxes);
        free(f->peers);
        free(f);
        return dpy_fail(err, errlen, "out of memory");
    }
    memcpy(f->node_process, o->node_process, o->nodes * sizeof *f->node_process);
    f->o.node_process = f->node_process;
    if (o->key)   /* the fabric's own copy: the caller's may go */
        memcpy(f->key, o->key, DPY_KEY_BYTES);
    f->o.key = o->key ? f->key : NULL;
    pthread_mutex_init(&f->mu, NULL);
    dpy_fabric_cond_init(&f->cv);
    dpy_faults_init(&f->faults, o);
    dpy_rejects_init(&f->rejects);
    f->rejects.process = o->process;
    for (uint32_t u = 0; u < o->nodes; u++)
        dpy_inbox_init(&f->inboxes[u]);
    for (int p = 0; p < o->processes; p++) {
        f->peers[p].fd = -1;
        f->peers[p].alive = p == o->process;
        pthread_mutex_init(&f->peers[p].write_mu, NULL);
    }
    if (o->processes > 1 && dpy_tcp_start(f, err, errlen) != 0) {
        dpy_fabric_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void dpy_fabric_close(dpy_fabric *f) {
    if (!f)
        return;
    dpy_tcp_stop(f);
    for (uint32_t u = 0; u < f->o.nodes; u++)
        dpy_inbox_destroy(&f->inboxes[u]);
    free(f->inboxes);
    for (int p = 0; p < f->o.processes; p++) {
        dpy_auth_stream_free(&f->peers[p].ts);
        pthread_mutex_destroy(&f->peers[p].write_mu);
    }
    free(f->peers);
    for (uint32_t u = 0; u < f->o.nodes; u++)
        free(f->gone_why[u]);
    free(f->gone_why);
    free(f->gone);
    free(f->node_process);
    dpy_rejects_destroy(&f->rejects);
    dpy_faults_destroy(&f->faults);
    memset(f->key, 0, sizeof f->key);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}
