"""RandomResizedCrop + flip for `data.decode: gpu`: the boxes from each image's seeded draws, and
the crops resized to a square for the whole batch at once on the run's device.

The boxes follow torchvision's RandomResizedCrop: up to ten tries of an area share in [0.08, 1]
and a log-uniform aspect ratio in [3/4, 4/3] that fit the image, else the central crop of the
nearest allowed ratio. The resize is PyTorch's antialiased bilinear filter (`F.interpolate(...,
antialias=True)`, the filter torchvision's `resized_crop` applies): a triangle whose support
widens with the downscale factor, so each output pixel averages every source pixel it covers.
The filter is separable, so a crop of h x w rows and columns resized to s x s pixels is
`Wy @ crop @ Wx^T` with Wy [s, h] and Wx [s, w] holding the filter's weights, and a horizontal
flip is Wx with its rows reversed. `batch_resized_crops` pads the crops of a batch into one
tensor (zero weight on the padding) and resizes them all with two batched matrix products,
instead of a resize per image (`resized_crops`, kept as the reference). The products run in
float32 outside autocast (the kit leaves TF32 off for them). Measured on the photo-like pictures
of benchmarks/photo_fixtures.py at 224 and 64 px, the two paths differ by at most 1 grey level
(values within float32 error of a half, rounded the other way) on under 0.005 % of the pixels,
and the batched one differs from the CPU pipeline's uint8 `resized_crop` of the same boxes by at
most 1 level, 0.1-0.2 on average (tests/test_batched.py holds both bounds).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: RandomResizedCrop's tries per image, as torchvision's
TRIES = 10
#: uniform draws per image: four per try (area, ratio, top, left) and one for the flip
DRAWS = 4 * TRIES + 1
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
#: float elements of one padded group of crops (256 MiB): a batch whose crops pad to more is
#: resized in several groups of similar crop areas, so one large image does not pad them all
GROUP_ELEMENTS = 1 << 26


def sample_draws(generator: torch.Generator) -> torch.Tensor:
    """One image's uniform draws in [0, 1), float64 so boxes do not depend on rounding."""
    return torch.rand(DRAWS, generator=generator, dtype=torch.float64)


