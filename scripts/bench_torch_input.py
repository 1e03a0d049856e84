#!/usr/bin/python3
"""bench_torch_input.py - the PyTorch reference for traind's input pipeline.

torchvision's RandomResizedCrop(224) + RandomHorizontalFlip on the same
stored JPEGs traind reads (the .jpg members of the tar shards in DIR, held
in memory as bytes, as traind mmaps them), uint8 batches of 64 from a
DataLoader with num_workers=0 and torch.set_num_threads(1): one core.
Pin it: `taskset -c 1 /usr/bin/python3 scripts/bench_torch_input.py DIR`.

Two decoders, as users would pick them:
  pil  PIL.Image.open(...).convert("RGB"), transforms on the PIL image,
       PILToTensor (torchvision's ImageFolder default path);
  io   torchvision.io.decode_jpeg to a uint8 tensor, transforms on it;
and with --normalize a third, the usual ImageNet recipe:
  pil_norm  as pil, then ToTensor + Normalize (float32 batches: the
       normalisation traind leaves to the device).
Each run times --epochs passes after one untimed warm-up pass per decoder
(images per wall second, and per CPU second of the process, which the
other work on a shared machine disturbs less);
runs alternate pil, io, pil, io...  Prints images/s per run, then the
median, min and max; --json prints them as one object.

Make the shards with the traind bench, e.g.
  build/tests/bench/bench_input --keep /tmp/bi --runs 1
  (then DIR = /tmp/bi/shards)
"""
import argparse
import glob
import io
import json
import os
import statistics
import sys
import tarfile
import time

import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


def load_jpegs(path):
    """The bytes of every .jpg member of path/*.tar (sorted), in order."""
    shards = sorted(glob.glob(os.path.join(path, "*.tar")))
    if not shards:
        sys.exit(f"bench_torch_input: no .tar shards in {path}")
    out = []
    for s in shards:
        with tarfile.open(s) as t:
            for m in t.getmembers():
                if m.name.endswith((".jpg", ".jpeg")):
                    out.append(t.extractfile(m).read())
    return out


class PilSet(Dataset):
    def __init__(self, blobs):
        self.blobs = blobs
        self.tf = transforms.Compose([
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ])

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        img = Image.open(io.BytesIO(self.blobs[i])).convert("RGB")
        return self.tf(img), 0


class PilNormSet(PilSet):
    """The usual ImageNet training recipe: ends in float32 tensors
    normalized on the CPU (ToTensor + Normalize), work traind leaves to the
    device (it hands over uint8)."""
    def __init__(self, blobs):
        super().__init__(blobs)
        self.tf = transforms.Compose([
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406],
                                 [0.229, 0.224, 0.225]),
        ])


class IoSet(Dataset):
    def __init__(self, blobs):
        self.blobs = [torch.frombuffer(bytearray(b), dtype=torch.uint8)
                      for b in blobs]
        self.tf = transforms.Compose([
            transforms.RandomResizedCrop(224, antialias=False),
            transforms.RandomHorizontalFlip(),
        ])

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        img = torchvision.io.decode_jpeg(self.blobs[i],
                                         torchvision.io.ImageReadMode.RGB)
        return self.tf(img), 0


def one_pass(loader):
    n = 0
    for x, _ in loader:
        n += x.shape[0]
    return n


def timed(loader, epochs):
    """(images per wall second, images per CPU second of this process)."""
    t0, c0 = time.perf_counter(), time.process_time()
    n = sum(one_pass(loader) for _ in range(epochs))
    return n / (time.perf_counter() - t0), n / (time.process_time() - c0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shards", help="directory of .tar shards")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--normalize", action="store_true",
                    help="also time pil_norm: ToTensor + Normalize (float32)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    blobs = load_jpegs(a.shards)
    loaders = {}
    sets = [("pil", PilSet(blobs)), ("io", IoSet(blobs))]
    if a.normalize:
        sets.append(("pil_norm", PilNormSet(blobs)))
    for name, ds in sets:
        loaders[name] = DataLoader(ds, batch_size=a.batch, shuffle=True,
                                   num_workers=0, drop_last=True)
        one_pass(loaders[name])  # warm-up
    res = {k: [] for k in loaders}
    cpu = {k: [] for k in loaders}
    for r in range(a.runs):
        for k, ld in loaders.items():
            v, c = timed(ld, a.epochs)
            res[k].append(v)
            cpu[k].append(c)
            if not a.json:
                print(f"run {r + 1} {k}: {v:.1f} img/s, {c:.1f} img/cpu-s",
                      flush=True)
    summary = {k: {"median": statistics.median(v), "min": min(v),
                   "max": max(v), "runs": v,
                   "cpu_median": statistics.median(cpu[k]),
                   "cpu_runs": cpu[k]} for k, v in res.items()}
    summary["images"] = len(blobs)
    summary["epochs"] = a.epochs
    summary["torch"] = torch.__version__
    summary["torchvision"] = torchvision.__version__
    if a.json:
        print(json.dumps(summary))
    else:
        for k in res:
            s = summary[k]
            print(f"torchvision {k}: median {s['median']:.1f} img/s "
                  f"(min {s['min']:.1f}, max {s['max']:.1f}, {a.runs} runs); "
                  f"{s['cpu_median']:.1f} img/cpu-s")


if __name__ == "__main__":
    main()
