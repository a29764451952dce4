/* test_fabric.c: inboxes and round buffering, byte counts, injected faults, tcp between two
** fabrics on 127.0.0.1 (a Unix socket, and the shared ring on it), garbage on a node's port, a
** peer that dies, and a signal while a process waits for its peers. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <time.h>

#include "bytes.h"
#include "check.h"
#include "fabric.h"
#include "fabric_internal.h"
#include "ring.h"
#include "wire.h"

static dpy_fabric *open_mem(int32_t *map, uint32_t nodes, double drop, double dup, double corrupt,
                            double delay) {
    dpy_fabric_opts o = {.run_id = 7, .nodes = nodes, .max_payload = 1 << 20, .process = 0,
                         .processes = 1, .node_process = map, .drop = drop, .duplicate = dup,
                         .corrupt = corrupt, .delay = delay, .fault_seed = 1};
    dpy_fabric *f;
    char err[256];
    CHECK(dpy_fabric_open(&f, &o, err, sizeof err) == 0);
    return f;
}

static int recv_int(dpy_fabric *f, uint32_t to, uint32_t from, uint32_t round, double timeout,
                    int *value) {
    void *data;
    size_t len;
    dpy_recv_status s = dpy_fabric_recv(f, to, from, 0, round, timeout, &data, &len, NULL);
    if (s == DPY_RECV_OK) {
        CHECK(len == sizeof(int));
        memcpy(value, data, sizeof(int));
        dpy_fabric_release(data);
    }
    return (int)s;
}

static void test_mem(void) {
    int32_t map[3] = {0, 0, 0};
    dpy_fabric *f = open_mem(map, 3, 0, 0, 0, 0);
    char err[256];
    int a = 10, b = 20, c = 5, v = 0;
    CHECK(dpy_fabric_send(f, 0, 1, 0, 2, &b, sizeof b, err, sizeof err) == 0);   /* round 2 first */
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &a, sizeof a, err, sizeof err) == 0);
    CHECK(recv_int(f, 1, 0, 1, 1, &v) == DPY_RECV_OK && v == 10);
    CHECK(recv_int(f, 1, 0, 2, 1, &v) == DPY_RECV_OK && v == 20);               /* it waited */
    CHECK(recv_int(f, 1, 0, 3, 0.05, &v) == DPY_RECV_TIMEOUT);
    CHECK(dpy_fabric_send(f, 2, 1, 0, 1, &c, sizeof c, err, sizeof err) == 0);   /* stale */
    CHECK(recv_int(f, 1, 2, 2, 0.05, &v) == DPY_RECV_TIMEOUT);
    dpy_traffic t;
    dpy_fabric_traffic(f, 0, 99, &t);
    CHECK(t.sent_msgs == 2 && t.sent_payload == 8 && t.sent_header == 2 * DPY_WIRE_HEADER);
    dpy_fabric_traffic(f, 1, 0, &t);   /* taken messages only: the stale one is not counted */
    CHECK(t.recv_msgs == 2 && t.recv_payload == 8);
    CHECK(dpy_fabric_send(f, 0, 9, 0, 1, &a, sizeof a, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "no node 9");
    dpy_fabric_close(f);
}

