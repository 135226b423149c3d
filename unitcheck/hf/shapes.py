"""Inputs remade at the shape a failure message asks for (a conv's channels, a broadcast, a
reshape, a split): the model says what it wants where the config does not."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from .common import _is_int, _walk
from .inputs import _TOKEN_MASKS, _mask

# probe failures no other plan can fix: branches on values, missing arguments
_SIZE_INDEPENDENT = ("DataDependent", "data-dependent", "missing a required argument", "missing 1 required",
                     "unexpected keyword argument", "has no attribute")


_CONV_CHANNELS = re.compile(r"expected input\[([\d, ]+)\] to have (\d+) channels, but got (\d+) channels")


_BROADCAST = re.compile(r"Attempting to broadcast a dimension of length \d+ at -\d+! Mismatching argument at index \d+ "
                        r"had torch.Size\(\[([\d, ]*)\]\); but expected shape should be broadcastable to \[([\d, ]+)\]")


_CONV_RANK = re.compile(r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d, but got input of size: "
                        r"\[(\d+), (\d+)\]")


_TOO_SMALL = re.compile(r"Output size is too small|Kernel size can't be greater than actual input size|"
                        r"[Ii]mage size \S+ is too small")


_NORMALIZED = re.compile(r"normalized_shape=\[(\d+)\], expected input with shape \[[\d, ]*\], but got input of size "
                         r"torch.Size\(\[([\d, ]+)\]\)")


_UNPACK = re.compile(r"not enough values to unpack \(expected (\d+), got (\d+)\)")


# the statement a failure names unpacks a tensor's shape: the names of its axes and the tensor's
_SHAPE_READ = re.compile(r"\[at: ([\w, ]+) = (\w+)\.shape\]")


_MAT1_MAT2 = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")


_REDUCTION = re.compile(r"a and b must have same reduction dim, but got \[(\d+), (\d+)\] X \[(\d+), (\d+)\]")


_IMAGE_SIZE = re.compile(r"Input image size \((\d+)\*(\d+)\) doesn't match model \((\d+)\*(\d+)\)")

# (fake tensors say "Expected 10 in dimension 2 but got 16", real ones "Expected size 10 but got size 16")
_CONCATENATED = re.compile(r"Sizes of tensors must match except in dimension \d+\. Expected (?:size )?(\d+)"
                           r"(?: in dimension \d+)? but got (?:size )?(\d+) for tensor number")

_SPLIT_SUM = re.compile(r"split_with_sizes expects split_sizes to sum exactly to (\d+) .*but got split_sizes=\[([\d, ]+)\]")


_LATENT_FRAMES = 16


def _axis_size(cfg: Any, axis: str) -> int:
    """How large an axis named ``axis`` (``num_tiles``) is: the config's int field of that name or
    ending in it (``max_num_tiles``), else 1."""
    for c in _walk(cfg) if cfg is not None else ():
        for k, v in vars(c).items():
            if _is_int(v) and 0 < v <= 64 and (k == axis or k.endswith(f"_{axis}")):
                return int(v)
    return 1


def _reshaped(why: str, inputs: Mapping[str, Any], cfg: Any = None) -> list[tuple[str, tuple[int, ...]]]:
    """Shapes for an input that a probe failure in the layer reading it asks for: a conv's
    "expected input[2, 16, 70] to have 1 channels" (channels first, or the input transposed), a
    layer norm's "normalized_shape=[8] ... got input of size [2, 16, 64]" (features as wide), a
    broadcast against a fixed-size tensor ("had torch.Size([448, 448]) ... broadcastable to [2, 3,
    64, 64]": the input's trailing dims become that tensor's; ids too, Kyutai's one column per
    codebook offset), a projection's "[384, 64] X [192, 64]" (rows as wide as its in-features, as
    patch rows too), a conv patch embedding given patch rows (each row as a c x p x p patch), two
    parts of a concatenation (an input holding one of the two sizes on one axis takes the other).
    Otherwise only an input whose shape the message shows (give or take the few steps a conv
    pads its input by) is changed, so layers deeper in the model (whose sizes the config ties) are
    never guessed at; the one exception is a pooling or patching window larger than what is left
    of the image, which asks for a larger image."""
    floats = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    out: list[tuple[str, tuple[int, ...]]] = []
    m = _CONV_CHANNELS.search(why)
    if m:
        shape, want = tuple(int(x) for x in m.group(1).split(",")), int(m.group(2))
        for name, v in floats.items():
            if v.dim() == 3 and shape == (1, *v.shape):
                # (batch, sequence, width) read by a 2-D conv as one unbatched (channels, height,
                # width) image: a batch of feature maps with that many channels (a VQ-VAE's latents)
                out.append((name, (int(v.shape[0]), want, *(int(d) for d in v.shape[1:]))))
                continue
            if len(shape) < 3 or v.dim() != len(shape) or tuple(v.shape[:-1]) != shape[:-1]:
                continue
            if v.shape[-1] != shape[-1] and not 0 < shape[-1] - v.shape[-1] <= 16:
                continue  # the same input, padded by the conv first (a causal conv's left context)
            dims = tuple(int(x) for x in v.shape)
            if dims[-1] == want:
                out.append((name, (dims[0], want, *dims[1:-1])))
            if want >= 16 and len(dims) == 3 and dims[-1] > _LATENT_FRAMES:
                # a waveform asked for that many channels is a latent sequence, each frame of which
                # a decoder turns into thousands of samples: 16 frames (VibeVoice's decoder made 10
                # million samples of 3200 frames, and their comparison needed 1.9 TiB)
                out.append((name, (dims[0], want, _LATENT_FRAMES)))
            out.append((name, (dims[0], want, *dims[2:])))
    m = _BROADCAST.search(why)
    if m:
        other, shape = (tuple(int(x) for x in g.split(",") if x.strip()) for g in m.group(1, 2))
        wants = [(*shape[: len(shape) - len(other)], *other)] if 0 < len(other) <= len(shape) else []
        if len(other) == 1:
            wants.append((*shape, *other))  # one more axis (Kyutai's ids: one column per codebook)
        out.extend((name, want) for want in wants for name, v in inputs.items()
                   if isinstance(v, torch.Tensor) and tuple(v.shape) == shape and want != shape)
        if "attention_mask" in why and len(other) == len(shape) == 4 and other[1] == 1 \
                and (other[0], other[2]) == (shape[0], shape[2]) and other[3] < shape[3]:
            # a (batch, 1, queries, keys) mask the model made from its queries alone, where the keys
            # also span a context it prepends (DFlash's context states): a padding mask as long as
            # the keys (a real run skips the mask; a traced one cannot)
            out.append(("attention_mask", (shape[0], shape[3])))
    m = _CONV_RANK.search(why)
    unpacked = _UNPACK.search(why)
    more = int(unpacked.group(1)) - int(unpacked.group(2)) if unpacked else 0  # axes the unpacking lacks
    if m or more >= 2:
        # patch rows (n, c * p * p) where a conv patch embedding wants patch images (n, c, p, p),
        # with as many leading axes as the unpacking lacks besides (PaddleOCR-VL's model adds its
        # tower's batch axis, (batch, patches, c, h, w); its tower alone takes (1, n, c, p, p))
        for name, v in floats.items():
            if v.dim() == 2 and (m is None or tuple(v.shape) == (int(m.group(1)), int(m.group(2)))):
                rows, feats = (int(x) for x in v.shape)
                for c in (3, 1):
                    p = round((feats / c) ** 0.5)
                    if c * p * p == feats:
                        out.append((name, (*(1,) * max(0, more - 2), rows, c, p, p)))
                        break
    if unpacked and more >= 1:
        # an image unpacked into more axes than it has ("b, media, tiles, c, h, w = pixel_values.shape"
        # given (b, c, h, w)): the axes it lacks after its batch axis, each as large as the config
        # field ending in its name says (Mllama's ``max_num_tiles``), else 1
        read = _SHAPE_READ.search(why)
        axes = [a.strip() for a in read.group(1).split(",")] if read else []
        have = int(unpacked.group(2))
        named = {read.group(2)} & set(floats) if read and len(axes) == have + more else set()
        for name in named or [k for k, v in floats.items() if v.dim() >= 3]:
            v = floats[name]
            if v.dim() != have or v.dim() < 3:  # patch rows are remade as patch images above
                continue
            by_config = tuple(_axis_size(cfg, a) for a in axes[1:1 + more]) if axes else (1,) * more
            for lacking in dict.fromkeys([by_config, (1,) * more]):
                out.append((name, (int(v.shape[0]), *lacking, *(int(d) for d in v.shape[1:]))))
    if _TOO_SMALL.search(why):
        # a pooling or patching layer deep in the model left with less than its window: a larger
        # image, twice and four times the side (the shrunk config does not tie the image size)
        for name, v in floats.items():
            if v.dim() == 4 and v.shape[1] <= 4:
                out.extend((name, (*v.shape[:2], v.shape[2] * k, v.shape[3] * k)) for k in (2, 4))
    m = _NORMALIZED.search(why)
    if m:
        want, shape = int(m.group(1)), tuple(int(x) for x in m.group(2).split(","))
        out.extend((name, (*shape[:-1], want)) for name, v in floats.items() if tuple(v.shape) == shape)
    m = _SPLIT_SUM.search(why)
    if m:
        # each example's tiles as many as the model counts for its image (LLaVA-NeXT splits the
        # features of (batch, tiles, c, h, w) by the tiles its image size needs; a processor pads
        # every example to the largest count)
        have, sizes = int(m.group(1)), [int(x) for x in m.group(2).split(",")]
        for name, v in floats.items():
            if v.dim() == 5 and v.shape[0] == len(sizes) and v.shape[0] * v.shape[1] == have and len(set(sizes)) == 1:
                out.append((name, (v.shape[0], sizes[0], *v.shape[2:])))
            if v.dim() == 3 and v.shape[0] == len(sizes) and v.shape[-1] == have and sum(sizes) == v.shape[0] * have:
                # the examples' frames concatenated along time, (features, total frames): the Qwen
                # Omni audio encoders split them back by their per-example lengths
                out.append((name, (v.shape[1], sum(sizes))))
    m = _IMAGE_SIZE.search(why)
    if m:
        # a patch embedding that checks its image against the configured size, given images the
        # model stacked first (SegGPT puts its prompt above its input): each image scaled so the
        # stack is that size
        h0, w0, h1, w1 = (int(x) for x in m.groups())
        for name, v in floats.items():
            if v.dim() != 4:
                continue
            h, w = (int(d) for d in v.shape[-2:])
            if h * h1 % h0 == 0 and w * w1 % w0 == 0 and (h0, w0) != (h1, w1):
                out.append((name, (*(int(d) for d in v.shape[:2]), h * h1 // h0, w * w1 // w0)))
    m = _CONCATENATED.search(why)
    if m:
        # two parts of one concatenation disagree on an axis (XCodec2's acoustic frames, from the
        # waveform, against the semantic frames of its features): an input holding one size on a
        # single axis after its batch, remade with the other, in both directions
        a, b = int(m.group(1)), int(m.group(2))
        for have, want in ((a, b), (b, a)):
            for name, v in floats.items():
                axes = [i for i in range(1, v.dim()) if v.shape[i] == have]
                if len(axes) == 1:
                    out.append((name, tuple(want if i == axes[0] else int(d) for i, d in enumerate(v.shape))))
    said = _reduction(why)
    if said:
        rows, have, want = said
        tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.dim() >= 2}
        shown = [(k, v) for k, v in tensors.items() if v.shape[-1] == have and v.numel() == rows * have]
        wide = [(k, v) for k, v in tensors.items() if v.shape[-1] == have and v.is_floating_point()]
        if not shown and len(wide) == 1:
            # no input is the operand itself, but one alone is as wide: its rows gathered or
            # pooled first (Molmo2's adapter pools patch features into one query per token)
            out.append((wide[0][0], (*wide[0][1].shape[:-1], want)))
        for name, v in shown:
            out.append((name, (*v.shape[:-1], want)))
            if v.dim() == 3:  # one vector per example (PI0's robot state), not one per position
                out.append((name, (v.shape[0], want)))
            if v.dim() > 3:  # an image read as patch rows: (batch, patches, features)
                out.append((name, (v.shape[0], rows // v.shape[0], want)))
    return [o for o in out if math.prod(o[1]) <= _MAX_REMADE]


_MAX_REMADE = 2**25  # elements of an input a failure's shape remakes: a larger ask is a misreading


def _with_companions(inputs: Mapping[str, Any], o: tuple[str, tuple[int, ...]]
                     ) -> list[tuple[tuple[str, tuple[int, ...]], ...]]:
    """``o`` alone, then with the images shaped as its input was remade as it is, then with
    the integer inputs given per example remade per item of the axes
    ``o`` adds after the batch axis: Mllama's (batch, images, tiles, c, h, w) pixels come with
    ``aspect_ratio_ids`` per image (batch, images) and ``aspect_ratio_mask`` per tile (batch,
    images, tiles); each such input at each prefix of the new leading axes."""
    name, shape = o
    v = inputs.get(name)
    out: list[tuple[tuple[str, tuple[int, ...]], ...]] = [(o,)]
    if isinstance(v, torch.Tensor) and v.is_floating_point() and len(shape) == v.dim() >= 4:
        alike = [k for k, t in inputs.items() if k != name and isinstance(t, torch.Tensor) and t.is_floating_point()
                 and t.shape == v.shape]
        if alike:  # images shaped alike, remade alike (SegGPT's prompt, its mask and its input; features
            # made from their names are all (batch, positions, width) by construction, not alike)
            out.append((o, *((k, shape) for k in alike)))
    if not isinstance(v, torch.Tensor) or len(shape) <= v.dim() or shape[0] != v.shape[0] \
            or tuple(shape[len(shape) - v.dim() + 1:]) != tuple(v.shape[1:]):
        return out
    lead = shape[:len(shape) - v.dim() + 1]  # the batch axis and the axes added after it
    others = [k for k, t in inputs.items() if k != name and isinstance(t, torch.Tensor) and not t.is_floating_point()
              and t.dim() >= 1 and t.shape[0] == shape[0] and t.dim() < len(lead) and not k.endswith("input_ids")][:3]
    options = [[None, *(lead[:n] for n in range(2, len(lead) + 1) if lead[:n] != tuple(inputs[k].shape))]
               for k in others]
    for pick in itertools.product(*options):
        extra = tuple((k, tuple(s)) for k, s in zip(others, pick) if s is not None)
        if extra:
            out.append((o, *extra))
    return out


def _with_shapes(inputs: Mapping[str, Any], shaped: tuple[tuple[str, tuple[int, ...]], ...], seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    out = dict(inputs)
    for name, shape in shaped:
        old = out.get(name)
        if name in _TOKEN_MASKS and len(shape) == 2:
            out[name] = _mask(name, (shape[0], shape[1]), torch.long if old is None else old.dtype)
        elif old is None:  # a mask the inputs left out: every position kept
            out[name] = torch.ones(shape, dtype=torch.long)
        elif old.is_floating_point():
            out[name] = torch.randn(shape, generator=g, dtype=old.dtype)
        elif old.numel() and bool((old == old.flatten()[0]).all()):  # a mask of ones stays ones
            out[name] = torch.full(shape, int(old.flatten()[0]), dtype=old.dtype)
        else:  # ids keep their range
            out[name] = torch.randint(0, max(2, int(old.max()) + 1), shape, generator=g, dtype=old.dtype)
    return out


def _reduction(why: str) -> tuple[int, int, int] | None:
    """A projection's failure: (rows, the width it was given, the width it reads)."""
    m = _REDUCTION.search(why) or _MAT1_MAT2.search(why)  # the fake-tensor and the real-run wording
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _shows_input(inputs: Mapping[str, Any], rows: int, have: int) -> bool:
    """Whether an input is the (rows, have) operand a projection's failure shows (batch and
    sequence axes flattened)."""
    return any(isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[-1] == have and v.numel() == rows * have
               for v in inputs.values())
