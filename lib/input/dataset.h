/* dataset.h - random access to labelled JPEG samples by index.
 *
 * Two sources behind one handle:
 *  - an ImageFolder tree: root/<class>/<file>.jpg|.jpeg; classes sorted by
 *    name (strcmp) give the label index, files sorted by name within each;
 *  - WebDataset tar shards: members <key>.jpg (or .jpeg) and <key>.cls (the
 *    label as decimal text) next to each other; shards sorted by path and
 *    memory-mapped; the samples are found by walking the tar headers once,
 *    and that index is cached beside each shard as <shard>.tdidx (checked
 *    against the shard's size and mtime; written when the directory lets
 *    us, silently skipped when it does not).
 * A path names: a directory of *.tar shards, an ImageFolder root, one .tar
 * file, or a glob of .tar files ("data/train-*.tar").
 *
 * Owns: the file handles and maps of a dataset, sample -> bytes + label.
 * Never: decodes, and never allocates per sample (a folder sample is read
 * into the caller's growing buffer; a shard sample is a pointer into the
 * map).  Reading is thread-safe; opening and closing are not.
 */
#ifndef TD_DATASET_H
#define TD_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

typedef struct td_dataset td_dataset;

enum td_dataset_kind {
    TD_DATASET_FOLDER = 1,
    TD_DATASET_SHARDS = 2,
};

/* Opens the dataset at `path` (see above).  Errors: -ENOENT (nothing
 * there), -ENOTDIR, TD_E_CORRUPT (a bad shard, a sample without a label),
 * -ENODATA (no samples, or an empty class folder).  err gets a sentence
 * naming the path and the problem. */
int td_dataset_open(const char *path, td_dataset **out, char *err,
                    size_t errcap);
/* The same, counting each sample found into t (base/tally.h; NULL: as
 * td_dataset_open) while it lists folders and reads shards' indexes, for
 * another thread to show. */
struct td_tally;
int td_dataset_open_tally(const char *path, struct td_tally *t,
                          td_dataset **out, char *err, size_t errcap);
/* Opens a list of shard files as one dataset, in the order given. */
int td_dataset_open_shards(const char *const *paths, int n, td_dataset **out,
                           char *err, size_t errcap);
void td_dataset_close(td_dataset *ds);
/* An ImageFolder's entries that are not samples although they are not
 * hidden: files at the root, subfolders of class folders, files not named
 * .jpg, .jpeg or .png (case aside: .webp, Thumbs.db, README.txt), broken
 * symbolic links, what is not a regular file.  Their count, and in *first
 * the first one's path and why ("" when none).  Shards: 0. */
size_t td_dataset_left_out(const td_dataset *ds, const char **first);
/* What the job's log and eval say of n such entries, the first `first`:
 * "N file(s) or folder(s) left out (only .jpg, ... are samples), the
 * first: FIRST", into buf. */
void td_dataset_left_out_text(size_t n, const char *first, char *buf,
                              size_t cap);
/* Why the ImageFolder entry at path (at_root: an entry of the root, else
 * of a class folder) is left out, as td_dataset_left_out counts it, or
 * NULL when it is taken or hidden. */
const char *td_dataset_folder_why_not(const char *path, int at_root);

enum td_dataset_kind td_dataset_kind(const td_dataset *ds);
size_t td_dataset_count(const td_dataset *ds);
/* 1 + the largest label. */
int td_dataset_classes(const td_dataset *ds);
int32_t td_dataset_label(const td_dataset *ds, size_t i);
/* For ImageFolder: the class folder's name; for shards: the name given
 * by td_dataset_set_class_names (classes.txt), else NULL. */
const char *td_dataset_class_name(const td_dataset *ds, int label);
/* How many classes have names (0: none known). */
int td_dataset_named_classes(const td_dataset *ds);
/* Names the classes 0..n-1 (copied); the dataset then has n classes.
 * TD_E_CORRUPT when a label is >= n. */
int td_dataset_set_class_names(td_dataset *ds, const char *const *names,
                               int n, char *err, size_t errcap);
/* Every label l becomes map[l] (0 <= map[l] < n) and the classes are
 * named by names[0..n-1].  -ERANGE (nothing changed) when a label has no
 * place in map. */
int td_dataset_relabel(td_dataset *ds, const int32_t *map, int nmap,
                       const char *const *names, int n);
/* Keeps the samples i with keep[i] != 0, in order (a held-out split). */
void td_dataset_keep(td_dataset *ds, const uint8_t *keep);

/* The largest sample a read takes: a file (or shard member) over it is a
 * bad sample (-EFBIG), never read into memory.  The decoders' own limit
 * (64 Mpx) is well under it for a JPEG or PNG of usual compression. */
#define TD_DATASET_SAMPLE_MAX (64u * 1024 * 1024)

/* The bytes of sample i, in scratch (grown as needed): copied from the
 * shard's map, or read from a folder's file.  Returns 0, -ERANGE,
 * TD_E_SHRUNK when the shard was cut short after it was opened, -EFBIG
 * over TD_DATASET_SAMPLE_MAX, TD_E_NOTREG for a file that is no longer a
 * regular file (a FIFO, a device: opened without blocking, never read),
 * or -errno from reading the file. */
int td_dataset_read(const td_dataset *ds, size_t i, td_buf *scratch,
                    const uint8_t **data, size_t *len);

/* 1 when sample i lies in a shard that is now shorter than where the
 * sample ends (cut short in place after it was opened), else 0.  Reading
 * such a sample faults past the page of the new end (td_dataset_read:
 * TD_E_SHRUNK), but the rest of that page reads as zeros: a sample there
 * decodes as "not a JPEG".  Asked when a sample fails, to name it. */
int td_dataset_shrunk(const td_dataset *ds, size_t i);

/* A name for sample i in log lines: "dir/class/file.jpg" or
 * "shard.tar:key".  Writes into buf and returns it. */
const char *td_dataset_sample_name(const td_dataset *ds, size_t i, char *buf,
                                   size_t cap);

/* The file sample i is read from: "dir/class/file.jpg", or its shard's
 * path.  Writes into buf and returns it. */
const char *td_dataset_file(const td_dataset *ds, size_t i, char *buf,
                            size_t cap);

/* Writes (or refreshes) the index cache of one shard file.  pack calls
 * it after writing a shard.  Returns 0 or a negative code. */
int td_dataset_index_shard(const char *shard_path, char *err, size_t errcap);

#endif
