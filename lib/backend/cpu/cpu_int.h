/* cpu_int.h - internals shared by the CPU backend's files.
 *
 * Owns: the CPU backend's data structures.  cpu_plan.c builds the oneDNN
 * primitives for a model (once per shape); cpu_step.c runs them for a step
 * (cpu_dropout.c draws its dropout masks) and cpu.c implements the rest
 * of the td_backend_ops; cpu_kplan.c plans the hand-written convolution
 * kernels (cpu_bwdw.c, cpu_cfwd.c, cpu_wino.c) where they apply.  Nothing
 * outside lib/backend/cpu/ may include this header.
 *
 * Tensors: every layer output lives in one oneDNN memory (value) and one
 * gradient memory with the same descriptor, in the blocked layout the
 * primitives chose (e.g. nChw16c); reorders happen only at the edges (the
 * normalised input, the logits, tensor reads for tests).  Layers that do
 * not need their own memory alias another layer's ("root"): a relu fused
 * into the batch norm before it, and flatten.  Parameters, gradients,
 * optimizer slots and running statistics are four flat float arrays in the
 * canonical layouts of model.h; weights are reordered into the layouts the
 * primitives want after each update.
 *
 * bf16 (cfg.dtype TD_BF16): activations and their gradients (every y, dy,
 * acc) are bf16; convolutions and inner products read bf16 weights, which
 * the weight maps (cpu_wmap.c) or reorders write from the fp32 master
 * parameters after each optimizer update (round to nearest even),
 * accumulate in fp32 and write
 * fp32 weight and bias gradients; batch norm keeps scale, shift, batch and
 * running statistics in fp32.  The input is normalised in fp32 (xin) and
 * rounded once; the logits are read as fp32 for the loss, and its fp32
 * gradient is rounded into the last layer's dy.  The input keeps plain
 * NCHW unless, in bf16, the model's convolutions prefer channels-last (on
 * AMX: oneDNN 2.6's AMX kernels take only nhwc); then every activation is
 * nhwc and one reorder (r_in) converts and lays out xin; there batch
 * norm runs cpu_bn.c's kernels (fast), fused with its relu, or with an
 * add taking it as first input and the relu after that add (resnet's
 * block end): the add and the relu alias the batch norm's memories.
 * Parameters,
 * gradients, optimizer slots and snapshots stay fp32 whatever the dtype.
 */
#ifndef TD_BACKEND_CPU_H
#define TD_BACKEND_CPU_H

#include <oneapi/dnnl/dnnl.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_fold.h"

