/* test_onednn_f16.c - the CPU backend refuses precision fp16 because the
 * oneDNN it links has no f16 training primitive on the CPU, not even a
 * reference one (docs/compute.md, Precision): f16 descriptors of the
 * layers fmnist-cnn and resnet20 use fail to create, where the same ones in
 * fp32 succeed.  Fails when a oneDNN with f16 CPU kernels is linked: then
 * the refusal's reason (lib/job/precision.c) and the docs need revisiting.
 */
#include <stdio.h>
#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h>

#include "backend/cpu/caps.h"
#include "tdtest.h"

static dnnl_engine_t eng;

/* 1 when oneDNN creates a primitive descriptor for op (kept in *keep
 * when keep is not NULL, else destroyed). */
static int creates(const void *op, const_dnnl_primitive_desc_t hint,
                   dnnl_primitive_desc_t *keep)
{
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, op, NULL, eng, hint) != dnnl_success)
        return 0;
    if (keep)
        *keep = pd;
    else
        dnnl_primitive_desc_destroy(pd);
    return 1;
}

static void md(dnnl_memory_desc_t *m, int nd, dnnl_dim_t a, dnnl_dim_t b,
               dnnl_dim_t c, dnnl_dim_t d, dnnl_data_type_t dt,
               dnnl_format_tag_t tag)
{
    dnnl_dims_t dims = {a, b, c, d};
    ck_assert_int_eq(dnnl_memory_desc_init_by_tag(m, nd, dims, dt, tag),
                     dnnl_success);
}

/* How many of the 7 training descriptors oneDNN creates in type dt. */
static int created(dnnl_data_type_t dt)
{
    dnnl_memory_desc_t src, w, dst, pdst, isrc, iw, idst;
    dnnl_dims_t st = {1, 1}, pad = {1, 1}, k = {2, 2}, s2 = {2, 2},
                p0 = {0, 0};
    md(&src, 4, 32, 32, 16, 16, dt, dnnl_nChw16c);
    md(&dst, 4, 32, 32, 16, 16, dt, dnnl_nChw16c);
    md(&w, 4, 32, 32, 3, 3, dt, dnnl_format_tag_any);
    md(&pdst, 4, 32, 32, 8, 8, dt, dnnl_nChw16c);
    md(&isrc, 2, 32, 512, 0, 0, dt, dnnl_nc);
    md(&iw, 2, 10, 512, 0, 0, dt, dnnl_format_tag_any);
    md(&idst, 2, 32, 10, 0, 0, dt, dnnl_nc);
    int n = 0;
    dnnl_convolution_desc_t cd;
    ck_assert_int_eq(dnnl_convolution_forward_desc_init(&cd,
        dnnl_forward_training, dnnl_convolution_direct, &src, &w, NULL, &dst,
        st, pad, pad), dnnl_success);
    dnnl_primitive_desc_t fwd = NULL; /* the backward passes' hint */
    n += creates(&cd, NULL, &fwd);
    ck_assert_int_eq(dnnl_convolution_backward_data_desc_init(&cd,
        dnnl_convolution_direct, &src, &w, &dst, st, pad, pad), dnnl_success);
    n += creates(&cd, fwd, NULL);
    ck_assert_int_eq(dnnl_convolution_backward_weights_desc_init(&cd,
        dnnl_convolution_direct, &src, &w, NULL, &dst, st, pad, pad),
        dnnl_success);
    n += creates(&cd, fwd, NULL);
    if (fwd)
        dnnl_primitive_desc_destroy(fwd);
    dnnl_batch_normalization_desc_t bd;
    ck_assert_int_eq(dnnl_batch_normalization_forward_desc_init(&bd,
        dnnl_forward_training, &src, 1e-5f, dnnl_use_scale | dnnl_use_shift),
        dnnl_success);
    n += creates(&bd, NULL, NULL);
    dnnl_eltwise_desc_t ed;
    ck_assert_int_eq(dnnl_eltwise_forward_desc_init(&ed,
        dnnl_forward_training, dnnl_eltwise_relu, &src, 0, 0), dnnl_success);
    n += creates(&ed, NULL, NULL);
    dnnl_pooling_desc_t pd;
    ck_assert_int_eq(dnnl_pooling_forward_desc_init(&pd,
        dnnl_forward_training, dnnl_pooling_max, &src, &pdst, s2, k, p0, p0),
        dnnl_success);
    n += creates(&pd, NULL, NULL);
    dnnl_inner_product_desc_t id;
    ck_assert_int_eq(dnnl_inner_product_forward_desc_init(&id,
        dnnl_forward_training, &isrc, &iw, NULL, &idst), dnnl_success);
    n += creates(&id, NULL, NULL);
    return n;
}

START_TEST(test_no_f16_training_primitives)
{
    ck_assert_int_eq(dnnl_engine_create(&eng, dnnl_cpu, 0), dnnl_success);
    char d[256];
    td_cpu_caps_describe(td_cpu_caps_get(), d, sizeof d);
    /* the control: every descriptor is a valid fp32 one */
    ck_assert_int_eq(created(dnnl_f32), 7);
    int f16 = created(dnnl_f16);
    printf("oneDNN f16 primitives created: %d of 7 (%s)\n", f16, d);
    ck_assert_msg(f16 == 0, "oneDNN now creates %d of 7 f16 training "
                  "primitives on this CPU (%s): the CPU fp16 refusal's "
                  "reason in lib/job/precision.c and docs/compute.md is "
                  "out of date", f16, d);
    dnnl_engine_destroy(eng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("onednn_f16");
    TCase *tc = tcase_create("onednn_f16");
    tcase_add_test(tc, test_no_f16_training_primitives);
    suite_add_tcase(s, tc);
    return td_test_run(s);
}
