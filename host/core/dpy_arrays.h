/*
** dpy_arrays.h: datasets from the files researchers already have, in plain C11: NumPy .npy/.npz,
** torch.save files, CIFAR's Python pickle batches. Every reader is strict: a file that is not
** exactly what it should be is refused with a message naming the file and what is wrong, and no
** header or size field ever makes it allocate more than the file actually delivers.
** Functions return 0 on success, or -1 with a message in err (as in dpy_core.h).
*/
#ifndef DPY_ARRAYS_H
#define DPY_ARRAYS_H

#include <stddef.h>
#include <stdint.h>

#include "dpy_core.h"

#define DPY_ARRAY_MAXDIM 8
/* no dataset file, nor member of one, may be larger: a bound on every read */
#define DPY_ARRAY_LIMIT ((size_t)1 << 36)

typedef enum { DPY_ARRAY_U8, DPY_ARRAY_I32, DPY_ARRAY_I64, DPY_ARRAY_F32, DPY_ARRAY_F64 } dpy_array_type;

/* A dense array in C order, native (little-endian) byte order. */
typedef struct {
    void *data;                     /* owned (malloc); nbytes bytes; NULL when nbytes is 0 */
    size_t nbytes;
    dpy_array_type type;
    int ndim;
    int64_t dims[DPY_ARRAY_MAXDIM];
    char name[64];                  /* the npz member or torch key it came from ("" if none) */
} dpy_array;

const char *dpy_array_type_name(dpy_array_type t);
size_t dpy_array_elsize(dpy_array_type t);
/* "5 x 3 x 32 x 32" into buf */
const char *dpy_array_shape(const dpy_array *a, char *buf, size_t len);
void dpy_array_free(dpy_array *a);

/* {==== NumPy ====} */

/* Reads a .npy file, or from a .npz archive (stored or deflated) the first of the nnames member
** names (without ".npy") that it holds. Little-endian u1, i4, i8, f4, f8 arrays in C order. */
int dpy_npy_read(const char *path, const char *const *names, int nnames, dpy_array *out,
                 char *err, size_t errlen);
/* Parses a whole .npy image of len bytes (what is in a file or an npz member); what names the
** source in messages. On success *data_off is where the data starts; out->data stays NULL. */
int dpy_npy_parse(const uint8_t *buf, size_t len, const char *what, dpy_array *out,
                  size_t *data_off, char *err, size_t errlen);

/* Reads every member of the zip archive of len bytes at buf (a torch.save file), checking each
** one's CRC and length: 0, or -1 with the member and the fault in err. */
int dpy_zip_check(const void *buf, size_t len, char *err, size_t errlen);
/* The same for the file at path, err naming it; 0 too for a file that is no zip archive (torch's
** own reader then says what it is). */
int dpy_zip_check_file(const char *path, char *err, size_t errlen);

/* {==== torch.save ====} */

/* Reads one tensor from a torch.save file (the zip format of PyTorch >= 1.6, also what
** torch::pickle_save writes): the file's tensor if it holds one; from a dict of tensors, the
** first of names it has as a key; from a tuple or list, the element at position. */
int dpy_torch_read(const char *path, const char *const *names, int nnames, int position,
                   dpy_array *out, char *err, size_t errlen);

/* {==== CIFAR Python batches ====} */

/* Reads a CIFAR-10/100 Python batch (a pickled dict with b'data', a uint8 n x 3072 numpy array,
** and label_key, a list of n ints in 0..255) into out (images n x 3 x 32 x 32). */
int dpy_cifar_py_read(const char *path, const char *label_key, dpy_cifar *out, char *err,
                      size_t errlen);

/* {==== from arrays to a dataset ====} */

typedef enum { DPY_LAYOUT_AUTO, DPY_LAYOUT_NCHW, DPY_LAYOUT_NHWC } dpy_layout;

/* Makes images uint8 or float32 N x C x H x W (N x H x W gets C = 1; N x H x W x C with
** DPY_LAYOUT_NHWC, or with AUTO when the last dim is 1 or 3 and dim 1 is not; AUTO refuses 4-d
** images where neither is 1 or 3, which it cannot tell apart; float64 becomes
** float32) and labels int64 N (N x 1 is flattened; any integer type); checks that the counts
** match and the labels are >= 0. what names the source in messages. */
int dpy_dataset_arrays(dpy_array *images, dpy_array *labels, dpy_layout layout, const char *what,
                       char *err, size_t errlen);

/* Per-channel mean and (population) standard deviation of N x C x H x W images, on the [0, 1]
** scale for uint8 ones; at most maxc channels. */
int dpy_array_channel_stats(const dpy_array *images, double *mean, double *std, int maxc,
                            char *err, size_t errlen);

/* {==== helpers the readers share (data_array.c) ====} */

/* Reads the whole file (at most limit bytes) into *out, growing only as bytes arrive. */
int dpy_read_file(const char *path, size_t limit, uint8_t **out, size_t *len, char *err,
                  size_t errlen);
/* Reads member idx of an open libzip archive whole into *out (data_npy.c); what names it. */
struct zip;
int dpy_zip_member(struct zip *z, int64_t idx, const char *what, uint8_t **out, size_t *len,
                   char *err, size_t errlen);

#endif