/* A fabric buffer reaches local receivers as itself, not a copy, and lives until the last of
** its owners (the sender, each receiver) gives it back: under ASan, a leak or a double free
** fails the test. */
static void test_buffer(void) {
    int32_t map[3] = {0, 0, 0};
    dpy_fabric *f = open_mem(map, 3, 0, 0, 0, 0);
    char err[256];
    int *buf = dpy_fabric_buffer(2 * sizeof(int));
    CHECK(buf != NULL);
    buf[0] = 3, buf[1] = 4;
    uint32_t to[2] = {1, 2};
    CHECK(dpy_fabric_send_buffer(f, 0, to, 2, 0, 1, 0, buf, err, sizeof err) == 0);
    dpy_fabric_release(buf);   /* the sender is done with it; the receivers are not */
    for (uint32_t r = 1; r <= 2; r++) {
        void *data;
        size_t len;
        CHECK(dpy_fabric_recv(f, r, 0, 0, 1, 1.0, &data, &len, NULL) == DPY_RECV_OK);
        CHECK(data == buf && len == 2 * sizeof(int) && ((int *)data)[1] == 4);
        dpy_fabric_release(data);
    }
    dpy_traffic t;
    dpy_fabric_traffic(f, 0, 0, &t);
    CHECK(t.sent_msgs == 2 && t.sent_payload == 4 * sizeof(int));
    void *empty = dpy_fabric_buffer(0);
    uint32_t nobody = 9;
    CHECK(dpy_fabric_send_buffer(f, 0, &nobody, 1, 0, 1, 0, empty, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "no node 9");
    dpy_fabric_release(empty);
    dpy_fabric_close(f);
}

static void test_faults(void) {
    int32_t map[2] = {0, 0};
    char err[256], last[256];
    int x = 1, v = 0;
    dpy_fabric *f = open_mem(map, 2, 1.0, 0, 0, 0);   /* drop everything */
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &x, sizeof x, err, sizeof err) == 0);
    CHECK(recv_int(f, 1, 0, 1, 0.05, &v) == DPY_RECV_TIMEOUT);
    dpy_fabric_close(f);

    f = open_mem(map, 2, 0, 1.0, 0, 0);               /* duplicate everything */
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &x, sizeof x, err, sizeof err) == 0);
    CHECK(recv_int(f, 1, 0, 1, 0.05, &v) == DPY_RECV_OK);
    CHECK(recv_int(f, 1, 0, 1, 0.05, &v) == DPY_RECV_OK);
    dpy_fabric_close(f);

    f = open_mem(map, 2, 0, 0, 1.0, 0);               /* corrupt everything */
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &x, sizeof x, err, sizeof err) == 0);
    void *why;
    size_t len;
    /* the receiver is told at once that the message came malformed, and why */
    CHECK(dpy_fabric_recv(f, 1, 0, 0, 1, 30, &why, &len, NULL) == DPY_RECV_MALFORMED);
    CHECK(len == strlen("checksum mismatch from node 0 (round 1)") &&
          memcmp(why, "checksum mismatch from node 0 (round 1)", len) == 0);
    dpy_fabric_release(why);
    CHECK(dpy_fabric_rejected(f, last, sizeof last) == 1);
    CHECK_CONTAINS(last, "checksum mismatch from node 0");
    dpy_fabric_close(f);

    f = open_mem(map, 2, 0, 0, 0, 0);                 /* a node that failed says why */
    dpy_fabric_node_gone(f, 0, "boom at round 2\nstack traceback: ...");
    CHECK(recv_int(f, 1, 0, 2, 30, &v) == DPY_RECV_DEAD);
    CHECK(dpy_fabric_gone_reason(f, 0, last, sizeof last) == 1 && strcmp(last, "boom at round 2") == 0);
    CHECK(dpy_fabric_gone_reason(f, 1, last, sizeof last) == 0);
    dpy_fabric_close(f);

    f = open_mem(map, 2, 0, 0, 0, 0.2);               /* delay up to 0.2 s */
    x = 42;
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &x, sizeof x, err, sizeof err) == 0);
    CHECK(recv_int(f, 1, 0, 1, 1.0, &v) == DPY_RECV_OK && v == 42);
    /* a sender that finished right after sending: its delayed message still arrives */
    CHECK(dpy_fabric_send(f, 0, 1, 0, 2, &x, sizeof x, err, sizeof err) == 0);
    dpy_fabric_node_gone(f, 0, NULL);
    CHECK(recv_int(f, 1, 0, 2, 1.0, &v) == DPY_RECV_OK && v == 42);
    CHECK(recv_int(f, 1, 0, 3, 1.0, &v) == DPY_RECV_DEAD);
    dpy_fabric_close(f);
}

/* This test's listening ports: each case its own offsets (0-15) from check_port_base(). */
static int test_port(int offset) { return check_port_base() + offset; }

typedef struct {
    dpy_fabric_opts o;
    dpy_fabric *f;
    int rc;
    char err[256];
} opener;

static void *open_thread(void *arg) {
    opener *op = arg;
    op->rc = dpy_fabric_open(&op->f, &op->o, op->err, sizeof op->err);
    return NULL;
}