def crop_boxes(heights: torch.Tensor, widths: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """RandomResizedCrop's boxes [B, 4] as (top, left, height, width) for images of the given
    sizes [B], from draws [B, DRAWS]: the first try that fits, else the central crop."""
    heights, widths = heights.double()[:, None], widths.double()[:, None]
    tries = draws[:, : 4 * TRIES].view(-1, TRIES, 4)
    area = heights * widths * (SCALE[0] + tries[..., 0] * (SCALE[1] - SCALE[0]))
    low, high = math.log(RATIO[0]), math.log(RATIO[1])
    aspect = torch.exp(low + tries[..., 1] * (high - low))
    w = torch.round(torch.sqrt(area * aspect))
    h = torch.round(torch.sqrt(area / aspect))
    fits = (w > 0) & (w <= widths) & (h > 0) & (h <= heights)
    top = torch.floor(tries[..., 2] * (heights - h + 1))
    left = torch.floor(tries[..., 3] * (widths - w + 1))
    first = torch.where(fits.any(1), fits.double().argmax(1), -1)
    pick = first.clamp_min(0)[:, None]
    chosen = torch.cat(
        [top.gather(1, pick), left.gather(1, pick), h.gather(1, pick), w.gather(1, pick)], 1
    )
    return torch.where(
        (first >= 0)[:, None], chosen, central_boxes(heights[:, 0], widths[:, 0])
    ).long()


def central_boxes(heights: torch.Tensor, widths: torch.Tensor) -> torch.Tensor:
    """The fallback crop: the whole image clipped to the allowed aspect ratios, centred."""
    ratio = widths / heights
    w = torch.where(
        ratio < RATIO[0],
        widths,
        torch.where(ratio > RATIO[1], torch.round(heights * RATIO[1]), widths),
    )
    h = torch.where(ratio < RATIO[0], torch.round(widths / RATIO[0]), heights)
    return torch.stack(
        [
            torch.div(heights - h, 2, rounding_mode="floor"),
            torch.div(widths - w, 2, rounding_mode="floor"),
            h,
            w,
        ],
        1,
    )


def image_boxes(images: list[torch.Tensor], draws: torch.Tensor) -> list[list[int]]:
    """Each image's (top, left, height, width) from its draws [B, DRAWS]."""
    sizes = torch.tensor([image.shape[1:] for image in images], dtype=torch.float64)
    return crop_boxes(sizes[:, 0], sizes[:, 1], draws.cpu()).tolist()


def flips(draws: torch.Tensor) -> torch.Tensor:
    """Which images are flipped: the last draw below 1/2, bool [B] on the draws' device."""
    return draws[:, -1] < 0.5


def resized_crops(images: list[torch.Tensor], draws: torch.Tensor, size: int) -> torch.Tensor:
    """The reference: uint8 images [3, H, W] (any sizes, one device) cropped by their draws,
    resized to `size` x `size` one image at a time (antialiased bilinear) and flipped where the
    last draw is below 1/2: uint8 [B, 3, size, size]."""
    out = torch.stack(
        [
            F.interpolate(
                image[None, :, top : top + h, left : left + w].float(),
                size=(size, size),
                mode="bilinear",
                antialias=True,
                align_corners=False,
            )[0]
            for image, (top, left, h, w) in zip(images, image_boxes(images, draws), strict=True)
        ]
    )
    flip = flips(draws).to(out.device)[:, None, None, None]
    out = torch.where(flip, out.flip(-1), out)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def filter_weights(lengths: torch.Tensor, size: int, span: int) -> torch.Tensor:
    """The antialiased bilinear filter as matrices [n, size, span] float32: row i of matrix k
    weighs the first lengths[k] source pixels (zero beyond them) into output pixel i, as
    `F.interpolate(mode="bilinear", antialias=True, align_corners=False)` weighs them: a
    triangle of half-width max(1, scale) source pixels centred on the output pixel's centre,
    scale = length / size, normalised to sum 1."""
    length = lengths.to(torch.float32)[:, None, None]  # [n, 1, 1]
    scale = length / size
    centre = scale[..., 0] * (torch.arange(size, device=lengths.device, dtype=torch.float32) + 0.5)
    source = torch.arange(span, device=lengths.device, dtype=torch.float32) + 0.5
    offset = (source - centre[..., None]) / scale.clamp(min=1.0)  # [n, size, span]
    weights = (1 - offset.abs()).clamp_(min=0) * (source < length)
    return weights / weights.sum(-1, keepdim=True)


def batch_resized_crops(
    images: list[torch.Tensor],
    draws: torch.Tensor,
    size: int,
    group: int = GROUP_ELEMENTS,
    half: bool | None = None,
) -> torch.Tensor:
    """`resized_crops` for the whole batch in a few kernels (`resized_regions` of each image's
    box). uint8 [B, 3, size, size]; within 1 grey level of `resized_crops`. `draws` are best on
    the host: the boxes are computed there."""
    boxes = image_boxes(images, draws)
    regions = [_crop(image, box) for image, box in zip(images, boxes, strict=True)]
    return resized_regions(regions, flips(draws), size, group, half)


def resized_regions(
    regions: list[torch.Tensor],
    flip: torch.Tensor,
    size: int,
    group: int = GROUP_ELEMENTS,
    half: bool | None = None,
) -> torch.Tensor:
    """Crops (uint8 [3, h, w], views of decoded images or regions decoded alone) resized to `size`
    x `size` and flipped where `flip` [B]: padded into groups of at most `group` elements (sorted
    by area) and each group resized and flipped by two batched matrix products of
    `filter_weights` (one copy per crop into its group, then a few kernels per group). With
    `half` (the default on CUDA) the products take float16 operands and accumulate in float32, as
    tensor cores do: half the bytes and a fraction of the SM time of float32 products, at the
    cost of rounding operands to 11 bits (on the CPU, where float16 products are slow, the same
    rounding is applied to float32 products, so the tests check the GPU's pixels' bound).
    uint8 [B, 3, size, size]."""
    device = regions[0].device
    half = device.type == "cuda" if half is None else half
    out = torch.empty(len(regions), 3, size, size, dtype=torch.uint8, device=device)
    flip = _to(flip, device)
    with torch.autocast(device.type, enabled=False):  # the products' precision is chosen here
        for members in _groups([list(region.shape[1:]) for region in regions], group):
            index = _to(torch.tensor(members), device)
            chosen = [regions[k] for k in members]
            out.index_copy_(0, index, _resized(chosen, size, flip.index_select(0, index), half))
    return out


def _to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on `device`, queued on the current stream: a blocking copy would
    make the host wait for the stream's earlier work (PyTorch synchronises the stream after it),
    and from pageable memory CUDA stages the bytes before the call returns."""
    return tensor.to(device, non_blocking=True)


def _crop(image: torch.Tensor, box: list[int]) -> torch.Tensor:
    top, left, h, w = box
    return image[:, top : top + h, left : left + w]


def _groups(sizes: list[list[int]], group: int) -> list[list[int]]:
    """The batch's indices in groups of increasing crop area (`sizes`: each crop's height and
    width) whose crops, padded to the group's largest height and width, hold at most `group`
    elements (a crop larger alone goes alone)."""
    order = sorted(range(len(sizes)), key=lambda k: sizes[k][0] * sizes[k][1])
    groups: list[list[int]] = []
    height = width = 0
    for k in order:
        h, w = max(height, sizes[k][0]), max(width, sizes[k][1])
        if groups and 3 * h * w * (len(groups[-1]) + 1) <= group:
            groups[-1].append(k)
            height, width = h, w
        else:
            groups.append([k])
            height, width = sizes[k]
    return groups


def _resized(crops: list[torch.Tensor], size: int, flip: torch.Tensor, half: bool) -> torch.Tensor:
    """uint8 crops [3, h, w] padded into one float tensor and resized by the filter's matrices,
    the columns' rows reversed where `flip`: uint8 [n, 3, size, size]."""
    device = crops[0].device
    height = max(crop.shape[1] for crop in crops)
    width = max(crop.shape[2] for crop in crops)
    fast = half and device.type == "cuda"
    padded = torch.zeros(
        len(crops), 3, height, width, device=device, dtype=torch.float16 if fast else None
    )
    for slot, crop in zip(padded, crops, strict=True):
        slot[:, : crop.shape[1], : crop.shape[2]].copy_(crop)
    lengths = _to(torch.tensor([crop.shape[1:] for crop in crops]), device)
    rows = filter_weights(lengths[:, 0], size, height)[:, None]
    columns = filter_weights(lengths[:, 1], size, width)
    columns = torch.where(flip[:, None, None], columns.flip(1), columns)[:, None]
    out = _product(_product(rows, padded, half), columns.transpose(-1, -2), half)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def _product(a: torch.Tensor, b: torch.Tensor, half: bool) -> torch.Tensor:
    """a @ b in float32, or with `half` from float16 operands to a float16 result accumulated in
    float32: on CUDA by the tensor cores; elsewhere as float32 products of float16-rounded
    operands, the result rounded to float16 (the same rounding, at float32's speed)."""
    if not half:
        return a @ b
    if a.device.type == "cuda":
        return a.half() @ b.half()
    return (a.half().float() @ b.half().float()).half().float()
