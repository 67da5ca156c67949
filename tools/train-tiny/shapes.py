"""The captioned shapes dataset: one flat-coloured shape on a flat background, 256x256, drawn on
the GPU (signed distances on a pixel grid, a one-pixel antialiasing ramp) from random
attributes, with a caption that names them.

    python3 shapes.py --out samples/ --count 32      # PNGs + captions.txt for inspection

Captions: "a [size] <colour> <shape> [position] on a <colour> background" or "... on <colour>".
A caption without a size means medium, without a position the center. Held-out (shape, colour,
background) triples never appear in training (Note [held-out triples]).
"""
import argparse
import math
import os

import torch

SIZE = 256
SHAPES = ["circle", "square", "triangle", "star", "ring", "diamond"]
# Fixed RGB values: the test (tests/cli/default_model_test.cpp) checks pixels against them.
COLOURS = {
    "red": (220, 30, 30), "green": (40, 170, 50), "blue": (35, 70, 220), "yellow": (250, 215, 30),
    "orange": (250, 135, 20), "purple": (135, 50, 185), "pink": (245, 125, 185),
    "cyan": (30, 205, 225), "white": (245, 245, 245), "black": (15, 15, 15),
}
COLOUR_NAMES = list(COLOURS)
# Circumradius-like size r as a fraction of the side (each shape's extent is a multiple of r).
SIZES = {"small": 0.10, "medium": 0.17, "large": 0.25}
POSITIONS = {
    "center": (0.5, 0.5), "top left": (0.28, 0.28), "top right": (0.72, 0.28),
    "bottom left": (0.28, 0.72), "bottom right": (0.72, 0.72), "top": (0.5, 0.28),
    "bottom": (0.5, 0.72), "left": (0.28, 0.5), "right": (0.72, 0.5),
}
POSITION_PHRASES = {
    "center": ["in the center", "in the middle"], "top left": ["in the top left"],
    "top right": ["in the top right"], "bottom left": ["in the bottom left"],
    "bottom right": ["in the bottom right"], "top": ["at the top"], "bottom": ["at the bottom"],
    "left": ["on the left"], "right": ["on the right"],
}
POSITION_NAMES = list(POSITIONS)

# Note [held-out triples]: (shape, colour, background) combinations that training never draws,
# with any size or position. Each colour and background still appears with other shapes, so a
# caption with one of these triples tests composition, not memory. The test's 12 captions use
# the first 12.
HELD_OUT = [
    ("circle", "green", "purple"), ("square", "yellow", "blue"), ("triangle", "red", "white"),
    ("star", "white", "black"), ("ring", "orange", "green"), ("diamond", "cyan", "red"),
    ("circle", "pink", "black"), ("square", "white", "green"), ("triangle", "blue", "yellow"),
    ("star", "yellow", "purple"), ("circle", "black", "orange"), ("square", "red", "cyan"),
    ("ring", "blue", "white"), ("diamond", "yellow", "black"), ("star", "orange", "blue"),
    ("triangle", "green", "pink"),
]
_HELD_OUT_INDEX = {(SHAPES.index(s), COLOUR_NAMES.index(c), COLOUR_NAMES.index(b)) for s, c, b in HELD_OUT}

# Shape geometry in units of r (used by the renderer and by test_table below).
STAR_INNER = 0.5      # inner radius / outer radius
STAR_OUTER = 1.2      # outer radius / r
RING_INNER = 0.6      # inner radius / outer radius (outer radius = r)
TRIANGLE_R = 1.2      # circumradius / r
SQUARE_HALF = 0.85    # half side / r
DIAMOND_HALF = 1.15   # half diagonal / r


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def caption(shape, colour, bg, size=None, position=None, short_bg=False):
    words = [w for w in (size, colour, shape) if w]
    text = f"{article(words[0])} {' '.join(words)}"
    if position:
        text += " " + position
    return text + (f" on {bg}" if short_bg else f" on {article(bg)} {bg} background")


def caption_vocabulary():
    """Every word a caption can use, for the text encoder's token table."""
    words = {"a", "an", "on", "background", "in", "the", "at"}
    words |= set(SHAPES) | set(COLOURS) | set(SIZES)
    for phrases in POSITION_PHRASES.values():
        for p in phrases:
            words |= set(p.split())
    return sorted(words)


class Attributes:
    """A batch of drawn attributes (indices) and their geometry in pixels."""

    def __init__(self, shape, colour, bg, size, position, cx, cy, r):
        self.shape, self.colour, self.bg, self.size, self.position = shape, colour, bg, size, position
        self.cx, self.cy, self.r = cx, cy, r


