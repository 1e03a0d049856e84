#!/usr/bin/env python3
"""gen_models.py - writes the ResNet definitions of config/models/.

The files are committed; run this only to change them.  fmnist-cnn.json is
written by hand.

Layer names are chosen so that the parameters and buffers carry the names
people already use (docs/checkpoints.md):
  resnet18, resnet50: torchvision's state_dict keys exactly (conv1, bn1,
    layer1.0.conv1, layer2.0.downsample.0, fc, ...), with torchvision's
    architecture: stride on the first 3x3 conv of a basic block and on the
    3x3 conv (conv2) of a bottleneck (ResNet v1.5), 1x1-conv + batch-norm
    downsample shortcuts where the shape changes, batch norm eps 1e-5 and
    momentum 0.1 (the model.h defaults).
  resnet20: the usual CIFAR naming (conv1, bn1, layer1.0.conv1, ...,
    shortcut.0/.1 for the 1x1-conv "option B" shortcuts, linear).
Layers without parameters (relu, add, pools) are named so that a block's
output is the block's own name ("layer1.0").
"""
import json
import os
import sys

out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "config", "models")


def conv_bn(layers, conv, bn, ch, k, stride, pad, inp, relu=None):
    c = {"type": "conv2d", "name": conv, "channels": ch, "kernel": k,
         "stride": stride, "pad": pad}
    if inp:
        c["input"] = inp
    layers.append(c)
    layers.append({"type": "batchnorm", "name": bn})
    if relu:
        layers.append({"type": "relu", "name": relu})
    return layers[-1]["name"]


def shortcut(layers, name, inp, ch, stride, in_ch, short):
    if stride == 1 and in_ch == ch:
        return inp
    return conv_bn(layers, "%s.%s.0" % (name, short),
                   "%s.%s.1" % (name, short), ch, 1, stride, 0, inp)


def finish(layers, name, main, sc):
    layers.append({"type": "add", "name": name + ".add",
                   "inputs": [main, sc]})
    layers.append({"type": "relu", "name": name})


def basic(layers, name, inp, in_ch, ch, stride, short):
    a = conv_bn(layers, name + ".conv1", name + ".bn1", ch, 3, stride, 1,
                inp, relu=name + ".relu1")
    b = conv_bn(layers, name + ".conv2", name + ".bn2", ch, 3, 1, 1, a)
    s = shortcut(layers, name, inp, ch, stride, in_ch, short)
    finish(layers, name, b, s)
    return name, ch


def bottleneck(layers, name, inp, in_ch, ch, stride, short):
    a = conv_bn(layers, name + ".conv1", name + ".bn1", ch, 1, 1, 0, inp,
                relu=name + ".relu1")
    b = conv_bn(layers, name + ".conv2", name + ".bn2", ch, 3, stride, 1, a,
                relu=name + ".relu2")
    c = conv_bn(layers, name + ".conv3", name + ".bn3", ch * 4, 1, 1, 0, b)
    s = shortcut(layers, name, inp, ch * 4, stride, in_ch, short)
    finish(layers, name, c, s)
    return name, ch * 4


def resnet(name, desc, stem, widths, blocks, block):
    layers = []
    if stem == "cifar":
        x = conv_bn(layers, "conv1", "bn1", widths[0], 3, 1, 1, None,
                    relu="relu")
        ch, short, head = widths[0], "shortcut", "linear"
    else:
        conv_bn(layers, "conv1", "bn1", 64, 7, 2, 3, None, relu="relu")
        layers.append({"type": "maxpool", "name": "maxpool", "kernel": 3,
                       "stride": 2, "pad": 1})
        x, ch, short, head = "maxpool", 64, "downsample", "fc"
    for s, (w, n) in enumerate(zip(widths, blocks)):
        for i in range(n):
            stride = 2 if (i == 0 and s > 0) else 1
            x, ch = block(layers, "layer%d.%d" % (s + 1, i), x, ch, w,
                          stride, short)
    layers.append({"type": "global_avgpool", "name": "avgpool"})
    layers.append({"type": "dense", "name": head, "units": "classes"})
    return {"name": name, "description": desc, "layers": layers}


models = [
    resnet("resnet20", "ResNet-20 for 32x32 inputs (He et al. 2015, CIFAR; "
           "1x1-conv shortcuts)", "cifar", [16, 32, 64], [3, 3, 3], basic),
    resnet("resnet18", "ResNet-18, torchvision's architecture and names",
           "imagenet", [64, 128, 256, 512], [2, 2, 2, 2], basic),
    resnet("resnet50", "ResNet-50 (v1.5), torchvision's architecture and "
           "names", "imagenet", [64, 128, 256, 512], [3, 4, 6, 3],
           bottleneck),
]

for m in models:
    path = os.path.join(out_dir, m["name"] + ".json")
    with open(path, "w") as f:
        f.write("{\n")
        f.write('  "name": %s,\n' % json.dumps(m["name"]))
        f.write('  "description": %s,\n' % json.dumps(m["description"]))
        f.write('  "layers": [\n')
        f.write(",\n".join("    " + json.dumps(l) for l in m["layers"]))
        f.write("\n  ]\n}\n")
    print(path, file=sys.stderr)
