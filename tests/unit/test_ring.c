/* test_ring.c: the shared ring between two processes of one machine (ring.h) and the framing of
** packets that come through it (framing.h): a ring is mapped only when sealed against resizing
** and of the size announced; pieces through the ring and inline pieces make the payload back byte
** for byte, across the ring's end; the writer never overwrites what the reader has not taken; a
** piece word that would read past the packet or the ring, or was written where the reader is not,
** or a ring packet where there is no ring, loses the framing (the connection goes). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bytes.h"
#include "check.h"
#include "fabric_internal.h"
#include "framing.h"
#include "ring.h"

#define SIZE (256u << 10)

static void test_adopt(void) {
    char why[128];
    dpy_ring w, r;
    int fd = dpy_ring_create(&w, SIZE);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 4096) != 0 && errno == EPERM);   /* the writer cannot take pages away */
    CHECK(dpy_ring_adopt(&r, dup(fd), SIZE, why, sizeof why) == 0);
    CHECK(mprotect(r.map, 4096, PROT_READ | PROT_WRITE) == 0);   /* its count: the reader's to write */
    dpy_ring_free(&r);
    CHECK(dpy_ring_adopt(&r, dup(fd), 2 * SIZE, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "not of the size announced");
    CHECK(dpy_ring_adopt(&r, dup(fd), 1000, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "impossible size");
    close(fd);
    dpy_ring_free(&w);
    dpy_ring_free(&w);   /* twice: nothing left to free */
    int plain = memfd_create("plain", MFD_CLOEXEC);   /* resizable: a mapping could lose its pages */
    CHECK(ftruncate(plain, 4096 + SIZE) == 0);
    CHECK(dpy_ring_adopt(&r, plain, SIZE, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "not sealed against resizing");
    int pipes[2];
    CHECK(pipe(pipes) == 0);
    CHECK(dpy_ring_adopt(&r, pipes[0], SIZE, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "not a memfd");
    close(pipes[1]);
    CHECK(fcntl(pipes[0], F_GETFD) == -1);   /* taken: closed on failure too */
}

static dpy_frame_rules rules = {.run_id = 5, .nodes = 4, .max_payload = 1 << 20, .ready = 1};

/* Feeds len bytes of a stream into fr as tcp.c does; returns the last event. */
static int feed(dpy_frame *fr, const uint8_t *s, size_t len, char *why, size_t whylen) {
    int ev = DPY_FRAME_MORE;
    for (size_t off = 0; off < len && ev == DPY_FRAME_MORE;) {
        uint8_t *at;
        size_t n = dpy_frame_want(fr, &at);
        n = n < len - off ? n : len - off;
        memcpy(at, s + off, n);
        off += n;
        ev = dpy_frame_got(fr, n, &rules, why, whylen);
    }
    return ev;
}

typedef struct {
    uint8_t bytes[1 << 21];
    size_t len;
} stream;

static void put_header(stream *s, uint32_t length, uint8_t flags) {
    dpy_header h = {.channel = 1, .run_id = 5, .sender = 1, .receiver = 2, .length = length, .flags = flags};
    dpy_wire_encode(s->bytes + s->len, &h);
    s->len += DPY_WIRE_HEADER;
}

static void put_word(stream *s, uint32_t w, uint32_t at) {
    put32(s->bytes + s->len, w);
    put32(s->bytes + s->len + 4, at);
    s->len += DPY_RING_WORD;
}

static void test_frames(void) {
    char why[256];
    dpy_ring w;
    dpy_frame fr;
    memset(&fr, 0, sizeof fr);
    fr.untagged = 1;
    int fd = dpy_ring_create(&w, SIZE);
    CHECK(fd >= 0);
    CHECK(dpy_ring_adopt(&fr.ring, dup(fd), SIZE, why, sizeof why) == 0);
    static uint8_t data[3 * SIZE];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + i / 251);
    static stream s;
    /* three packets, 300,000 bytes each: the ring's 256 KiB hold fewer, so pieces wrap its end and
    ** some wait for the reader; one goes on the socket */
    for (int k = 0; k < 3; k++) {
        const uint8_t *src = data + k * 100000;
        uint32_t len = 300000;
        s.len = 0;
        put_header(&s, len, DPY_FLAG_RING);
        for (uint32_t off = 0; off < len;) {
            uint32_t want = len - off < 70000 ? len - off : 70000;
            uint32_t n = (uint32_t)dpy_ring_room(&w, want);
            if (k == 1 && off == 70000)
                n = 0;   /* as when the reader is behind: on the socket */
            if (n) {
                put_word(&s, n, (uint32_t)w.pos);
                dpy_ring_put(&w, src + off, n);
            } else {
                put_word(&s, want | DPY_RING_INLINE, (uint32_t)w.pos);
                memcpy(s.bytes + s.len, src + off, want);
                s.len += want;
                n = want;
            }
            off += n;
            if (dpy_ring_room(&w, SIZE) == 0) {   /* full: the reader takes what is there */
                CHECK(feed(&fr, s.bytes, s.len, why, sizeof why) == DPY_FRAME_MORE);
                s.len = 0;
                CHECK(dpy_ring_room(&w, SIZE) > 0);
            }
        }
        CHECK(feed(&fr, s.bytes, s.len, why, sizeof why) == DPY_FRAME_PACKET);
        payload *p = dpy_frame_take(&fr);
        CHECK(p->len == len && memcmp(p->data, src, len) == 0);
        free(p);
    }
    CHECK(w.pos == fr.ring.pos);   /* every byte the writer put in was taken, in order */

    /* a reader's count the writer never gave it: no room, so nothing is overwritten */
    uint64_t *count = (uint64_t *)fr.ring.map;
    uint64_t saved = *count;
    *count = w.pos + 1;
    CHECK(dpy_ring_room(&w, 100) == 0);
    *count = saved;

    /* hostile words: each loses the framing; so does a word written where the reader is not (a
    ** writer out of step would hand on stale bytes) */
    uint32_t here = (uint32_t)fr.ring.pos;
    const struct { uint32_t length, word, at; const char *why; } bad[] = {
        {1000, 0, here, "a piece of 0 bytes"},
        {1000, 1001, here, "a piece of 1001 bytes where 1000 remain"},
        {1000, 1001 | DPY_RING_INLINE, here, "where 1000 remain"},
        {SIZE, SIZE, here, "past the shared ring's end"},   /* the reader is not at the ring's start */
        {1000, 1000, here + 4096, "written at byte"},
        {1000, 1000 | DPY_RING_INLINE, here - 1, "written at byte"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s.len = 0;
        put_header(&s, bad[i].length, DPY_FLAG_RING);
        put_word(&s, bad[i].word, bad[i].at);
        why[0] = '\0';
        CHECK(feed(&fr, s.bytes, s.len, why, sizeof why) == DPY_FRAME_BAD_HEADER);
        CHECK_CONTAINS(why, bad[i].why);
        free(dpy_frame_take(&fr));   /* a new connection's frame, as far as this test goes */
    }
    dpy_frame_clear(&fr);
    CHECK(fr.ring.map == NULL);

    /* a ring packet where no ring came, or on a tagged (tcp) stream */
    for (int tagged = 0; tagged <= 1; tagged++) {
        memset(&fr, 0, sizeof fr);
        fr.untagged = !tagged;
        if (tagged)
            CHECK(dpy_ring_adopt(&fr.ring, dup(fd), SIZE, why, sizeof why) == 0);
        s.len = 0;
        put_header(&s, 100, DPY_FLAG_RING);
        CHECK(feed(&fr, s.bytes, s.len, why, sizeof why) == DPY_FRAME_BAD_HEADER);
        CHECK_CONTAINS(why, "shared ring where there is none");
        dpy_frame_clear(&fr);
    }
    close(fd);
    dpy_ring_free(&w);
}

int main(void) {
    test_adopt();
    test_frames();
    return check_report("ring");
}
