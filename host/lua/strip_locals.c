/*
** strip_locals.c: a Lua 5.4 dump without its local variables' names. A node's state loads ~25 of
** the framework's modules from their dumps; the ~2,000 local names in them were half the strings
** it interned and 36 KiB of its heap. The lines, the source and the upvalues' names stay: tracebacks
** keep their files, lines and function names, and globals are still named as such in messages.
** The format is lundump.c's (5.4): a size is 7-bit groups, most significant first, the last one
** marked with 0x80; a string is its size + 1 (0: none) and its bytes.
*/
#include <stdint.h>
#include <string.h>

#include "dpy_lua.h"

typedef struct {
    const unsigned char *in;
    size_t len, at;       /* the input and the reading position */
    unsigned char *out;
    size_t out_len, copied;   /* bytes written, and the input copied up to */
    int bad;
} walk;

static unsigned char byte(walk *w) {
    if (w->at >= w->len) {
        w->bad = 1;
        return 0;
    }
    return w->in[w->at++];
}

static size_t size(walk *w) {
    size_t x = 0;
    unsigned char b;
    do {
        if (x >> (sizeof x * 8 - 7)) {   /* would overflow */
            w->bad = 1;
            return 0;
        }
        b = byte(w);
        x = (x << 7) | (b & 0x7f);
    } while (!(b & 0x80) && !w->bad);
    return x;
}

static void skip(walk *w, size_t n, size_t times) {
    if (times && n > (w->len - w->at) / times)
        w->bad = 1;
    else
        w->at += n * times;
}

static void string(walk *w) {
    size_t n = size(w);
    if (n)
        skip(w, n - 1, 1);
}

/* Copies the input read since the last copy, then bytes. */
static void emit(walk *w, size_t upto, const void *bytes, size_t n) {
    memcpy(w->out + w->out_len, w->in + w->copied, upto - w->copied);
    w->out_len += upto - w->copied;
    memcpy(w->out + w->out_len, bytes, n);
    w->out_len += n;
}

static void function(walk *w, int depth) {
    if (depth > 200) {   /* Lua's own limit on nesting is below this */
        w->bad = 1;
        return;
    }
    string(w);                        /* source */
    size(w), size(w);                 /* linedefined, lastlinedefined */
    skip(w, 3, 1);                    /* numparams, is_vararg, maxstacksize */
    skip(w, 4, size(w));              /* code */
    for (size_t k = size(w); k-- && !w->bad;) {
        unsigned char t = byte(w);
        if (t == 0x03 || t == 0x13)   /* integer, float */
            skip(w, 8, 1);
        else if (t == 0x04 || t == 0x14)   /* short, long string */
            string(w);
        else if (t != 0x00 && t != 0x01 && t != 0x11)   /* nil, false, true */
            w->bad = 1;
    }
    skip(w, 3, size(w));              /* upvalues: instack, idx, kind */
    for (size_t k = size(w); k-- && !w->bad;)
        function(w, depth + 1);
    skip(w, 1, size(w));              /* lineinfo */
    for (size_t k = size(w); k-- && !w->bad;)
        size(w), size(w);             /* abslineinfo: pc, line */
    size_t from = w->at;
    for (size_t k = size(w); k-- && !w->bad;)
        string(w), size(w), size(w);  /* locvars: name, startpc, endpc */
    if (w->bad)
        return;
    emit(w, from, "\x80", 1);         /* none */
    w->copied = w->at;
    for (size_t k = size(w); k-- && !w->bad;)
        string(w);                    /* upvalue names */
}

/* The header of a dump of this Lua, as lundump.c checks it: the sizes that function() assumes. */
static int header(walk *w) {
    static const unsigned char sizes[] = {4, 8, 8};   /* Instruction, lua_Integer, lua_Number */
    if (w->len < 32 || memcmp(w->in, LUA_SIGNATURE, 4) != 0 || w->in[4] != 0x54 ||
        memcmp(w->in + 12, sizes, 3) != 0)
        return 0;
    w->at = 4 + 1 + 1 + 6 + 3 + 8 + 8 + 1;   /* ..., LUAC_INT, LUAC_NUM, the main's upvalue count */
    return 1;
}

size_t dpy_strip_locals(const char *in, size_t len, char *out) {
    walk w = {.in = (const unsigned char *)in, .len = len, .out = (unsigned char *)out};
    if (!header(&w))
        return 0;
    function(&w, 0);
    if (w.bad || w.at != len)
        return 0;
    emit(&w, len, "", 0);
    return w.out_len;
}
