/* ref_layers.c - the naive double-precision reference (see ref_layers.h). */
#include "ref_layers.h"

#include "bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define IX(n, c, h, w, C, H, W) ((((size_t)(n) * (C) + (c)) * (H) + (h)) * (W) + (w))

size_t td_ref_size(const td_ref *r, int L)
{
    td_shape s = r->m->layers[L].out;
    return (size_t)r->n * s.c * s.h * s.w;
}

static size_t td__poff(const td_model *m, int p)
{
    size_t off = 0;
    for (int i = 0; i < p; i++)
        off += m->params[i].count;
    return off;
}

static size_t td__soff(const td_model *m, int s)
{
    size_t off = 0;
    for (int i = 0; i < s; i++)
        off += m->state[i].count;
    return off;
}

int td_ref_init(td_ref *r, const td_model *m, int n)
{
    memset(r, 0, sizeof *r);
    r->m = m;
    r->n = n;
    r->y = calloc((size_t)m->nlayers, sizeof *r->y);
    r->dy = calloc((size_t)m->nlayers, sizeof *r->dy);
    r->bmean = calloc((size_t)m->nlayers, sizeof *r->bmean);
    r->bvar = calloc((size_t)m->nlayers, sizeof *r->bvar);
    r->params = calloc(m->param_count, sizeof *r->params);
    r->grads = calloc(m->param_count, sizeof *r->grads);
    r->running = calloc(td__soff(m, m->nstate) + 1, sizeof *r->running);
    r->labels = calloc((size_t)n, sizeof *r->labels);
    if (!r->y || !r->dy || !r->bmean || !r->bvar || !r->params ||
        !r->grads || !r->running || !r->labels)
        return -1;
    for (int L = 0; L < m->nlayers; L++) {
        r->y[L] = calloc(td_ref_size(r, L), sizeof(double));
        r->dy[L] = calloc(td_ref_size(r, L), sizeof(double));
        r->bmean[L] = calloc((size_t)m->layers[L].out.c, sizeof(double));
        r->bvar[L] = calloc((size_t)m->layers[L].out.c, sizeof(double));
        if (!r->y[L] || !r->dy[L] || !r->bmean[L] || !r->bvar[L])
            return -1;
    }
    for (int s = 0; s < m->nstate; s++)
        for (size_t i = 0; i < m->state[s].count; i++)
            r->running[td__soff(m, s) + i] = m->state[s].init;
    return 0;
}

void td_ref_free(td_ref *r)
{
    for (int L = 0; r->y && L < r->m->nlayers; L++) {
        free(r->y[L]);
        free(r->dy[L]);
        free(r->bmean[L]);
        free(r->bvar[L]);
    }
    free(r->y);
    free(r->dy);
    free(r->bmean);
    free(r->bvar);
    free(r->params);
    free(r->grads);
    free(r->running);
    free(r->labels);
}

/* ---- convolution ------------------------------------------------------- */

void td_ref_conv_fwd(const double *x, int n, int c, int h, int w,
                     const double *wt, const double *b, int oc, int k,
                     int s, int p, double *y, int oh, int ow)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < oc; o++)
            for (int yh = 0; yh < oh; yh++)
                for (int yw = 0; yw < ow; yw++) {
                    double acc = b ? b[o] : 0.0;
                    for (int ci = 0; ci < c; ci++)
                        for (int kh = 0; kh < k; kh++)
                            for (int kw = 0; kw < k; kw++) {
                                int ih = yh * s - p + kh, iw = yw * s - p + kw;
                                if (ih < 0 || ih >= h || iw < 0 || iw >= w)
                                    continue;
                                acc += wt[IX(o, ci, kh, kw, c, k, k)] *
                                       x[IX(i, ci, ih, iw, c, h, w)];
                            }
                    y[IX(i, o, yh, yw, oc, oh, ow)] = acc;
                }
}

static void td__conv_bwd(const double *x, int n, int c, int h, int w,
                         const double *wt, int oc, int k, int s, int p,
                         const double *dy, int oh, int ow, double *dx,
                         double *dw, double *db)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < oc; o++)
            for (int yh = 0; yh < oh; yh++)
                for (int yw = 0; yw < ow; yw++) {
                    double g = dy[IX(i, o, yh, yw, oc, oh, ow)];
                    if (db)
                        db[o] += g;
                    for (int ci = 0; ci < c; ci++)
                        for (int kh = 0; kh < k; kh++)
                            for (int kw = 0; kw < k; kw++) {
                                int ih = yh * s - p + kh, iw = yw * s - p + kw;
                                if (ih < 0 || ih >= h || iw < 0 || iw >= w)
                                    continue;
                                size_t xi = IX(i, ci, ih, iw, c, h, w);
                                size_t wi = IX(o, ci, kh, kw, c, k, k);
                                dw[wi] += g * x[xi];
                                dx[xi] += g * wt[wi];
                            }
                }
}

