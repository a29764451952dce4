/* test_wire_auth.c: attacks on the tcp path from raw sockets on 127.0.0.1: a HELLO claiming a
** connected process (then a close), a forged HELLO and data packet, 1,100 idle connections; a
** man in the middle that flips a bit or replays a packet; a process with another key; the key
** file; sealing and opening packets. Between processes of one machine: the Unix socket, a hello
** on the wrong kind of socket, and a relay on the Unix socket that another process holds. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/stat.h>

#include "auth.h"
#include "check.h"
#include "fabric.h"
#include "wire.h"

static uint8_t key[DPY_KEY_BYTES] = {7, 7, 7}, other_key[DPY_KEY_BYTES] = {8};

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

static int port_base;
static char addr0[64], addr1[64];
static const char *addrs[2] = {addr0, addr1};
static int32_t map[2] = {0, 1};

static char proxy_addr[64];
static const char *via_proxy[2] = {proxy_addr, addr1};

/* Two fabrics (process 0: node 0, process 1: node 1) on 127.0.0.1; process 1 reaches process 0
** through the proxy when proxied; key1: process 1's key; tcp_only: no Unix socket. */
static int tcp_only;

static int start_pair(opener p[2], int encrypt, int proxied, const uint8_t *key1) {
    snprintf(addr0, sizeof addr0, "127.0.0.1:%d", port_base);
    snprintf(addr1, sizeof addr1, "127.0.0.1:%d", port_base + 1);
    snprintf(proxy_addr, sizeof proxy_addr, "127.0.0.1:%d", port_base + 2);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].o = (dpy_fabric_opts){.run_id = 9, .nodes = 2, .max_payload = 1 << 20, .process = i,
                                   .processes = 2, .node_process = map,
                                   .addresses = i == 1 && proxied ? via_proxy : addrs,
                                   .connect_timeout = 5, .key = i == 1 ? key1 : key,
                                   .encrypt = encrypt, .max_pending = 16, .hello_timeout = 1,
                                   .tcp_only = tcp_only};
        pthread_create(&th[i], NULL, open_thread, &p[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    return 0;
}

static int open_pair(opener p[2]) {
    start_pair(p, 0, 0, key);
    CHECK(p[0].rc == 0 && p[1].rc == 0);
    if (p[0].rc || p[1].rc) {
        fprintf(stderr, "%s / %s\n", p[0].err, p[1].err);
        return -1;
    }
    return 0;
}

static void close_pair(opener p[2]) {
    dpy_fabric_close(p[1].f);
    dpy_fabric_close(p[0].f);
    port_base += 4;
}

static int raw_connect(int port) {
    int g = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(g, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(g);
        return -1;
    }
    return g;
}

static void raw_packet(int g, uint16_t channel, uint32_t sender, uint32_t receiver, uint32_t round,
                       const void *data, uint32_t len) {
    dpy_header h = {.channel = channel, .run_id = 9, .sender = sender, .receiver = receiver,
                    .round = round, .length = len};
    uint8_t hdr[DPY_WIRE_HEADER];
    dpy_wire_encode(hdr, &h);
    ssize_t w = write(g, hdr, sizeof hdr);   /* the other end may have closed: no check */
    if (len && w == (ssize_t)sizeof hdr)
        w = write(g, data, len);
    (void)w;
}

static int exchange(opener p[2], uint32_t round, int value) {
    char err[256];
    int v = -1;
    if (dpy_fabric_send(p[1].f, 1, 0, 0, round, &value, sizeof value, err, sizeof err) != 0)
        return -1;
    void *data;
    size_t len;
    if (dpy_fabric_recv(p[0].f, 0, 1, 0, round, 5, &data, &len, NULL) != DPY_RECV_OK)
        return -1;
    memcpy(&v, data, sizeof v);
    dpy_fabric_release(data);
    return v == value ? 0 : -1;
}

static int wait_rejected(dpy_fabric *f, uint64_t n, char *last, size_t len) {
    for (int i = 0; i < 200 && dpy_fabric_rejected(f, last, len) < n; i++)
        usleep(10000);
    return dpy_fabric_rejected(f, last, len) >= n;
}

static uint64_t rejected_as(dpy_fabric *f, dpy_reject_kind kind) {
    uint64_t by[DPY_REJECT_KINDS];
    dpy_fabric_rejected_by(f, by);
    return by[kind];
}

/* A HELLO claiming process 1 (connected to process 0), then a close: refused and logged, process
** 1 stays connected and its traffic flows. Also on process 1 (which accepts no one): a HELLO
** claiming process 0. */
static void test_hello_then_close(void) {
    opener p[2];
    if (open_pair(p) != 0)
        return;
    char last[320];
    uint8_t nonce[DPY_NONCE_BYTES] = {0};
    int g = raw_connect(port_base);
    raw_packet(g, DPY_CHANNEL_HELLO, 1, 0, 0, nonce, sizeof nonce);
    CHECK(wait_rejected(p[0].f, 1, last, sizeof last));
    CHECK_CONTAINS(last, "a second hello for process 1, which is connected: refused");
    CHECK(rejected_as(p[0].f, DPY_REJECT_DUPLICATE) == 1);
    close(g);
    g = raw_connect(port_base + 1);
    raw_packet(g, DPY_CHANNEL_HELLO, 0, 1, 0, nonce, sizeof nonce);
    CHECK(wait_rejected(p[1].f, 1, last, sizeof last));
    close(g);
    usleep(100000);
    CHECK(dpy_fabric_alive(p[0].f, 1) && dpy_fabric_alive(p[1].f, 0));
    CHECK(exchange(p, 1, 11) == 0);
    close_pair(p);
}

/* A raw HELLO from a claimed process 2 of 3 without the key: its proof is refused, and its
** data packet (a valid checksum) never delivered, nor one sent with no handshake at all. */
static void test_forged_data(void) {
    opener p[2];
    if (open_pair(p) != 0)
        return;
    char last[320];
    float nan = 0.0f / 0.0f;
    int g = raw_connect(port_base);
    raw_packet(g, 0, 1, 0, 1, &nan, sizeof nan);   /* data, no handshake */
    CHECK(wait_rejected(p[0].f, 1, last, sizeof last));
    CHECK_CONTAINS(last, "data before the handshake");
    close(g);
    /* the handshake with a made-up proof: answered with a challenge, then refused */
    dpy_fabric_close(p[1].f);   /* process 1 gone, so its hello is no duplicate */
    usleep(100000);
    g = raw_connect(port_base);
    uint8_t nonce[DPY_NONCE_BYTES] = {1}, reply[DPY_WIRE_HEADER + 64], proof[DPY_PROOF_BYTES] = {2};
    raw_packet(g, DPY_CHANNEL_HELLO, 1, 0, 0, nonce, sizeof nonce);
    size_t got = 0;
    while (got < sizeof reply) {
        ssize_t n = read(g, reply + got, sizeof reply - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    CHECK(got == sizeof reply);
    raw_packet(g, DPY_CHANNEL_PROOF, 1, 0, 0, proof, sizeof proof);
    CHECK(wait_rejected(p[0].f, 2, last, sizeof last));
    CHECK_CONTAINS(last, "failed the key check");
    raw_packet(g, 0, 1, 0, 1, &nan, sizeof nan);
    void *data;
    size_t len;
    CHECK(dpy_fabric_recv(p[0].f, 0, 1, 0, 1, 0.3, &data, &len, NULL) != DPY_RECV_OK);
    CHECK(rejected_as(p[0].f, DPY_REJECT_HELLO) == 2);
    close(g);
    dpy_fabric_close(p[0].f);
    port_base += 4;
}

/* 1,100 idle connections from another process: refused or closed, the run goes on. */
static void test_idle_flood(void) {
    opener p[2];
    if (open_pair(p) != 0)
        return;
    int go[2];
    CHECK(pipe(go) == 0);
    int before = check_open_fds();
    pid_t child = fork();
    if (child == 0) {
        int held = 0;
        for (int i = 0; i < 1100; i++)
            if (raw_connect(port_base) >= 0)
                held++;
        char c = (char)(held == 1100);
        ssize_t w = write(go[1], &c, 1);
        (void)w;
        pause();
        _exit(0);
    }
    char c = 0;
    CHECK(read(go[0], &c, 1) == 1 && c == 1);
    usleep(300000);
    CHECK(check_open_fds() < before + 200);   /* a cap on connections, not one fd per attacker */
    CHECK(exchange(p, 1, 13) == 0);
    CHECK(dpy_fabric_alive(p[0].f, 1) && dpy_fabric_alive(p[1].f, 0));
    for (int i = 0; i < 100 && rejected_as(p[0].f, DPY_REJECT_CAP) < 1100 - 16; i++)
        usleep(10000);
    CHECK(rejected_as(p[0].f, DPY_REJECT_CAP) + rejected_as(p[0].f, DPY_REJECT_IDLE) >= 1100 - 16);
    sleep(2);   /* past hello_timeout: the ones left are closed */
    CHECK(check_open_fds() <= before + 1);
    CHECK(rejected_as(p[0].f, DPY_REJECT_IDLE) >= 1);
    CHECK(exchange(p, 2, 14) == 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(go[0]);
    close(go[1]);
    close_pair(p);
}

/* {==== a man in the middle ====} */

/* Relays process 1's connection to process 0, frame by frame towards process 0: mode 1 flips a
** bit of the first data packet's payload, mode 2 sends the first data packet twice. */
typedef struct {
    int mode, listen_fd;
} proxy;

static int full(int fd, uint8_t *buf, size_t len, int writing) {
    while (len > 0) {
        ssize_t n = writing ? write(fd, buf, len) : read(fd, buf, len);
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static void *back_thread(void *arg) {   /* process 0 -> process 1, as it is */
    int *fds = arg;
    uint8_t buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0)
        if (full(fds[1], buf, (size_t)n, 1) != 0)
            break;
    shutdown(fds[1], SHUT_WR);
    return NULL;
}

static void *proxy_thread(void *arg) {
    proxy *px = arg;
    int in = accept(px->listen_fd, NULL, NULL), out;
    if (in < 0)
        return NULL;   /* no one came */
    for (int i = 0; (out = raw_connect(port_base)) < 0 && i < 200; i++)   /* process 0 starts */
        usleep(10000);
    int back[2] = {out, in};
    pthread_t bt;
    pthread_create(&bt, NULL, back_thread, back);
    static uint8_t frame[1 << 16];
    int data_frames = 0;
    for (;;) {
        if (full(in, frame, DPY_WIRE_HEADER, 0) != 0)
            break;
        uint32_t len = frame[28] | frame[29] << 8 | (uint32_t)frame[30] << 16;
        uint16_t channel = (uint16_t)(frame[6] | frame[7] << 8);
        size_t rest = len + (dpy_wire_handshake(channel) ? 0 : DPY_TRAILER_BYTES);
        if (DPY_WIRE_HEADER + rest > sizeof frame || full(in, frame + DPY_WIRE_HEADER, rest, 0) != 0)
            break;
        size_t total = DPY_WIRE_HEADER + rest;
        int first = !dpy_wire_handshake(channel) && data_frames++ == 0;
        if (first && px->mode == 1)
            frame[DPY_WIRE_HEADER] ^= 0x01;
        if (full(out, frame, total, 1) != 0)
            break;
        if (first && px->mode == 2 && full(out, frame, total, 1) != 0)
            break;
    }
    shutdown(out, SHUT_WR);
    pthread_join(bt, NULL);
    close(in);
    close(out);
    return NULL;
}

static int listen_on(int port) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(bind(l, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(l, 4) == 0);
    return l;
}

/* The proxy on port_base + 2, in a thread of its own. */
static pthread_t start_proxy(proxy *px, int mode) {
    *px = (proxy){.mode = mode, .listen_fd = listen_on(port_base + 2)};
    pthread_t th;
    pthread_create(&th, NULL, proxy_thread, px);
    return th;
}

/* Waits for the proxy and closes its socket (one that no one reached leaves its accept). */
static void stop_proxy(proxy *px, pthread_t th) {
    shutdown(px->listen_fd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(px->listen_fd);
}

/* Closes the fabrics of a pair that started, process 1's first. */
static void close_started(opener p[2]) {
    if (p[1].rc == 0)
        dpy_fabric_close(p[1].f);
    if (p[0].rc == 0)
        dpy_fabric_close(p[0].f);
}

/* mode 1, encrypted: the flipped bit is rejected, never delivered; mode 2: the replay refused.
** Either way the next round arrives and both processes stay alive. */
static void test_mitm(int mode, int encrypt) {
    proxy px;
    pthread_t th = start_proxy(&px, mode);
    opener p[2];
    start_pair(p, encrypt, 1, key);
    CHECK(p[0].rc == 0 && p[1].rc == 0);
    if (p[0].rc || p[1].rc)
        fprintf(stderr, "%s / %s\n", p[0].err, p[1].err);
    if (p[0].rc == 0 && p[1].rc == 0) {
        char err[256], last[320];
        float v[4] = {1, 2, 3, 4};
        CHECK(dpy_fabric_send(p[1].f, 1, 0, 0, 1, v, sizeof v, err, sizeof err) == 0);
        void *data;
        size_t len;
        dpy_recv_status s = dpy_fabric_recv(p[0].f, 0, 1, 0, 1, mode == 1 ? 0.3 : 5, &data, &len, NULL);
        if (mode == 1) {
            CHECK(s == DPY_RECV_TIMEOUT);
        } else {
            CHECK(s == DPY_RECV_OK && len == sizeof v && memcmp(data, v, len) == 0);
            dpy_fabric_release(data);
        }
        CHECK(wait_rejected(p[0].f, 1, last, sizeof last));
        CHECK_CONTAINS(last, mode == 1 ? "a forged or altered packet" : "a replayed packet");
        CHECK(rejected_as(p[0].f, DPY_REJECT_AUTH) == 1);
        CHECK(dpy_fabric_recv(p[0].f, 0, 1, 0, 1, 0.2, &data, &len, NULL) == DPY_RECV_TIMEOUT);
        CHECK(exchange(p, 2, 21) == 0);
        CHECK(dpy_fabric_alive(p[0].f, 1) && dpy_fabric_alive(p[1].f, 0));
    }
    close_started(p);
    stop_proxy(&px, th);
    port_base += 4;
}

/* Encrypted payloads travel as ciphertext and arrive as the plaintext (by tcp: a Unix socket's
** packets are neither tagged nor encrypted). */
static void test_encrypted(void) {
    opener p[2];
    tcp_only = 1;
    start_pair(p, 1, 0, key);
    tcp_only = 0;
    CHECK(p[0].rc == 0 && p[1].rc == 0);
    if (p[0].rc || p[1].rc)
        return;
    CHECK(strcmp(dpy_fabric_link(p[1].f, 0), "tcp") == 0);
    CHECK(exchange(p, 1, 31) == 0 && exchange(p, 2, 32) == 0);
    close_pair(p);
}

/* {==== between processes of one machine: the Unix socket ====} */

/* Process p's Unix socket address as process 1 names it, at address addr (auth.h). */
static socklen_t unix_address(int p, const char *addr, struct sockaddr_un *sa) {
    char name[DPY_UNIX_NAME_BYTES];
    dpy_auth_unix_name(key, 9, p, addr, name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, name, DPY_UNIX_NAME_BYTES - 1);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + DPY_UNIX_NAME_BYTES);
}

/* Two processes of one machine connect on the Unix socket and exchange there (encrypted or
** not: the kernel alone carries it); with tcp_only, by tcp. */
static void test_unix_link(void) {
    for (int only = 0; only <= 1; only++) {
        for (int encrypt = 0; encrypt <= 1; encrypt++) {
            opener p[2];
            tcp_only = only;
            start_pair(p, encrypt, 0, key);
            tcp_only = 0;
            CHECK(p[0].rc == 0 && p[1].rc == 0);
            if (p[0].rc || p[1].rc)
                return;
            const char *want = only ? "tcp" : "unix";
            CHECK(strcmp(dpy_fabric_link(p[0].f, 1), want) == 0 && strcmp(dpy_fabric_link(p[1].f, 0), want) == 0);
            CHECK(dpy_fabric_link(p[0].f, 0) == NULL);
            float big[70000];   /* a packet of several socket reads */
            for (int i = 0; i < 70000; i++)
                big[i] = (float)i;
            char err[256];
            void *data;
            size_t len;
            CHECK(dpy_fabric_send(p[0].f, 0, 1, 0, 1, big, sizeof big, err, sizeof err) == 0);
            CHECK(dpy_fabric_recv(p[1].f, 1, 0, 0, 1, 5, &data, &len, NULL) == DPY_RECV_OK &&
                  len == sizeof big && memcmp(data, big, len) == 0);
            if (len == sizeof big)
                dpy_fabric_release(data);
            CHECK(exchange(p, 2, 41) == 0 && exchange(p, 3, 42) == 0);
            CHECK(dpy_fabric_rejected(p[0].f, NULL, 0) == 0 && dpy_fabric_rejected(p[1].f, NULL, 0) == 0);
            close_pair(p);
        }
    }
}

/* A hello marked for a Unix socket that comes by tcp, and one marked for tcp that comes on the
** Unix socket: both refused, naming it (the proofs would differ too). */
static void test_unix_flag(void) {
    opener p[2];
    if (open_pair(p) != 0)
        return;
    dpy_fabric_close(p[1].f);   /* process 1 gone, so its hello is no duplicate */
    usleep(100000);
    char last[320];
    uint8_t nonce[DPY_NONCE_BYTES] = {1}, hdr[DPY_WIRE_HEADER];
    dpy_header h = {.channel = DPY_CHANNEL_HELLO, .run_id = 9, .sender = 1, .receiver = 0,
                    .length = sizeof nonce, .flags = DPY_FLAG_UNIX};
    dpy_wire_encode(hdr, &h);
    int g = raw_connect(port_base);
    CHECK(write(g, hdr, sizeof hdr) == sizeof hdr && write(g, nonce, sizeof nonce) == sizeof nonce);
    CHECK(wait_rejected(p[0].f, 1, last, sizeof last));
    CHECK_CONTAINS(last, "process 1's hello is marked for a Unix socket but came by tcp");
    close(g);
    struct sockaddr_un sa;
    socklen_t salen = unix_address(0, addr0, &sa);
    g = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(connect(g, (struct sockaddr *)&sa, salen) == 0);
    raw_packet(g, DPY_CHANNEL_HELLO, 1, 0, 0, nonce, sizeof nonce);
    CHECK(wait_rejected(p[0].f, 2, last, sizeof last));
    CHECK_CONTAINS(last, "process 1's hello is marked for tcp but came on a Unix socket");
    CHECK(rejected_as(p[0].f, DPY_REJECT_HELLO) == 2);
    close(g);
    dpy_fabric_close(p[0].f);
    port_base += 4;
}

/* A socket that holds process 0's Unix socket name before it starts and never answers (one that
** knows the key; here the test): process 1 gives up on it within half the hello timeout, while
** process 0 still holds its tcp connection, and connects by tcp. */
static void test_unix_squatter(void) {
    snprintf(addr0, sizeof addr0, "127.0.0.1:%d", port_base);
    struct sockaddr_un sa;
    socklen_t salen = unix_address(0, addr0, &sa);
    int squat = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(bind(squat, (struct sockaddr *)&sa, salen) == 0 && listen(squat, 4) == 0);
    opener p[2];
    start_pair(p, 0, 0, key);
    CHECK(p[0].rc == 0 && p[1].rc == 0);
    if (p[0].rc == 0 && p[1].rc == 0) {
        CHECK(strcmp(dpy_fabric_link(p[1].f, 0), "tcp") == 0 && strcmp(dpy_fabric_link(p[0].f, 1), "tcp") == 0);
        CHECK(exchange(p, 1, 61) == 0);
        CHECK(dpy_fabric_alive(p[0].f, 1) && dpy_fabric_alive(p[1].f, 0));
    } else {
        fprintf(stderr, "%s / %s\n", p[0].err, p[1].err);
    }
    close_started(p);
    close(squat);
    port_base += 4;
}

/* Relays each connection on the Unix socket at from to the one at to, as it is, until either
** end closes; counts the connections it relayed on its pipe. */
static void unix_relay(const struct sockaddr_un *from, socklen_t fromlen, const struct sockaddr_un *to,
                       socklen_t tolen, int ready) {
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    char ok = bind(l, (const struct sockaddr *)from, fromlen) == 0 && listen(l, 4) == 0;
    if (write(ready, &ok, 1) != 1 || !ok)
        _exit(1);
    for (char count = 1;; count++) {
        int in = accept(l, NULL, NULL), out = socket(AF_UNIX, SOCK_STREAM, 0);
        if (in < 0 || connect(out, (const struct sockaddr *)to, tolen) != 0)
            _exit(1);
        if (write(ready, &count, 1) != 1)
            _exit(1);
        struct pollfd pf[2] = {{.fd = in, .events = POLLIN}, {.fd = out, .events = POLLIN}};
        uint8_t buf[4096];
        for (int open = 1; open && poll(pf, 2, -1) > 0;) {
            for (int i = 0; i < 2 && open; i++) {
                ssize_t n = pf[i].revents ? read(pf[i].fd, buf, sizeof buf) : 0;
                open = !pf[i].revents || (n > 0 && full(pf[1 - i].fd, buf, (size_t)n, 1) == 0);
            }
        }
        close(in);
        close(out);
    }
}

/* Process 1 is told that process 0 is at the tcp proxy's address, and another process holds the
** Unix socket of that name (one that knows the key; here the test) and relays it to process 0's
** own. Each end then sees the relay's process id where the other's should be, the proofs fail,
** and the connection stays on tcp, through the proxy, where every packet is tagged. */
static void test_unix_relay(void) {
    struct sockaddr_un from, to;
    snprintf(proxy_addr, sizeof proxy_addr, "127.0.0.1:%d", port_base + 2);
    snprintf(addr0, sizeof addr0, "127.0.0.1:%d", port_base);
    socklen_t fromlen = unix_address(0, proxy_addr, &from), tolen = unix_address(0, addr0, &to);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t relay = fork();
    if (relay == 0)
        unix_relay(&from, fromlen, &to, tolen, ready[1]);
    char got = 0;
    CHECK(read(ready[0], &got, 1) == 1 && got == 1);
    proxy px;
    pthread_t th = start_proxy(&px, 0);
    opener p[2];
    start_pair(p, 0, 1, key);
    CHECK(p[0].rc == 0 && p[1].rc == 0);
    CHECK(read(ready[0], &got, 1) == 1 && got == 1);   /* process 1 tried the relay */
    if (p[0].rc == 0 && p[1].rc == 0) {
        CHECK(strcmp(dpy_fabric_link(p[1].f, 0), "tcp") == 0 && strcmp(dpy_fabric_link(p[0].f, 1), "tcp") == 0);
        CHECK(exchange(p, 1, 51) == 0);
    }
    close_started(p);
    stop_proxy(&px, th);
    kill(relay, SIGKILL);
    waitpid(relay, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    port_base += 4;
}

/* A process with another key: the start fails, naming the key check, in both directions. */
static void test_wrong_key(void) {
    opener p[2];
    start_pair(p, 0, 0, other_key);
    CHECK(p[0].rc != 0 && p[1].rc != 0);
    CHECK_CONTAINS(p[1].err, "failed the key check");
    CHECK_CONTAINS(p[0].err, "start barrier");
    if (p[0].rc == 0)
        dpy_fabric_close(p[0].f);
    if (p[1].rc == 0)
        dpy_fabric_close(p[1].f);
    port_base += 4;
    start_pair(p, 0, 0, NULL);   /* no key at all */
    CHECK(p[1].rc != 0);
    CHECK_CONTAINS(p[1].err, "need the run key");
    if (p[0].rc == 0)
        dpy_fabric_close(p[0].f);
    port_base += 4;
}

/* {==== the key file, and packets ====} */

static void test_key_file(void) {
    char path[64], err[256];
    snprintf(path, sizeof path, "/tmp/dpy-test-key-%d", (int)getpid());
    uint8_t k1[DPY_KEY_BYTES], k2[DPY_KEY_BYTES];
    umask(0);   /* even so: 0600 */
    CHECK(dpy_key_create(path, err, sizeof err) == 0);
    umask(022);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size == DPY_KEY_BYTES);
    CHECK(dpy_key_load(path, k1, err, sizeof err) == 0);
    CHECK(dpy_key_create(path, err, sizeof err) == 0);   /* a rerun: a fresh key */
    CHECK(dpy_key_load(path, k2, err, sizeof err) == 0);
    CHECK(memcmp(k1, k2, sizeof k1) != 0);
    chmod(path, 0644);
    CHECK(dpy_key_load(path, k1, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "has mode 644: only its owner may read it");
    chmod(path, 0600);
    truncate(path, 5);
    CHECK(dpy_key_load(path, k1, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "holds 5 bytes, not 32");
    unlink(path);
    CHECK(dpy_key_load(path, k1, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "No such file");
}

static void test_seal(void) {
    char err[256];
    CHECK(dpy_auth_init(err, sizeof err) == 0);
    dpy_handshake hs = {.run_id = 1, .connector = 1, .acceptor = 0};
    dpy_auth_dir tx, rx, tx2, rx2;
    dpy_auth_session(key, &hs, &tx, &rx2);
    dpy_auth_session(key, &hs, &rx, &tx2);   /* the other end's view: the same two keys */
    CHECK(memcmp(tx.key, rx.key, DPY_KEY_BYTES) == 0 && memcmp(tx.key, tx2.key, DPY_KEY_BYTES) != 0);
    uint8_t hdr[DPY_WIRE_HEADER] = {1, 2, 3}, tr[DPY_TRAILER_BYTES], tr2[DPY_TRAILER_BYTES];
    for (int enc = 0; enc <= 1; enc++) {
        uint8_t plain[100], buf[100];
        for (int i = 0; i < 100; i++)
            plain[i] = (uint8_t)i;
        dpy_auth_seal(&tx, enc, hdr, plain, buf, sizeof plain, tr);
        uint8_t *sent = enc ? buf : plain;
        CHECK(!enc || memcmp(buf, plain, sizeof plain) != 0);   /* ciphertext */
        uint8_t copy[100];
        memcpy(copy, sent, sizeof copy);
        CHECK(dpy_auth_open(&rx, enc, hdr, copy, sizeof copy, tr) == DPY_AUTH_OK);
        CHECK(memcmp(copy, plain, sizeof plain) == 0);
        memcpy(copy, sent, sizeof copy);   /* the same packet again */
        CHECK(dpy_auth_open(&rx, enc, hdr, copy, sizeof copy, tr) == DPY_AUTH_REPLAYED);
        dpy_auth_seal(&tx, enc, hdr, plain, buf, sizeof plain, tr2);
        memcpy(copy, sent, sizeof copy);
        copy[50] ^= 0x10;   /* one bit */
        CHECK(dpy_auth_open(&rx, enc, hdr, copy, sizeof copy, tr2) == DPY_AUTH_FORGED);
        memcpy(copy, sent, sizeof copy);
        hdr[24] ^= 1;       /* another round */
        CHECK(dpy_auth_open(&rx, enc, hdr, copy, sizeof copy, tr2) == DPY_AUTH_FORGED);
        hdr[24] ^= 1;
        tr2[1] ^= 1;        /* another sequence number */
        CHECK(dpy_auth_open(&rx, enc, hdr, copy, sizeof copy, tr2) == DPY_AUTH_FORGED);
        tr2[1] ^= 1;
        CHECK(dpy_auth_open(&rx2, enc, hdr, copy, sizeof copy, tr2) == DPY_AUTH_FORGED);   /* other key */
        memcpy(copy, sent, sizeof copy);   /* a failed decryption leaves zeros */
        CHECK(dpy_auth_open(&rx, enc, hdr, copy, sizeof copy, tr2) == DPY_AUTH_OK);
        CHECK(memcmp(copy, plain, sizeof plain) == 0);
    }
}

/* Sealing and opening a piece at a time give what libsodium's one-shot AEAD gives (encrypt: the
** same ciphertext and tag, RFC 8439), whatever the pieces; a later number (packets dropped
** between) is still checked; a replay and an altered byte are refused. */
static void test_pieces(void) {
    enum { N = 3 * 1000 + 7 };
    static uint8_t plain[N], sealed[N], ref[N], got[N];
    uint8_t hdr[DPY_WIRE_HEADER] = {9, 8, 7}, tr[DPY_TRAILER_BYTES], tag[16];
    for (int i = 0; i < N; i++)
        plain[i] = (uint8_t)(i * 7 + 1);
    for (int enc = 0; enc <= 1; enc++) {
        dpy_auth_dir tx = {{4}, 0}, rx = {{4}, 0};
        dpy_auth_stream st = {0};   /* one stream for every packet, as a connection keeps it */
        for (int trial = 0; trial < 6; trial++) {
            size_t piece = 64 * (size_t)(1 + trial * 5);   /* the sender's pieces */
            if (trial == 3)
                tx.seq += 2;   /* two packets lost on the way */
            uint64_t seq = tx.seq;
            CHECK(dpy_auth_begin(&tx, enc, hdr, N, &st) == 0);
            for (size_t off = 0; off < N; off += piece) {
                size_t n = N - off < piece ? N - off : piece;
                dpy_auth_seal_piece(&st, plain + off, sealed + off, n);
            }
            dpy_auth_seal_end(&tx, &st, tr);
            CHECK(tx.seq == seq + 1);
            if (enc) {   /* the reference: one call to libsodium's ChaCha20-Poly1305 (IETF) */
                uint8_t n12[12] = {0};
                for (int b = 0; b < 8; b++)
                    n12[b] = (uint8_t)(seq >> (8 * b));
                crypto_aead_chacha20poly1305_ietf_encrypt_detached(ref, tag, NULL, plain, N, hdr, 40,
                                                                   NULL, n12, tx.key);
                CHECK(memcmp(ref, sealed, N) == 0 && memcmp(tag, tr + 8, 16) == 0);
            } else {   /* the reference: libsodium's Poly1305 over header and payload, under the
                       ** one-time key of ChaCha20's block 0 (the tag is OpenSSL's) */
                uint8_t n12[12] = {0}, otk[32], msg[40 + N];
                for (int b = 0; b < 8; b++)
                    n12[b] = (uint8_t)(seq >> (8 * b));
                crypto_stream_chacha20_ietf(otk, sizeof otk, n12, tx.key);
                memcpy(msg, hdr, 40);
                memcpy(msg + 40, plain, N);
                crypto_onetimeauth_poly1305(tag, msg, sizeof msg, otk);
                CHECK(memcmp(tag, tr + 8, 16) == 0);
            }
            memcpy(got, enc ? sealed : plain, N);
            CHECK(dpy_auth_begin(&rx, enc, hdr, N, &st) == 0);   /* the receiver's pieces: odd sizes */
            for (size_t at = 0; at < N;) {
                at += 1 + (at * 31 + (size_t)trial * 97) % 700;
                dpy_auth_open_upto(&st, got, at < N ? at : N);
            }
            CHECK(dpy_auth_open_end(&rx, &st, got, tr) == DPY_AUTH_OK);
            CHECK(memcmp(got, plain, N) == 0);
            CHECK(rx.seq == seq + 1);
        }
        dpy_auth_stream_free(&st);
        memcpy(got, enc ? sealed : plain, N);
        CHECK(dpy_auth_open(&rx, enc, hdr, got, N, tr) == DPY_AUTH_REPLAYED);
        CHECK(dpy_auth_seal(&tx, enc, hdr, plain, sealed, N, tr) == 0);
        memcpy(got, enc ? sealed : plain, N);
        got[N - 1] ^= 0x80;
        CHECK(dpy_auth_open(&rx, enc, hdr, got, N, tr) == DPY_AUTH_FORGED);
        memcpy(got, enc ? sealed : plain, N);
        CHECK(dpy_auth_open(&rx, enc, hdr, got, N, tr) == DPY_AUTH_OK && memcmp(got, plain, N) == 0);
    }
}

/* A connection's stream outlives its packets: one cut off midway (the peer went) or refused as a
** replay must leave no one-time key behind in OpenSSL's context (which OpenSSL frees without
** clearing), and the next packet on the same stream must be tagged as if the stream were new. */
static void test_stream_reuse(void) {
    enum { N = 1000 };
    static uint8_t plain[N], sealed[N], ref[N], got[N];
    uint8_t hdr[DPY_WIRE_HEADER] = {1, 2, 3}, tr[DPY_TRAILER_BYTES], ref_tr[DPY_TRAILER_BYTES];
    for (int i = 0; i < N; i++)
        plain[i] = (uint8_t)(i * 5 + 3);
    for (int enc = 0; enc <= 1; enc++) {
        dpy_auth_dir tx = {{6}, 0}, tx_ref = {{6}, 0}, rx = {{6}, 0};
        dpy_auth_stream st = {0};
        CHECK(dpy_auth_begin(&tx, !enc, hdr, N, &st) == 0);   /* the other mode, cut off midway */
        CHECK(dpy_auth_seal_piece(&st, plain, sealed, 128) == 0);
        CHECK(st.keyed);
        CHECK(dpy_auth_begin(&tx, enc, hdr, N, &st) == 0);
        CHECK(dpy_auth_seal_piece(&st, plain, sealed, N) == 0 && dpy_auth_seal_end(&tx, &st, tr) == 0);
        CHECK(!st.keyed);
        CHECK(dpy_auth_seal(&tx_ref, enc, hdr, plain, ref, N, ref_tr) == 0);
        CHECK(memcmp(tr, ref_tr, sizeof tr) == 0 && (!enc || memcmp(sealed, ref, N) == 0));
        memcpy(got, enc ? sealed : plain, N);
        CHECK(dpy_auth_begin(&rx, enc, hdr, N, &st) == 0);
        dpy_auth_open_upto(&st, got, N);
        CHECK(dpy_auth_open_end(&rx, &st, got, tr) == DPY_AUTH_OK && !st.keyed);
        memcpy(got, enc ? sealed : plain, N);
        CHECK(dpy_auth_begin(&rx, enc, hdr, N, &st) == 0);   /* the same packet again: a replay */
        dpy_auth_open_upto(&st, got, N);
        CHECK(dpy_auth_open_end(&rx, &st, got, tr) == DPY_AUTH_REPLAYED && !st.keyed);
        CHECK(dpy_auth_begin(&rx, enc, hdr, N, &st) == 0 && st.keyed);   /* cut off, then freed */
        dpy_auth_stream_free(&st);
        CHECK(!st.keyed && !st.mac && !st.cipher);
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    port_base = check_port_base();
    test_hello_then_close();
    test_forged_data();
    test_idle_flood();
    test_mitm(1, 1);
    test_mitm(2, 0);
    test_mitm(1, 0);
    test_encrypted();
    test_unix_link();
    test_unix_flag();
    test_unix_relay();
    test_unix_squatter();
    test_wrong_key();
    test_key_file();
    test_seal();
    test_pieces();
    test_stream_reuse();
    return check_report("wire_auth");
}
