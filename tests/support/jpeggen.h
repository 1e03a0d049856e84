/* jpeggen.h - test and benchmark data made on the spot: photo-like images
 * (smooth gradients, shapes, noise), JPEGs of them in every colour space
 * and subsampling traind meets, ImageFolder trees and IDX files.  Nothing
 * is downloaded.  Test-only code: aborts (via Check or exit) on failure.
 */
#ifndef TD_TEST_JPEGGEN_H
#define TD_TEST_JPEGGEN_H

#include <stddef.h>
#include <stdint.h>

enum td_test_cs {
    TD_TEST_RGB = 0,   /* YCbCr JPEG from RGB pixels */
    TD_TEST_GRAY = 1,
    TD_TEST_CMYK = 2,  /* Adobe CMYK JPEG (inverted, as Photoshop writes) */
    TD_TEST_YCCK = 3,
};

/* Fills w*h*c pixels (c = 1, 3 or 4) with a photo-like picture for seed. */
void td_test_photo(uint8_t *px, int w, int h, int c, uint32_t seed);

/* A JPEG of td_test_photo(seed).  subsamp: 444, 422 or 420 (ignored for
 * gray); progressive 0/1.  *out is malloc'd. */
void td_test_jpeg(int w, int h, enum td_test_cs cs, int subsamp, int quality,
                  int progressive, uint32_t seed, uint8_t **out, size_t *len);

/* Encodes given RGB (c=3) or gray (c=1) pixels at 4:4:4. */
void td_test_jpeg_from(const uint8_t *px, int w, int h, int c, int quality,
                       uint8_t **out, size_t *len);

void td_test_write_file(const char *path, const void *data, size_t len);

/* root/class<k>/img<i>.jpg, w x h RGB 4:2:0 q90, seeds k*1000+i. */
void td_test_make_folder(const char *root, int classes, int per_class, int w,
                         int h);

/* root/<name k>/img<i>.jpg that a model can learn: a darkened photo
 * (seed + k*1000 + i) with a class mark, a square of a class colour at a
 * class place (8 colours, 12 places: up to 8 classes differ in both; the
 * mark moves by a few pixels from image to image).  names: `classes` folder names, or NULL for
 * class<k>.  RGB 4:2:0 q90. */
void td_test_make_labelled_folder(const char *root, int classes,
                                  int per_class, int w, int h, uint32_t seed,
                                  const char *const *names);

/* An IDX file of unsigned bytes; gz selects gzip. */
void td_test_write_idx(const char *path, int gz, int ndims,
                       const uint32_t *dims, const uint8_t *data);

/* A fresh directory under $TMPDIR (or /tmp); the caller removes it with
 * td_test_rmtree. */
char *td_test_tmpdir(const char *tag);
void td_test_rmtree(const char *path);

#endif