def sample_attributes(n, gen, device):
    """Random attributes; size/position index -1 means unnamed (medium / center)."""
    def randint(hi):
        return torch.randint(0, hi, (n,), generator=gen, device=device)

    shape, colour, bg = randint(len(SHAPES)), randint(len(COLOURS)), randint(len(COLOURS))
    for _ in range(20):  # redraw the background where it equals the colour or is held out
        bad = (bg == colour) | _held_out_mask(shape, colour, bg)
        if not bad.any():
            break
        bg = torch.where(bad, randint(len(COLOURS)), bg)
    named_size = torch.rand(n, generator=gen, device=device) < 0.6
    named_pos = torch.rand(n, generator=gen, device=device) < 0.6
    size = torch.where(named_size, randint(len(SIZES)), torch.full_like(shape, -1))
    position = torch.where(named_pos, randint(len(POSITIONS)), torch.full_like(shape, -1))
    sizes = torch.tensor(list(SIZES.values()), device=device)
    centres = torch.tensor(list(POSITIONS.values()), device=device)
    r = sizes[torch.where(size < 0, 1, size)]
    c = centres[torch.where(position < 0, 0, position)]
    jitter = (torch.rand(n, 3, generator=gen, device=device) - 0.5)
    r = r * (1 + 0.16 * jitter[:, 0])
    cx, cy = c[:, 0] + 0.05 * jitter[:, 1], c[:, 1] + 0.05 * jitter[:, 2]
    return Attributes(shape, colour, bg, size, position, cx * SIZE, cy * SIZE, r * SIZE)


def _held_out_mask(shape, colour, bg):
    key = (shape * len(COLOURS) + colour) * len(COLOURS) + bg
    held = torch.tensor([(s * len(COLOURS) + c) * len(COLOURS) + b for s, c, b in _HELD_OUT_INDEX],
                        device=shape.device)
    return (key[:, None] == held[None]).any(1)


def captions_of(a, gen):
    """One caption per sample; the background phrase's form is drawn per sample."""
    short = torch.rand(len(a.shape), generator=gen, device=a.shape.device) < 0.3
    pick = torch.randint(0, 2, (len(a.shape),), generator=gen, device=a.shape.device)
    out = []
    rows = zip(a.shape.tolist(), a.colour.tolist(), a.bg.tolist(), a.size.tolist(),
               a.position.tolist(), short.tolist(), pick.tolist())
    for s, c, b, z, p, sh, k in rows:
        pos = None
        if p >= 0:
            phrases = POSITION_PHRASES[POSITION_NAMES[p]]
            pos = phrases[k % len(phrases)]
        size = list(SIZES)[z] if z >= 0 else None
        out.append(caption(SHAPES[s], COLOUR_NAMES[c], COLOUR_NAMES[b], size, pos, sh))
    return out


def _line_distance(px, py, ax, ay, bx, by):
    """Signed distance of P from the line A->B (negative on the origin's side for our folds)."""
    ex, ey = bx - ax, by - ay
    return ((px - ax) * ey - (py - ay) * ex) / torch.sqrt(ex * ex + ey * ey)


def signed_distance(kind, dx, dy, r):
    """Signed distance in pixels (negative inside) of offsets dx, dy [B, H, W] from a shape of
    size r [B, 1, 1] centred at 0, for one shape kind."""
    rho = torch.sqrt(dx * dx + dy * dy)
    if kind == "circle":
        return rho - r
    if kind == "ring":
        mid, half = r * (1 + RING_INNER) / 2, r * (1 - RING_INNER) / 2
        return (rho - mid).abs() - half
    if kind == "square":
        h = SQUARE_HALF * r
        qx, qy = dx.abs() - h, dy.abs() - h
        outside = torch.sqrt(qx.clamp(min=0) ** 2 + qy.clamp(min=0) ** 2)
        return outside + torch.maximum(qx, qy).clamp(max=0)
    if kind == "diamond":
        return (dx.abs() + dy.abs() - DIAMOND_HALF * r) / math.sqrt(2)
    if kind == "triangle":  # vertex up (image y grows downwards); inradius = circumradius / 2
        inr = TRIANGLE_R * r / 2
        d = torch.stack([dy, -0.5 * dy + 0.8660254 * dx, -0.5 * dy - 0.8660254 * dx])
        return d.max(0).values - inr
    if kind == "star":  # five points, one up; fold the angle into one edge's wedge
        ro = STAR_OUTER * r
        ri = STAR_INNER * ro
        phi = torch.remainder(torch.atan2(dy, dx) + math.pi / 2, 2 * math.pi / 5)
        phi = torch.minimum(phi, 2 * math.pi / 5 - phi)
        px, py = rho * torch.cos(phi), rho * torch.sin(phi)
        a36 = math.pi / 5
        return _line_distance(px, py, ro, 0 * ro, ri * math.cos(a36), ri * math.sin(a36))
    raise ValueError(kind)


