/* tcp_exchange.c: a model of SIZE bytes sent between two processes of this machine through the
** fabric as a run connects them (a Unix socket: framing, the I/O thread, the inbox; from 64 KiB the
** payload through the shared ring), the same without the ring (shared_memory = false), through the
** fabric on tcp alone (tcp_only: the tag too, as between machines), and the same encrypted, against
** a plain copy of the same bytes on a tcp socket (loopback) and on a Unix socket, measured the
** same way: COUNT ping-pongs of SIZE bytes out and 4 bytes back, after one untimed (the first pays
** for fresh buffers: its page faults). TRIES rounds of the six, alternated, each on new
** connections: this machine's speed drifts from one try to the next by up to 2x for all alike, so
** each try's ratios are taken within it and the medians reported. Then the tag and the encryption
** alone on one core (seal and open of SIZE bytes), as a share of the tcp fabric's exchange time.
** Prints per try "try K fabric_ms F socket_fabric_ms B tcp_fabric_ms T encrypted_ms E socket_ms S
** unix_socket_ms U", then those medians (per message), the medians of the tries' ratios
** "fabric_over_socket" (F/S), "fabric_over_unix_socket" (F/U), "socket_fabric_over_unix_socket"
** (B/U), "tcp_fabric_over_socket" (T/S), "encrypted_over_socket" (E/S),
** then "mac_MBps", "aead_MBps" (one core, seal + open), "mac_share", "aead_share".
** usage: bench_tcp SIZE_BYTES COUNT TRIES PORT */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "fabric.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void full_io(int fd, void *buf, size_t len, int writing) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
        if (n <= 0) {
            perror("socket");
            exit(1);
        }
        p += n;
        len -= (size_t)n;
    }
}

static const uint8_t key[DPY_KEY_BYTES] = {42};

static double fabric_run(size_t size, int count, int port, int proc, char *buf, int tcp_only, int encrypt,
                         int no_ring) {
    char a0[64], a1[64], err[256];
    snprintf(a0, sizeof a0, "127.0.0.1:%d", port);
    snprintf(a1, sizeof a1, "127.0.0.1:%d", port + 1);
    const char *addrs[2] = {a0, a1};
    int32_t map[2] = {0, 1};
    dpy_fabric_opts o = {.run_id = 5, .nodes = 2, .max_payload = (uint32_t)size + 16, .process = proc,
                         .processes = 2, .node_process = map, .addresses = addrs,
                         .connect_timeout = 20, .key = key, .encrypt = encrypt, .tcp_only = tcp_only,
                         .no_ring = no_ring};
    dpy_fabric *f;
    if (dpy_fabric_open(&f, &o, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    const char *link = dpy_fabric_link(f, 1 - proc), *want = tcp_only ? "tcp" : "unix";
    if (!link || strcmp(link, want) != 0) {   /* measured under its own name, or not at all */
        fprintf(stderr, "bench_tcp: connected by %s, not %s\n", link ? link : "nothing", want);
        exit(1);
    }
    uint32_t me = (uint32_t)proc, other = 1 - me;
    double t0 = 0;
    for (int i = -1; i < count; i++) {   /* i = -1: untimed */
        if (i == 0)
            t0 = now();
        void *data;
        size_t len;
        uint32_t round = (uint32_t)(i + 1);
        if (proc == 0) {
            dpy_fabric_send(f, me, other, 0, round, buf, size, err, sizeof err);
            if (dpy_fabric_recv(f, me, other, 0, round, 30, &data, &len, NULL) != DPY_RECV_OK)
                exit(1);
        } else {
            if (dpy_fabric_recv(f, me, other, 0, round, 30, &data, &len, NULL) != DPY_RECV_OK)
                exit(1);
            dpy_fabric_send(f, me, other, 0, round, buf, 4, err, sizeof err);
        }
        dpy_fabric_release(data);
    }
    double secs = now() - t0;
    dpy_fabric_close(f);
    return secs;
}

static int parent_pid;   /* the Unix socket names: both processes know it */

/* A plain socket: tcp on loopback at port, or (unix_socket) a Unix socket named after it. */
static double socket_run(size_t size, int count, int port, int proc, char *buf, int unix_socket) {
    int one = 1, fd;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int n = snprintf(sun.sun_path + 1, sizeof sun.sun_path - 1, "bench-tcp-%d-%d", parent_pid, port);
    struct sockaddr *sa = unix_socket ? (struct sockaddr *)&sun : (struct sockaddr *)&sin;
    socklen_t salen = unix_socket ? (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n) : sizeof sin;
    int family = unix_socket ? AF_UNIX : AF_INET;
    if (proc == 0) {
        int l = socket(family, SOCK_STREAM, 0);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, sa, salen) != 0 || listen(l, 1) != 0) {
            perror("listen");
            exit(1);
        }
        fd = accept(l, NULL, NULL);
        close(l);
    } else {
        fd = socket(family, SOCK_STREAM, 0);
        while (connect(fd, sa, salen) != 0)
            usleep(20000);
    }
    if (!unix_socket)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char *in = malloc(size);
    double t0 = 0;
    for (int i = -1; i < count; i++) {   /* i = -1: untimed */
        if (i == 0)
            t0 = now();
        if (proc == 0) {
            full_io(fd, buf, size, 1);
            full_io(fd, in, 4, 0);
        } else {
            full_io(fd, in, size, 0);   /* the received copy the fabric also makes */
            full_io(fd, buf, 4, 1);
        }
    }
    double secs = now() - t0;
    free(in);
    close(fd);
    return secs;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[(n - 1) / 2];
}

