"""The offline synthetic world: images rendered from (world seed, split, index), and its ceiling.

Its renders stay float and standardised: they are tiny (16-32 px), so their bytes cost nothing,
and quantising them would change every synthetic result the kit has recorded.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from kit.data.synthetic_settings import CUES, SyntheticSettings


@dataclass(frozen=True)
class SyntheticDraw:
    """What a synthetic sample shows: its label, mixture component and each cue's class (None
    where the component does not show that cue)."""

    label: int
    component: int
    cue_values: dict[str, int | None]


def _figure(u: np.ndarray, v: np.ndarray, shape: int) -> np.ndarray:
    """Whether each point (u, v), in units of the object's radius, lies inside figure `shape`:
    ten outlines a small CNN can tell apart at 24 px (beyond ten classes they repeat smaller)."""
    r = np.hypot(u, v)
    p, q = (u + v) / np.sqrt(2), (u - v) / np.sqrt(2)
    figures = (
        lambda: r <= 1.0,  # disc
        lambda: np.maximum(abs(u), abs(v)) <= 0.8,  # square
        lambda: abs(u) + abs(v) <= 1.1,  # diamond
        lambda: (v <= 0.6) & (abs(u) <= 0.6 * (v + 1.0)),  # triangle, up
        lambda: (v >= -0.6) & (abs(u) <= 0.6 * (1.0 - v)),  # triangle, down
        lambda: (r >= 0.55) & (r <= 1.0),  # ring
        lambda: (np.minimum(abs(u), abs(v)) <= 0.33) & (np.maximum(abs(u), abs(v)) <= 1.0),
        lambda: (np.minimum(abs(p), abs(q)) <= 0.33) & (np.maximum(abs(p), abs(q)) <= 1.0),
        lambda: (abs(u) <= 1.0) & (abs(v) <= 0.4),  # bar, lying
        lambda: (abs(u) <= 0.4) & (abs(v) <= 1.0),  # bar, standing
    )
    return figures[shape % len(figures)]()


#: synthetic worlds whose rendered images a process keeps (a sample is a pure function of its
#: world, split and index): runs trained in turn in one process, and every probe of a task,
#: render each image once. About 7 kB an image at 24 px: 8 worlds of 8,192 images, 0.5 GB.
RENDERED_WORLDS = 8
_RENDERED: dict[tuple, dict[int, tuple[torch.Tensor, int]]] = {}


class SyntheticWorld(Dataset):
    """Images rendered on the fly from (world seed, split, index): an object on a grey field
    whose colour (hue), shape (one of ten figures), texture (stripe orientation) and position
    (angle around the centre) each show a class. In each mixture component only the
    component's cues show the label, each with probability `strength[cue]`; its absent cues are
    not shown (grey, unstriped, a disc, centred) and all other cues show random classes. No
    disk, no state, identical in every worker."""

    SPLITS = {"train": 0, "eval": 1}
    #: the object's radius, in units of half the image side
    RADIUS = 0.5

    def __init__(
        self, world: SyntheticSettings, num_classes: int, image_size: int, split: str
    ) -> None:
        self.world, self.num_classes, self.image_size = world, num_classes, image_size
        self.split = self.SPLITS[split]
        self.size = world.num_train if split == "train" else world.num_eval
        weights = np.array([c.weight for c in world.components])
        self.component_weights = weights / weights.sum()
        axis = np.linspace(-1.0, 1.0, image_size, dtype=np.float32)
        self.grid_x, self.grid_y = np.meshgrid(axis, axis)
        self._key = (world.model_dump_json(), num_classes, image_size, self.split)

    def __len__(self) -> int:
        return self.size

    def _rng(self, index: int) -> np.random.Generator:
        if not 0 <= index < self.size:
            raise IndexError(index)
        return np.random.default_rng([self.world.seed, self.split, index])

    def _draw(self, rng: np.random.Generator) -> SyntheticDraw:
        label = int(rng.integers(self.num_classes))
        component = int(rng.choice(len(self.component_weights), p=self.component_weights))
        chosen = self.world.components[component]
        values: dict[str, int | None] = {}
        for cue in CUES:  # two draws per cue whatever the branch, so streams stay aligned
            shows_label, other = rng.random(), int(rng.integers(self.num_classes))
            strength = self.world.strength.get(cue, 1.0)
            values[cue] = (
                None
                if cue in chosen.absent
                else label
                if cue in chosen.cues and shows_label < strength
                else other
            )
        return SyntheticDraw(label, component, values)

    def draw(self, index: int) -> SyntheticDraw:
        return self._draw(self._rng(index))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rendered = _RENDERED.get(self._key)
        if rendered is None:
            rendered = _RENDERED[self._key] = {}
            while len(_RENDERED) > RENDERED_WORLDS:
                del _RENDERED[next(iter(_RENDERED))]  # the least recently made
        if index not in rendered:
            rng = self._rng(index)
            drawn = self._draw(rng)
            rendered[index] = (torch.from_numpy(self._render(drawn.cue_values, rng)), drawn.label)
        image, label = rendered[index]
        return image.clone(), label  # a transform may write into what it is given

    def _render(self, values: dict[str, int | None], rng: np.random.Generator) -> np.ndarray:
        classes = self.num_classes
        centre = rng.normal(0, 0.04, 2)
        if values["position"] is not None:
            angle = 2 * np.pi * values["position"] / classes
            centre += 0.45 * np.array([np.cos(angle), np.sin(angle)])
        dx, dy = self.grid_x - centre[0], self.grid_y - centre[1]
        radius = self.RADIUS * rng.uniform(0.9, 1.1)
        shape = values["shape"]
        level = 0 if shape is None else shape // 10  # classes beyond ten: smaller figures
        inside = _figure(
            dx / radius * (1 + 0.3 * level),
            dy / radius * (1 + 0.3 * level),
            0 if shape is None else shape,
        )
        if values["texture"] is None:
            shade = np.full_like(dx, 0.85)
        else:
            stripe_angle = np.pi * values["texture"] / classes
            phase = (dx * np.cos(stripe_angle) + dy * np.sin(stripe_angle)) * (np.pi * 6)
            shade = 0.65 + 0.35 * np.sign(np.sin(phase))
        hue, saturation = (
            (0.0, 0.0) if values["colour"] is None else (values["colour"] / classes, 0.85)
        )
        rgb = np.array(colorsys.hsv_to_rgb(hue, saturation, 1.0), dtype=np.float32)
        image = np.where(inside, shade * rgb[:, None, None], 0.5).astype(np.float32)
        image += rng.normal(0, self.world.noise, image.shape).astype(np.float32)
        return (image - 0.5) / 0.25


def bayes_ceiling(world: SyntheticSettings, num_classes: int) -> float:
    """The best top-1 any classifier can reach on this world if it reads every cue perfectly:
    the probability mass of the most likely label of each combination of cue values. A task
    whose components cannot be told apart (each shows a random class in the cues it does not
    carry) has a ceiling well below 100%, and no representation can be blamed for it."""
    weights = np.array([c.weight for c in world.components])
    weights = weights / weights.sum()
    shape = (num_classes,) + (num_classes + 1,) * len(CUES)  # label, then each cue (+ absent)
    joint = np.zeros(shape)
    eye = np.eye(num_classes)
    for weight, component in zip(weights, world.components, strict=True):
        term = np.full(shape, weight / num_classes)
        for axis, cue in enumerate(CUES, start=1):
            given = np.zeros((num_classes, num_classes + 1))  # P(cue value | label)
            if cue in component.absent:
                given[:, num_classes] = 1.0
            elif cue in component.cues:
                strength = world.strength.get(cue, 1.0)
                given[:, :num_classes] = strength * eye + (1 - strength) / num_classes
            else:
                given[:, :num_classes] = 1.0 / num_classes
            view = [1] * len(shape)
            view[0], view[axis] = num_classes, num_classes + 1
            term = term * given.reshape(view)
        joint += term
    return float(joint.max(axis=0).sum())
