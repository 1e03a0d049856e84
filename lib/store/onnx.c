/* onnx.c - the ONNX export of a model (see onnx.h for the graph).
 *
 * Builds the protobuf-c structs of onnx.pb-c.h (generated at build time
 * from Debian's /usr/include/onnx/onnx.proto) in an arena, packs them and
 * writes the bytes durably.
 * Owns: the layer -> operator mapping.  Never: runs the model or guesses
 * at a layer it cannot express (TD_E_NOTSUP naming it).
 */
#include "store/onnx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fsio.h"
#include "onnx.pb-c.h"

/* Every allocation of one export, freed together. */
typedef struct td__arena {
    void **p;
    size_t n, cap;
    int oom;
} td__arena;

static void *td__alloc(td__arena *a, size_t bytes)
{
    if (a->oom)
        return NULL;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        void **np = realloc(a->p, cap * sizeof *np);
        if (!np) {
            a->oom = 1;
            return NULL;
        }
        a->p = np;
        a->cap = cap;
    }
    void *q = calloc(1, bytes ? bytes : 1);
    if (!q) {
        a->oom = 1;
        return NULL;
    }
    return a->p[a->n++] = q;
}

static char *td__str(td__arena *a, const char *s)
{
    char *d = td__alloc(a, strlen(s) + 1);
    if (d)
        strcpy(d, s);
    return d;
}

static void td__arena_free(td__arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
}

/* The graph under construction. */
typedef struct td__g {
    td__arena *a;
    Onnx__GraphProto *g;
    size_t cap_node, cap_init;
} td__g;

static Onnx__NodeProto *td__node(td__g *b, const char *op, const char *name,
                                 const char *out, int nin,
                                 const char *const *in)
{
    td__arena *a = b->a;
    Onnx__NodeProto *n = td__alloc(a, sizeof *n);
    char **ins = td__alloc(a, (size_t)nin * sizeof *ins);
    char **outs = td__alloc(a, sizeof *outs);
    if (!n || !ins || !outs || b->g->n_node == b->cap_node) {
        a->oom = 1;
        return NULL;
    }
    onnx__node_proto__init(n);
    n->op_type = td__str(a, op);
    n->name = td__str(a, name);
    for (int i = 0; i < nin; i++)
        ins[i] = td__str(a, in[i]);
    outs[0] = td__str(a, out);
    n->n_input = (size_t)nin;
    n->input = ins;
    n->n_output = 1;
    n->output = outs;
    b->g->node[b->g->n_node++] = n;
    return n;
}

static Onnx__AttributeProto *td__attr(td__g *b, Onnx__NodeProto *n,
                                      const char *name)
{
    td__arena *a = b->a;
    Onnx__AttributeProto *at = td__alloc(a, sizeof *at);
    Onnx__AttributeProto **v = td__alloc(a, (n ? n->n_attribute + 1 : 1) *
                                                sizeof *v);
    if (!n || !at || !v)
        return NULL;
    onnx__attribute_proto__init(at);
    at->name = td__str(a, name);
    if (n->n_attribute)
        memcpy(v, n->attribute, n->n_attribute * sizeof *v);
    v[n->n_attribute++] = at;
    n->attribute = v;
    return at;
}

static void td__attr_int(td__g *b, Onnx__NodeProto *n, const char *name,
                         int64_t i)
{
    Onnx__AttributeProto *at = td__attr(b, n, name);
    if (!at)
        return;
    at->has_type = 1;
    at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    at->has_i = 1;
    at->i = i;
}

static void td__attr_float(td__g *b, Onnx__NodeProto *n, const char *name,
                           float f)
{
    Onnx__AttributeProto *at = td__attr(b, n, name);
    if (!at)
        return;
    at->has_type = 1;
    at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    at->has_f = 1;
    at->f = f;
}