/* Opens processes 0 and 1 at 127.0.0.1:port and port + 1 (each on its thread, as two processes):
** 0, or -1 with both errors said. */
static int open_two(opener p[2], int port, uint32_t max_payload, int no_ring) {
    static char a0[64], a1[64];
    snprintf(a0, sizeof a0, "127.0.0.1:%d", port);
    snprintf(a1, sizeof a1, "127.0.0.1:%d", port + 1);
    static const char *addrs[2] = {a0, a1};
    static int32_t map[2] = {0, 1};
    static const uint8_t key[32] = {1, 2, 3};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].o = (dpy_fabric_opts){.run_id = 9, .nodes = 2, .max_payload = max_payload, .process = i,
                                   .processes = 2, .node_process = map, .addresses = addrs,
                                   .connect_timeout = 10, .key = key, .no_ring = no_ring};
        pthread_create(&th[i], NULL, open_thread, &p[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(p[0].rc == 0 && p[1].rc == 0);
    if (p[0].rc || p[1].rc) {
        fprintf(stderr, "%s / %s\n", p[0].err, p[1].err);
        return -1;
    }
    return 0;
}

static void test_tcp(void) {
    int port = test_port(0);
    opener p[2];
    if (open_two(p, port, 1 << 20, 0) != 0)
        return;
    char err[256], last[256];
    static int big[100000];
    for (int i = 0; i < 100000; i++)
        big[i] = i;
    uint32_t to = 1, encoding = 0;
    CHECK(dpy_fabric_send_many(p[0].f, 0, &to, 1, 0, 1, 0xC0DEu, big, sizeof big, err,
                               sizeof err) == 0);
    void *data;
    size_t len;
    CHECK(dpy_fabric_recv(p[1].f, 1, 0, 0, 1, 5, &data, &len, &encoding) == DPY_RECV_OK);
    CHECK(len == sizeof big && memcmp(data, big, len) == 0);
    CHECK(encoding == 0xC0DEu);   /* the header carries the sender's encoding */
    dpy_fabric_release(data);
    CHECK(dpy_fabric_shared_bytes(p[0].f, 1) == sizeof big);   /* through the shared ring */
    int x = 3, v = 0;
    CHECK(dpy_fabric_send(p[1].f, 1, 0, 0, 1, &x, sizeof x, err, sizeof err) == 0);
    CHECK(recv_int(p[0].f, 0, 1, 1, 5, &v) == DPY_RECV_OK && v == 3);

    /* garbage on process 1's port: rejected and counted, the run goes on */
    int g = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(port + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(connect(g, (struct sockaddr *)&sa, sizeof sa) == 0);
    char junk[200];
    memset(junk, 'A', sizeof junk);
    CHECK(write(g, junk, sizeof junk) == (ssize_t)sizeof junk);
    for (int i = 0; i < 100 && dpy_fabric_rejected(p[1].f, last, sizeof last) == 0; i++)
        usleep(10000);
    CHECK(dpy_fabric_rejected(p[1].f, last, sizeof last) == 1);
    CHECK_CONTAINS(last, "bad magic");
    close(g);
    CHECK(dpy_fabric_send(p[0].f, 0, 1, 0, 2, &x, sizeof x, err, sizeof err) == 0);
    CHECK(recv_int(p[1].f, 1, 0, 2, 5, &v) == DPY_RECV_OK && v == 3);

    /* node 1 fails while its process lives on: a notice on the wire ends node 0's wait at once,
    ** with node 1's reason */
    dpy_fabric_node_gone(p[1].f, 1, "boom at round 3\nstack traceback: ...");
    CHECK(recv_int(p[0].f, 0, 1, 3, 10, &v) == DPY_RECV_DEAD);
    CHECK(dpy_fabric_gone_reason(p[0].f, 1, last, sizeof last) == 1 && strcmp(last, "boom at round 3") == 0);
    CHECK(dpy_fabric_alive(p[0].f, 1));

    /* process 1 dies: process 0's wait for node 1 ends at once, not at the timeout */
    dpy_fabric_close(p[1].f);
    CHECK(recv_int(p[0].f, 0, 1, 2, 30, &v) == DPY_RECV_DEAD);
    /* node 1 was gone already (its notice), so the wait above ends before process 0's I/O thread
    ** has seen the connection close: give it that moment */
    for (int i = 0; i < 500 && dpy_fabric_alive(p[0].f, 1); i++)
        usleep(10000);
    CHECK(!dpy_fabric_alive(p[0].f, 1));
    /* a send to a dead receiver and a live one: the live one still gets it */
    uint32_t both[2] = {1, 0};
    x = 5;
    CHECK(dpy_fabric_send_many(p[0].f, 0, both, 2, 0, 4, 0, &x, sizeof x, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "peer 1 failed: boom at round 3");   /* its notice's reason, not "unreachable" */
    CHECK(recv_int(p[0].f, 0, 0, 4, 1, &v) == DPY_RECV_OK && v == 5);
    dpy_fabric_close(p[0].f);
}

/* Payloads through the shared ring between two processes of one machine come back byte for byte,
** many times round it, with a fresh pattern each (a stale ring byte would show). One at a time (each
** taken before the next goes), every byte goes through the ring, round its end too (the cnn's
** 861,480 bytes do not divide it); larger than the ring, the pieces it has no room for go on the
** socket. Without the ring (no_ring) everything goes on the socket alone. */
static void test_ring(void) {
    static uint8_t buf[11 << 20];
    for (int no_ring = 0; no_ring <= 1; no_ring++) {
        opener p[2];
        if (open_two(p, test_port(2 + 2 * no_ring), sizeof buf, no_ring) != 0)
            return;
        /* the first leaves 16,928 bytes to the ring's end: less than a piece, the next starts there */
        const size_t sizes[] = {DPY_RING_BYTES - 16928, 861480, 861480, 861480, 64 << 10, 300000,
                                (1 << 20) + 3, 70001, sizeof buf, 5 << 20, sizeof buf - 5};
        const uint32_t fit = 8;   /* those up to the ring's size */
        uint64_t through = 0;
        char err[256];
        for (uint32_t r = 0; r < 4 * sizeof sizes / sizeof sizes[0]; r++) {
            uint32_t k = r % (sizeof sizes / sizeof sizes[0]);
            size_t len = sizes[k];
            for (size_t i = 0; i < len; i++)
                buf[i] = (uint8_t)(i * 31 + r * 17 + i / 4093);
            uint64_t before = dpy_fabric_shared_bytes(p[1].f, 0);
            CHECK(dpy_fabric_send(p[1].f, 1, 0, 0, r, buf, len, err, sizeof err) == 0);
            void *data;
            size_t got;
            CHECK(dpy_fabric_recv(p[0].f, 0, 1, 0, r, 10, &data, &got, NULL) == DPY_RECV_OK);
            CHECK(got == len && memcmp(data, buf, len) == 0);
            dpy_fabric_release(data);
            uint64_t shared = dpy_fabric_shared_bytes(p[1].f, 0) - before;
            if (no_ring)
                CHECK(shared == 0);
            else if (k < fit)
                CHECK(shared == len);
            else
                CHECK(shared > 0 && shared <= len);
            through += shared;
        }
        CHECK(no_ring ? through == 0 : through >= 4 * 5 * 861480);   /* round the ring's end 10 times */
        dpy_fabric_close(p[0].f);
        dpy_fabric_close(p[1].f);
    }
}

/* The ring's packet misused by a peer that holds the run key (tcp.c): a descriptor sent with any
** other packet is closed unread and the packet delivered; a ring packet without a descriptor, with
** one that is not a sealed memfd, or a second ring, loses the connection with its reason said, and
** leaves no descriptor or mapping behind: a peer gone, the ring to it is unmapped at once. */
static int ring_maps(void) {   /* the mappings of rings in this process (one ring may be two) */
    char line[512];
    int n = 0;
    FILE *fp = fopen("/proc/self/maps", "r");
    while (fp && fgets(line, sizeof line, fp))
        n += strstr(line, "dpy-ring") != NULL;
    if (fp)
        fclose(fp);
    return n;
}

/* Process 1 writes a packet as it is to process 0: its header, len payload bytes, descriptor fd. */
static void raw_packet(dpy_fabric *f1, uint16_t channel, uint32_t round, const void *data, uint32_t len, int fd) {
    uint8_t pk[DPY_WIRE_HEADER + 64];
    dpy_header h = {.channel = channel, .run_id = 9, .sender = 1, .round = round, .length = len};
    dpy_wire_encode(pk, &h);
    memcpy(pk + DPY_WIRE_HEADER, data, len);
    CHECK(dpy_tcp_write_raw(f1, 0, pk, DPY_WIRE_HEADER + len, fd) == 0);
}

/* Waits until process 0 has refused something and lost process 1; the last refusal's text. */
static void refused(opener p[2], char *last, size_t len) {
    for (int i = 0; i < 500 && (dpy_fabric_rejected(p[0].f, last, len) == 0 || dpy_fabric_alive(p[0].f, 1)); i++)
        usleep(10000);
    CHECK(!dpy_fabric_alive(p[0].f, 1));
}

static void test_ring_misused(void) {
    int base = test_port(6), fds = check_open_fds();
    char err[256], last[320];
    uint8_t size[DPY_RING_OFFER];
    put64(size, DPY_RING_BYTES);
    for (int attack = 0; attack < 3; attack++) {
        opener p[2];
        if (open_two(p, base + 2 * attack, 4 << 20, 0) != 0)
            return;
        int pipes[2], x = 7, v = 0;
        CHECK(pipe(pipes) == 0);
        /* a descriptor with a data packet: closed, the packet delivered */
        raw_packet(p[1].f, 0, 5, &x, sizeof x, pipes[0]);
        CHECK(recv_int(p[0].f, 0, 1, 5, 5, &v) == DPY_RECV_OK && v == 7);
        if (attack == 0) {   /* a ring packet without its descriptor */
            raw_packet(p[1].f, DPY_CHANNEL_RING, 0, size, sizeof size, -1);
            refused(p, last, sizeof last);
            CHECK_CONTAINS(last, "a shared ring without its file descriptor");
        } else if (attack == 1) {   /* a pipe for a ring */
            raw_packet(p[1].f, DPY_CHANNEL_RING, 0, size, sizeof size, pipes[1]);
            refused(p, last, sizeof last);
            CHECK_CONTAINS(last, "a shared ring not a memfd on tmpfs");
        } else {   /* a second ring, after the first carried a model */
            static uint8_t model[1 << 20];
            CHECK(dpy_fabric_send(p[1].f, 1, 0, 0, 6, model, sizeof model, err, sizeof err) == 0);
            void *data;
            size_t got;
            CHECK(dpy_fabric_recv(p[0].f, 0, 1, 0, 6, 5, &data, &got, NULL) == DPY_RECV_OK);
            dpy_fabric_release(data);
            CHECK(dpy_fabric_shared_bytes(p[1].f, 0) == sizeof model && ring_maps() > 0);
            dpy_ring second;
            int fd = dpy_ring_create(&second, DPY_RING_BYTES);
            dpy_ring_free(&second);
            raw_packet(p[1].f, DPY_CHANNEL_RING, 0, size, sizeof size, fd);
            close(fd);
            refused(p, last, sizeof last);
            CHECK_CONTAINS(last, "a second shared ring");
            for (int i = 0; i < 500 && ring_maps() > 0; i++)   /* both ends let their rings go */
                usleep(10000);
            CHECK(ring_maps() == 0);
        }
        close(pipes[0]);
        close(pipes[1]);
        dpy_fabric_close(p[0].f);
        dpy_fabric_close(p[1].f);
    }
    CHECK(check_open_fds() == fds);   /* every descriptor sent was closed */
}

/* Messages of rounds a receiver is done with: dpy_fabric_late discards them (any sender, any
** channel, delayed ones too) and counts them with those a recv discarded as stale; the count is
** the node's total so far, and taken messages are never in it. */
static void test_late(void) {
    int32_t map[3] = {0, 0, 0};
    dpy_fabric *f = open_mem(map, 3, 0, 0, 0, 0);
    char err[256];
    int a = 1, v = 0;
    CHECK(dpy_fabric_late(f, 1, 1) == 0);
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &a, sizeof a, err, sizeof err) == 0);
    CHECK(dpy_fabric_send(f, 2, 1, 0, 1, &a, sizeof a, err, sizeof err) == 0);
    CHECK(dpy_fabric_send(f, 2, 1, 3, 2, &a, sizeof a, err, sizeof err) == 0);   /* channel 3 */
    CHECK(dpy_fabric_send(f, 2, 1, 0, 2, &a, sizeof a, err, sizeof err) == 0);
    CHECK(recv_int(f, 1, 0, 1, 1, &v) == DPY_RECV_OK && v == 1);
    CHECK(dpy_fabric_late(f, 1, 2) == 1);   /* node 2's round 1, never taken */
    CHECK(dpy_fabric_late(f, 1, 2) == 1);   /* nothing more: the total so far */
    CHECK(recv_int(f, 1, 2, 2, 1, &v) == DPY_RECV_OK);   /* round 2 is still there */
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &a, sizeof a, err, sizeof err) == 0);   /* late */
    CHECK(dpy_fabric_send(f, 0, 1, 0, 3, &a, sizeof a, err, sizeof err) == 0);
    CHECK(recv_int(f, 1, 0, 3, 1, &v) == DPY_RECV_OK);   /* the recv discards round 1 as stale */
    CHECK(dpy_fabric_late(f, 1, 0) == 2);
    CHECK(dpy_fabric_late(f, 1, 3) == 3);   /* channel 3's round 2 */
    CHECK(dpy_fabric_late(f, 0, 3) == 0);   /* another node's count */
    dpy_fabric_close(f);

    /* a delayed message of a finished round is late too, though not yet due */
    f = open_mem(map, 3, 0, 0, 0, 5.0);
    v = 0;
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &a, sizeof a, err, sizeof err) == 0);
    CHECK(recv_int(f, 1, 0, 1, 0.01, &v) == DPY_RECV_TIMEOUT || v == 1);
    CHECK(dpy_fabric_late(f, 1, 2) == (v == 1 ? 0 : 1));
    dpy_fabric_close(f);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Emulated link latency: a message waits in the inbox for its link's latency; a range gives each
