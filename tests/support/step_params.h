/* step_params.h - one training step of a backend seen through its
 * parameters, for the tests that check the optimizer update against the
 * kernels (test_backend_cpu, test_backend_bf16).
 */
#ifndef TD_TEST_STEP_PARAMS_H
#define TD_TEST_STEP_PARAMS_H

#include <stdlib.h>

#include "backend/backend.h"
#include "tdtest.h"

/* Reads every parameter of be into *w0, uploads b and trains one step at
 * lr (step 1), then reads the parameters into *w1 and their gradients
 * into *g: arrays of m->param_count floats in parameter order, which the
 * caller frees. */
static inline void tdt_step_params(td_backend *be, const td_model *m,
                                   const td_batch *b, float lr, float **w0,
                                   float **w1, float **g)
{
    size_t pc = m->param_count, off = 0;
    *w0 = malloc(pc * sizeof **w0);
    *w1 = malloc(pc * sizeof **w1);
    *g = malloc(pc * sizeof **g);
    ck_assert(*w0 && *w1 && *g);
    for (int p = 0; p < m->nparams; p++) {
        size_t n = m->params[p].count;
        ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, p, *w0 + off,
                                              n), 0);
        off += n;
    }
    ck_assert_int_eq(td_backend_upload(be, b), 0);
    ck_assert_int_eq(td_backend_train_step(be, lr, 1), 0);
    off = 0;
    for (int p = 0; p < m->nparams; p++) {
        size_t n = m->params[p].count;
        ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM, p, *w1 + off,
                                              n), 0);
        ck_assert_int_eq(be->ops->read_tensor(be, TD_T_PARAM_GRAD, p,
                                              *g + off, n), 0);
        off += n;
    }
}

#endif
