/* codec_internal.h: what compress.c needs of fpzip_guard.c (not a public header). */
#ifndef DPY_CODEC_INTERNAL_H
#define DPY_CODEC_INTERNAL_H

/* 1 when fpzip's decoder is the bounded one (see fpzip_guard.c) */
int dpy_fpzip_guarded(void);
/* this thread's decodes since the reset met a symbol no encoder writes */
void dpy_fpzip_forged_reset(void);
int dpy_fpzip_forged(void);

#endif
