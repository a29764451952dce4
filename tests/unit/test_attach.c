/* test_attach.c: host/core/attach.c over a real Unix socket: hostile frames, many clients, the
** hold/limit pause protocol with node threads at their boundaries, stop and close. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "check.h"

static char dir[64], sock[96];

static void nap(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static dpy_attach *open_with(const uint32_t *uids, size_t n) {
    dpy_attach *a = NULL;
    char err[256] = "";
    if (dpy_attach_open(&a, sock, uids, n, err, sizeof err) != 0)
        fprintf(stderr, "open: %s\n", err);
    return a;
}

static int client(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("connect");
        exit(2);
    }
    struct timeval tv = {.tv_sec = 2};   /* a test that fails does not hang */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static int put(int fd, const void *p, size_t len) {
    return send(fd, p, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static int frame(int fd, char type, uint32_t uid, uint32_t id, const char *payload) {
    unsigned char h[DPY_ATTACH_HEADER];
    size_t len = payload ? strlen(payload) : 0;
    dpy_attach_header(h, (uint32_t)len, type, uid, id);
    return put(fd, h, sizeof h) || (len && put(fd, payload, len)) ? -1 : 0;
}

static int get_all(int fd, void *p, size_t len) {
    for (size_t got = 0; got < len;) {
        ssize_t k = recv(fd, (char *)p + got, len - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* The next frame: its type (0 when the connection closed or nothing came in 2 s), text in out. */
static char reply(int fd, uint32_t *id, char *out, size_t outlen) {
    unsigned char h[DPY_ATTACH_HEADER];
    if (get_all(fd, h, sizeof h) != 0)
        return 0;
    uint32_t len, uid, rid;
    char type;
    dpy_attach_parse(h, &len, &type, &uid, &rid);
    char *body = malloc(len + 1);
    if (!body || get_all(fd, body, len) != 0) {
        free(body);
        return 0;
    }
    body[len] = '\0';
    if (out)
        snprintf(out, outlen, "%s", body);
    if (id)
        *id = rid;
    free(body);
    return type;
}

/* Whether the process has closed fd (a read finds its end, not a timeout). */
static int closed_by_peer(int fd) {
    char b;
    return recv(fd, &b, 1, 0) == 0;
}

/* A request queued for node i: polled until it comes (the server thread hands it over). */
static int take_request(dpy_attach *a, size_t i, dpy_attach_request *r) {
    for (int k = 0; k < 400; k++) {
        if (dpy_attach_poll(a, i, r))
            return 1;
        nap(5);
    }
    return 0;
}

static void test_frames(void) {
    const uint32_t uids[] = {5, 1, 9};
    dpy_attach *a = open_with(uids, 3);
    CHECK(a != NULL);
    if (!a)
        return;
    int c = client();
    char text[4096];
    uint32_t id = 0;

    CHECK(frame(c, 'S', 0, 7, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'S');
    CHECK(id == 7);
    CHECK_CONTAINS(text, "limit -1 hold 0\n1 0 starting\n5 0 starting\n9 0 starting\n");

    CHECK(frame(c, 'E', 42, 8, "return 1") == 0);   /* a uid not in this process */
    CHECK(reply(c, &id, text, sizeof text) == 'X');
    CHECK(id == 8);
    CHECK_CONTAINS(text, "node 42 is not in this process");

    /* a limit that is no round is refused, and changes nothing */
    const char *bad[] = {"abc", "-3", "12x", "99999999999999999999"};
    for (int k = 0; k < 4; k++) {
        CHECK(frame(c, 'L', 0, 20 + (uint32_t)k, bad[k]) == 0);
        CHECK(reply(c, &id, text, sizeof text) == 'X');
        CHECK_CONTAINS(text, "limit: a round >= 0 expected");
    }
    CHECK(frame(c, 'S', 0, 30, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'S');
    CHECK_CONTAINS(text, "limit -1 hold 0\n");

    CHECK(frame(c, 'Q', 1, 9, "whatever") == 0);   /* unknown: ignored, the connection stays */
    CHECK(frame(c, 'I', 1, 12345, NULL) == 0);     /* an interrupt of nothing: no answer */
    CHECK(frame(c, 'I', 77, 1, NULL) == 0);        /* of a node not here: no answer */
    CHECK(frame(c, 'S', 0, 10, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'S');
    CHECK(id == 10);

    /* an empty eval reaches its node as an empty chunk; a queued one interrupted never runs */
    dpy_attach_request r;
    CHECK(frame(c, 'E', 9, 11, NULL) == 0);
    CHECK(take_request(a, 2, &r));
    CHECK(r.id == 11 && r.len == 0 && r.code && r.code[0] == '\0');
    dpy_attach_request_free(&r);
    CHECK(frame(c, 'E', 1, 12, "x = 1") == 0);
    CHECK(frame(c, 'I', 1, 12, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'X');
    CHECK(id == 12);
    CHECK_CONTAINS(text, "had not begun");
    CHECK(dpy_attach_poll(a, 1, &r) == 0);

    /* a payload past 1 MiB: that connection is dropped, the others go on */
    int big = client();
    unsigned char h[DPY_ATTACH_HEADER];
    dpy_attach_header(h, (uint32_t)DPY_ATTACH_MAX_PAYLOAD + 1, 'E', 1, 1);
    CHECK(put(big, h, sizeof h) == 0);
    CHECK(closed_by_peer(big));
    close(big);
    dpy_attach_header(h, 0xffffffffu, 'E', 1, 1);
    big = client();
    CHECK(put(big, h, sizeof h) == 0);
    CHECK(closed_by_peer(big));
    close(big);

    /* exactly 1 MiB is allowed */
    big = client();
    char *mb = malloc(DPY_ATTACH_MAX_PAYLOAD + 1);
    memset(mb, ' ', DPY_ATTACH_MAX_PAYLOAD);
    memcpy(mb, "return 2", 8);
    mb[DPY_ATTACH_MAX_PAYLOAD] = '\0';
    CHECK(frame(big, 'E', 5, 3, mb) == 0);
    free(mb);
    CHECK(take_request(a, 0, &r));
    CHECK(r.len == DPY_ATTACH_MAX_PAYLOAD && strncmp(r.code, "return 2", 8) == 0);
    CHECK(dpy_attach_send(a, r.conn, 'R', 5, r.id, "2", 1) == 0);
    dpy_attach_request_free(&r);
    CHECK(reply(big, &id, text, sizeof text) == 'R');
    CHECK(id == 3 && strcmp(text, "2") == 0);
    close(big);

    /* a header cut short, the client staying: the server is not stuck on it */
    int cut = client();
    CHECK(put(cut, h, 5) == 0);
    CHECK(frame(c, 'S', 0, 13, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'S');
    CHECK(id == 13);
    close(cut);   /* and leaving mid-header */
    int half = client();   /* or mid-payload, with a request half sent */
    dpy_attach_header(h, 100, 'E', 1, 14);
    CHECK(put(half, h, sizeof h) == 0 && put(half, "return", 6) == 0);
    close(half);
    CHECK(frame(c, 'S', 0, 15, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'S');
    nap(20);
    CHECK(dpy_attach_poll(a, 1, &r) == 0);

    /* a node that finishes with requests queued tells their clients; later ones are refused */
    CHECK(frame(c, 'E', 9, 16, "return 3") == 0);
    CHECK(frame(c, 'S', 0, 17, NULL) == 0);   /* answered after the eval is queued */
    CHECK(reply(c, &id, text, sizeof text) == 'S');
    dpy_attach_done(a, 2);
    CHECK(reply(c, &id, text, sizeof text) == 'X');
    CHECK(id == 16);
    CHECK_CONTAINS(text, "node 9 has finished");
    CHECK(frame(c, 'E', 9, 18, "return 4") == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'X');
    CHECK(id == 18);
    CHECK_CONTAINS(text, "node 9 has finished");

    /* a client that left: sends to it fail, its queued requests go */
    int gone = client();
    CHECK(frame(gone, 'E', 5, 19, "return 5") == 0);
    CHECK(take_request(a, 0, &r));
    uint32_t gone_conn = r.conn;
    dpy_attach_request_free(&r);
    CHECK(frame(gone, 'E', 5, 20, "return 6") == 0);
    CHECK(frame(gone, 'S', 0, 21, NULL) == 0);
    CHECK(reply(gone, &id, text, sizeof text) == 'S');
    close(gone);
    for (int k = 0; k < 200 && dpy_attach_alive(a, gone_conn); k++)
        nap(5);
    CHECK(!dpy_attach_alive(a, gone_conn));
    CHECK(dpy_attach_send(a, gone_conn, 'R', 5, 19, "5", 1) == -1);
    nap(20);
    CHECK(dpy_attach_poll(a, 0, &r) == 0);

    /* a frame that comes a byte at a time */
    dpy_attach_header(h, 8, 'E', 5, 22);
    for (size_t k = 0; k < sizeof h; k++)
        CHECK(put(c, h + k, 1) == 0);
    for (const char *p = "return 7"; *p; p++)
        CHECK(put(c, p, 1) == 0);
    CHECK(take_request(a, 0, &r));
    CHECK(r.id == 22 && strcmp(r.code, "return 7") == 0);
    dpy_attach_request_free(&r);

    /* close() with a client connected: it is told ('Z'), then its connection ends */
    dpy_attach_close(a);
    CHECK(reply(c, &id, text, sizeof text) == 'Z');
    CHECK(closed_by_peer(c));
    close(c);
    CHECK(access(sock, F_OK) != 0);   /* the socket is gone */
}

/* 33 clients: 32 are served, the one past MAX_CONNS is told so and closed; a slot freed takes a new one */
static void test_many_connections(void) {
    const uint32_t uids[] = {0};
    dpy_attach *a = open_with(uids, 1);
    CHECK(a != NULL);
    if (!a)
        return;
    int fds[33];
    char text[256];
    uint32_t id;
    for (int k = 0; k < 33; k++) {
        fds[k] = client();
        if (k < 32) {   /* in order: the server has taken this one before the next connects */
            CHECK(frame(fds[k], 'S', 0, (uint32_t)k + 1, NULL) == 0);
            CHECK(reply(fds[k], &id, text, sizeof text) == 'S');
            CHECK(id == (uint32_t)k + 1);
        }
    }
    CHECK(reply(fds[32], &id, text, sizeof text) == 'X');   /* told why, then closed */
    CHECK(strstr(text, "all 32 sessions are taken") != NULL);
    CHECK(closed_by_peer(fds[32]));
    close(fds[32]);
    close(fds[0]);
    int again = -1;
    for (int tries = 0; tries < 50; tries++) {   /* once the server has reaped fds[0]'s slot */
        nap(10);
        again = client();
        if (frame(again, 'S', 0, 99, NULL) == 0 && reply(again, &id, text, sizeof text) == 'S')
            break;
        close(again);
        again = -1;
    }
    CHECK(again >= 0);
    if (again >= 0)
        close(again);
    dpy_attach_close(a);   /* 31 clients connected */
    for (int k = 1; k < 32; k++) {
        CHECK(reply(fds[k], NULL, NULL, 0) == 'Z');
        close(fds[k]);
    }
}

/* {==== node threads ====} */

typedef struct {
    dpy_attach *a;
    size_t i;
    atomic_int started;   /* the last round begun */
    int rc;               /* what ended it: -1, stopped */
} node_arg;

/* A node: rounds 1, 2, ... each a millisecond long, serving requests at its boundaries. */
static void *node_thread(void *p) {
    node_arg *n = p;
    for (int r = 1;; r++) {
        dpy_attach_request req;
        int rc;
        while ((rc = dpy_attach_boundary(n->a, n->i, r, &req, 1)) == 1) {
            dpy_attach_evaluating(n->a, n->i, req.conn, req.id);
            char out[64];
            int len = snprintf(out, sizeof out, "node %zu round %d", n->i, r);
            dpy_attach_send(n->a, req.conn, 'R', 0, req.id, out, (size_t)len);
            dpy_attach_request_free(&req);
            dpy_attach_evaluating(n->a, n->i, req.conn, 0);
        }
        if (rc < 0) {
            n->rc = rc;
            return NULL;
        }
        atomic_store(&n->started, r);
        nap(1 + (int)n->i);   /* the nodes go at different speeds */
    }
}

/* Every node paused (or finished) according to 'S'. */
static int all_paused(int c, uint32_t id) {
    char text[4096];
    for (int k = 0; k < 400; k++) {
        CHECK(frame(c, 'S', 0, id, NULL) == 0);
        if (reply(c, NULL, text, sizeof text) != 'S')
            return 0;
        if (!strstr(text, "running") && !strstr(text, "starting") && !strstr(text, "evaluating"))
            return 1;
        nap(5);
    }
    return 0;
}

/* Waits (2 s at most) until every node has begun round r: a node the new limit lets go may not
** have run yet on a loaded machine, and the status then still says paused. */
static void wait_started(node_arg *nodes, size_t n, int r) {
    for (int k = 0; k < 400; k++) {
        size_t i = 0;
        while (i < n && atomic_load(&nodes[i].started) >= r)
            i++;
        if (i == n)
            return;
        nap(5);
    }
}

static void test_pause_protocol(void) {
    enum { N = 3 };
    const uint32_t uids[N] = {10, 11, 12};
    dpy_attach *a = open_with(uids, N);
    CHECK(a != NULL);
    if (!a)
        return;
    node_arg nodes[N];
    pthread_t th[N];
    for (size_t i = 0; i < N; i++) {
        nodes[i] = (node_arg){.a = a, .i = i};
        pthread_create(&th[i], NULL, node_thread, &nodes[i]);
    }
    nap(30);
    int c = client();
    char text[256];
    uint32_t id;
    /* hold, then a limit at the highest round begun: every node finishes that round and stops */
    CHECK(frame(c, 'H', 0, 1, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'H');
    int top = atoi(text);
    CHECK(top >= 1);
    char num[24];
    snprintf(num, sizeof num, "%d", top);
    CHECK(frame(c, 'L', 0, 2, num) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'L');
    CHECK(all_paused(c, 3));
    CHECK(dpy_attach_paused(a));
    for (size_t i = 0; i < N; i++)
        CHECK(atomic_load(&nodes[i].started) == top);
    nap(20);   /* and they stay there */
    for (size_t i = 0; i < N; i++)
        CHECK(atomic_load(&nodes[i].started) == top);

    /* paused, a node still serves what is asked of it */
    CHECK(frame(c, 'E', 11, 4, "return round") == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'R');
    CHECK(id == 4);
    snprintf(num, sizeof num, "round %d", top + 1);
    CHECK_CONTAINS(text, num);

    /* step 2 */
    snprintf(num, sizeof num, "%d", top + 2);
    CHECK(frame(c, 'L', 0, 5, num) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'L');
    wait_started(nodes, N, top + 2);
    CHECK(all_paused(c, 6));
    for (size_t i = 0; i < N; i++)
        CHECK(atomic_load(&nodes[i].started) == top + 2);

    /* resume: rounds go on */
    CHECK(frame(c, 'L', 0, 7, "") == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'L');
    wait_started(nodes, N, top + 3);
    for (size_t i = 0; i < N; i++)
        CHECK(atomic_load(&nodes[i].started) > top + 2);

    /* a hold whose client leaves before it sets a limit does not keep the run held */
    CHECK(frame(c, 'H', 0, 8, NULL) == 0);
    CHECK(reply(c, &id, text, sizeof text) == 'H');
    close(c);
    int before = atomic_load(&nodes[0].started);   /* held, no node begins a round */
    for (int k = 0; k < 400 && atomic_load(&nodes[0].started) <= before; k++)
        nap(5);   /* 2 s at most */
    CHECK(atomic_load(&nodes[0].started) > before);

    /* stop() wakes the nodes paused at a boundary */
    dpy_attach_limit(a, 0);
    for (int k = 0; k < 400 && !dpy_attach_paused(a); k++)
        nap(5);
    CHECK(dpy_attach_paused(a));
    dpy_attach_stop(a);
    for (size_t i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECK(nodes[i].rc == -1);
    }
    dpy_attach_close(a);
}

/* Clients at once, each with a stream of requests, two node threads answering. */
typedef struct {
    int fd;
    int ok;
} client_arg;

static void *client_thread(void *p) {
    client_arg *c = p;
    for (uint32_t k = 1; k <= 20; k++) {
        if (frame(c->fd, 'E', k % 2 ? 21 : 20, k, "return round") != 0)
            return NULL;
        uint32_t id;
        char text[128];
        if (reply(c->fd, &id, text, sizeof text) != 'R' || id != k || !strstr(text, "round"))
            return NULL;
    }
    c->ok = 1;
    return NULL;
}

static void test_many_clients(void) {
    enum { N = 2, C = 12 };
    const uint32_t uids[N] = {20, 21};
    dpy_attach *a = open_with(uids, N);
    CHECK(a != NULL);
    if (!a)
        return;
    node_arg nodes[N];
    pthread_t th[N], ct[C];
    for (size_t i = 0; i < N; i++) {
        nodes[i] = (node_arg){.a = a, .i = i};
        pthread_create(&th[i], NULL, node_thread, &nodes[i]);
    }
    client_arg cs[C];
    for (int k = 0; k < C; k++) {
        cs[k] = (client_arg){.fd = client()};
        pthread_create(&ct[k], NULL, client_thread, &cs[k]);
    }
    for (int k = 0; k < C; k++) {
        pthread_join(ct[k], NULL);
        CHECK(cs[k].ok);
    }
    dpy_attach_stop(a);
    for (size_t i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    dpy_attach_close(a);
    for (int k = 0; k < C; k++) {
        CHECK(reply(cs[k].fd, NULL, NULL, 0) == 'Z');
        close(cs[k].fd);
    }
}

/* A breakpoint set by a client that has left since holds nothing: no 'L' would ever come. */
static void test_hold_of_a_client_gone(void) {
    const uint32_t uids[] = {3, 4};
    dpy_attach *a = open_with(uids, 2);
    CHECK(a != NULL);
    if (!a)
        return;
    int c = client();
    dpy_attach_request r;
    CHECK(frame(c, 'E', 3, 1, "break_on('post_train', function() return true end)") == 0);
    CHECK(take_request(a, 0, &r));
    uint32_t conn = r.conn;
    dpy_attach_request_free(&r);
    close(c);
    for (int k = 0; k < 200 && dpy_attach_alive(a, conn); k++)
        nap(5);
    nap(20);   /* the server has reaped it */
    dpy_attach_hold(a, conn);   /* node 3's breakpoint fires, its client gone */
    CHECK(dpy_attach_boundary(a, 0, 2, &r, 0) == 0);
    CHECK(dpy_attach_boundary(a, 1, 2, &r, 0) == 0);
    dpy_attach_close(a);
}

/* Ctrl-C right after the node took the request, before it marked the evaluation: not lost. */
static void test_interrupt_just_taken(void) {
    const uint32_t uids[] = {6};
    dpy_attach *a = open_with(uids, 1);
    CHECK(a != NULL);
    if (!a)
        return;
    int c = client();
    char text[64];
    uint32_t id;
    dpy_attach_request r;
    CHECK(frame(c, 'E', 6, 5, "while true do end") == 0);
    for (int k = 0; k < 400 && dpy_attach_boundary(a, 0, 1, &r, 0) != 1; k++)
        nap(5);
    CHECK(r.id == 5);
    CHECK(frame(c, 'I', 6, 5, NULL) == 0);
    CHECK(frame(c, 'S', 0, 6, NULL) == 0);   /* handled in order: the interrupt is in */
    CHECK(reply(c, &id, text, sizeof text) == 'S');
    dpy_attach_evaluating(a, 0, r.conn, r.id);
    CHECK(dpy_attach_cancelled(a, 0));
    dpy_attach_evaluating(a, 0, r.conn, 0);
    CHECK(!dpy_attach_cancelled(a, 0));
    dpy_attach_request_free(&r);
    /* the run stopping (g:interrupt) ends an evaluation too: its hook may be the one that runs */
    CHECK(frame(c, 'E', 6, 7, "while true do end") == 0);
    CHECK(take_request(a, 0, &r));
    dpy_attach_evaluating(a, 0, r.conn, r.id);
    CHECK(!dpy_attach_cancelled(a, 0));
    dpy_attach_stop(a);
    CHECK(dpy_attach_cancelled(a, 0));
    dpy_attach_evaluating(a, 0, r.conn, 0);
    dpy_attach_request_free(&r);
    close(c);
    dpy_attach_close(a);
}

/* A hold stops the nodes past the highest round begun, not those behind it: a node ahead may be
** waiting for their messages of that round (a breakpoint's hold, before its client's 'L'). */
static void test_hold_lets_the_nodes_behind_catch_up(void) {
    const uint32_t uids[] = {0, 1};
    dpy_attach *a = open_with(uids, 2);
    CHECK(a != NULL);
    if (!a)
        return;
    dpy_attach_request r;
    for (int k = 1; k <= 3; k++)
        CHECK(dpy_attach_boundary(a, 1, k, &r, 0) == 0);   /* node 1 has begun round 3 */
    CHECK(dpy_attach_boundary(a, 0, 1, &r, 0) == 0);       /* node 0, round 1 */
    int c = client();
    CHECK(frame(c, 'E', 0, 1, "return 1") == 0);   /* a client, that node 1's breakpoint names */
    CHECK(take_request(a, 0, &r));
    dpy_attach_hold(a, r.conn);
    dpy_attach_request_free(&r);
    CHECK(dpy_attach_boundary(a, 0, 2, &r, 0) == 0);
    CHECK(dpy_attach_boundary(a, 0, 3, &r, 0) == 0);
    CHECK(dpy_attach_boundary(a, 0, 4, &r, 0) == 2);   /* past it: held */
    CHECK(dpy_attach_boundary(a, 1, 4, &r, 0) == 2);
    char text[64];
    CHECK(frame(c, 'H', 0, 2, NULL) == 0);   /* the client's pause of the whole run */
    CHECK(reply(c, NULL, text, sizeof text) == 'H');
    CHECK(strcmp(text, "3") == 0);
    CHECK(frame(c, 'L', 0, 3, "3") == 0);
    CHECK(reply(c, NULL, text, sizeof text) == 'L');
    CHECK(dpy_attach_boundary(a, 0, 4, &r, 0) == 2);
    CHECK(frame(c, 'L', 0, 4, "") == 0);
    CHECK(reply(c, NULL, text, sizeof text) == 'L');
    CHECK(dpy_attach_boundary(a, 0, 4, &r, 0) == 0);
    close(c);
    dpy_attach_close(a);
}

int main(void) {

    snprintf(dir, sizeof dir, "/tmp/dpy-test-attach-XXXXXX");
    if (!mkdtemp(dir))
        return 2;
    snprintf(sock, sizeof sock, "%s/attach/p0.sock", dir);
    int fds = check_open_fds();
    test_frames();
    test_many_connections();
    test_pause_protocol();
    test_many_clients();
    test_hold_of_a_client_gone();
    test_interrupt_just_taken();
    test_hold_lets_the_nodes_behind_catch_up();
    CHECK(check_open_fds() == fds);   /* every socket, pipe and connection closed */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 2;
    return check_report("attach");
}
