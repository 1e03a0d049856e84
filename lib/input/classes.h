/* classes.h - class names as the identity of a class.
 *
 * A label is a number only inside one dataset; what a class *is* is its
 * name: the folder name of an ImageFolder, or the line of classes.txt that
 * `trainctl pack` writes next to its shards (line i names label i).  A
 * validation set is mapped onto the training set's classes by name, so a
 * val tree that lacks a class cannot shift the others (issue 18).
 *
 * Owns: classes.txt (read, write), the name mapping, the held-out split.
 * Never: reads samples (only labels and names).
 */
#ifndef TD_CLASSES_H
#define TD_CLASSES_H

#include <stddef.h>
#include <stdint.h>

#include "input/dataset.h"

#define TD_CLASSES_FILE "classes.txt"

/* Why the len bytes at name cannot name a class, or NULL if they can: a
 * class name is non-empty UTF-8 without control characters, since names
 * travel in JSON (replies, a checkpoint's traind.classes).  The reason
 * may be written into why (cap bytes). */
const char *td_classes_bad_name(const char *name, size_t len, char *why,
                                size_t cap);
/* name for a message: printable ASCII as it is, every other byte (and
 * the backslash) as \xNN, so that any name fits in JSON; cut to cap. */
void td_classes_quote(const char *name, char *out, size_t cap);

/* Writes dir/classes.txt, one name per line (tmp + rename).  Each name
 * must be one td_classes_attach takes (non-empty UTF-8 without control
 * characters): -EINVAL naming the class otherwise.  0 or -errno with err
 * filled in. */
int td_classes_write(const char *dir, const char *const *names, int n,
                     char *err, size_t errcap);
/* For a shard dataset opened from `path` (a directory, a .tar file or a
 * glob): reads classes.txt from that directory, when there is one, and
 * names the dataset's classes with it: line i (a final "\r" dropped, the
 * last "\n" optional) names label i.  Nothing for an ImageFolder (its
 * folders are the names) or without the file.  0, or an error naming the
 * file: TD_E_CORRUPT naming the line for an empty name, a control
 * character, bytes that are not UTF-8 or a name two lines give, or a
 * label beyond its lines; -errno when it cannot be read. */
/* The classes file td_classes_attach reads for data path `path` (a
 * folder of shards, a shard or a glob): TD_CLASSES_FILE beside it. */
void td_classes_file(const char *path, char *file, size_t cap);
int td_classes_attach(td_dataset *ds, const char *path, char *err,
                      size_t errcap);
/* Maps val's labels onto train's classes by name.  A val class that train
 * lacks is an error (TD_E_SPEC, naming it); train classes that val lacks
 * are listed in note ("" when none; note may be NULL).  Without names on
 * both sides the labels are taken as they are, and a val label beyond
 * train's classes is the error. */
int td_classes_align(const td_dataset *train, td_dataset *val, char *note,
                     size_t notecap, char *err, size_t errcap);
/* Marks the held-out samples: out[i] = 1 for about `fraction` of each
 * class (rounded, at least one of every class with two or more samples),
 * chosen by a shuffle of (seed, class); 0 for the rest.  Deterministic. */
int td_classes_split(const td_dataset *ds, double fraction, uint64_t seed,
                     uint8_t *out);

#endif
