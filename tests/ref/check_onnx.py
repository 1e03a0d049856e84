#!/usr/bin/python3
"""check_onnx.py - `trainctl export --format onnx` against the ONNX tools.

For resnet18 (3x224x224, 1000 classes) and fmnist-cnn (1x28x28, 10
classes), with traind's seeded weights (batch-norm statistics drawn away
from 0/1; ref_infer export):
  1. `trainctl export W.safetensors -o M.onnx --format onnx`
  2. onnx.checker.check_model(full_check=True) passes, the opset is 13
     and the metadata carries traind.classes
  3. OpenCV's DNN module runs M.onnx on uint8 images given as float pixel
     values 0..255 (the normalisation is folded into the graph), and its
     logits equal traind's (td_infer on W.safetensors) to 1e-4 relative,
     with the same top-1 for every image.
Prints the figures.  Exits 77 (skip) when python3-onnx or python3-opencv
is not installed.

Usage: check_onnx.py TRAINCTL REF_INFER
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import cv2
except ImportError as e:
    print("SKIP: %s (apt-get install python3-onnx python3-opencv)" % e)
    sys.exit(77)

TOL = 1e-4


def check(trainctl, ref, name, c, size, classes, tmp):
    w = os.path.join(tmp, name + ".safetensors")
    m = os.path.join(tmp, name + ".onnx")
    subprocess.run([ref, "export", name, str(c), str(size), str(size),
                    str(classes), "9", w], check=True)
    subprocess.run([trainctl, "export", w, "-o", m, "--format", "onnx"],
                   check=True)
    model = onnx.load(m)
    onnx.checker.check_model(model, full_check=True)
    opset = [o.version for o in model.opset_import if o.domain == ""]
    props = {p.key for p in model.metadata_props}
    ok = opset == [13] and "traind.classes" in props
    print("%s: onnx.checker ok, opset %s, metadata %s" %
          (name, opset, sorted(props)))

    n = 8
    rng = np.random.default_rng(77)
    images = rng.integers(0, 256, size=(n, size, size, c), dtype=np.uint8)
    img_path = os.path.join(tmp, "images.u8")
    out_path = os.path.join(tmp, "logits.f32")
    images.tofile(img_path)
    subprocess.run([ref, "file-logits", w, img_path, str(n), out_path],
                   check=True)
    ours = np.fromfile(out_path, dtype="<f4").reshape(n, classes)

    net = cv2.dnn.readNetFromONNX(m)
    net.setInput(images.transpose(0, 3, 1, 2).astype(np.float32))
    theirs = net.forward()
    rel = float(np.abs(ours - theirs).max() / np.abs(ours).max())
    same = bool((ours.argmax(1) == theirs.argmax(1)).all())
    print("%s: OpenCV %s vs traind: max |diff| %.3g over max |logit| %.3g "
          "= %.2e relative; top-1 %s on %d images" %
          (name, cv2.__version__, float(np.abs(ours - theirs).max()),
           float(np.abs(ours).max()), rel, "equal" if same else "DIFFERS",
           n))
    return ok and rel < TOL and same


def check_refusals(trainctl, tmp):
    """A file that is not safetensors, and one without traind's metadata,
    are refused with a message naming the file; no output is left."""
    ok = True
    bad = os.path.join(tmp, "bad.safetensors")
    plain = os.path.join(tmp, "plain.safetensors")
    out = os.path.join(tmp, "never.onnx")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8 not a safetensors file at all")
    hdr = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    with open(plain, "wb") as f:
        f.write(len(hdr).to_bytes(8, "little") + hdr + b"\0\0\0\0")
    for path, why in ((bad, "header length"),
                      (plain, "not self-describing")):
        r = subprocess.run([trainctl, "export", path, "-o", out, "--format",
                            "onnx"], capture_output=True, text=True)
        good = r.returncode == 1 and path in r.stderr and why in r.stderr \
            and not os.path.exists(out)
        print("refused %s: exit %d, %s" % (os.path.basename(path),
                                           r.returncode, r.stderr.strip()))
        ok &= good
    return ok


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    ok = True
    with tempfile.TemporaryDirectory(prefix="td-onnx-") as tmp:
        ok &= check(sys.argv[1], sys.argv[2], "resnet18", 3, 224, 1000, tmp)
        ok &= check(sys.argv[1], sys.argv[2], "fmnist-cnn", 1, 28, 10, tmp)
        ok &= check_refusals(sys.argv[1], tmp)
    print("onnx cross-check: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
