#!/usr/bin/python3
"""bench_torch_fmnist.py - PyTorch on the same model, batch and recipe as
traind's bench_train (fmnist-cnn, synthetic device-resident uint8 batch,
cast + normalise every step, SGD momentum 0.9, weight decay 5e-4).

    /usr/bin/python3 scripts/bench_torch_fmnist.py [--batch 128]
        [--threads 2] [--steps 200] [--warmup 20]
Prints one JSON line with samples_per_s, measured after the warm-up steps.
Uses Debian's python3-torch (run it with /usr/bin/python3).
"""
import argparse
import json
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=128)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--steps", type=int, default=200)
p.add_argument("--warmup", type=int, default=20)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)


def block(i, o):
    return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
            nn.ReLU(inplace=True)]


model = nn.Sequential(*block(1, 32), *block(32, 32), nn.MaxPool2d(2),
                      *block(32, 64), *block(64, 64), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                      weight_decay=5e-4)
loss_fn = nn.CrossEntropyLoss()
x8 = torch.randint(0, 256, (a.batch, 1, 28, 28), dtype=torch.uint8)
y = torch.randint(0, 10, (a.batch,))
model.train()
for i in range(a.warmup + a.steps):
    if i == a.warmup:
        t0 = time.perf_counter()
    x = (x8.float() / 255.0 - 0.2860) / 0.3530
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    loss.item()
dt = time.perf_counter() - t0
print(json.dumps({"impl": "pytorch " + torch.__version__,
                  "batch": a.batch, "threads": a.threads,
                  "steps": a.steps, "warmup": a.warmup,
                  "samples_per_s": round(a.steps * a.batch / dt, 1)}))
