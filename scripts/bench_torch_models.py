#!/usr/bin/python3
"""bench_torch_models.py - PyTorch on the models, batch and recipe of
traind's bench_train (synthetic device-resident uint8 batch, cast +
normalise every step, SGD momentum 0.9, weight decay 5e-4), in fp32 or with
bf16 autocast on the CPU (torch.autocast("cpu", torch.bfloat16): convolutions
and matmuls in bf16, master weights, optimizer and loss in fp32).

    /usr/bin/python3 scripts/bench_torch_models.py [--model fmnist-cnn]
        [--precision fp32|bf16] [--batch 128] [--threads 2] [--steps 200]
        [--warmup 20]
Models: fmnist-cnn (1x28x28, as config/models/fmnist-cnn.json), resnet20
(3x32x32, as config/models/resnet20.json: 1x1 conv + batch norm shortcuts)
and resnet18 (3x224x224, 1000 classes: torchvision's, which
config/models/resnet18.json matches layer for layer).
Prints one JSON line with samples_per_s, measured after the warm-up steps.
Uses Debian's python3-torch (run it with /usr/bin/python3).
"""
import argparse
import json
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--model", default="fmnist-cnn",
               choices=["fmnist-cnn", "resnet20", "resnet18"])
p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
p.add_argument("--batch", type=int, default=128)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--steps", type=int, default=200)
p.add_argument("--warmup", type=int, default=20)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)


def cbr(i, o, stride=1):
    return [nn.Conv2d(i, o, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(o), nn.ReLU(inplace=True)]


class Block(nn.Module):
    def __init__(self, i, o, stride):
        super().__init__()
        self.body = nn.Sequential(*cbr(i, o, stride),
                                  nn.Conv2d(o, o, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(o))
        self.down = None
        if stride != 1 or i != o:
            self.down = nn.Sequential(
                nn.Conv2d(i, o, 1, stride=stride, bias=False),
                nn.BatchNorm2d(o))

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return torch.relu(self.body(x) + s)


def resnet20():
    layers = cbr(3, 16)
    i = 16
    for o, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(3):
            layers.append(Block(i, o, stride if b == 0 else 1))
            i = o
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10))


if a.model == "fmnist-cnn":
    model = nn.Sequential(*cbr(1, 32), *cbr(32, 32), nn.MaxPool2d(2),
                          *cbr(32, 64), *cbr(64, 64), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
    shape, mean, std = (1, 28, 28), 0.5, 0.25
elif a.model == "resnet18":
    import torchvision
    model = torchvision.models.resnet18(num_classes=1000)
    shape, mean, std = (3, 224, 224), 0.5, 0.25
else:
    model = resnet20()
    shape, mean, std = (3, 32, 32), 0.5, 0.25
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                      weight_decay=5e-4)
loss_fn = nn.CrossEntropyLoss()
x8 = torch.randint(0, 256, (a.batch, *shape), dtype=torch.uint8)
y = torch.randint(0, 10, (a.batch,))
model.train()
bf16 = a.precision == "bf16"
for i in range(a.warmup + a.steps):
    if i == a.warmup:
        t0 = time.perf_counter()
    x = (x8.float() / 255.0 - mean) / std
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(x)
    loss = loss_fn(out.float(), y)
    loss.backward()
    opt.step()
    loss.item()
dt = time.perf_counter() - t0
print(json.dumps({"impl": "pytorch " + torch.__version__,
                  "model": a.model, "precision": a.precision,
                  "batch": a.batch, "threads": a.threads,
                  "steps": a.steps, "warmup": a.warmup,
                  "samples_per_s": round(a.steps * a.batch / dt, 1)}))
