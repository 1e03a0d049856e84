#!/usr/bin/python3
"""check_train_torch.py - whole training steps of traind against PyTorch.

For fmnist-cnn (1x28x28) and resnet20 (3x32x32), 10 classes, fp32 on the
CPU, and each optimizer setting the job spec offers (SETTINGS below: SGD,
momentum, Nesterov, L2 weight decay, AdamW with decoupled decay, label
smoothing, warm-up, cosine with min_lr, step):
  1. a random model is built in torch from the zoo's layer graph
     (config/models/<name>.json; batch-norm scales, shifts and running
     statistics drawn away from their defaults), saved as safetensors with
     the zoo's names and given to the job as `init`;
  2. random uint8 images (seeded, brighter by class) are written as an
     ImageFolder of PNGs: 2 B + 3 training images, V validation images
     (V not a multiple of B: the last evaluation batch is partial);
  3. `traind --run` trains EPOCHS epochs of SPE steps of batch_size B,
     no augmentation, input.normalize, evaluating after each epoch; the
     sample order of each epoch is the pipeline's Philox permutation,
     which `ref_infer perm` prints, and the last 3 are dropped;
  4. torch trains the same model on the same batches with torch.optim
     (SGD or AdamW over every parameter, as model.parameters() gives it),
     F.cross_entropy(label_smoothing=...), F.batch_norm in training mode
     (momentum 0.1), the learning rate of step s from docs/compute.md's
     closed form through LambdaLR (the same as LinearLR(1/W,
     total_iters=W-1) then CosineAnnealingLR(T_max=steps-W, eta_min) or
     StepLR, stepped per step), and after each epoch the validation loss
     (mean over the samples) and accuracy in evaluation mode;
  5. compares: every parameter, running mean and variance and optimizer
     state of traind's final checkpoint (the largest absolute difference
     over the largest |value| of torch's tensor, within the setting's
     tolerances), num_batches_tracked (the steps), each epoch's training
     loss (mean over its samples), validation loss (relative), training
     and validation accuracy (within one sample, for a near-tie of
     logits), the epoch's reported lr (its last step's), and each metrics
     window's train_loss (the mean over its own steps) and loss (its last
     step's).
Prints the figures.  TD_PARITY_F64=1 also prints how far torch's own
fp32 run is from a float64 one (the yardstick of the tolerances);
TD_PARITY_ONLY=model/setting runs one case.  Exits 77 (skip) when
python3-torch is not installed.

Usage: check_train_torch.py TRAIND REF_INFER
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from st_io import save_safetensors, load_safetensors
    import torch
    import torch.nn.functional as F
    from PIL import Image
except ImportError as e:
    print("SKIP: %s (apt-get install python3-torch python3-pil)" % e)
    sys.exit(77)

EPOCHS = 3
SPE = 2          # steps per epoch
K = EPOCHS * SPE
DROP = 3         # training samples past the last whole batch
SEED = 7
CLASSES = 10

MODELS = {  # name: channels, side, training batch, validation images
    "fmnist-cnn": (1, 28, 20, 30),
    "resnet20": (3, 32, 12, 20),
}

def tol(weights, state, loss):
    return {"weights": weights, "state": state, "loss": loss}


# name, optimizer, label_smoothing, models, tolerances (relative: the
# largest absolute difference over the largest |value| of torch's tensor;
# for losses, of the loss).  The tolerances are 3-10x what this test
# measured on an AVX2 CPU (docs/compute.md#training-steps-against-pytorch),
# where torch's own fp32 run differs from a float64 one by 1/3 to 1/10 of
# them; resnet20's batch norms, fed 12 images, make its gradients (and
# so the momentum and Adam state) far more sensitive than fmnist-cnn's.
# Weight decay is strong (0.2-0.9) so that leaving it out of any
# parameter shows (the lr x wd x steps it adds is several tolerances).
FM, R20 = ("fmnist-cnn",), ("resnet20",)
SGD_MOM = {"type": "sgd", "lr": 0.001, "momentum": 0.9, "weight_decay": 0.5,
           "schedule": {"type": "cosine", "warmup_steps": 2}}
SGD_NEST = {"type": "sgd", "lr": 0.001, "momentum": 0.9, "nesterov": True,
            "weight_decay": 0.2,
            "schedule": {"type": "step", "step_size": 2, "gamma": 0.5}}
SETTINGS = [
    ("sgd", {"type": "sgd", "lr": 0.002}, 0.0, FM, tol(2e-4, 0, 3e-5)),
    ("sgd-momentum-wd-warmup-cosine", SGD_MOM, 0.0, FM,
     tol(2e-4, 2e-2, 3e-5)),
    ("sgd-momentum-wd-warmup-cosine", SGD_MOM, 0.0, R20,
     tol(2e-3, 0.3, 1e-3)),
    ("sgd-nesterov-step-smoothing", SGD_NEST, 0.1, FM,
     tol(2e-4, 5e-2, 3e-5)),
    ("sgd-nesterov-step-smoothing", SGD_NEST, 0.1, R20,
     tol(2e-3, 0.3, 1e-3)),
    ("adamw-warmup-cosine-minlr",
     {"type": "adamw", "lr": 1e-3, "weight_decay": 0.9,
      "betas": [0.8, 0.99], "eps": 1e-2,
      "schedule": {"type": "cosine", "warmup_steps": 1, "min_lr": 1e-4}},
     0.05, FM, tol(3e-3, 0.2, 2e-3)),
    ("adamw-warmup-cosine-minlr",
     {"type": "adamw", "lr": 3e-4, "weight_decay": 0.5,
      "betas": [0.8, 0.99], "eps": 1e-2,
      "schedule": {"type": "cosine", "warmup_steps": 1, "min_lr": 1e-4}},
     0.05, R20, tol(5e-3, 0.6, 5e-3)),
]

MEAN, STD = 0.3, 0.25


class Graph:
    """The zoo's JSON layer graph as torch tensors and a functional
    forward (docs/compute.md's layer table)."""

    def __init__(self, layers, c, gen):
        self.layers = layers
        self.params, self.buffers = {}, {}
        ch, prev = {"input": c}, "input"
        for l in layers:
            l.setdefault("input", prev)
            ci = ch[l["inputs"][0] if l["type"] == "add" else l["input"]]
            n, t = l["name"], l["type"]
            if t == "conv2d":
                co, k = l["channels"], l["kernel"]
                std = (2.0 / (ci * k * k)) ** 0.5
                self.params[n + ".weight"] = std * torch.randn(
                    co, ci, k, k, generator=gen)
                if l.get("bias", False):
                    self.params[n + ".bias"] = 0.1 * torch.randn(
                        co, generator=gen)
                ci = co
            elif t == "batchnorm":
                self.params[n + ".weight"] = 0.5 + torch.rand(ci,
                                                              generator=gen)
                self.params[n + ".bias"] = 0.2 * (torch.rand(
                    ci, generator=gen) - 0.5)
                self.buffers[n + ".running_mean"] = 0.2 * (torch.rand(
                    ci, generator=gen) - 0.5)
                self.buffers[n + ".running_var"] = 0.5 + torch.rand(
                    ci, generator=gen)
            elif t == "dense":
                self.dense_in = n
            ch[n] = ci
            prev = n
        for p in self.params.values():
            p.requires_grad_(True)

    def finish_dense(self, flat, gen):
        n = self.dense_in
        self.params[n + ".weight"] = ((1.0 / flat) ** 0.5 * torch.randn(
            CLASSES, flat, generator=gen)).requires_grad_(True)
        self.params[n + ".bias"] = (0.1 * torch.randn(
            CLASSES, generator=gen)).requires_grad_(True)

    def forward(self, x, train, gen=None):
        out = {"input": x}
        p, b = self.params, self.buffers
        for l in self.layers:
            n, t = l["name"], l["type"]
            if t == "add":
                y = out[l["inputs"][0]] + out[l["inputs"][1]]
            else:
                y = out[l["input"]]
            if t == "conv2d":
                y = F.conv2d(y, p[n + ".weight"], p.get(n + ".bias"),
                             stride=l.get("stride", 1), padding=l.get("pad",
                                                                      0))
            elif t == "batchnorm":
                y = F.batch_norm(y, b[n + ".running_mean"],
                                 b[n + ".running_var"], p[n + ".weight"],
                                 p[n + ".bias"], training=train,
                                 momentum=l.get("momentum", 0.1),
                                 eps=l.get("eps", 1e-5))
            elif t == "relu":
                y = F.relu(y)
            elif t == "maxpool":
                y = F.max_pool2d(y, l["kernel"], l.get("stride", l["kernel"]),
                                 l.get("pad", 0))
            elif t == "global_avgpool":
                y = y.mean(dim=(2, 3), keepdim=True)
            elif t == "flatten":
                y = y.flatten(1)
            elif t == "dense":
                if n + ".weight" not in p:
                    self.finish_dense(y[0].numel(), gen)
                y = F.linear(y.flatten(1), p[n + ".weight"], p[n + ".bias"])
            elif t != "add":
                raise SystemExit("check_train_torch: layer type %s" % t)
            out[n] = y
        return y

    def state(self, steps):
        sd = {k: v.detach().clone() for k, v in self.params.items()}
        sd.update({k: v.clone() for k, v in self.buffers.items()})
        for l in self.layers:
            if l["type"] == "batchnorm":
                sd[l["name"] + ".num_batches_tracked"] = torch.tensor(
                    steps, dtype=torch.int64)
        return sd


def normalise(images):
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    return (x - MEAN) / STD


def lr_at(o, s, total):
    """docs/compute.md's schedule of step s (0-based)."""
    sch = o.get("schedule", {})
    w, lr = sch.get("warmup_steps", 0), o["lr"]
    if s < w:
        return lr * (s + 1) / w
    k = s - w
    if sch.get("type") == "step":
        return lr * sch.get("gamma", 0.1) ** (k // sch.get("step_size",
                                                           1000))
    if sch.get("type") == "cosine":
        lo = sch.get("min_lr", 0.0)
        p = min(k / (total - w), 1.0) if total > w else 1.0
        return lo + (lr - lo) * 0.5 * (1 + np.cos(np.pi * p))
    return lr