int main(int argc, char **argv) {
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : 1 << 20;
    int count = argc > 2 ? atoi(argv[2]) : 50;
    int tries = argc > 3 ? atoi(argv[3]) : 5;
    int port = argc > 4 ? atoi(argv[4]) : 41000;
    if (tries < 1 || tries > 64 || count < 1 || port < 1024 || port + 10 * tries > 65535) {
        fprintf(stderr, "usage: bench_tcp SIZE_BYTES COUNT TRIES(1-64) PORT (TRIES x 10 ports from PORT)\n");
        return 2;
    }
    alarm(600);   /* a side whose partner failed would wait on its socket for ever */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);   /* the allocator settings of dpy-lua's main() */
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    char *buf = malloc(size);
    for (size_t i = 0; i < size; i++)
        buf[i] = (char)i;
    parent_pid = (int)getpid();
    pid_t child = fork();
    int proc = child == 0 ? 1 : 0;
    double fab[64], tcp[64], enc[64], sock[64], usock[64], fab_r[64], fab_ur[64], tcp_r[64], enc_r[64];
    double bare[64], bare_ur[64];
    for (int k = 0; k < tries; k++) {   /* each part on new connections: ports 10 apart */
        int at = port + 10 * k;
        fab[k] = fabric_run(size, count, at, proc, buf, 0, 0, 0) / count * 1e3;
        bare[k] = fabric_run(size, count, at + 8, proc, buf, 0, 0, 1) / count * 1e3;
        tcp[k] = fabric_run(size, count, at + 2, proc, buf, 1, 0, 0) / count * 1e3;
        enc[k] = fabric_run(size, count, at + 4, proc, buf, 1, 1, 0) / count * 1e3;
        sock[k] = socket_run(size, count, at + 6, proc, buf, 0) / count * 1e3;
        usock[k] = socket_run(size, count, at + 7, proc, buf, 1) / count * 1e3;
        fab_r[k] = fab[k] / sock[k];
        fab_ur[k] = fab[k] / usock[k];
        bare_ur[k] = bare[k] / usock[k];
        tcp_r[k] = tcp[k] / sock[k];
        enc_r[k] = enc[k] / sock[k];
        if (proc == 0)
            printf("try %d fabric_ms %.3f socket_fabric_ms %.3f tcp_fabric_ms %.3f encrypted_ms %.3f socket_ms %.3f "
                   "unix_socket_ms %.3f\n", k, fab[k], bare[k], tcp[k], enc[k], sock[k], usock[k]);
    }
    if (child == 0)
        return 0;
    int status;
    waitpid(child, &status, 0);
    /* the per-packet work alone: what sender and receiver each do for one message */
    char err[256];
    dpy_auth_init(err, sizeof err);
    double per[2];
    uint8_t hdr[40] = {0}, trailer[DPY_TRAILER_BYTES];
    for (int e = 0; e <= 1; e++) {
        dpy_auth_dir tx = {{1}, 0}, rx = {{1}, 0};
        double t0 = now();
        for (int i = 0; i < count; i++) {
            dpy_auth_seal(&tx, e, hdr, (uint8_t *)buf, (uint8_t *)buf, size, trailer);
            if (dpy_auth_open(&rx, e, hdr, (uint8_t *)buf, size, trailer) != 0)
                return 1;
        }
        per[e] = (now() - t0) / count;
    }
    double t = median(tcp, tries), e = median(enc, tries);
    printf("fabric_ms %.3f\nsocket_fabric_ms %.3f\ntcp_fabric_ms %.3f\nencrypted_ms %.3f\nsocket_ms %.3f\n"
           "unix_socket_ms %.3f\n", median(fab, tries), median(bare, tries), t, e, median(sock, tries),
           median(usock, tries));
    printf("fabric_over_socket %.3f\nfabric_over_unix_socket %.3f\nsocket_fabric_over_unix_socket %.3f\n"
           "tcp_fabric_over_socket %.3f\nencrypted_over_socket %.3f\n", median(fab_r, tries),
           median(fab_ur, tries), median(bare_ur, tries), median(tcp_r, tries), median(enc_r, tries));
    printf("mac_MBps %.0f\naead_MBps %.0f\n", 2 * size / per[0] / 1e6, 2 * size / per[1] / 1e6);
    printf("mac_share %.3f\naead_share %.3f\n", per[0] * 1e3 / t, per[1] * 1e3 / e);
    return 0;
}