/* An INTS attribute of n values all v (kernel 2 x k, pads 4 x p, ...). */
static void td__attr_ints(td__g *b, Onnx__NodeProto *n, const char *name,
                          int count, int64_t v)
{
    Onnx__AttributeProto *at = td__attr(b, n, name);
    int64_t *vals = td__alloc(b->a, (size_t)count * sizeof *vals);
    if (!at || !vals)
        return;
    for (int i = 0; i < count; i++)
        vals[i] = v;
    at->has_type = 1;
    at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    at->n_ints = (size_t)count;
    at->ints = vals;
}

static void td__init(td__g *b, const char *name, int nd, const int64_t *dims,
                     const float *v, size_t count)
{
    td__arena *a = b->a;
    Onnx__TensorProto *t = td__alloc(a, sizeof *t);
    int64_t *d = td__alloc(a, (size_t)nd * sizeof *d);
    uint8_t *raw = td__alloc(a, count * sizeof(float));
    if (!t || !d || !raw || b->g->n_initializer == b->cap_init) {
        a->oom = 1;
        return;
    }
    onnx__tensor_proto__init(t);
    memcpy(d, dims, (size_t)nd * sizeof *d);
    memcpy(raw, v, count * sizeof(float)); /* little-endian host */
    t->name = td__str(a, name);
    t->n_dims = (size_t)nd;
    t->dims = d;
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->has_raw_data = 1;
    t->raw_data.len = count * sizeof(float);
    t->raw_data.data = raw;
    b->g->initializer[b->g->n_initializer++] = t;
}