typedef struct td__cl {
    int root;      /* layer whose memories hold this layer's output */
    int fused;     /* batch norm: the following relu is fused into it */
    int no_dsrc;   /* conv/dense reading the input: no data gradient */
    int fast;      /* batch norm: cpu_bn.c's (bf16) or cpu_bn8.c's (fp32)
                      kernels instead of oneDNN */
    int add;       /* fast batch norm: the add fused into it (its layer
                      index; then the relu after the add is fused too and
                      the group runs at the add's position), else 0 */
    float *part;   /* fast batch norm: its kernels' scratch */
    uint8_t *rmask; /* fast fp32 batch norm with a relu: the output's
                       signs, one bit per element (cpu_bn8.h) */
    int fold;      /* fast fp32 batch norm + relu folded into every layer
                      that reads it (cpu_fold.h): its output is not
                      written; fd is what those layers apply */
    float *fscale; /* fold: the scale gamma*rstd of the latest forward */
    int wsrc;      /* fold: the convolution (layer index) whose Winograd
                      forward keeps its input's moments (its statistics
                      pass saved), else 0 */
    td_fold fd;    /* fold: {mean or running mean, fscale, beta, C} */
    dnnl_memory_desc_t md;      /* output descriptor (roots only) */
    dnnl_memory_t y, dy;        /* output value and gradient (roots) */
    dnnl_memory_t acc;          /* scratch for a second gradient summand */
    int sources;   /* gradient contributions into this root per step */
    int written;   /* contributions written so far in this backward */
    int deferred;  /* fast batch norm: dy + acc is its gradient, the sum
                      not yet stored (td__cpu_settle_deferred stores it) */
    dnnl_primitive_desc_t pd[4]; /* fwd, inference fwd, bwd data, bwd w */
    dnnl_primitive_t fwd, inf, bwd_d, bwd_w;
    dnnl_memory_t sp[4];        /* views of the shared scratchpad per pd */
    dnnl_memory_t ws, mean, var; /* workspace, batch statistics */
    dnnl_memory_t rmean, rvar;  /* batch norm running statistics (views) */
    dnnl_primitive_t r_src1;    /* add: its gradient into input 1's layout */
    dnnl_memory_t w, dw, b, db; /* views into the flat parameter arrays */
    dnnl_memory_t w_f, w_bd, dw_bw; /* weights in primitive layouts */
    dnnl_primitive_t r_w_f, r_w_bd, r_dw;
    uint32_t *m_f, *m_bd, *m_dw; /* cpu_wmap.c: canonical element i is at
                                    [m[i]] of w_f, w_bd, dw_bw (NULL: the
                                    reorder r_w_f, r_w_bd, r_dw runs) */
    size_t wn;                  /* elements of the canonical weight */
    uint8_t *mask;              /* dropout keep mask, one byte per element
                                   of md (physical order) */
    size_t nelem;               /* elements in the output buffer (padded) */
    struct td_bwdw *bw;         /* convolution: cpu_bwdw.c's backward
                                   weights (AMX) instead of bwd_w */
    struct td_cfwd *cf;         /* convolution: cpu_cfwd.c's forward (AMX)
                                   instead of fwd */
    struct td_cfwd *cbd;        /* convolution: its backward data on
                                   cpu_cfwd.c (flipped weights) instead of
                                   bwd_d */
    int bdf;       /* conv: its backward data runs as a forward convolution
                      of dy with the flipped, channel-swapped weights
                      (cpu_bwdd.c); pd[2], bwd_d, w_bd, r_w_bd and m_bd
                      are that forward's */
    dnnl_memory_t w_flip;       /* bdf: the flipped weights in fp32, plain
                                   [ic][oc][kh][kw] (r_w_bd's source when
                                   no map writes w_bd) */
    struct td__bd2 *bd2;        /* stride-2 conv: its backward data as four
                                   stride-1 forward convolutions
                                   (cpu_bwdd2.c) instead of bwd_d */
    dnnl_memory_t bw_x, bw_dy;  /* conv: source and output gradient in
                                   channels-last for bwd_w, when oneDNN has
                                   only a reference kernel in the
                                   activations' layout (td__bwdw_nhwc) */
    dnnl_primitive_t r_bw_x, r_bw_dy; /* their reorders, run each step */
    struct td_wino *wf;         /* fp32 3x3 convolution: cpu_wino.c's
                                   forward and backward weights instead of
                                   fwd and bwd_w */
    struct td_wino *wbd;        /* its backward data on cpu_wino.c
                                   (flipped weights) instead of bwd_d */
    struct td_sbw *sbw;         /* fp32 stem convolution (planar input,
                                   nChw8c output): cpu_sbw.c's backward
                                   weights instead of bwd_w */
    uint8_t *pmask;             /* max pooling on cpu_pool.c (2x2, or
                                   3x3 stride 2; fp32, blocked): its
                                   winners' masks, instead of fwd's
                                   workspace and bwd_d */
    int pblk;                   /* ... and the layout's channel block */
    int ph, pw;                 /* ... and the input's size */
} td__cl;

