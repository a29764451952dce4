/* wavelet.c: the wavelet transform of float vectors over GSL (see wavelet.h). */
#include <gsl/gsl_errno.h>
#include <gsl/gsl_wavelet.h>
#include <pthread.h>
#include <stdlib.h>

#include "dpy_core.h"
#include "wavelet.h"

/* GSL's default error handler aborts the process: errors come back as codes instead. */
static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;
static void quiet(void) { gsl_set_error_handler_off(); }

size_t dpy_wavelet_size(size_t n) {
    size_t m = 1;
    while (m < n)
        m <<= 1;
    return m;
}

/* Transforms m doubles in place (dir 1 forward, -1 inverse). */
static int transform(double *d, size_t m, int family, int member, int dir, char *err, size_t errlen) {
    pthread_once(&quiet_once, quiet);
    const gsl_wavelet_type *type = family == DPY_WAVELET_HAAR      ? gsl_wavelet_haar
                                   : family == DPY_WAVELET_BSPLINE ? gsl_wavelet_bspline
                                                                   : gsl_wavelet_daubechies;
    if (family < 0 || family > 2)
        return dpy_fail(err, errlen, "wavelet: unknown family %d", family);
    gsl_wavelet *w = gsl_wavelet_alloc(type, (size_t)member);
    if (!w)
        return dpy_fail(err, errlen, "wavelet: %s has no member %d", type->name, member);
    gsl_wavelet_workspace *work = gsl_wavelet_workspace_alloc(m);
    int rc = work ? gsl_wavelet_transform(w, d, 1, m, dir > 0 ? gsl_wavelet_forward
                                                              : gsl_wavelet_backward, work)
                  : GSL_ENOMEM;
    if (work)
        gsl_wavelet_workspace_free(work);
    gsl_wavelet_free(w);
    if (rc != GSL_SUCCESS)
        return dpy_fail(err, errlen, "wavelet: %s (%zu values)", gsl_strerror(rc), m);
    return 0;
}

int dpy_wavelet_forward(float *coef, const float *x, size_t n, int family, int member, char *err,
                        size_t errlen) {
    size_t m = dpy_wavelet_size(n);
    double *d = malloc(m * sizeof *d);
    if (!d)
        return dpy_fail(err, errlen, "wavelet: out of memory (%zu values)", m);
    for (size_t i = 0; i < m; i++)
        d[i] = i < n ? x[i] : 0.0;
    int rc = m > 1 ? transform(d, m, family, member, 1, err, errlen) : 0;
    for (size_t i = 0; i < m && rc == 0; i++)
        coef[i] = (float)d[i];
    free(d);
    return rc;
}

int dpy_wavelet_inverse(float *x, size_t n, const float *coef, int family, int member, char *err,
                        size_t errlen) {
    size_t m = dpy_wavelet_size(n);
    double *d = malloc(m * sizeof *d);
    if (!d)
        return dpy_fail(err, errlen, "wavelet: out of memory (%zu values)", m);
    for (size_t i = 0; i < m; i++)
        d[i] = coef[i];
    int rc = m > 1 ? transform(d, m, family, member, -1, err, errlen) : 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        x[i] = (float)d[i];
    free(d);
    return rc;
}
