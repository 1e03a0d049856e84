/* pack_classes.h - classes.txt and --val-fraction for trainctl pack. */
#ifndef TD_CLIENT_PACK_CLASSES_H
#define TD_CLIENT_PACK_CLASSES_H

#include <stddef.h>
#include <stdint.h>

/* Writes out/classes.txt: the class folders of `folder`, or (folder NULL,
 * IDX) the names "0".."classes-1". */
int td_pack_classes_file(const char *out, const char *folder, int classes,
                         char *err, size_t errcap);
/* Makes tmp (a new folder under out) with train/ and val/ trees of links
 * to folder's images, `fraction` of each class in val.  *nval: images
 * held out.  On failure nothing is left behind. */
int td_pack_split_trees(const char *folder, const char *out, double fraction,
                        uint64_t seed, char *tmp, size_t tmpcap,
                        size_t *nval, char *err, size_t errcap);
void td_pack_remove_tree(const char *dir);
/* Before packing an ImageFolder: names on stderr each file it leaves out
 * (*skipped) and each image whose headers cannot be read (*bad, packed
 * as it is, a bad sample when training), and warns when *bad is more than
 * max_bad of the images (a job with that max_bad_ratio would fail). */
int td_pack_survey(const char *root, double max_bad, size_t *skipped,
                   size_t *bad);

#endif