typedef struct td__cpu {
    td_backend base;
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_attr_t attr; /* user-managed scratchpad */
    void *scratch;              /* one scratchpad shared by all primitives
                                 * and cpu_wino.c's working buffers */
    size_t scratch_bytes;
    int threads;
    int batch;
    dnnl_data_type_t adt;  /* activations: dnnl_f32 or dnnl_bf16 */
    size_t esize;          /* bytes per activation element */
    dnnl_format_tag_t atag; /* conv and pooling outputs: nhwc or nChw16c
                               (bf16), nChw8c (fp32) when a typical
                               convolution prefers it, else any (the
                               primitive chooses) */
    float *xin;            /* bf16: the normalised input in fp32 */
    dnnl_memory_t xin_m;   /* xin as plain NCHW fp32, when r_in exists */
    dnnl_primitive_t r_in; /* bf16: xin into the input's layout (nhwc) */
    td__cl *cl;          /* one per model layer */
    float *params, *grads, *slots, *state;
    size_t nslots;       /* optimizer slot arrays (0, 1 or 2) */
    int weights_dirty;   /* params changed: refresh primitive layouts */
    uint8_t *pixels;     /* the uploaded batch (the "device" copy) */
    int32_t *labels;
    int n;               /* samples in the uploaded batch */
    enum td_layout layout; /* of the uploaded pixels */
    float nscale[4], nbias[4];
    dnnl_memory_t logits;   /* plain [batch, classes] view of the logits */
    dnnl_memory_t dlogits;  /* plain gradient of the logits */
    dnnl_primitive_t r_logits, r_dlogits; /* when the last layer is blocked */
    int64_t step;        /* this train step, 0-based global (t - 1): the
                            dropout draws' position */
    td_step_stats acc;   /* counters since the last read_stats */
    td_ls_state ls;      /* the loss scaler (scale 0: off) */
    uint8_t *choice;     /* per layer, when choice_set: the TD__CH_* bits
                            the plan follows for each convolution
                            (cpu_tune.c measured or was given them) */
    int choice_set;      /* 0: the plan follows its fixed rules */
    int layout_pick;     /* bf16: the activation layout asked for
                            (TD__LY_*; TD__LY_RULE: the one a typical
                            convolution prefers), unless TD_CPU_NHWC
                            forces one */
    int layout_rule;     /* the layout the rule gives (TD__LY_*), set
                            when planning */
    int64_t *prof;       /* cpu_tune.c, while it times steps: per layer
                            the ns of its backward weights [2L] and
                            backward data [2L + 1] in the latest step */
} td__cpu;

/* A convolution's kernel choices (cpu_tune.c, docs/compute.md "Plan
 * choices by measurement"). */
#define TD__CH_BWDW 1 /* backward weights on cpu_bwdw.c, not oneDNN's */
#define TD__CH_BWDD 2 /* backward data as forward convolution(s):
                         cpu_bwdd.c (stride 1), cpu_bwdd2.c (stride 2) */
#define TD__CH_BNDNN 4 /* a batch norm on oneDNN's primitives, not
                          cpu_bn.c's kernels (where those apply) */
/* The bf16 activation layouts (be->layout_pick, be->layout_rule). */
enum { TD__LY_RULE = 0, TD__LY_NHWC, TD__LY_BLK16, TD__LY_ANY };
/* The environment switch forcing choice `bit` of layer L, when it is set
 * to "1" or "0" (TD_CPU_BWDW; TD_CPU_BWDD for stride 1, TD_CPU_BWDD2 for
 * stride 2; TD__CH_BNDNN: "1" when TD_CPU_BN=onednn), else NULL. */
const char *td__choice_forced(const td__cpu *be, int L, int bit);
/* Choice `bit` of convolution L: forced by its environment switch, else
 * the choices the backend follows, else dflt (the plan's fixed rule). */
int td__choice(const td__cpu *be, int L, int bit, int dflt);
/* The bits layer L's plan took: a convolution's TD__CH_BWDW and
 * TD__CH_BWDD, a batch norm's TD__CH_BNDNN (0 for other layers). */
int td__choice_taken(const td__cpu *be, int L);
/* Batch norm L could run cpu_bn.c's kernels (the choice aside). */
int td__bn_can_fast(const td__cpu *be, int L);
/* Batch norm L and its relu may fold into every layer that reads them
 * (cpu_fold.h): an fp32 nChw8c plan, cpu_bn8.c's kernel, training
 * statistics, and every reader a 3x3 convolution that cpu_wino.c runs or
 * a 2x2 max pooling that cpu_pool.c runs, unless TD_CPU_FOLD=0.  The
 * prediction at wiring; td__fold_plan keeps the folds whose readers were
 * planned so, after every layer. */
int td__bn_folds(const td__cpu *be, int L);
int td__fold_plan(td__cpu *be);
/* cpu_plan.c: the largest channel block a 2x2 max pooling runs
 * cpu_pool.c in: 8 by default, 16 with TD_CPU_POOL=1, 0 with
 * TD_CPU_POOL=0 (oneDNN's). */
int td__pool_blk(void);
/* TD_CPU_NHWC in the environment when it forces the bf16 layout ("1":
 * channels-last, "0": not), else NULL. */
const char *td__layout_forced(void);

/* cpu_tune.c: with cfg.plan TD_PLAN_MEASURE in a bf16 plan, times both
 * kernels of each choice within whole steps and plans again with the
 * faster (a cache per process keeps the times per shape); the ops
 * plan_get and plan_set. */
int td__cpu_tune(td__cpu *be);
int td__cpu_plan_get(td_backend *b, char *out, size_t cap);
int td__cpu_plan_set(td_backend *b, const char *choices);