** directed link its own seeded draw, the same for every fabric of the run. */
static void test_latency(void) {
    int32_t map[3] = {0, 0, 0};
    dpy_fabric_opts o = {.run_id = 7, .nodes = 3, .max_payload = 1 << 20, .process = 0,
                         .processes = 1, .node_process = map, .fault_seed = 5, .latency = 0.2};
    dpy_fabric *f;
    char err[256];
    CHECK(dpy_fabric_open(&f, &o, err, sizeof err) == 0);
    CHECK(dpy_fabric_link_latency(f, 0, 1) == 0.2);
    int a = 4, v = 0;
    double t0 = now_s();
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &a, sizeof a, err, sizeof err) == 0);
    /* not yet: a wait that ends as asked times out; one the machine stalls past the latency may
    ** take it, never before */
    if (recv_int(f, 1, 0, 1, 0.05, &v) != DPY_RECV_OK)
        CHECK(recv_int(f, 1, 0, 1, 2.0, &v) == DPY_RECV_OK);
    CHECK(v == 4 && now_s() - t0 >= 0.2);
    dpy_fabric_close(f);

    o.latency = 0.01, o.latency_max = 0.05;
    CHECK(dpy_fabric_open(&f, &o, err, sizeof err) == 0);
    dpy_fabric *g;
    CHECK(dpy_fabric_open(&g, &o, err, sizeof err) == 0);
    double l01 = dpy_fabric_link_latency(f, 0, 1), l10 = dpy_fabric_link_latency(f, 1, 0);
    CHECK(l01 >= 0.01 && l01 < 0.05 && l10 >= 0.01 && l10 < 0.05 && l01 != l10);
    CHECK(dpy_fabric_link_latency(g, 0, 1) == l01);   /* another process of the run: the same */
    dpy_fabric_close(g);
    dpy_fabric_close(f);
}

