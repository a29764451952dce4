/*
** wavelet.h: the discrete wavelet transform of a float vector (GSL's gsl_wavelet: Daubechies, Haar
** or B-spline, periodic boundaries, every level), for the wavelet sharing rule. GSL transforms
** 2^j values: a vector of n is zero-padded to m = dpy_wavelet_size(n) coefficients.
*/
#ifndef DPY_WAVELET_H
#define DPY_WAVELET_H

#include <stddef.h>

enum { DPY_WAVELET_DAUBECHIES = 0, DPY_WAVELET_HAAR = 1, DPY_WAVELET_BSPLINE = 2 };

/* The power of two at or above n (1 for n = 0). */
size_t dpy_wavelet_size(size_t n);
/* coef (m = dpy_wavelet_size(n) values) = the transform of x (n values); member: the family's
** member (Daubechies 4..20 even, Haar 2, B-spline 103, 105, 202, ...). 0, or -1 with a message. */
int dpy_wavelet_forward(float *coef, const float *x, size_t n, int family, int member, char *err,
                        size_t errlen);
/* x (n values) = the first n values of the inverse transform of coef (m values). */
int dpy_wavelet_inverse(float *x, size_t n, const float *coef, int family, int member, char *err,
                        size_t errlen);

#endif