def render(a):
    """Images [B, 3, SIZE, SIZE] in [0, 1]."""
    device = a.cx.device
    grid = torch.arange(SIZE, device=device, dtype=torch.float32) + 0.5
    n = len(a.cx)
    dx = (grid[None, None, :] - a.cx[:, None, None]).expand(n, SIZE, SIZE)
    dy = (grid[None, :, None] - a.cy[:, None, None]).expand(n, SIZE, SIZE)
    r = a.r[:, None, None]
    sd = torch.zeros_like(dx)
    for k, kind in enumerate(SHAPES):
        sel = a.shape == k
        if sel.any():
            sd[sel] = signed_distance(kind, dx[sel], dy[sel], r[sel])
    cover = (0.5 - sd).clamp(0, 1)[:, None]
    palette = torch.tensor(list(COLOURS.values()), device=device, dtype=torch.float32) / 255
    fg, bg = palette[a.colour][:, :, None, None], palette[a.bg][:, :, None, None]
    return bg + (fg - bg) * cover


def batch(n, gen, device):
    """(images in [-1, 1], captions) of n random samples."""
    a = sample_attributes(n, gen, device)
    return render(a) * 2 - 1, captions_of(a, gen)


# The region of a shape that must carry its colour, as (inner, outer) radii in units of r:
# inside every shape's inscribed circle (an annulus inside the ring).
CORE = {"circle": (0, 0.5), "square": (0, 0.5), "diamond": (0, 0.5), "triangle": (0, 0.35),
        "star": (0, 0.3), "ring": (0.7, 0.9)}
TEST_CAPTIONS = [  # held-out triples (Note [held-out triples]); the test's 12 captions
    "a green circle on a purple background", "a large yellow square on a blue background",
    "a red triangle in the top left on a white background", "a white star on black",
    "an orange ring on a green background", "a small cyan diamond in the bottom right on red",
    "a pink circle on the right on a black background", "a large white square on green",
    "a blue triangle at the bottom on a yellow background",
    "a yellow star in the top right on a purple background",
    "a black circle on the left on an orange background", "a red square at the top on cyan",
]


def parse_caption(text):
    """(shape, colour, background, size, position) named by a caption of this grammar."""
    words = text.split()
    colours = [w for w in words if w in COLOURS]
    shape = next(w for w in words if w in SHAPES)
    size = next((w for w in words if w in SIZES), "medium")
    position = next((p for p, phrases in POSITION_PHRASES.items() if any(f" {x}" in text for x in phrases)),
                    "center")
    return shape, colours[0], colours[1], size, position


def test_table():
    """C++ rows for tests/default_model: caption, colours, centre, r, core radii, area (px)."""
    rows = []
    for text in TEST_CAPTIONS:
        shape, colour, bg, size, position = parse_caption(text)
        cx, cy = (v * SIZE for v in POSITIONS[position])
        r = SIZES[size] * SIZE
        a = Attributes(torch.tensor([SHAPES.index(shape)]), torch.tensor([COLOUR_NAMES.index(colour)]),
                       torch.tensor([COLOUR_NAMES.index(bg)]), None, None, torch.tensor([cx]),
                       torch.tensor([cy]), torch.tensor([r]))
        area = int((signed_area_mask(a)).sum())
        lo, hi = CORE[shape]
        rows.append(f'    {{"{text}", {{{", ".join(map(str, COLOURS[colour]))}}}, '
                    f'{{{", ".join(map(str, COLOURS[bg]))}}}, {cx:.2f}, {cy:.2f}, {r:.2f}, {lo}, {hi}, {area}}},')
    return "\n".join(rows)


def signed_area_mask(a):
    """Pixels at least half covered by the shape."""
    img = render(a)[0]
    palette = torch.tensor(list(COLOURS.values()), dtype=torch.float32) / 255
    fg, bg = palette[a.colour[0]][:, None, None], palette[a.bg[0]][:, None, None]
    return (img - bg).norm(dim=0) > (img - fg).norm(dim=0)


def save_png(img01, path):
    from PIL import Image
    arr = (img01.clamp(0, 1) * 255 + 0.5).to(torch.uint8).permute(1, 2, 0).cpu().numpy()
    Image.fromarray(arr).save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--test-table", action="store_true", help="print the C++ test's expectations")
    ap.add_argument("--count", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    if args.test_table:
        print(test_table())
        return
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    imgs, caps = batch(args.count, gen, args.device)
    with open(os.path.join(args.out, "captions.txt"), "w") as f:
        for i, (img, cap) in enumerate(zip(imgs, caps)):
            save_png((img + 1) / 2, os.path.join(args.out, f"{i:04d}.png"))
            f.write(f"{i:04d}.png\t{cap}\n")
    print(f"wrote {args.count} samples to {args.out}")


if __name__ == "__main__":
    main()
