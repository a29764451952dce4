/* faults.c: fault injection ("mock"), seeded so a run's faults repeat: each message is dropped,
** duplicated, corrupted and delayed with the configured probabilities (see fabric.h). */
#include "fabric_internal.h"

void dpy_faults_init(faults *fl, const dpy_fabric_opts *o) {
    fl->drop = o->drop;
    fl->duplicate = o->duplicate;
    fl->corrupt = o->corrupt;
    fl->delay = o->delay;
    fl->rng = o->fault_seed;
    fl->latency = o->latency;
    fl->latency_max = o->latency_max;
    fl->bandwidth = o->bandwidth;
    fl->bandwidth_min = o->bandwidth_min;
    fl->seed = o->fault_seed;
    pthread_mutex_init(&fl->mu, NULL);
}

void dpy_faults_destroy(faults *fl) { pthread_mutex_destroy(&fl->mu); }

static double mix01(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

double dpy_faults_link_latency(const faults *fl, uint32_t from, uint32_t to) {
    if (!(fl->latency_max > fl->latency))
        return fl->latency;
    uint64_t link = ((uint64_t)from << 32 | to) * 0x9E3779B97F4A7C15ULL;
    return fl->latency + (fl->latency_max - fl->latency) * mix01(fl->seed ^ link ^ 0x6c696e6bULL);
}

double dpy_faults_link_bandwidth(const faults *fl, uint32_t from, uint32_t to) {
    if (!(fl->bandwidth > 0) || !(fl->bandwidth_min > 0 && fl->bandwidth_min < fl->bandwidth))
        return fl->bandwidth > 0 ? fl->bandwidth : 0;
    uint64_t link = ((uint64_t)from << 32 | to) * 0x9E3779B97F4A7C15ULL;
    return fl->bandwidth_min + (fl->bandwidth - fl->bandwidth_min) * mix01(fl->seed ^ link ^ 0x62616e64ULL);
}

double dpy_faults_link_wait(const faults *fl, uint32_t from, uint32_t to, size_t len) {
    double bw = dpy_faults_link_bandwidth(fl, from, to);
    return dpy_faults_link_latency(fl, from, to) + (bw > 0 ? (double)(len + DPY_WIRE_HEADER) / bw : 0);
}

/* splitmix64 draw in [0, 1); caller holds fl->mu */
static double draw(faults *fl) {
    uint64_t z = (fl->rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

/* The draws come in a fixed order (drop, then duplicate if kept, corrupt if there are bytes,
** delay), so a seed gives the same faults for the same sends. */
fate dpy_faults_decide(faults *fl, size_t len) {
    fate d = {1, 0, 0};
    if (fl->drop > 0 || fl->duplicate > 0 || fl->corrupt > 0 || fl->delay > 0) {
        pthread_mutex_lock(&fl->mu);
        if (draw(fl) < fl->drop)
            d.copies = 0;
        else if (draw(fl) < fl->duplicate)
            d.copies = 2;
        d.corrupt = len > 0 && draw(fl) < fl->corrupt;
        d.delay = fl->delay > 0 ? fl->delay * draw(fl) : 0;
        pthread_mutex_unlock(&fl->mu);
    }
    return d;
}

void dpy_faults_corrupt_header(uint8_t hdr[DPY_WIRE_HEADER]) {
    hdr[32] ^= 0x5a;   /* the checksum's first byte (wire.h) */
}