/* ---- batch norm ---------------------------------------------------------- */

static void td__bn_fwd(td_ref *r, int L, int train)
{
    const td_layer *l = &r->m->layers[L];
    const td_shape x = l->out;
    const double *in = r->y[l->in[0]], *g = r->params + td__poff(r->m,
                                                                   l->param0);
    const double *be = g + x.c;
    double *rm = r->running + td__soff(r->m, l->state0), *rv = rm + x.c;
    double cnt = (double)r->n * x.h * x.w;
    for (int c = 0; c < x.c; c++) {
        double mean = 0, var = 0;
        for (int i = 0; i < r->n; i++)
            for (int j = 0; j < x.h * x.w; j++)
                mean += in[IX(i, c, 0, j, x.c, 1, x.h * x.w)];
        mean /= cnt;
        for (int i = 0; i < r->n; i++)
            for (int j = 0; j < x.h * x.w; j++) {
                double d = in[IX(i, c, 0, j, x.c, 1, x.h * x.w)] - mean;
                var += d * d;
            }
        var /= cnt;
        if (train) {
            r->bmean[L][c] = mean;
            r->bvar[L][c] = var;
            rm[c] = (1 - l->momentum) * rm[c] + l->momentum * mean;
            rv[c] = (1 - l->momentum) * rv[c] +
                    l->momentum * var * cnt / (cnt - 1);
        } else {
            mean = rm[c];
            var = rv[c];
        }
        double inv = 1.0 / sqrt(var + l->eps);
        for (int i = 0; i < r->n; i++)
            for (int j = 0; j < x.h * x.w; j++) {
                size_t e = IX(i, c, 0, j, x.c, 1, x.h * x.w);
                r->y[L][e] = g[c] * (in[e] - mean) * inv + be[c];
            }
    }
}

static void td__bn_bwd(td_ref *r, int L)
{
    const td_layer *l = &r->m->layers[L];
    const td_shape x = l->out;
    const double *in = r->y[l->in[0]], *dy = r->dy[L];
    size_t po = td__poff(r->m, l->param0);
    const double *g = r->params + po;
    double *dg = r->grads + po, *db = dg + x.c, *dx = r->dy[l->in[0]];
    double cnt = (double)r->n * x.h * x.w;
    int hw = x.h * x.w;
    for (int c = 0; c < x.c; c++) {
        double mean = r->bmean[L][c];
        double inv = 1.0 / sqrt(r->bvar[L][c] + l->eps);
        double sdy = 0, sdyx = 0;
        for (int i = 0; i < r->n; i++)
            for (int j = 0; j < hw; j++) {
                size_t e = IX(i, c, 0, j, x.c, 1, hw);
                sdy += dy[e];
                sdyx += dy[e] * (in[e] - mean) * inv;
            }
        dg[c] += sdyx;
        db[c] += sdy;
        for (int i = 0; i < r->n; i++)
            for (int j = 0; j < hw; j++) {
                size_t e = IX(i, c, 0, j, x.c, 1, hw);
                double xh = (in[e] - mean) * inv;
                dx[e] += g[c] * inv * (dy[e] - sdy / cnt - xh * sdyx / cnt);
            }
    }
}

/* ---- pooling ------------------------------------------------------------- */

/* Window of output (yh, yw) clipped to the input: [h0, h1) x [w0, w1). */
static void td__win(const td_layer *l, td_shape x, int yh, int yw, int *h0,
                    int *h1, int *w0, int *w1)
{
    int k = l->kernel, s = l->stride, p = l->pad;
    if (l->kind == TD_L_GAP) {
        *h0 = 0, *h1 = x.h, *w0 = 0, *w1 = x.w;
        return;
    }
    *h0 = yh * s - p, *h1 = *h0 + k, *w0 = yw * s - p, *w1 = *w0 + k;
    if (*h0 < 0)
        *h0 = 0;
    if (*w0 < 0)
        *w0 = 0;
    if (*h1 > x.h)
        *h1 = x.h;
    if (*w1 > x.w)
        *w1 = x.w;
}