/* cpu_step.c: the weights' primitive layouts from the fp32 masters when
 * be->weights_dirty; convolution L's backward weights (into its dw) and
 * backward data (into t), as a training step runs them. */
int td__refresh_weights(td__cpu *be);
int td__conv_bwd_weights(td__cpu *be, int L);
int td__conv_bwd_data(td__cpu *be, int L, dnnl_memory_t t);

/* cpu_plan.c */
int td__cpu_plan(td__cpu *be);
void td__cpu_unplan(td__cpu *be);
/* Plan helpers shared with the other plan files: a descriptor of dims in
 * layout tag and type dt; a memory on host data (ptr) or its own; a
 * primitive descriptor's memory descriptor; when the primitive wants the
 * weights in another layout than plain's, a memory in it and a reorder
 * (plain to it when to_prim, else back; *mem stays NULL otherwise); a
 * primitive from op (its scratchpad counted, its kernel logged; bf16 on a
 * reference kernel refused with TD_E_NOTSUP unless allow_slow_bf16); its
 * view of the shared scratchpad, after be->scratch exists (none for a pd
 * NULL or without scratchpad). */
void td__mdt(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims,
             dnnl_format_tag_t tag, dnnl_data_type_t dt);
int td__mem(td__cpu *be, const dnnl_memory_desc_t *md, void *ptr,
            dnnl_memory_t *out, const char *layer);
const dnnl_memory_desc_t *td__q(const_dnnl_primitive_desc_t pd,
                                dnnl_query_t what, int index);
int td__wlayout(td__cpu *be, const dnnl_memory_desc_t *want,
                dnnl_memory_t plain, int to_prim, dnnl_memory_t *mem,
                dnnl_primitive_t *reorder, const char *layer);
int td__pd(td__cpu *be, const void *op, const_dnnl_primitive_desc_t hint,
           dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim,
           const char *what, const char *layer);
int td__scratch_view(td__cpu *be, const_dnnl_primitive_desc_t pd,
                     dnnl_memory_t *sp, const char *layer);
/* Sets be->base.err from a failed oneDNN call and returns TD_E_DEVICE. */
int td__cpu_fail(td__cpu *be, dnnl_status_t st, const char *what,
                 const char *layer);

#define TD__DNNL(be, call, what, layer)                                      \
    do {                                                                     \
        dnnl_status_t td__st = (call);                                       \
        if (td__st != dnnl_success)                                          \
            return td__cpu_fail((be), td__st, (what), (layer));              \
    } while (0)

static inline td__cpu *td__be(td_backend *b) { return (td__cpu *)b; }
/* The data of a oneDNN memory (the buffers are the backend's own). */
static inline void *td__mem_ptr(dnnl_memory_t m)
{
    void *p = NULL;
    dnnl_memory_get_data_handle(m, &p);
    return p;
}
static inline int td__is_bf16(const td__cpu *be)
{
    return be->adt == dnnl_bf16;
}
/* Layer L is a batch norm kept in inference mode while training
 * (cfg.bn_eval: frozen scale, shift and statistics). */
static inline int td__bn_eval(const td__cpu *be, int L)
{
    return be->base.cfg.bn_eval && be->base.cfg.bn_eval[L];
}

/* The layer whose forward and backward run at position L of the layer
 * order, or -1: a root runs at its own position, except a batch norm
 * fused with an add, which runs at the add's (after the add's second
 * input exists). */
static inline int td__run_at(const td__cpu *be, int L)
{
    int r = be->cl[L].root;
    if (r == L)
        return be->cl[L].add ? -1 : L;
    return be->cl[r].add == L ? r : -1;
}

/* cpu_kplan.c: md is dense channels-last bf16 ([rows][C], C contiguous:
 * nhwc or nc); the hand-written kernels' plans for convolution L with
 * source src of ic channels (after its oneDNN primitives' and c->md;
 * each leaves the layer on oneDNN where its kernel does not apply, and
 * sets be->base.err on failure). */
int td__nhwc_dense(const dnnl_memory_desc_t *md);
/* md is dense nChw16c bf16 (oneDNN's aBcd16b, no padded channels). */
int td__blocked16_dense(const dnnl_memory_desc_t *md);
/* md's channel block (8 or 16) when it is a dense nChw8c (aBcd8b, the
 * layout of oneDNN's AVX2 kernels) or nChw16c fp32 layout, else 0. */