/* Emulated link bandwidth: a message waits its bytes (payload and header) / the link's bandwidth
** more; a range gives each directed link its own seeded draw. */
static void test_bandwidth(void) {
    int32_t map[3] = {0, 0, 0};
    dpy_fabric_opts o = {.run_id = 7, .nodes = 3, .max_payload = 1 << 20, .process = 0, .processes = 1,
                         .node_process = map, .fault_seed = 5, .latency = 0.01, .bandwidth = 440};
    dpy_fabric *f;
    char err[256];
    CHECK(dpy_fabric_open(&f, &o, err, sizeof err) == 0);
    CHECK(dpy_fabric_link_bandwidth(f, 0, 1) == 440);
    int a = 4, v = 0;
    double t0 = now_s();
    CHECK(dpy_fabric_send(f, 0, 1, 0, 1, &a, sizeof a, err, sizeof err) == 0);   /* 44 bytes: 0.1 s */
    /* past the latency, not the transfer (as above: never before it) */
    if (recv_int(f, 1, 0, 1, 0.08, &v) != DPY_RECV_OK)
        CHECK(recv_int(f, 1, 0, 1, 2.0, &v) == DPY_RECV_OK);
    CHECK(v == 4 && now_s() - t0 >= 0.01 + 0.1);
    dpy_fabric_close(f);

    o.latency = 0, o.bandwidth = 0;
    CHECK(dpy_fabric_open(&f, &o, err, sizeof err) == 0);
    CHECK(dpy_fabric_link_bandwidth(f, 0, 1) == 0);   /* unlimited */
    dpy_fabric_close(f);

    o.bandwidth_min = 1e6, o.bandwidth = 2e6;
    CHECK(dpy_fabric_open(&f, &o, err, sizeof err) == 0);
    dpy_fabric *g;
    CHECK(dpy_fabric_open(&g, &o, err, sizeof err) == 0);
    double b01 = dpy_fabric_link_bandwidth(f, 0, 1), b10 = dpy_fabric_link_bandwidth(f, 1, 0);
    CHECK(b01 >= 1e6 && b01 < 2e6 && b10 >= 1e6 && b10 < 2e6 && b01 != b10);
    CHECK(dpy_fabric_link_bandwidth(g, 0, 1) == b01);   /* another process of the run: the same */
    dpy_fabric_close(g);
    dpy_fabric_close(f);
}

