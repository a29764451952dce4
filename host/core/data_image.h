/*
** data_image.h: image files (PNG, JPEG) decoded into uint8 planes, per-channel statistics, and
** sorted directory listings: what image-folder datasets are read with. Plain C11, no Lua.
** Functions return 0 on success, or -1 with a message in err (as in dpy_core.h).
*/
#ifndef DPY_DATA_IMAGE_H
#define DPY_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* The largest side accepted (a header promising more is refused before anything is allocated). */
#define DPY_IMAGE_MAX_SIDE 16384

/* What an image file's header says: its size and whether it is grey (1) or colour (3); an
** alpha channel is not counted (it is dropped on decoding). */
typedef struct {
    int width, height, channels;
} dpy_image_info;

/* Reads path's header (PNG or JPEG, told by the first bytes, not the name). */
int dpy_image_probe(const char *path, dpy_image_info *info, char *err, size_t errlen);

/*
** Decodes path into out: channels (1 or 3) planes of height x width bytes, channel-major
** (C x H x W, as torchvision's ToTensor lays them out). The file must be exactly width x height,
** else -1 with both sizes in err. Grey becomes RGB by replication, RGB becomes grey as PIL's
** convert('L') does (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16). Alpha is dropped, palettes
** are expanded, 16-bit samples keep their high byte. A corrupt or truncated file, and a JPEG
** that libjpeg would only warn about (and fill with grey), is an error naming path.
*/
int dpy_image_decode(const char *path, int channels, int height, int width, uint8_t *out,
                     char *err, size_t errlen);
/* The same on len bytes in memory; name is what err calls them. */
int dpy_image_decode_mem(const uint8_t *data, size_t len, const char *name, int channels,
                         int height, int width, uint8_t *out, char *err, size_t errlen);

/* Mean and (population) standard deviation of each channel of n images laid out as n x channels
** x plane bytes, on the 0..1 scale (byte / 255). Never fails. */
void dpy_u8_channel_stats(const uint8_t *data, int64_t n, int channels, int64_t plane,
                          double *mean, double *std);

/* A list of names, owned. */
typedef struct {
    char **names;
    size_t n;
} dpy_names;

/* The entries of path (not . and ..), each sorted by strcmp (byte order, as Python sorts
** UTF-8 names): directories into dirs, regular files into files (symbolic links followed; a
** dangling link goes with the files, whose reader then names it; anything else is left out). */
int dpy_dir_list(const char *path, dpy_names *dirs, dpy_names *files, char *err, size_t errlen);
void dpy_names_free(dpy_names *x);

#endif