/* Forward when dy == NULL, else backward into dx. */
static void td__pool(td_ref *r, int L, const double *dy, double *dx)
{
    const td_layer *l = &r->m->layers[L];
    td_shape x = r->m->layers[l->in[0]].out, o = l->out;
    const double *in = r->y[l->in[0]];
    for (int i = 0; i < r->n; i++)
        for (int c = 0; c < o.c; c++)
            for (int yh = 0; yh < o.h; yh++)
                for (int yw = 0; yw < o.w; yw++) {
                    int h0, h1, w0, w1;
                    size_t oi = IX(i, c, yh, yw, o.c, o.h, o.w);
                    td__win(l, x, yh, yw, &h0, &h1, &w0, &w1);
                    double acc = 0, best = -INFINITY;
                    size_t arg = 0;
                    int cnt = (h1 - h0) * (w1 - w0);
                    for (int a = h0; a < h1; a++)
                        for (int b = w0; b < w1; b++) {
                            size_t e = IX(i, c, a, b, x.c, x.h, x.w);
                            acc += in[e];
                            if (in[e] > best) {
                                best = in[e];
                                arg = e;
                            }
                        }
                    if (!dy) {
                        r->y[L][oi] = l->kind == TD_L_MAXPOOL ? best
                                                              : acc / cnt;
                        continue;
                    }
                    if (l->kind == TD_L_MAXPOOL) {
                        dx[arg] += dy[oi];
                        continue;
                    }
                    for (int a = h0; a < h1; a++)
                        for (int b = w0; b < w1; b++)
                            dx[IX(i, c, a, b, x.c, x.h, x.w)] += dy[oi] / cnt;
                }
}

/* ---- dense, loss ------------------------------------------------------- */

static void td__dense(td_ref *r, int L, int bwd)
{
    const td_layer *l = &r->m->layers[L];
    td_shape x = r->m->layers[l->in[0]].out;
    int in = x.c * x.h * x.w, out = l->channels;
    size_t po = td__poff(r->m, l->param0);
    const double *w = r->params + po, *b = l->bias ? w + (size_t)in * out
                                                   : NULL;
    double *dw = r->grads + po, *db = dw + (size_t)in * out;
    const double *xv = r->y[l->in[0]];
    double *dx = r->dy[l->in[0]];
    for (int i = 0; i < r->n; i++)
        for (int o = 0; o < out; o++) {
            if (!bwd) {
                double acc = b ? b[o] : 0;
                for (int j = 0; j < in; j++)
                    acc += w[(size_t)o * in + j] * xv[(size_t)i * in + j];
                r->y[L][(size_t)i * out + o] = acc;
                continue;
            }
            double g = r->dy[L][(size_t)i * out + o];
            if (l->bias)
                db[o] += g;
            for (int j = 0; j < in; j++) {
                dw[(size_t)o * in + j] += g * xv[(size_t)i * in + j];
                dx[(size_t)i * in + j] += g * w[(size_t)o * in + j];
            }
        }
}

double td_ref_xent(const double *z, int k, int label, double *grad)
{
    double m = z[0], s = 0;
    for (int j = 1; j < k; j++)
        m = z[j] > m ? z[j] : m;
    for (int j = 0; j < k; j++)
        s += exp(z[j] - m);
    if (grad)
        for (int j = 0; j < k; j++)
            grad[j] = exp(z[j] - m) / s - (j == label);
    return log(s) + m - z[label];
}

double td_ref_xent_smooth(const double *z, int k, int label, double e,
                          double *grad)
{
    double m = z[0], s = 0, loss = 0;
    for (int j = 1; j < k; j++)
        m = z[j] > m ? z[j] : m;
    for (int j = 0; j < k; j++)
        s += exp(z[j] - m);
    for (int j = 0; j < k; j++) {
        double q = (j == label ? 1.0 - e : 0.0) + e / k;
        loss -= q * (z[j] - m - log(s));
        if (grad)
            grad[j] = exp(z[j] - m) / s - q;
    }
    return loss;
}

/* ---- the graph ----------------------------------------------------------- */

static void td__round_bf16(double *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = td_bf16_round((float)v[i]);
}

void td_ref_round_weights(td_ref *r)
{
    const td_model *m = r->m;
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        if (l->kind == TD_L_CONV || l->kind == TD_L_DENSE)
            td__round_bf16(r->params + td__poff(m, l->param0),
                           m->params[l->param0].count);
    }
}

