"""The upper bounds of the settings' counts and sizes: the most a machine can meet.

Every count and size a notebook or a run takes (replicates, rounds, budgets, rows, workers,
processes, widths, list lengths) is refused above its bound when the settings are validated,
before any compute or allocation, naming the key and the bound. Without one, a slip of the
keyboard (`--set replicates=1000000000`) plans work that grows memory for minutes in silence.
Each bound is far above what the paper and the profiles use (the paper's values in brackets), so
that no real design meets it; a value below it but large still runs, and `kit check` and `kit
run` print what it costs before it starts. tests/test_params.py checks that every integer and
every list of every settings class has one.
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import AfterValidator, Field

from kit.files import paths

#: replicates of a design, and every count of replicates (a round's, the most) [the paper: 5]
REPLICATES = 100
#: models concatenated in one variant, or sizes of concatenation [catN up to cat5]
MODELS = 32
#: variants, tasks and other named entries of one notebook [Table 3: 5 variants, 3 tasks]
ENTRIES = 64
#: values of a swept list: budgets, world seeds [the sweep profile: 6 budgets, 3 worlds]. Every
#: cell (budget x world) is validated as notebook 03's parameters before compute, and planned
SWEPT = 16
#: values of a grid of hyper-parameters (learning rates, weight decays, milestones, shares)
GRID = 64
#: iterations of a run, a budget or an interval of steps [450,000 for cat1]: no more than the
#: images one run may train on (kit.train.settings.MOST_IMAGES, whose refusal says what the
#: budget would cost), as a batch holds at least one
ITERATIONS = 100_000_000_000
#: steps of the toy counterexample's small networks [3,000]
STEPS = 1_000_000
#: images in a batch, global or per process [1,024 for training]
BATCH = 1 << 20
#: rows (images) of a dataset or a probe's subset [ImageNet-1k: 1.28M]
ROWS = 100_000_000
#: classes of a task [iNat18: 8,142]
CLASSES = 1_000_000
#: epochs of a probe [the authors' probe: 28]
EPOCHS = 100_000
#: processes, GPUs and loader workers on one node, or fits side by side [8 GPUs, 12 workers]
PER_NODE = 1024
#: nodes, jobs running at once, CPU cores a node, GB of memory a node
CLUSTER = 1 << 20
#: the side of an image in pixels [224]
IMAGE_SIZE = 4096
#: a network's width multiplier [1, and 2 for the width-matched control]: a ResNet-50 of width
#: 16 holds 6.5 billion parameters, more than a GPU trains
WIDTH = 16.0
#: seconds (a timeout, a wall budget): 30 days
SECONDS = 30 * 24 * 3600
#: minutes of a Slurm job: 30 days
MINUTES = SECONDS // 60
#: a seed: what numpy's generators take (below 2**32), leaving room for the seeds derived from it
SEED = 2**31 - 1
#: lines of a shell preamble, and other free lists
LINES = 1000
#: bytes of one name in a path, and of a whole path (kit.files.paths: the file system's limits)
NAME_BYTES, PATH_BYTES = paths.NAME_BYTES, paths.PATH_BYTES

#: a learning rate in a grid, above 0 [the profiles' grids: 0.01 to 0.3]
LEARNING_RATE = 100.0
#: a weight decay in a grid, 0 or above [the profiles' grids: 0 to 10]
WEIGHT_DECAY = 1000.0

#: a learning rate as a grid holds it: positive, finite, at most LEARNING_RATE
Rate = Annotated[float, Field(gt=0.0, le=LEARNING_RATE, allow_inf_nan=False)]
#: a weight decay as a grid holds it: 0 or positive, finite, at most WEIGHT_DECAY
Decay = Annotated[float, Field(ge=0.0, le=WEIGHT_DECAY, allow_inf_nan=False)]
#: a share of a whole (a mixture's weight, a component's part): in [0, 1]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
#: a seed as a list holds it
Seed = Annotated[int, Field(ge=0, le=SEED)]
#: iterations (a budget, a step) as a list holds them
Step = Annotated[int, Field(le=ITERATIONS)]
#: a grid of weight decays, as a mapping holds it
Grid = Annotated[list[Decay], Field(max_length=GRID)]
#: a list of names (files, cues), as a list holds it
Names = Annotated[list[str], Field(max_length=ENTRIES)]
#: a replicate's seeds, one a model
Seeds = Annotated[list[Seed], Field(max_length=MODELS)]


def _path_lengths(text: str) -> str:
    """A path whose whole and every name fit the file system (NAME_BYTES, PATH_BYTES)."""
    if len(os.fsencode(text)) > PATH_BYTES:
        raise ValueError(
            f"a path of {len(os.fsencode(text)):,} bytes; file systems take at most {PATH_BYTES:,}"
        )
    for name in text.split("/"):
        if len(os.fsencode(name)) > NAME_BYTES:
            raise ValueError(
                f"the name {name[:24]}... is {len(os.fsencode(name)):,} bytes long; a file system "
                f"takes at most {NAME_BYTES} in one name"
            )
    return text


#: a path as a setting holds it (a folder to write or read), refused when it cannot be named
PathText = Annotated[str, Field(min_length=1), AfterValidator(_path_lengths)]
