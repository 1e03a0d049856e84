/* make_imagefolder.c - writes an ImageFolder of JPEGs a model can learn
 * (td_test_make_labelled_folder: a photo with a class mark), for the
 * walkthrough in docs/models.md and its test.
 *
 *   make_imagefolder ROOT CLASSES PER_CLASS [WIDTH HEIGHT [SEED]]
 * Classes are named class0, class1, ...; images img000.jpg, ...
 * Defaults: 64 x 48 pixels, seed 1.  Exits 2 on bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>

#include "jpeggen.h"

static int arg(const char *s, int lo, int hi, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < lo || v > hi) {
        fprintf(stderr, "make_imagefolder: %s: expected %d..%d, not '%s'\n",
                what, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc == 5 || argc > 7) {
        fprintf(stderr, "usage: make_imagefolder ROOT CLASSES PER_CLASS "
                "[WIDTH HEIGHT [SEED]]\n");
        return 2;
    }
    int classes = arg(argv[2], 2, 48, "CLASSES");
    int per = arg(argv[3], 1, 100000, "PER_CLASS");
    int w = argc > 5 ? arg(argv[4], 16, 4096, "WIDTH") : 64;
    int h = argc > 5 ? arg(argv[5], 16, 4096, "HEIGHT") : 48;
    int seed = argc > 6 ? arg(argv[6], 0, 1 << 30, "SEED") : 1;
    td_test_make_labelled_folder(argv[1], classes, per, w, h,
                                 (uint32_t)seed, NULL);
    printf("%s: %d classes x %d JPEGs of %dx%d\n", argv[1], classes, per, w,
           h);
    return 0;
}
