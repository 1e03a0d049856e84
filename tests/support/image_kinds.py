#!/usr/bin/python3
"""image_kinds.py DIR - the image files users bring, and what the real
tools make of them, for tests/unit/test_image_kinds.c.

Writes into DIR the PNGs and JPEGs it can make with Pillow (and a small
PNG writer of its own for what Pillow cannot write: Adam7 interlacing,
gAMA and sRGB chunks, an RGB colour key), then, for every image file in DIR
(also those the C test wrote before, such as arithmetic-coded JPEGs),
the reference pixels: NAME.c3 (RGB) and NAME.c1 (grey), raw bytes, and a
line "NAME W H TOL3 TOL1 WHY" in DIR/manifest.txt.

The references are the tools' own results:
  - Pillow's Image.open(f).convert('RGB' / 'L') (what torchvision's
    default loader does for RGB; EXIF orientation is not applied by
    either);
  - for files with an alpha channel or tRNS: Pillow's alpha_composite
    over opaque white, then convert (traind composites over white; Pillow's
    convert('RGB') alone drops the alpha), within 1 level;
  - 16-bit grey (Pillow's mode I clips it to 255 in convert('L')):
    OpenCV's imread, the high byte, as Pillow does for 16-bit RGB;
  - grey from a YCbCr JPEG: torchvision.io.decode_jpeg(mode=GRAY), the
    file's own luma (Pillow's convert('L') of its RGB decode is up to 4
    levels off that).
Exit 77 when a module is missing.
"""
import os
import struct
import sys
import zlib

try:
    import numpy as np
    from PIL import Image
    import cv2
    import torch  # noqa: F401 (torchvision needs it)
    from torchvision.io import ImageReadMode, decode_jpeg
except ImportError as e:
    print(f"image_kinds.py: {e}: apt-get install python3-pil python3-opencv "
          "python3-torchvision")
    sys.exit(77)

D = sys.argv[1]
W, H = 61, 37  # odd sizes: partial MCUs, Adam7 passes of unequal length


