#!/usr/bin/python3
"""wino_error.py - the rounding error of Winograd F(m x m, 3x3) in fp32
against a direct convolution in fp64, for the tile sizes and
interpolation points a CPU kernel could use (docs/compute.md, the
Winograd bullet of "CPU backend on oneDNN").

The transforms come from Toom-Cook on the given finite points plus the
point at infinity; each is checked exact in fp64 first.  A trial is one
output tile summed over C input channels: the weights' and the input's
transforms, the C element-wise products accumulated in fp32, the output
transform in fp32 (numpy float32 arithmetic, no FMA).  The error of each
output is divided by the sum of the magnitudes of its C*9 terms, the
scale of a direct fp32 sum's own rounding; printed are its maximum and
mean over the trials, and the multiplications per output.

Usage: scripts/wino_error.py [C=32] [TRIALS=200] [SEED=0]
Needs numpy (Debian: python3-numpy).  Exit status: 0 done, 1 a transform
is not exact, 2 bad arguments.
"""
import sys

import numpy as np

CASES = [
    (2, [0, 1, -1]),
    (3, [0, 1, -1, 2]),
    (3, [0, 1, -1, 0.5]),
    (4, [0, 1, -1, 2, -2]),
    (4, [0, 1, -1, 0.5, -0.5]),
    (4, [0, 1, -1, 2, -0.5]),
]


def transforms(m, r, pts):
    """A^T (m x n), G (n x r), B^T (n x n) for F(m, r), n = m + r - 1."""
    n = m + r - 1
    a = np.array(pts, dtype=np.float64)
    g = np.zeros((n, r))
    at = np.zeros((m, n))
    bt = np.zeros((n, n))
    for i in range(n - 1):
        norm = np.prod([a[i] - a[j] for j in range(n - 1) if j != i])
        g[i] = [a[i] ** t / norm for t in range(r)]
        at[:, i] = [a[i] ** k for k in range(m)]
        poly = np.poly1d([1.0])
        for j in range(n - 1):
            if j != i:
                poly = poly * np.poly1d([1.0, -a[j]])
        coef = poly.coeffs[::-1]
        bt[i, : len(coef)] = coef
    g[n - 1, r - 1] = 1
    at[m - 1, n - 1] = 1
    poly = np.poly1d([1.0])
    for j in range(n - 1):
        poly = poly * np.poly1d([1.0, -a[j]])
    coef = poly.coeffs[::-1]
    bt[n - 1, : len(coef)] = coef
    return at, g, bt


def exact(m, pts, rng):
    """max |error| of the 1-D transforms in fp64 against a correlation."""
    at, g, bt = transforms(m, 3, pts)
    w = rng.standard_normal(3)
    d = rng.standard_normal(m + 2)
    y = at @ ((g @ w) * (bt @ d))
    ref = np.array([w @ d[k : k + 3] for k in range(m)])
    return float(np.max(np.abs(y - ref)))


def error(m, pts, chans, trials, rng):
    at, g, bt = (t.astype(np.float32) for t in transforms(m, 3, pts))
    n = m + 2
    f32 = np.float32
    worst, total = 0.0, 0.0
    for _ in range(trials):
        d = rng.standard_normal((chans, n, n)).astype(f32)
        w = (rng.standard_normal((chans, 3, 3)) * 0.2).astype(f32)
        u = np.einsum("ij,cjk,lk->cil", g, w, g).astype(f32)
        v = np.einsum("ij,cjk,lk->cil", bt, d, bt).astype(f32)
        acc = np.zeros((n, n), f32)
        for c in range(chans):
            acc = (acc + (u[c] * v[c]).astype(f32)).astype(f32)
        y = (at @ acc @ at.T).astype(f32)
        d64, w64 = d.astype(np.float64), w.astype(np.float64)
        ref = np.zeros((m, m))
        mag = np.zeros((m, m))
        for i in range(m):
            for j in range(m):
                terms = w64 * d64[:, i : i + 3, j : j + 3]
                ref[i, j] = terms.sum()
                mag[i, j] = np.abs(terms).sum()
        rel = np.abs(y - ref) / mag
        worst = max(worst, float(rel.max()))
        total += float(rel.mean())
    return worst, total / trials


def main(argv):
    try:
        chans = int(argv[1]) if len(argv) > 1 else 32
        trials = int(argv[2]) if len(argv) > 2 else 200
        seed = int(argv[3]) if len(argv) > 3 else 0
        if chans < 1 or trials < 1 or len(argv) > 4:
            raise ValueError
    except ValueError:
        print("usage: wino_error.py [C>=1] [TRIALS>=1] [SEED]",
              file=sys.stderr)
        return 2
    rng = np.random.default_rng(seed)
    print(f"C {chans}, {trials} tiles, seed {seed}: |fp32 - fp64| / "
          "sum |terms| per output")
    for m, pts in CASES:
        if exact(m, pts, rng) > 1e-12:
            print(f"F({m}x{m}, 3x3) points {pts}: transform not exact",
                  file=sys.stderr)
            return 1
        worst, mean = error(m, pts, chans, trials, rng)
        print(f"F({m}x{m}, 3x3) points {str(pts):24s} max {worst:.2e}  "
              f"mean {mean:.2e}  multiplications per output "
              f"{(m + 2) ** 2 / m ** 2:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
