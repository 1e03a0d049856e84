#!/usr/bin/python3
"""torch_fmnist_accuracy.py - the reference job (config/jobs/fmnist-cnn.json)
in PyTorch, for comparing accuracy: fmnist-cnn, SGD momentum 0.9, lr 0.05
with 100 linear warm-up steps then cosine to 0, weight decay 5e-4, batch 128
(last partial batch dropped), pad-2 random crop and horizontal flip, test
split evaluated after each epoch.  PyTorch's default initialisation.

    /usr/bin/python3 scripts/torch_fmnist_accuracy.py [--epochs 10]
        [--threads 2] [--seed 1] [--data /usr/share/datasets/fashion-mnist]
Prints one JSON line per epoch.
"""
import argparse
import gzip
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=10)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--seed", type=int, default=1)
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
rng = np.random.default_rng(a.seed)


def idx(path, header):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


def split(name):
    x = idx("%s/%s-images-idx3-ubyte.gz" % (a.data, name), 16)
    y = idx("%s/%s-labels-idx1-ubyte.gz" % (a.data, name), 8)
    return x.reshape(-1, 1, 28, 28), y.astype(np.int64)


xtr, ytr = split("train")
xte, yte = split("t10k")


def block(i, o):
    return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
            nn.ReLU(inplace=True)]


model = nn.Sequential(*block(1, 32), *block(32, 32), nn.MaxPool2d(2),
                      *block(32, 64), *block(64, 64), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                      weight_decay=5e-4)
steps = len(xtr) // 128
total, warm = steps * a.epochs, 100


def lr_at(s):
    if s < warm:
        return (s + 1) / warm
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warm) / (total - warm))))


sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
loss_fn = nn.CrossEntropyLoss()


def norm(x8):
    return (torch.from_numpy(x8).float() / 255.0 - 0.2860) / 0.3530


def augment(xb):
    padded = np.pad(xb, ((0, 0), (0, 0), (2, 2), (2, 2)))
    out = np.empty_like(xb)
    dy = rng.integers(0, 5, len(xb))
    dx = rng.integers(0, 5, len(xb))
    flip = rng.integers(0, 2, len(xb))
    for i in range(len(xb)):
        c = padded[i, :, dy[i]:dy[i] + 28, dx[i]:dx[i] + 28]
        out[i] = c[:, :, ::-1] if flip[i] else c
    return out


for ep in range(a.epochs):
    model.train()
    t0 = time.perf_counter()
    perm = rng.permutation(len(xtr))
    for s in range(steps):
        b = perm[s * 128:(s + 1) * 128]
        x, y = norm(augment(xtr[b])), torch.from_numpy(ytr[b])
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        sched.step()
    dt = time.perf_counter() - t0
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(xte), 500):
            z = model(norm(xte[i:i + 500]))
            correct += (z.argmax(1) == torch.from_numpy(yte[i:i + 500])).sum().item()
    print(json.dumps({"epoch": ep, "val_acc": correct / len(xte),
                      "samples_per_s": round(steps * 128 / dt, 1)}), flush=True)