def photo(w=W, h=H, seed=1):
    """A smooth picture with some noise (JPEG-friendly, every level)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    r = x * 255 // max(w - 1, 1)
    g = y * 255 // max(h - 1, 1)
    b = (x * 5 + y * 3) % 256
    a = np.stack([r, g, b], -1) + rng.integers(-8, 9, (h, w, 3))
    return np.clip(a, 0, 255).astype(np.uint8)


def chunk(t, d):
    return (struct.pack('>I', len(d)) + t + d +
            struct.pack('>I', zlib.crc32(t + d) & 0xffffffff))


def write_png(name, a, ctype, depth=8, interlace=0, extra=b''):
    """a: h x w x channels samples (uint8, or uint16 for depth 16)."""
    h, w = a.shape[:2]
    a = a.reshape(h, w, -1)
    dt = '>u2' if depth == 16 else 'u1'

    def rows(sub):
        return b''.join(b'\x00' + r.astype(dt).tobytes() for r in sub)
    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                  (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        raw = b''.join(rows(a[y0::dy, x0::dx]) for x0, y0, dx, dy in passes
                       if a[y0::dy, x0::dx].size)
    else:
        raw = rows(a)
    ihdr = struct.pack('>IIBBBBB', w, h, depth, ctype, 0, 0, interlace)
    with open(os.path.join(D, name), 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + extra +
                chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))


def make():
    p = photo()
    im = Image.fromarray(p)
    alpha = ((np.arange(W)[None, :] * 255 // (W - 1)) +
             np.zeros((H, 1), int)).astype(np.uint8)
    # JPEG
    im.save(os.path.join(D, 'rgb420.jpg'), quality=90)
    im.save(os.path.join(D, 'rgb444.jpg'), quality=90, subsampling=0)
    im.save(os.path.join(D, 'rgb422.jpg'), quality=90, subsampling=1)
    im.save(os.path.join(D, 'progressive.jpg'), quality=90, progressive=True)
    im.convert('L').save(os.path.join(D, 'gray.jpg'), quality=90)
    im.convert('CMYK').save(os.path.join(D, 'cmyk.jpg'), quality=90)
    ex = Image.Exif()
    ex[0x0112] = 6  # orientation: rotate 90 CW to display
    im.save(os.path.join(D, 'exif_rot90.jpg'), quality=90, exif=ex.tobytes())
    # PNG, 8 bits
    im.save(os.path.join(D, 'rgb.png'))
    im.convert('L').save(os.path.join(D, 'gray.png'))
    im.convert('P', palette=Image.ADAPTIVE, colors=200).save(
        os.path.join(D, 'palette.png'))
    im.convert('P', palette=Image.ADAPTIVE, colors=16).save(
        os.path.join(D, 'palette4bit.png'), bits=4)
    im.convert('1').save(os.path.join(D, 'gray1bit.png'))
    pt = im.convert('P', palette=Image.ADAPTIVE, colors=64)
    pt.save(os.path.join(D, 'palette_trns.png'),
            transparency=bytes(range(0, 256, 4)))
    Image.fromarray(np.dstack([p, alpha]), 'RGBA').save(
        os.path.join(D, 'rgba.png'))
    Image.fromarray(np.dstack([p[:, :, 1], alpha]), 'LA').save(
        os.path.join(D, 'gray_alpha.png'))
    # what Pillow cannot write
    write_png('adam7.png', p, 2, interlace=1)
    write_png('adam7_gray.png', p[:, :, 0], 0, interlace=1)
    write_png('adam7_rgba.png', np.dstack([p, alpha]), 6, interlace=1)
    gama = struct.pack('>I', 100000)  # gamma 1.0: linear samples
    write_png('gama_1.0.png', p, 2, extra=chunk(b'gAMA', gama))
    write_png('gama_0.55.png', p, 2,
              extra=chunk(b'gAMA', struct.pack('>I', 55556)))  # old Macs
    write_png('srgb_chunk.png', p, 2, extra=chunk(b'sRGB', b'\x00'))
    rng = np.random.default_rng(3)
    p16 = p.astype(np.uint16) * 257 + rng.integers(0, 256, p.shape,
                                                   dtype=np.uint16)
    write_png('rgb16.png', p16, 2, depth=16)
    write_png('gray16.png', p16[:, :, 0], 0, depth=16)
    write_png('rgba16.png', np.dstack([p16, alpha.astype(np.uint16) * 257]),
              6, depth=16)
    key = p[5, 7].astype(np.uint16)  # an 8-bit RGB colour key (tRNS)
    write_png('rgb_trns.png', p, 2,
              extra=chunk(b'tRNS', struct.pack('>HHH', *key)))


def composite(im):
    white = Image.new('RGBA', im.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, im.convert('RGBA'))


def reference(name):
    path = os.path.join(D, name)
    im = Image.open(path)
    w, h = im.size
    tol3 = tol1 = 0
    why = im.format + ':' + im.mode
    if im.mode in ('I', 'I;16', 'I;16B'):  # 16-bit grey
        g = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
        c1 = g
        c3 = np.dstack([g, g, g])
        why += ':opencv'
    elif 'A' in im.mode or 'transparency' in im.info:
        im = composite(im)
        c3 = np.asarray(im.convert('RGB'))
        c1 = np.asarray(im.convert('L'))
        tol3 = tol1 = 1
        why += ':over-white'
    else:
        c3 = np.asarray(im.convert('RGB'))
        c1 = np.asarray(im.convert('L'))
        if im.format == 'JPEG' and im.mode in ('RGB', 'YCbCr'):
            with open(path, 'rb') as f:
                data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            c1 = decode_jpeg(data, mode=ImageReadMode.GRAY)[0].numpy()
            why += ':torchvision-gray'
    with open(path + '.c3', 'wb') as f:
        f.write(np.ascontiguousarray(c3, np.uint8).tobytes())
    with open(path + '.c1', 'wb') as f:
        f.write(np.ascontiguousarray(c1, np.uint8).tobytes())
    return f"{name} {w} {h} {tol3} {tol1} {why}\n"


make()
lines = [reference(n) for n in sorted(os.listdir(D))
         if n.endswith(('.jpg', '.png'))]
with open(os.path.join(D, 'manifest.txt'), 'w') as f:
    f.writelines(lines)