def torch_run(g, o, smooth, batches, xv, yv):
    """K steps of torch on batches[e][s] = (x, y); per step (loss,
    correct), per epoch (train loss, train acc, val loss, val acc, lr of
    its last step)."""
    params = list(g.params.values())
    wd = o.get("weight_decay", 0.0)
    if o["type"] == "adamw":
        opt = torch.optim.AdamW(params, lr=o["lr"],
                                betas=tuple(o.get("betas", (0.9, 0.999))),
                                eps=o.get("eps", 1e-8), weight_decay=wd)
    else:
        opt = torch.optim.SGD(params, lr=o["lr"],
                              momentum=o.get("momentum", 0.0),
                              nesterov=o.get("nesterov", False),
                              weight_decay=wd)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_at(o, s, K) / o["lr"])
    steps, hist = [], []
    for ep in batches:
        lsum, corr, n = 0.0, 0, 0
        for x, y in ep:
            lr = opt.param_groups[0]["lr"]
            opt.zero_grad()
            z = g.forward(x, True)
            loss = F.cross_entropy(z, y, label_smoothing=smooth)
            loss.backward()
            c = int((z.argmax(1) == y).sum())
            opt.step()
            sched.step()
            steps.append((float(loss), c))
            lsum += float(loss) * len(y)
            corr += c
            n += len(y)
        with torch.no_grad():
            zv = g.forward(xv, False)
            vl = float(F.cross_entropy(zv, yv))  # mean over the samples
            va = float((zv.argmax(1) == yv).float().mean())
        hist.append((lsum / n, corr / n, vl, va, lr))
    return steps, hist, opt


