/*
** data_pickle.c: the strict pickle reader of pickle.h. The opcodes are those of Python's
** Lib/pickle.py (and pickletools' documentation) that protocols 0 to 5 write for dicts, lists,
** tuples, numbers, strings and objects rebuilt by REDUCE/BUILD; a pickle that uses any other
** opcode, or a global not allowed, is refused.
*/
#include "pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpy_core.h"

/* a CIFAR-100 batch makes 150k objects, a torch.save file a few dozen per tensor */
#define PK_MAX_VALUES (1 << 21)
#define PK_MAX_STACK (1 << 21)

typedef struct {
    pk_doc *doc;
    const uint8_t *buf;
    size_t len, pos, op_pos;
    const char *const *globals;
    int nglobals;
    const char *what;
    char *err;
    size_t errlen;
    int32_t *stack;
    int32_t sp, stack_cap;
    int32_t *marks;
    int32_t nmarks, marks_cap;
    int32_t *memo;
    int32_t memo_cap, memo_n;           /* memo_n: entries set (MEMOIZE's next key) */
    int codecs_encode, ordered_dict, type_tag;   /* indexes of those globals, -1 if not allowed */
} pk_state;

static int fail(pk_state *st, const char *msg) {
    return dpy_fail(st->err, st->errlen, "%s: pickle: %s at offset %zu", st->what, msg, st->op_pos);
}

static int grow(void **p, int32_t *cap, int32_t need, size_t elsize, int32_t limit) {
    if (need <= *cap)
        return 0;
    if (need > limit)
        return -1;
    int64_t ncap = *cap ? (int64_t)*cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    if (ncap > limit)
        ncap = limit;
    void *np = realloc(*p, (size_t)ncap * elsize);
    if (!np)
        return -1;
    *p = np;
    *cap = (int32_t)ncap;
    return 0;
}

/* A new value of kind; returns its index, or -1 (with a message) past the limits. */
static int32_t new_value(pk_state *st, pk_kind kind) {
    pk_doc *d = st->doc;
    if (grow((void **)&d->v, &d->capv, d->nv + 1, sizeof *d->v, PK_MAX_VALUES) != 0) {
        fail(st, "too many objects");
        return -1;
    }
    pk_value *v = &d->v[d->nv];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    return d->nv++;
}

static int push(pk_state *st, int32_t i) {
    if (i < 0)
        return -1;
    if (grow((void **)&st->stack, &st->stack_cap, st->sp + 1, sizeof *st->stack, PK_MAX_STACK) != 0)
        return fail(st, "stack too deep");
    st->stack[st->sp++] = i;
    return 0;
}

static int32_t floor_of_stack(pk_state *st) {
    return st->nmarks ? st->marks[st->nmarks - 1] : 0;
}

static int32_t pop(pk_state *st) {
    if (st->sp <= floor_of_stack(st)) {
        fail(st, "stack underflow");
        return -1;
    }
    return st->stack[--st->sp];
}

static int add_item(pk_state *st, int32_t container, int32_t item) {
    pk_value *c = &st->doc->v[container];
    if (grow((void **)&c->items, &c->cap, c->n + 1, sizeof *c->items, PK_MAX_STACK) != 0)
        return fail(st, "container too large");
    c->items[c->n++] = item;
    return 0;
}

/* Moves the stack above the topmost mark into a new container of kind; pops the mark. */
static int32_t from_mark(pk_state *st, pk_kind kind) {
    if (!st->nmarks) {
        fail(st, "no mark");
        return -1;
    }
    int32_t base = st->marks[--st->nmarks], c = new_value(st, kind);
    if (c < 0)
        return -1;
    for (int32_t i = base; i < st->sp; i++)
        if (add_item(st, c, st->stack[i]) != 0)
            return -1;
    st->sp = base;
    return c;
}