void td_ref_forward(td_ref *r, int train)
{
    const td_model *m = r->m;
    if (r->bf16)
        td__round_bf16(r->y[0], td_ref_size(r, 0));
    for (int L = 1; L < m->nlayers; L++) {
        const td_layer *l = &m->layers[L];
        td_shape x = m->layers[l->in[0]].out;
        size_t n = td_ref_size(r, L);
        const double *in = r->y[l->in[0]];
        switch (l->kind) {
        case TD_L_CONV: {
            const double *w = r->params + td__poff(m, l->param0);
            const double *b = l->bias ? w + m->params[l->param0].count : NULL;
            td_ref_conv_fwd(in, r->n, x.c, x.h, x.w, w, b, l->channels,
                            l->kernel, l->stride, l->pad, r->y[L], l->out.h,
                            l->out.w);
            break;
        }
        case TD_L_BN:
            td__bn_fwd(r, L, train);
            break;
        case TD_L_RELU:
            for (size_t e = 0; e < n; e++)
                r->y[L][e] = in[e] > 0 ? in[e] : 0;
            break;
        case TD_L_MAXPOOL:
        case TD_L_AVGPOOL:
        case TD_L_GAP:
            td__pool(r, L, NULL, NULL);
            break;
        case TD_L_DENSE:
            td__dense(r, L, 0);
            break;
        case TD_L_ADD:
            for (size_t e = 0; e < n; e++)
                r->y[L][e] = in[e] + r->y[l->in[1]][e];
            break;
        case TD_L_DROPOUT: /* reference supports rate 0 only */
        case TD_L_FLATTEN:
            memcpy(r->y[L], in, n * sizeof(double));
            break;
        default:
            break;
        }
        if (r->bf16)
            td__round_bf16(r->y[L], n);
    }
    int k = m->classes;
    const double *z = r->y[m->nlayers - 1];
    r->loss = 0;
    r->correct = 0;
    for (int i = 0; i < r->n; i++) {
        r->loss += td_ref_xent(z + (size_t)i * k, k, r->labels[i], NULL);
        int arg = 0;
        for (int j = 1; j < k; j++)
            if (z[(size_t)i * k + j] > z[(size_t)i * k + arg])
                arg = j;
        r->correct += arg == r->labels[i];
    }
    r->loss /= r->n;
}

void td_ref_backward(td_ref *r)
{
    const td_model *m = r->m;
    int k = m->classes, last = m->nlayers - 1;
    for (int L = 0; L < m->nlayers; L++)
        memset(r->dy[L], 0, td_ref_size(r, L) * sizeof(double));
    memset(r->grads, 0, m->param_count * sizeof(double));
    for (int i = 0; i < r->n; i++) {
        double *g = r->dy[last] + (size_t)i * k;
        td_ref_xent(r->y[last] + (size_t)i * k, k, r->labels[i], g);
        for (int j = 0; j < k; j++)
            g[j] /= r->n;
    }
    for (int L = last; L >= 1; L--) {
        const td_layer *l = &m->layers[L];
        td_shape x = m->layers[l->in[0]].out;
        size_t n = td_ref_size(r, L);
        const double *in = r->y[l->in[0]], *dy = r->dy[L];
        double *dx = r->dy[l->in[0]];
        if (r->bf16) /* every summand is in: dy as the backend stores it */
            td__round_bf16(r->dy[L], n);
        switch (l->kind) {
        case TD_L_CONV: {
            size_t po = td__poff(m, l->param0);
            double *dw = r->grads + po;
            double *db = l->bias ? dw + m->params[l->param0].count : NULL;
            td__conv_bwd(in, r->n, x.c, x.h, x.w, r->params + po, l->channels,
                         l->kernel, l->stride, l->pad, dy, l->out.h, l->out.w,
                         dx, dw, db);
            break;
        }
        case TD_L_BN:
            td__bn_bwd(r, L);
            break;
        case TD_L_RELU:
            for (size_t e = 0; e < n; e++)
                dx[e] += in[e] > 0 ? dy[e] : 0;
            break;
        case TD_L_MAXPOOL:
        case TD_L_AVGPOOL:
        case TD_L_GAP:
            td__pool(r, L, dy, dx);
            break;
        case TD_L_DENSE:
            td__dense(r, L, 1);
            break;
        case TD_L_ADD:
            for (size_t e = 0; e < n; e++) {
                dx[e] += dy[e];
                r->dy[l->in[1]][e] += dy[e];
            }
            break;
        case TD_L_DROPOUT:
        case TD_L_FLATTEN:
            for (size_t e = 0; e < n; e++)
                dx[e] += dy[e];
            break;
        default:
            break;
        }
    }
}
