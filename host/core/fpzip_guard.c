/*
** fpzip_guard.c: makes libfpzip's decoder safe on a forged stream. Its range decoder computes a
** cumulative frequency from the input and indexes its symbol tables with it unchecked
** (RCqsmodel::decode in fpzip 1.3.0): a stream no encoder wrote reads and writes the heap far
** outside them. This file defines that member function again, the same but for the bound: ours
** takes the place of the library's (ELF interposition: libdpy-lua.so comes before libfpzip in the
** lookup of the dlopen that loads both; a test executable exports it, as CMake asks), and a value
** out of range marks this thread's decode as forged, so it is refused.
** The class layout below is fpzip 1.3.0's (src/rcqsmodel.h; checked against Debian's build), so
** dpy_fpzip_guarded() also requires that version and that the interposition took effect.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fpzip.h>
#include <stddef.h>

#include "codec_internal.h"

/* class RCqsmodel : RCmodel (vtable, const uint symbols) */
typedef struct {
    const void *vtable;
    unsigned symbols, bits, left, more, incr, rescale, targetrescale;
    unsigned *symf, *cumf;
    unsigned searchshift;
    unsigned *search;
} qsmodel;

_Static_assert(offsetof(qsmodel, cumf) == 0x30 && offsetof(qsmodel, searchshift) == 0x38 &&
               offsetof(qsmodel, search) == 0x40, "RCqsmodel's layout in fpzip 1.3.0");

unsigned dpy_qsmodel_decode(qsmodel *m, unsigned *l, unsigned *r) __asm__("_ZN9RCqsmodel6decodeERjS0_");
void dpy_qsmodel_update(qsmodel *m, unsigned s) __asm__("_ZN9RCqsmodel6updateEj");

static _Thread_local int forged;

/* upstream's RCqsmodel::decode, with l bounded by the total frequency */
unsigned dpy_qsmodel_decode(qsmodel *m, unsigned *l, unsigned *r) {
    unsigned total = m->cumf[m->symbols];
    if (*l >= total) {
        forged = 1;
        *l = total - 1;
    }
    unsigned i = *l >> m->searchshift, s = m->search[i], h = m->search[i + 1] + 1;
    while (s + 1 < h) {
        unsigned mid = (s + h) / 2;
        if (*l < m->cumf[mid])
            h = mid;
        else
            s = mid;
    }
    *l = m->cumf[s];
    *r = m->cumf[s + 1] - *l;
    dpy_qsmodel_update(m, s);
    return s;
}

int dpy_fpzip_guarded(void) {
    return fpzip_library_version == 0x130 &&
           dlsym(RTLD_DEFAULT, "_ZN9RCqsmodel6decodeERjS0_") == (void *)dpy_qsmodel_decode;
}

void dpy_fpzip_forged_reset(void) { forged = 0; }
int dpy_fpzip_forged(void) { return forged; }
