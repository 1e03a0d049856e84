#!/usr/bin/env python3
"""gen_models.py - writes the ResNet definitions of config/models/.

The files are committed; run this only to change them.  fmnist-cnn.json is
written by hand.  Shortcuts that change shape are 1x1 convolutions with
batch norm (ResNet "option B").
"""
import json
import os
import sys

out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "config", "models")


def conv_bn(layers, name, ch, k, stride, pad, relu=True, inp=None):
    c = {"type": "conv2d", "name": name, "channels": ch, "kernel": k,
         "stride": stride, "pad": pad}
    if inp:
        c["input"] = inp
    layers.append(c)
    layers.append({"type": "batchnorm", "name": name + "_bn"})
    if relu:
        layers.append({"type": "relu", "name": name + "_relu"})
    return layers[-1]["name"]


def shortcut(layers, name, inp, ch, stride, in_ch):
    if stride == 1 and in_ch == ch:
        return inp
    return conv_bn(layers, name + "_down", ch, 1, stride, 0, relu=False,
                   inp=inp)


def basic(layers, name, inp, in_ch, ch, stride):
    a = conv_bn(layers, name + "_conv1", ch, 3, stride, 1, inp=inp)
    b = conv_bn(layers, name + "_conv2", ch, 3, 1, 1, relu=False, inp=a)
    s = shortcut(layers, name, inp, ch, stride, in_ch)
    layers.append({"type": "add", "name": name + "_add", "inputs": [b, s]})
    layers.append({"type": "relu", "name": name})
    return name, ch


def bottleneck(layers, name, inp, in_ch, ch, stride):
    a = conv_bn(layers, name + "_conv1", ch, 1, 1, 0, inp=inp)
    b = conv_bn(layers, name + "_conv2", ch, 3, stride, 1, inp=a)
    c = conv_bn(layers, name + "_conv3", ch * 4, 1, 1, 0, relu=False, inp=b)
    s = shortcut(layers, name, inp, ch * 4, stride, in_ch)
    layers.append({"type": "add", "name": name + "_add", "inputs": [c, s]})
    layers.append({"type": "relu", "name": name})
    return name, ch * 4


def resnet(name, desc, stem, widths, blocks, block):
    layers = []
    if stem == "cifar":
        x = conv_bn(layers, "stem", widths[0], 3, 1, 1)
        ch = widths[0]
    else:
        conv_bn(layers, "stem", 64, 7, 2, 3)
        layers.append({"type": "maxpool", "name": "stem_pool", "kernel": 3,
                       "stride": 2, "pad": 1})
        x, ch = "stem_pool", 64
    for s, (w, n) in enumerate(zip(widths, blocks)):
        for i in range(n):
            stride = 2 if (i == 0 and s > 0) else 1
            x, ch = block(layers, "s%d_b%d" % (s + 1, i + 1), x, ch, w,
                          stride)
    layers.append({"type": "global_avgpool", "name": "pool"})
    layers.append({"type": "dense", "name": "fc", "units": "classes"})
    return {"name": name, "description": desc, "layers": layers}


models = [
    resnet("resnet20", "ResNet-20 for 32x32 inputs (He et al. 2015, CIFAR)",
           "cifar", [16, 32, 64], [3, 3, 3], basic),
    resnet("resnet18", "ResNet-18 for 224x224 inputs", "imagenet",
           [64, 128, 256, 512], [2, 2, 2, 2], basic),
    resnet("resnet50", "ResNet-50 for 224x224 inputs", "imagenet",
           [64, 128, 256, 512], [3, 4, 6, 3], bottleneck),
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
