#!/usr/bin/python3
"""check_torchvision.py - the zoo's ResNets against torchvision itself.

For resnet18 (224x224, 1000 classes) and resnet50 (96x96, 1000 classes):
  1. torchvision -> traind: torchvision builds the model with its own
     random initialisation (batch-norm statistics and affine parameters
     drawn away from 0/1 so that they matter), saves its state_dict as
     safetensors (written by st_io.py with struct + json: Debian has no
     python3-safetensors), and ref_infer loads it into traind by name and
     runs the same uint8 images in evaluation mode on the CPU backend.
  2. traind -> torchvision: ref_infer exports traind's initialisation as
     safetensors; torchvision loads it with strict=True (every key and
     shape must match, num_batches_tracked included) and runs the images.
In both directions the logits must agree to 1e-4 relative (the largest
absolute difference over the largest |logit|), and the top-1 must be the
same.  Prints the figures.  Exits 77 (skip) when python3-torch or
python3-torchvision is not installed.

Usage: check_torchvision.py REF_INFER
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from st_io import save_safetensors, load_safetensors
    import torch
    import torchvision
except ImportError as e:
    print("SKIP: %s (apt-get install python3-torch python3-torchvision)" % e)
    sys.exit(77)

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
TOL = 1e-4


def torch_logits(model, images):
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    x = (x - torch.from_numpy(MEAN).view(1, 3, 1, 1)) / \
        torch.from_numpy(STD).view(1, 3, 1, 1)
    with torch.no_grad():
        return model(x).numpy()


def traind_logits(ref, name, size, weights, images, tmp):
    n = images.shape[0]
    img_path = os.path.join(tmp, "images.u8")
    out_path = os.path.join(tmp, "logits.f32")
    images.tofile(img_path)
    subprocess.run([ref, "logits", name, "3", str(size), str(size), "1000",
                    weights, img_path, str(n), out_path], check=True)
    return np.fromfile(out_path, dtype="<f4").reshape(n, 1000)


def compare(what, a, b):
    rel = float(np.abs(a - b).max() / np.abs(b).max())
    same = bool((a.argmax(1) == b.argmax(1)).all())
    print("%s: max |diff| %.3g over max |logit| %.3g = %.2e relative; "
          "top-1 %s" % (what, float(np.abs(a - b).max()),
                        float(np.abs(b).max()), rel,
                        "equal" if same else "DIFFERS"))
    return rel < TOL and same


def randomise_bn(model, gen):
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            c = mod.num_features
            with torch.no_grad():
                mod.weight.copy_(0.5 + torch.rand(c, generator=gen))
                mod.bias.copy_(0.2 * (torch.rand(c, generator=gen) - 0.5))
                mod.running_mean.copy_(
                    0.2 * (torch.rand(c, generator=gen) - 0.5))
                mod.running_var.copy_(0.5 + torch.rand(c, generator=gen))
                mod.num_batches_tracked.fill_(3)


def check(ref, name, size, tmp):
    ok = True
    ctor = getattr(torchvision.models, name)
    rng = np.random.default_rng(1234)
    images = rng.integers(0, 256, size=(2, size, size, 3), dtype=np.uint8)

    torch.manual_seed(5)
    tv = ctor()
    randomise_bn(tv, torch.Generator().manual_seed(6))
    tv.eval()
    w = os.path.join(tmp, name + "-torchvision.safetensors")
    save_safetensors(w, tv.state_dict())
    ok &= compare("%s torchvision -> traind" % name,
                  traind_logits(ref, name, size, w, images, tmp),
                  torch_logits(tv, images))

    w = os.path.join(tmp, name + "-traind.safetensors")
    subprocess.run([ref, "export", name, "3", str(size), str(size), "1000",
                    "42", w], check=True)
    back = ctor()
    back.load_state_dict({k: torch.from_numpy(v) for k, v in
                          load_safetensors(w).items()}, strict=True)
    back.eval()
    ok &= compare("%s traind -> torchvision (strict=True)" % name,
                  torch_logits(back, images),
                  traind_logits(ref, name, size, w, images, tmp))
    return ok


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    torch.set_num_threads(2)
    ok = True
    with tempfile.TemporaryDirectory(prefix="td-torchvision-") as tmp:
        ok &= check(sys.argv[1], "resnet18", 224, tmp)
        ok &= check(sys.argv[1], "resnet50", 96, tmp)
    print("torchvision cross-check: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