def torch_state(g, opt):
    """g's state_dict (K steps) and opt's state under traind's names."""
    sd = g.state(K)
    for p, t in zip(g.params, opt.param_groups[0]["params"]):
        st = opt.state[t]
        if st.get("momentum_buffer") is not None:
            sd["optimizer.momentum_buffer." + p] = st["momentum_buffer"]
        if "exp_avg" in st:
            sd["optimizer.exp_avg." + p] = st["exp_avg"]
            sd["optimizer.exp_avg_sq." + p] = st["exp_avg_sq"]
    return sd


def f64(g, o, smooth, batches, xv, yv):
    """TD_PARITY_F64=1: how far torch's own fp32 run is from a float64
    one, the yardstick for the tolerances."""
    runs = []
    for dt in (torch.float32, torch.float64):
        h = Graph.__new__(Graph)
        h.layers = g.layers
        h.params = {k: v.detach().to(dt).clone().requires_grad_(True)
                    for k, v in g.params.items()}
        h.buffers = {k: v.to(dt).clone() for k, v in g.buffers.items()}
        bt = [[(x.to(dt), y) for x, y in ep] for ep in batches]
        steps, hist, opt = torch_run(h, o, smooth, bt, xv.to(dt), yv)
        runs.append((steps, torch_state(h, opt)))
    (s32, d32), (s64, d64) = runs
    w = {"weights": 0.0, "state": 0.0}
    for k, t in d64.items():
        if not k.endswith("num_batches_tracked"):
            kind = "state" if k.startswith("optimizer.") else "weights"
            w[kind] = max(w[kind], rel(d32[k].double().numpy(), t.numpy()))
    lw = max(abs(a[0] - b[0]) / abs(b[0]) for a, b in zip(s32, s64))
    print("  torch fp32 against float64: weights and statistics %.2e, "
          "optimizer state %.2e, step losses %.2e" % (
              w["weights"], w["state"], lw))


