/* ref_layers.h - naive reference implementations of every layer, in
 * double precision with plain loops, and a reference graph built on them.
 *
 * Owns: the arithmetic the backends are checked against (forward and
 * backward of conv2d, batchnorm, relu, max/avg/global pooling, dense, add,
 * flatten, dropout with rate 0, softmax cross-entropy).  Layouts are the
 * canonical ones of model.h (activations NCHW).  Written for clarity, not
 * speed: use tiny shapes.  The CUDA backend's tests reuse this file.
 * Never does: anything clever.
 */
#ifndef TD_REF_LAYERS_H
#define TD_REF_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef struct td_ref {
    const td_model *m;
    int n;              /* batch */
    double **y, **dy;   /* per layer, n * c * h * w */
    double *params;     /* canonical layouts, m->param_count */
    double *grads;
    double *running;    /* batch-norm running mean/var, as in a snapshot */
    double **bmean, **bvar; /* per batch-norm layer: batch statistics */
    int32_t *labels;
    double loss;        /* mean over the batch */
    int correct;
    /* bf16-rounded reference (mixed precision): the input, every layer's
     * output and every layer's incoming gradient are rounded to the
     * nearest bf16 where the bf16 backend stores them; the arithmetic stays
     * double.  Round the conv/dense weights with td_ref_round_weights. */
    int bf16;
} td_ref;

/* Rounds the conv and dense weights (not biases, not batch-norm scale and
 * shift, which mixed precision keeps in fp32) to bf16. */
void td_ref_round_weights(td_ref *r);

int td_ref_init(td_ref *r, const td_model *m, int n);
void td_ref_free(td_ref *r);
size_t td_ref_size(const td_ref *r, int layer); /* elements of y[layer] */

/* Input: y[0] must hold the normalised batch.  train selects batch
 * statistics (and updates r->running like PyTorch) or running ones. */
void td_ref_forward(td_ref *r, int train);
/* Gradients of the mean loss into dy[] and grads[]. */
void td_ref_backward(td_ref *r);

/* Single layers, exposed for focused tests. */
void td_ref_conv_fwd(const double *x, int n, int c, int h, int w,
                     const double *wt, const double *b, int oc, int k,
                     int s, int p, double *y, int oh, int ow);
double td_ref_xent(const double *z, int k, int label, double *grad);
/* With label smoothing e, straight from the definition: -sum q_j log p_j,
 * q = (1 - e) on the label + e / k everywhere; grad = p - q (unscaled). */
double td_ref_xent_smooth(const double *z, int k, int label, double e,
                          double *grad);

#endif