int td__blocked_f32_dense(const dnnl_memory_desc_t *md);
/* The layout the hand-written batch norms read in this plan ("nhwc", or
 * "nChw16c" / "nChw8c": td__bn_hw), md is dense in it, and the rows per
 * image they take: 0 in nhwc. */
const char *td__bn_layout(const td__cpu *be);
int td__bn_dense(const td__cpu *be, const dnnl_memory_desc_t *md);
size_t td__bn_hw(const td__cpu *be, int L);
int td__plan_bwdw(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic);
int td__plan_cfwd(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic);
int td__plan_cbd(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic);
int td__plan_wino(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic);
int td__plan_sbw(td__cpu *be, int L, const dnnl_memory_desc_t *src, int ic);
void td__kplan_free(td__cl *c);

/* cpu_wmap.c: one oneDNN reorder run now from src (described by from)
 * into dst (described by to); the primitive and the memories wrapping
 * the two buffers are made and freed here, and the stream waited for. */
dnnl_status_t td__reorder_now(td__cpu *be, const dnnl_memory_desc_t *from,
                              void *src, const dnnl_memory_desc_t *to,
                              void *dst);

/* cpu_wmap.c: the weights' layout maps.  plan after the layer's weight
 * memories (keeps the reorders where a map cannot be built); weights: w ->
 * w_f, w_bd of every mapped layer, one parallel region; grads: dw_bw ->
 * dw likewise. */
int td__wmap_plan(td__cpu *be, int L);
void td__wmap_free(td__cl *c);
void td__wmap_weights(td__cpu *be);
void td__wmap_grads(td__cpu *be);

/* cpu_bwdd.c: backward data as a forward convolution.  ok: layer L's
 * backward data may run so (bf16 channels-last, stride 1, "same"
 * padding, not TD_CPU_BWDD=0); flip_index: where canonical weight element
 * i (oihw) of L lands in the flipped [ic][oc][kh][kw] tensor; flip: w into
 * w_flip for every bdf layer whose w_bd no map writes (before r_w_bd). */
int td__bwdd_ok(const td__cpu *be, int L);
size_t td__bwdd_flip_index(const td__cpu *be, int L, size_t i);
void td__bwdd_flip(td__cpu *be);

/* cpu_bwdd2.c: a stride-2 convolution's backward data as four stride-1
 * forward convolutions, one per output parity (TD_CPU_BWDD2=1).  plan:
 * after the layer's c->md, sets c->bd2 where it applies (0 and nothing
 * planned where not; < 0 on failure, be->base.err set); weights: the
 * phases' weights from the master weights, after any change; scratch:
 * the phases' views of the shared scratchpad (td__scratch_view); run: dy
 * into dx (t); free. */
int td__bd2_plan(td__cpu *be, int L, const dnnl_memory_desc_t *src);
int td__bd2_weights(td__cpu *be);
int td__bd2_scratch(td__cpu *be, td__cl *c, const char *layer);
int td__bd2_run(td__cpu *be, int L, dnnl_memory_t t);
void td__bd2_free(td__cl *c);

/* cpu_dropout.c: dropout masks drawn by each element's NCHW index (the
 * CUDA backend's draw) whatever oneDNN's layout of the tensor.  check at
 * plan, after the layer's md (refuses a layout it cannot map); draw fills
 * cl[L].mask for be->step. */
int td__dropout_check(td__cpu *be, int L);
void td__dropout_draw(td__cpu *be, int L);

/* cpu_step.c: the td_backend_ops train_step and eval_step. */
int td__cpu_train_step(td_backend *b, float lr, int64_t t);
int td__cpu_eval_step(td_backend *b);
/* Stores root r's deferred gradient sum into its dy (reads after a step). */
void td__cpu_settle_deferred(td__cpu *be, int r);

#define TD__ARGS(...) ((dnnl_exec_arg_t[]){__VA_ARGS__})
#define TD__NARGS(...)                                                       \
    ((int)(sizeof((dnnl_exec_arg_t[]){__VA_ARGS__}) / sizeof(dnnl_exec_arg_t)))
#define TD__RUN(be, prim, what, ...)                                         \
    TD__DNNL(be, dnnl_primitive_execute(prim, (be)->strm,                    \
                                        TD__NARGS(__VA_ARGS__),              \
                                        TD__ARGS(__VA_ARGS__)),              \
             what, NULL)

#endif