def write_folder(root, images, labels):
    for i, (im, y) in enumerate(zip(images, labels)):
        d = os.path.join(root, "c%d" % y)
        os.makedirs(d, exist_ok=True)
        a = im[:, :, 0] if im.shape[2] == 1 else im
        Image.fromarray(a).save(os.path.join(d, "%03d.png" % i))


def dataset(rng, n, c, side):
    labels = np.arange(n) % CLASSES  # every class in every folder
    images = rng.integers(0, 256, size=(n, side, side, c), dtype=np.uint8)
    # a class-dependent brightness so that the steps learn something
    images = np.clip(images.astype(np.int32) // 2 + 12 * labels[:, None,
                     None, None], 0, 255).astype(np.uint8)
    return images, labels


def traind_run(traind, tmp, name, c, side, b, o, smooth, init):
    job = {"name": "parity", "model": name,
           "data": {"train": os.path.join(tmp, "train"),
                    "val": os.path.join(tmp, "val")},
           "input": {"size": side, "channels": c, "workers": 1,
                     "normalize": {"mean": MEAN, "std": STD}},
           "optimizer": o, "label_smoothing": smooth, "batch_size": b,
           "epochs": EPOCHS, "seed": SEED, "init": init, "device": "cpu",
           "precision": "fp32", "deterministic": True, "threads": 2,
           "checkpoint": {"every_steps": 0, "keep": 1,
                          "at_epoch_end": True}}
    jf = os.path.join(tmp, "job.json")
    with open(jf, "w") as f:
        json.dump(job, f)
    ck = os.path.join(tmp, "ckpt")
    r = subprocess.run([traind, "--run", jf, "--json", "--checkpoint-dir",
                        ck], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("traind --run failed (%d):\n%s\n%s" % (
            r.returncode, r.stdout, r.stderr))
    epochs, steps = [], []
    for line in r.stdout.splitlines():
        ev = json.loads(line)
        if ev.get("event") == "epoch":
            epochs.append(ev["data"])
        elif ev.get("event") == "window":
            steps.append(ev["data"])
    files = sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))
    return epochs, steps, load_safetensors(os.path.join(ck, files[-1]))


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def check(traind, ref, model, setting, tmp):
    sname, o, smooth, _, tol = setting
    c, side, b, v = MODELS[model]
    root = os.environ.get("TD_SOURCE_ROOT", os.path.join(
        os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(root, "config", "models", model + ".json")) as f:
        layers = json.load(f)["layers"]
    rng = np.random.default_rng(2026)
    n = SPE * b + DROP
    xt_u8, yt = dataset(rng, n, c, side)
    xv_u8, yv = dataset(rng, v, c, side)
    for d in ("train", "val"):
        p = os.path.join(tmp, d)
        if os.path.isdir(p):
            subprocess.run(["rm", "-rf", p], check=True)
    write_folder(os.path.join(tmp, "train"), xt_u8, yt)
    write_folder(os.path.join(tmp, "val"), xv_u8, yv)
    gen = torch.Generator().manual_seed(11)
    g = Graph(layers, c, gen)
    xt, xv = normalise(xt_u8), normalise(xv_u8)
    with torch.no_grad():
        g.forward(xt[:1], False, gen)  # sizes the dense layer
    init = os.path.join(tmp, "init.safetensors")
    save_safetensors(init, g.state(0))
    # The dataset's order: the class folders sorted (c0..c9, the labels),
    # then the files sorted; epoch e trains on positions perm_e[s*b:s*b+b)
    # of it, and drops the last DROP.
    order = sorted(range(n), key=lambda i: ("c%d" % yt[i], "%03d" % i))
    yt_t, yv_t = torch.from_numpy(yt), torch.from_numpy(yv)
    batches = []
    for e in range(EPOCHS):
        perm = [int(x) for x in subprocess.run(
            [ref, "perm", str(SEED), str(e), str(n)], check=True,
            capture_output=True, text=True).stdout.split()]
        idx = [[order[j] for j in perm[s * b:s * b + b]] for s in range(SPE)]
        batches.append([(xt[i], yt_t[i]) for i in idx])
    ep, st, ck = traind_run(traind, tmp, model, c, side, b, o, smooth, init)
    if os.environ.get("TD_PARITY_F64"):
        f64(g, o, smooth, batches, xv, yv_t)
    steps, hist, opt = torch_run(g, o, smooth, batches, xv, yv_t)
    ok = len(ep) == EPOCHS and len(st) > 0
    if not ok:
        print("  %d epoch events and %d window events, expected %d and some"
              % (len(ep), len(st), EPOCHS))
    worst_l = 0.0
    for w in st:  # metrics windows: train_loss is the mean over its steps
        # (first_step and last_step count from 1, as step events do;
        # steps[] from 0)
        lo, hi = w["first_step"], w["last_step"]
        want = sum(h[0] for h in steps[lo - 1:hi]) / (hi + 1 - lo)
        for what, got, want in (("train_loss", w["train_loss"], want),
                                ("loss", w["loss"], steps[hi - 1][0])):
            r = abs(got - want) / abs(want)
            worst_l = max(worst_l, r)
            if r > tol["loss"]:
                ok = False
                print("  window of steps %d-%d: %s traind %.7g torch %.7g "
                      "(%.2e)" % (lo, hi, what, got, want, r))
    for e, h in zip(ep, hist):
        for what, got, want in (("train_loss", e["train_loss"], h[0]),
                                ("val_loss", e["val_loss"], h[2])):
            r = abs(got - want) / abs(want)
            worst_l = max(worst_l, r)
            if r > tol["loss"]:
                ok = False
                print("  epoch %d %s: traind %.7g torch %.7g (%.2e)" % (
                    e["epoch"], what, got, want, r))
        for what, got, want, n in (("train_acc", e["train_acc"], h[1],
                                    SPE * b),
                                   ("val_acc", e["val_acc"], h[3], v)):
            if abs(got - want) * n > 1.01:
                ok = False
                print("  epoch %d %s: traind %.6g torch %.6g" % (
                    e["epoch"], what, got, want))
        if abs(e["lr"] - h[4]) > 1e-6 * h[4]:
            ok = False
            print("  epoch %d lr: traind %.8g torch %.8g" % (
                e["epoch"], e["lr"], h[4]))
    want = torch_state(g, opt)
    worst = {"weights": (0.0, ""), "state": (0.0, "")}
    for k, t in want.items():
        if k not in ck:
            ok = False
            print("  %s: not in traind's checkpoint" % k)
            continue
        a, w = ck[k], t.numpy()
        if a.shape != w.shape:
            ok = False
            print("  %s: shape %s, torch %s" % (k, a.shape, w.shape))
            continue
        if k.endswith("num_batches_tracked"):
            if int(a) != int(w):
                ok = False
                print("  %s: %d, torch %d" % (k, int(a), int(w)))
            continue
        r = rel(a, w)
        kind = "state" if k.startswith("optimizer.") else "weights"
        if r > worst[kind][0]:
            worst[kind] = (r, k)
        if r > tol[kind]:
            ok = False
            print("  %s: %.2e relative (max |diff| %.3g, max |torch| %.3g)"
                  % (k, r, float(np.abs(a - w).max()),
                     float(np.abs(w).max())))
    extra = [k for k in ck if k.startswith("optimizer.") and k not in want]
    for k in extra:
        ok = False
        print("  %s: in traind's checkpoint, not in torch's state" % k)
    print("%s %s: relative differences at worst: weights and statistics "
          "%.2e (%s), optimizer state %.2e (%s), losses %.2e; final train "
          "loss %.5f val loss %.5f val acc %.3f: %s" % (
              model, sname, worst["weights"][0], worst["weights"][1],
              worst["state"][0], worst["state"][1], worst_l, hist[-1][0],
              hist[-1][2], hist[-1][3], "ok" if ok else "FAILED"))
    return ok


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    only = os.environ.get("TD_PARITY_ONLY")  # "model/setting" to narrow
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for s in SETTINGS:
            for m in s[3]:
                if only and only != "%s/%s" % (m, s[0]):
                    continue
                ok &= check(sys.argv[1], sys.argv[2], m, s, tmp)
    print("all settings agree" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