static int need(pk_state *st, size_t n) {
    if (st->len - st->pos < n)
        return fail(st, "truncated");
    return 0;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int push_text(pk_state *st, pk_kind kind, size_t lenbytes) {
    if (need(st, lenbytes) != 0)
        return -1;
    uint64_t n = le(st->buf + st->pos, (int)lenbytes);
    st->pos += lenbytes;
    if (lenbytes == 4 && kind == PK_BYTES && n > INT32_MAX)   /* BINSTRING's length is signed */
        return fail(st, "negative string length");
    if (n > st->len - st->pos)
        return fail(st, "truncated");
    int32_t i = new_value(st, kind);
    if (i < 0)
        return -1;
    st->doc->v[i].s = st->buf + st->pos;
    st->doc->v[i].len = (size_t)n;
    st->pos += (size_t)n;
    return push(st, i);
}

static int push_int(pk_state *st, int64_t x) {
    int32_t i = new_value(st, PK_INT);
    if (i < 0)
        return -1;
    st->doc->v[i].i = x;
    return push(st, i);
}

/* module.name of a GLOBAL (two newline-ended lines) or STACK_GLOBAL: allowed, or refused. */
static int push_global(pk_state *st, const uint8_t *mod, size_t mlen, const uint8_t *name,
                       size_t nlen) {
    for (int g = 0; g < st->nglobals; g++) {
        const char *want = st->globals[g];
        size_t wl = strlen(want);
        if (wl == mlen + 1 + nlen && memcmp(want, mod, mlen) == 0 && want[mlen] == '.' &&
            memcmp(want + mlen + 1, name, nlen) == 0) {
            int32_t i = new_value(st, PK_GLOBAL);
            if (i < 0)
                return -1;
            st->doc->v[i].i = g;
            return push(st, i);
        }
    }
    char msg[200];
    snprintf(msg, sizeof msg, "global '%.*s.%.*s' is not allowed (this file is not what it should "
             "be, or holds more than plain data)", (int)(mlen > 80 ? 80 : mlen), (const char *)mod,
             (int)(nlen > 80 ? 80 : nlen), (const char *)name);
    return fail(st, msg);
}

static int global_line(pk_state *st, const uint8_t **s, size_t *n) {
    const uint8_t *nl = memchr(st->buf + st->pos, '\n', st->len - st->pos);
    if (!nl)
        return fail(st, "truncated");
    *s = st->buf + st->pos;
    *n = (size_t)(nl - *s);
    st->pos = (size_t)(nl - st->buf) + 1;
    return 0;
}

/* The signed decimal of a protocol 0 line (INT, LONG with its trailing L, PUT, GET), or -1. */
static int decimal(pk_state *st, const uint8_t *s, size_t n, int64_t *out) {
    size_t k = 0;
    int neg = n > 0 && (s[0] == '-' || s[0] == '+') ? s[k++] == '-' : 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (k == n)
        return fail(st, "a number line without digits");
    for (; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return fail(st, "a number line with something not a digit");
        if (v > (limit - (uint64_t)(s[k] - '0')) / 10)
            return fail(st, "a number beyond 64 bits");
        v = v * 10 + (uint64_t)(s[k] - '0');
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* The value of hex digit c, or -1. */
static int hex_digit(uint8_t c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* UNICODE (protocol 0): a line in Python's raw-unicode-escape (bytes are Latin-1 characters; an
** odd run of backslashes before u or U starts a \uXXXX or \UXXXXXXXX escape, as CPython decodes
** it), pushed as a str in UTF-8, which _codecs.encode(.., 'latin1') reads back. */
static int push_unicode(pk_state *st) {
    const uint8_t *s = NULL;
    size_t n = 0;
    if (global_line(st, &s, &n) != 0)
        return -1;
    pk_doc *d = st->doc;
    if (grow((void **)&d->owned, &d->capowned, d->nowned + 1, sizeof *d->owned, 1 << 24) != 0)
        return fail(st, "out of memory");
    uint8_t *out = malloc(2 * n + 1);   /* a byte makes at most 2, an escape of 6 or 10 at most 4 */
    if (!out)
        return fail(st, "out of memory");
    d->owned[d->nowned++] = out;
    size_t m = 0;
    for (size_t k = 0; k < n;) {
        if (s[k] != '\\') {
            uint8_t c = s[k++];
            if (c < 0x80) {
                out[m++] = c;
            } else {
                out[m++] = (uint8_t)(0xc0 | c >> 6);
                out[m++] = (uint8_t)(0x80 | (c & 0x3f));
            }
            continue;
        }
        size_t run = 0;
        while (k < n && s[k] == '\\')
            out[m++] = s[k++], run++;
        if (run % 2 == 0 || k == n || (s[k] != 'u' && s[k] != 'U'))
            continue;
        m--;   /* the last backslash opens the escape */
        int digits = s[k++] == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int j = 0; j < digits; j++) {
            int h = k < n ? hex_digit(s[k]) : -1;
            if (h < 0)
                return fail(st, digits == 4 ? "a \\u escape without its 4 hex digits"
                                            : "a \\U escape without its 8 hex digits");
            cp = cp << 4 | (uint32_t)h, k++;
        }
        if (cp > 0x10ffff)
            return fail(st, "a \\U escape past U+10FFFF");
        if (cp < 0x80) {
            out[m++] = (uint8_t)cp;
        } else if (cp < 0x800) {
            out[m++] = (uint8_t)(0xc0 | cp >> 6), out[m++] = (uint8_t)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[m++] = (uint8_t)(0xe0 | cp >> 12), out[m++] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
            out[m++] = (uint8_t)(0x80 | (cp & 0x3f));
        } else {
            out[m++] = (uint8_t)(0xf0 | cp >> 18), out[m++] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
            out[m++] = (uint8_t)(0x80 | (cp >> 6 & 0x3f)), out[m++] = (uint8_t)(0x80 | (cp & 0x3f));
        }
    }
    int32_t i = new_value(st, PK_STR);
    if (i < 0)
        return -1;
    d->v[i].s = out;
    d->v[i].len = m;
    return push(st, i);
}

/* _codecs.encode(text, 'latin1'): how Python 3 pickles bytes at protocol 2. UTF-8 in, bytes out. */
static int32_t latin1_bytes(pk_state *st, const pk_value *args) {
    const pk_value *text = args->n == 2 ? &st->doc->v[args->items[0]] : NULL;
    const pk_value *enc = args->n == 2 ? &st->doc->v[args->items[1]] : NULL;
    if (!text || text->kind != PK_STR || !(pk_text_is(enc, "latin1") || pk_text_is(enc, "latin-1"))) {
        fail(st, "_codecs.encode other than (str, 'latin1')");
        return -1;
    }
    pk_doc *d = st->doc;
    if (grow((void **)&d->owned, &d->capowned, d->nowned + 1, sizeof *d->owned, 1 << 24) != 0) {
        fail(st, "out of memory");
        return -1;
    }
    uint8_t *out = malloc(text->len ? text->len : 1);
    if (!out) {
        fail(st, "out of memory");
        return -1;
    }
    d->owned[d->nowned++] = out;
    size_t n = 0;
    for (size_t k = 0; k < text->len; k++) {
        uint8_t c = text->s[k];
        if (c < 0x80) {
            out[n++] = c;
        } else if ((c == 0xc2 || c == 0xc3) && k + 1 < text->len && (text->s[k + 1] & 0xc0) == 0x80) {
            out[n++] = (uint8_t)((c & 0x03) << 6 | (text->s[++k] & 0x3f));
        } else {
            fail(st, "_codecs.encode of text that is not latin1");
            return -1;
        }
    }
    int32_t i = new_value(st, PK_BYTES);
    if (i < 0)
        return -1;
    d->v[i].s = out;
    d->v[i].len = n;
    return i;
}

static int reduce(pk_state *st) {
    int32_t args = pop(st), fn = args < 0 ? -1 : pop(st);
    if (fn < 0)
        return -1;
    pk_value *a = &st->doc->v[args];
    if (a->kind != PK_TUPLE)
        return fail(st, "REDUCE arguments are not a tuple");
    if (pk_is_global(st->doc, fn, st->codecs_encode))
        return push(st, latin1_bytes(st, a));
    if (pk_is_global(st->doc, fn, st->ordered_dict)) {
        if (a->n != 0)
            return fail(st, "OrderedDict with arguments");
        return push(st, new_value(st, PK_DICT));
    }
    if (pk_is_global(st->doc, fn, st->type_tag)) {   /* (value, "Dict[str, Tensor]"): the value itself */
        if (a->n != 2 || st->doc->v[a->items[1]].kind != PK_STR)
            return fail(st, "restore_type_tag other than (value, type name)");
        return push(st, a->items[0]);
    }
    if (st->doc->v[fn].kind != PK_GLOBAL)
        return fail(st, "REDUCE of something not a global");
    int32_t c = new_value(st, PK_CALL);
    if (c < 0 || add_item(st, c, fn) != 0 || add_item(st, c, args) != 0 || add_item(st, c, -1) != 0)
        return -1;
    return push(st, c);
}

static int build(pk_state *st) {
    int32_t state = pop(st), obj = state < 0 ? -1 : pop(st);
    if (obj < 0)
        return -1;
    pk_value *o = &st->doc->v[obj];
    if (o->kind != PK_CALL || o->items[2] != -1)
        return fail(st, "BUILD of something not rebuilt by REDUCE");
    o->items[2] = state;
    return push(st, obj);
}

static int memo_put(pk_state *st, uint64_t key) {
    if (st->sp <= floor_of_stack(st))
        return fail(st, "memo put with an empty stack");
    /* Python numbers its memo entries in order: a key past the objects made is not a pickler's */
    if (key > (uint64_t)st->doc->nv)
        return fail(st, "memo index out of order");
    int32_t old = st->memo_cap;
    if (grow((void **)&st->memo, &st->memo_cap, (int32_t)key + 1, sizeof *st->memo, PK_MAX_VALUES + 1) != 0)
        return fail(st, "out of memory");
    for (int32_t i = old; i < st->memo_cap; i++)
        st->memo[i] = -1;
    if (st->memo[key] < 0)
        st->memo_n++;
    st->memo[key] = st->stack[st->sp - 1];
    return 0;
}

static int memo_get(pk_state *st, uint64_t key) {
    if (key >= (uint64_t)st->memo_cap || st->memo[key] < 0)
        return fail(st, "memo get of a missing entry");
    return push(st, st->memo[key]);
}

static int set_items(pk_state *st, int32_t dict, int32_t base) {
    if (st->doc->v[dict].kind != PK_DICT)
        return fail(st, "SETITEM on something not a dict");
    if ((st->sp - base) % 2)
        return fail(st, "SETITEMS with an odd number of items");
    for (int32_t i = base; i < st->sp; i++)
        if (add_item(st, dict, st->stack[i]) != 0)
            return -1;
    st->sp = base;
    return 0;
}

static int append_items(pk_state *st, int32_t list, int32_t base) {
    if (st->doc->v[list].kind != PK_LIST)
        return fail(st, "APPEND on something not a list");
    for (int32_t i = base; i < st->sp; i++)
        if (add_item(st, list, st->stack[i]) != 0)
            return -1;
    st->sp = base;
    return 0;
}

/* The top of the stack below the topmost mark (the container SETITEMS/APPENDS fill). */
static int32_t below_mark(pk_state *st, int32_t *base) {
    if (!st->nmarks)
        return fail(st, "no mark"), -1;
    *base = st->marks[--st->nmarks];
    if (*base <= floor_of_stack(st))
        return fail(st, "stack underflow"), -1;
    return st->stack[*base - 1];
}

static int step(pk_state *st, int *done) {
    st->op_pos = st->pos;
    uint8_t op = st->buf[st->pos++];
    const uint8_t *p = st->buf + st->pos;
    int32_t i, base;
    switch (op) {
    case 0x80: /* PROTO */
        if (need(st, 1) != 0)
            return -1;
        if (p[0] < 2 || p[0] > 5)
            return fail(st, "unsupported protocol");
        st->pos++;
        return 0;
    case 0x95: /* FRAME: a length hint only */
        if (need(st, 8) != 0)
            return -1;
        st->pos += 8;
        return 0;
    case '.': /* STOP */
        if (st->nmarks || st->sp != 1)
            return fail(st, "STOP with a mark or more than one object left");
        st->doc->root = st->stack[0];
        *done = 1;
        return 0;
    case '(': /* MARK */
        if (grow((void **)&st->marks, &st->marks_cap, st->nmarks + 1, sizeof *st->marks, PK_MAX_STACK) != 0)
            return fail(st, "too many marks");
        st->marks[st->nmarks++] = st->sp;
        return 0;
    case '0': /* POP */
        return pop(st) < 0 ? -1 : 0;
    case 'N':
        return push(st, new_value(st, PK_NONE));
    case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
        if ((i = new_value(st, PK_BOOL)) < 0)
            return -1;
        st->doc->v[i].i = op == 0x88;
        return push(st, i);
    case 'K': /* BININT1 */
        if (need(st, 1) != 0)
            return -1;
        st->pos += 1;
        return push_int(st, p[0]);
    case 'M': /* BININT2 */
        if (need(st, 2) != 0)
            return -1;
        st->pos += 2;
        return push_int(st, (int64_t)le(p, 2));
    case 'J': /* BININT: signed */
        if (need(st, 4) != 0)
            return -1;
        st->pos += 4;
        return push_int(st, (int32_t)(uint32_t)le(p, 4));
    case 0x8a: { /* LONG1: two's complement, little-endian */
        if (need(st, 1) != 0 || need(st, 1 + (size_t)p[0]) != 0)
            return -1;
        int n = p[0];
        if (n > 8)
            return fail(st, "integer too large");
        uint64_t v = le(p + 1, n);
        if (n > 0 && n < 8 && (p[n] & 0x80))
            v |= ~(uint64_t)0 << (8 * n);
        st->pos += 1 + (size_t)n;
        return push_int(st, (int64_t)v);
    }
    case 'G': { /* BINFLOAT: big-endian double */
        if (need(st, 8) != 0 || (i = new_value(st, PK_FLOAT)) < 0)
            return -1;
        uint64_t bits = 0;
        for (int k = 0; k < 8; k++)
            bits = bits << 8 | p[k];
        memcpy(&st->doc->v[i].f, &bits, 8);
        st->pos += 8;
        return push(st, i);
    }
    case 'U': return push_text(st, PK_BYTES, 1);   /* SHORT_BINSTRING (Python 2 str) */
    case 'T': return push_text(st, PK_BYTES, 4);   /* BINSTRING */
    case 'C': return push_text(st, PK_BYTES, 1);   /* SHORT_BINBYTES */
    case 'B': return push_text(st, PK_BYTES, 4);   /* BINBYTES */
    case 0x8e: return push_text(st, PK_BYTES, 8);  /* BINBYTES8 */
    case 0x96: return push_text(st, PK_BYTES, 8);  /* BYTEARRAY8 (protocol 5) */
    case 0x8c: return push_text(st, PK_STR, 1);    /* SHORT_BINUNICODE */
    case 'X': return push_text(st, PK_STR, 4);     /* BINUNICODE */
    case 0x8d: return push_text(st, PK_STR, 8);    /* BINUNICODE8 */
    case ')': return push(st, new_value(st, PK_TUPLE));
    case ']': return push(st, new_value(st, PK_LIST));
    case '}': return push(st, new_value(st, PK_DICT));
    case 't': return push(st, from_mark(st, PK_TUPLE));
    case 'l': return push(st, from_mark(st, PK_LIST));
    case 'd': /* DICT */
        if ((i = from_mark(st, PK_DICT)) < 0)
            return -1;
        if (st->doc->v[i].n % 2)
            return fail(st, "DICT with an odd number of items");
        return push(st, i);
    case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
        int n = op - 0x84;
        if (st->sp - floor_of_stack(st) < n)
            return fail(st, "stack underflow");
        if ((i = new_value(st, PK_TUPLE)) < 0)
            return -1;
        for (int k = n; k > 0; k--)
            if (add_item(st, i, st->stack[st->sp - k]) != 0)
                return -1;
        st->sp -= n;
        return push(st, i);
    }
    case 'a': { /* APPEND */
        int32_t v = pop(st);
        if (v < 0 || st->sp <= floor_of_stack(st))
            return v < 0 ? -1 : fail(st, "stack underflow");
        base = st->sp;
        st->stack[st->sp++] = v;
        return append_items(st, st->stack[base - 1], base);
    }
    case 'e': /* APPENDS */
        if ((i = below_mark(st, &base)) < 0)
            return -1;
        return append_items(st, i, base);
    case 's': /* SETITEM */
        if (st->sp - floor_of_stack(st) < 3)
            return fail(st, "stack underflow");
        return set_items(st, st->stack[st->sp - 3], st->sp - 2);
    case 'u': /* SETITEMS */
        if ((i = below_mark(st, &base)) < 0)
            return -1;
        return set_items(st, i, base);
    case 'q': /* BINPUT */
        if (need(st, 1) != 0)
            return -1;
        st->pos += 1;
        return memo_put(st, p[0]);
    case 'r': /* LONG_BINPUT */
        if (need(st, 4) != 0)
            return -1;
        st->pos += 4;
        return memo_put(st, le(p, 4));
    case 0x94: /* MEMOIZE */
        return memo_put(st, (uint64_t)st->memo_n);
    case 'h': /* BINGET */
        if (need(st, 1) != 0)
            return -1;
        st->pos += 1;
        return memo_get(st, p[0]);
    case 'j': /* LONG_BINGET */
        if (need(st, 4) != 0)
            return -1;
        st->pos += 4;
        return memo_get(st, le(p, 4));
    case 'I': { /* INT (protocols 0, 1): a decimal line; 00 and 01 are False and True */
        const uint8_t *t = NULL;
        size_t tn = 0;
        int64_t x;
        if (global_line(st, &t, &tn) != 0)
            return -1;
        if (tn == 2 && t[0] == '0' && (t[1] == '0' || t[1] == '1')) {
            if ((i = new_value(st, PK_BOOL)) < 0)
                return -1;
            st->doc->v[i].i = t[1] == '1';
            return push(st, i);
        }
        return decimal(st, t, tn, &x) != 0 ? -1 : push_int(st, x);
    }
    case 'L': { /* LONG (protocols 0, 1): a decimal line, L at its end */
        const uint8_t *t = NULL;
        size_t tn = 0;
        int64_t x;
        if (global_line(st, &t, &tn) != 0)
            return -1;
        tn -= tn > 0 && t[tn - 1] == 'L';
        return decimal(st, t, tn, &x) != 0 ? -1 : push_int(st, x);
    }
    case 'V': return push_unicode(st);   /* UNICODE (protocol 0) */
    case 'p':   /* PUT, GET (protocol 0): the memo key as a decimal line */
    case 'g': {
        const uint8_t *t = NULL;
        size_t tn = 0;
        int64_t key;
        if (global_line(st, &t, &tn) != 0 || decimal(st, t, tn, &key) != 0)
            return -1;
        if (key < 0)
            return fail(st, "a negative memo key");
        return op == 'p' ? memo_put(st, (uint64_t)key) : memo_get(st, (uint64_t)key);
    }
    case 'c': { /* GLOBAL */
        const uint8_t *mod = NULL, *name = NULL;
        size_t ml = 0, nl = 0;
        if (global_line(st, &mod, &ml) != 0 || global_line(st, &name, &nl) != 0)
            return -1;
        return push_global(st, mod, ml, name, nl);
    }
    case 0x93: { /* STACK_GLOBAL */
        int32_t name = pop(st), mod = name < 0 ? -1 : pop(st);
        if (mod < 0)
            return -1;
        const pk_value *m = &st->doc->v[mod], *n = &st->doc->v[name];
        if (m->kind != PK_STR || n->kind != PK_STR)
            return fail(st, "STACK_GLOBAL of something not a str");
        return push_global(st, m->s, m->len, n->s, n->len);
    }
    case 'R': return reduce(st);
    case 'b': return build(st);
    case 'Q': { /* BINPERSID */
        int32_t pid = pop(st);
        if (pid < 0 || (i = new_value(st, PK_PERSID)) < 0 || add_item(st, i, pid) != 0)
            return -1;
        return push(st, i);
    }
    default: {
        char msg[80];
        snprintf(msg, sizeof msg, "opcode 0x%02x%s%c%s is not supported", op,
                 op >= 0x20 && op < 0x7f ? " ('" : "", op >= 0x20 && op < 0x7f ? op : ' ',
                 op >= 0x20 && op < 0x7f ? "')" : "");
        return fail(st, msg);
    }
    }
}

int pk_parse(pk_doc *doc, const uint8_t *buf, size_t len, const char *const *globals,
             int nglobals, const char *what, char *err, size_t errlen) {
    memset(doc, 0, sizeof *doc);
    doc->root = -1;
    pk_state st = {.doc = doc, .buf = buf, .len = len, .globals = globals, .nglobals = nglobals,
                   .what = what, .err = err, .errlen = errlen, .codecs_encode = -1,
                   .ordered_dict = -1, .type_tag = -1};
    for (int g = 0; g < nglobals; g++) {
        if (strcmp(globals[g], "_codecs.encode") == 0)
            st.codecs_encode = g;
        if (strcmp(globals[g], "collections.OrderedDict") == 0)
            st.ordered_dict = g;
        if (strcmp(globals[g], "torch.jit._pickle.restore_type_tag") == 0)
            st.type_tag = g;   /* libtorch's pickle_save wraps a typed dict in it */
    }
    int done = 0, rc = 0;
    /* protocols 2 on open with PROTO; 0 and 1 with no header, a dict or list opening with MARK or
    ** an empty container */
    if (len < 2 || !(buf[0] == 0x80 || buf[0] == '(' || buf[0] == '}' || buf[0] == ']'))
        rc = dpy_fail(err, errlen, "%s: not a pickle (protocol 0 to 5)", what);
    while (rc == 0 && !done) {
        if (st.pos >= len) {
            st.op_pos = st.pos;
            rc = fail(&st, "truncated (no STOP)");
        } else {
            rc = step(&st, &done);
        }
    }
    free(st.stack);
    free(st.marks);
    free(st.memo);
    if (rc != 0) {
        pk_free(doc);
        return -1;
    }
    return 0;
}

void pk_free(pk_doc *doc) {
    for (int32_t i = 0; i < doc->nv; i++)
        free(doc->v[i].items);
    free(doc->v);
    for (int i = 0; i < doc->nowned; i++)
        free(doc->owned[i]);
    free(doc->owned);
    memset(doc, 0, sizeof *doc);
    doc->root = -1;
}

const pk_value *pk_at(const pk_doc *doc, int32_t i) {
    return i >= 0 && i < doc->nv ? &doc->v[i] : NULL;
}

int pk_text_is(const pk_value *v, const char *s) {
    size_t n = strlen(s);
    return v && (v->kind == PK_STR || v->kind == PK_BYTES) && v->len == n && memcmp(v->s, s, n) == 0;
}

int32_t pk_dict_get(const pk_doc *doc, const pk_value *dict, const char *s) {
    if (!dict || dict->kind != PK_DICT)
        return -1;
    for (int32_t k = 0; k + 1 < dict->n; k += 2)
        if (pk_text_is(pk_at(doc, dict->items[k]), s))
            return dict->items[k + 1];
    return -1;
}

int pk_is_global(const pk_doc *doc, int32_t i, int g) {
    const pk_value *v = pk_at(doc, i);
    return g >= 0 && v && v->kind == PK_GLOBAL && v->i == g;
}