/* A float tensor value: [N (symbolic), d1, ...]. */
static Onnx__ValueInfoProto *td__value(td__g *b, const char *name, int nd,
                                       const int *dims)
{
    td__arena *a = b->a;
    Onnx__ValueInfoProto *v = td__alloc(a, sizeof *v);
    Onnx__TypeProto *tp = td__alloc(a, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = td__alloc(a, sizeof *tt);
    Onnx__TensorShapeProto *sh = td__alloc(a, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dv =
        td__alloc(a, (size_t)(nd + 1) * sizeof *dv);
    if (!v || !tp || !tt || !sh || !dv)
        return NULL;
    for (int i = 0; i <= nd; i++) {
        if (!(dv[i] = td__alloc(a, sizeof *dv[i])))
            return NULL;
        onnx__tensor_shape_proto__dimension__init(dv[i]);
        if (i == 0) {
            dv[i]->value_case =
                ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dv[i]->dim_param = td__str(a, "N");
        } else {
            dv[i]->value_case =
                ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dv[i]->dim_value = dims[i - 1];
        }
    }
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)nd + 1;
    sh->dim = dv;
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->name = td__str(a, name);
    v->type = tp;
    return v;
}

/* The value name of layer L's output. */
static const char *td__vname(const td_model *m, int L)
{
    if (L == 0)
        return "normalized";
    if (L == m->nlayers - 1)
        return "logits";
    return m->layers[L].name;
}

/* Mul + Add of the normalisation, pixels -> "normalized". */
static void td__normalize(td__g *b, const td_model *m, const float *mean,
                          const float *std)
{
    int c = m->layers[0].out.c;
    float scale[4], bias[4];
    int64_t dims[3] = {c, 1, 1}; /* broadcast from the right */
    for (int i = 0; i < c; i++) {
        scale[i] = 1.0f / (255.0f * std[i]);
        bias[i] = -mean[i] / std[i];
    }
    td__init(b, "input.scale", 3, dims, scale, (size_t)c);
    td__init(b, "input.shift", 3, dims, bias, (size_t)c);
    const char *mul[2] = {"pixels", "input.scale"};
    const char *add[2] = {"pixels.scaled", "input.shift"};
    td__node(b, "Mul", "input.scale", "pixels.scaled", 2, mul);
    td__node(b, "Add", "input.shift", "normalized", 2, add);
}

static void td__params(td__g *b, const td_model *m, int L,
                       const float *params, const size_t *poff)
{
    for (int p = m->layers[L].param0; p >= 0 && p < m->nparams &&
                                      m->params[p].layer == L; p++) {
        int64_t dims[4];
        for (int d = 0; d < m->params[p].ndims; d++)
            dims[d] = m->params[p].dims[d];
        td__init(b, m->params[p].name, m->params[p].ndims, dims,
                 params + poff[p], m->params[p].count);
    }
}

/* One layer's nodes.  flat[L]: its ONNX value is [N, K]. */
static int td__layer(td__g *b, const td_model *m, int L, const float *params,
                     const size_t *poff, const float *state,
                     const size_t *soff, int *flat, char *err, size_t cap)
{
    const td_layer *l = &m->layers[L];
    const char *x = td__vname(m, l->in[0]), *y = td__vname(m, L);
    char buf[TD_NAME_MAX + 32];
    const char *in[5] = {x};
    Onnx__NodeProto *n = NULL;
    flat[L] = flat[l->in[0]];
    td__params(b, m, L, params, poff);
    switch (l->kind) {
    case TD_L_CONV:
        in[1] = m->params[l->param0].name;
        in[2] = l->bias ? m->params[l->param0 + 1].name : NULL;
        n = td__node(b, "Conv", l->name, y, l->bias ? 3 : 2, in);
        td__attr_ints(b, n, "kernel_shape", 2, l->kernel);
        td__attr_ints(b, n, "strides", 2, l->stride);
        td__attr_ints(b, n, "pads", 4, l->pad);
        break;
    case TD_L_BN: {
        int64_t dim = l->out.c;
        for (int s = 0; s < 2; s++)
            td__init(b, m->state[l->state0 + s].name, 1, &dim,
                     state + soff[l->state0 + s],
                     m->state[l->state0 + s].count);
        in[1] = m->params[l->param0].name;
        in[2] = m->params[l->param0 + 1].name;
        in[3] = m->state[l->state0].name;
        in[4] = m->state[l->state0 + 1].name;
        n = td__node(b, "BatchNormalization", l->name, y, 5, in);
        td__attr_float(b, n, "epsilon", l->eps);
        td__attr_float(b, n, "momentum", 1.0f - l->momentum);
        break;
    }
    case TD_L_RELU:
        td__node(b, "Relu", l->name, y, 1, in);
        break;
    case TD_L_MAXPOOL:
    case TD_L_AVGPOOL:
        n = td__node(b, l->kind == TD_L_MAXPOOL ? "MaxPool" : "AveragePool",
                     l->name, y, 1, in);
        td__attr_ints(b, n, "kernel_shape", 2, l->kernel);
        td__attr_ints(b, n, "strides", 2, l->stride);
        td__attr_ints(b, n, "pads", 4, l->pad);
        break;
    case TD_L_GAP:
        td__node(b, "GlobalAveragePool", l->name, y, 1, in);
        break;
    case TD_L_DENSE:
        if (!flat[L]) {
            snprintf(buf, sizeof buf, "%s.flatten", l->name);
            n = td__node(b, "Flatten", buf, buf, 1, in);
            td__attr_int(b, n, "axis", 1);
            in[0] = buf;
        }
        in[1] = m->params[l->param0].name;
        in[2] = l->bias ? m->params[l->param0 + 1].name : NULL;
        n = td__node(b, "Gemm", l->name, y, l->bias ? 3 : 2, in);
        td__attr_int(b, n, "transB", 1);
        flat[L] = 1;
        break;
    case TD_L_FLATTEN:
        n = td__node(b, "Flatten", l->name, y, 1, in);
        td__attr_int(b, n, "axis", 1);
        flat[L] = 1;
        break;
    case TD_L_DROPOUT:
        td__node(b, "Identity", l->name, y, 1, in);
        break;
    case TD_L_ADD:
        in[1] = td__vname(m, l->in[1]);
        td__node(b, "Add", l->name, y, 2, in);
        break;
    default:
        snprintf(err, cap, "layer %s: %s has no ONNX form here", l->name,
                 td_layer_kind_name(l->kind));
        return TD_E_NOTSUP;
    }
    return 0;
}

static void td__metadata(td__arena *a, Onnx__ModelProto *mp,
                         const json_t *extra)
{
    const char *key;
    json_t *v;
    size_t n = 0;
    if (!extra)
        return;
    mp->metadata_props = td__alloc(a, (json_object_size(extra) + 1) *
                                          sizeof *mp->metadata_props);
    json_object_foreach((json_t *)extra, key, v) {
        Onnx__StringStringEntryProto *e = td__alloc(a, sizeof *e);
        if (!e || !mp->metadata_props || !json_is_string(v))
            continue;
        onnx__string_string_entry_proto__init(e);
        e->key = td__str(a, key);
        e->value = td__str(a, json_string_value(v));
        mp->metadata_props[n++] = e;
    }
    mp->n_metadata_props = n;
}

int td_onnx_save(const td_model *m, const float *params, const float *state,
                 const float *mean, const float *std,
                 const json_t *extra_meta, const char *path, char *err,
                 size_t errcap)
{
    td__arena a = {0};
    Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    td__g b = {&a, &g, 2 * (size_t)m->nlayers + 4,
               (size_t)m->nparams + (size_t)m->nstate + 2};
    size_t *poff = td__alloc(&a, ((size_t)m->nparams + 1) * sizeof *poff);
    size_t *soff = td__alloc(&a, ((size_t)m->nstate + 1) * sizeof *soff);
    int *flat = td__alloc(&a, (size_t)m->nlayers * sizeof *flat);
    uint8_t *buf = NULL;
    int rc = 0;
    g.node = td__alloc(&a, b.cap_node * sizeof *g.node);
    g.initializer = td__alloc(&a, b.cap_init * sizeof *g.initializer);
    if (a.oom)
        goto oom;
    for (int p = 1; p <= m->nparams; p++)
        poff[p] = poff[p - 1] + m->params[p - 1].count;
    for (int s = 1; s <= m->nstate; s++)
        soff[s] = soff[s - 1] + m->state[s - 1].count;
    g.name = td__str(&a, m->name);
    td__normalize(&b, m, mean, std);
    for (int L = 1; L < m->nlayers && rc == 0; L++)
        rc = td__layer(&b, m, L, params, poff, state, soff, flat, err,
                       errcap);
    if (rc)
        goto out;
    const td_shape in = m->layers[0].out;
    int in_dims[3] = {in.c, in.h, in.w}, out_dims[1] = {m->classes};
    Onnx__ValueInfoProto *vin = td__value(&b, "pixels", 3, in_dims);
    Onnx__ValueInfoProto *vout = td__value(&b, "logits", 1, out_dims);
    if (!flat[m->nlayers - 1]) {
        /* The model ends on an image-shaped [classes, 1, 1]: rename its
         * value and flatten it into the logits. */
        const char *last[1] = {"logits.nchw"};
        Onnx__NodeProto *fl;
        char **o = g.node[g.n_node - 1]->output;
        o[0] = td__str(&a, "logits.nchw");
        fl = td__node(&b, "Flatten", "logits", "logits", 1, last);
        td__attr_int(&b, fl, "axis", 1);
    }
    g.input = td__alloc(&a, sizeof *g.input);
    g.output = td__alloc(&a, sizeof *g.output);
    if (a.oom || !vin || !vout)
        goto oom;
    g.n_input = g.n_output = 1;
    g.input[0] = vin;
    g.output[0] = vout;
    opset.domain = td__str(&a, "");
    opset.has_version = 1;
    opset.version = TD_ONNX_OPSET;
    mp.has_ir_version = 1;
    mp.ir_version = 7;
    mp.n_opset_import = 1;
    mp.opset_import = opsets;
    mp.producer_name = td__str(&a, "traind");
    mp.graph = &g;
    td__metadata(&a, &mp, extra_meta);
    if (a.oom)
        goto oom;
    size_t len = onnx__model_proto__get_packed_size(&mp);
    if (!(buf = malloc(len ? len : 1)))
        goto oom;
    onnx__model_proto__pack(&mp, buf);
    /* tmp, fsync, rename, fsync the folder; never through a link at
     * the tmp name (fsio.h) */
    rc = td_write_atomic(path, 0644, buf, len, NULL, err, errcap);
    goto out;
oom:
    rc = -ENOMEM;
    snprintf(err, errcap, "%s: out of memory", path);
out:
    free(buf);
    td__arena_free(&a);
    return rc;
}