static atomic_int stop_flag;   /* as the host's interrupt flag */

typedef struct { dpy_fabric *f; int value, rc; } late_send;

/* checked by the main thread once joined: CHECK's counters are not shared between threads */
static void *send_later(void *arg) {
    late_send *l = arg;
    char err[256];
    usleep(200000);
    l->rc = dpy_fabric_send(l->f, 0, 1, 0, 1, &l->value, sizeof l->value, err, sizeof err);
    return NULL;
}

/* A wait whose deadline a timespec cannot hold (a timeout of 1e300 s, or inf) sleeps until its
** message comes: the cast of such a deadline came out negative, and the wait spun on the CPU. */
static void test_endless_timeout(void) {
    int32_t map[2] = {0, 0};
    double timeouts[] = {1e300, 1.0 / 0.0};
    for (int i = 0; i < 2; i++) {
        dpy_fabric *f = open_mem(map, 2, 0, 0, 0, 0);
        late_send l = {f, 42, -1};
        pthread_t t;
        pthread_create(&t, NULL, send_later, &l);
        struct timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        int v = 0;
        CHECK(recv_int(f, 1, 0, 1, timeouts[i], &v) == DPY_RECV_OK && v == 42);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        double cpu = (double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
        CHECK(cpu < 0.05);   /* asleep for the 0.2 s, not spinning */
        pthread_join(t, NULL);
        CHECK(l.rc == 0);
        dpy_fabric_close(f);
    }
}

static void *raise_stop(void *arg) {
    (void)arg;
    usleep(300000);
    atomic_store(&stop_flag, SIGTERM);
    return NULL;
}

/* A signal (the flag the host's handler sets) while a process waits for a peer that never comes:
** the open gives up within a second or so, saying why, not after connect_timeout. Process 1 waits
** in its connect loop (process 0 never listens), process 0 at the start barrier. */
static void test_stop_connecting(void) {
    int port = test_port(12);
    for (int me = 0; me <= 1; me++) {
        char a0[64], a1[64], err[256] = "";
        snprintf(a0, sizeof a0, "127.0.0.1:%d", port + 2 * me);
        snprintf(a1, sizeof a1, "127.0.0.1:%d", port + 2 * me + 1);
        const char *addrs[2] = {a0, a1};
        int32_t map[2] = {0, 1};
        uint8_t key[32] = {3};
        atomic_store(&stop_flag, 0);
        dpy_fabric_opts o = {.run_id = 7, .nodes = 2, .max_payload = 1 << 20, .process = me,
                             .processes = 2, .node_process = map, .addresses = addrs,
                             .connect_timeout = 30, .key = key, .stop = &stop_flag};
        pthread_t th;
        pthread_create(&th, NULL, raise_stop, NULL);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        dpy_fabric *f = NULL;
        int rc = dpy_fabric_open(&f, &o, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_join(th, NULL);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        CHECK(rc != 0);
        CHECK(secs < 3);
        CHECK_CONTAINS(err, "interrupted");
        if (rc == 0)
            dpy_fabric_close(f);
    }
}

int main(void) {
    test_mem();
    test_buffer();
    test_late();
    test_latency();
    test_bandwidth();
    test_faults();
    test_tcp();
    test_ring();
    test_ring_misused();
    test_stop_connecting();
    test_endless_timeout();
    return check_report("fabric");
}
