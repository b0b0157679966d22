"""Why can the untrained networks score the same on the mixture in every replicate?

Reads notebook 03's cached features of its random-init variant on the pretraining mixture (the
cpu profile's run, or any output folder), fits each replicate's L-BFGS probe along the weight
decays given, and prints per replicate: the evaluation images each head gets right, and, for the
head the held-out rule picks from the first `--choose-from` decays, which images those are
(coloured or grey objects) and how far the replicates' sets of correct images overlap. Equal
counts over sets that differ say the replicates agree by coincidence, not by a seeding slip.

    .venv/bin/python benchmarks/random_init_replicates.py outputs/cpu --choose-from 2

(an output folder relative to the repository root, or absolute)
"""

from __future__ import annotations

import argparse
import itertools

import torch

from kit.data.synthetic import SyntheticWorld
from kit.experiments.timecat import measure, planning
from kit.params import params
from kit.probes import lbfgs
from kit.probes.rows import Split
from kit.probes.settings import LBFGS_MAX_ITER
from kit.stats import diagnostics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", help="the output folder notebook 03 ran in")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument(
        "--weight-decays", type=float, nargs="+", default=[1e-3, 1e-2, 0.1, 1.0, 10.0]
    )
    parser.add_argument(
        "--choose-from",
        type=int,
        default=2,
        help="the held-out rule chooses among the first this many decays",
    )
    args = parser.parse_args()
    settings, _ = params.load("03_time_concat", args.profile, output_dir=args.output_dir)
    untrained = [
        rep for rep in planning.plan(settings).representations if rep.kind == "random-init"
    ]
    mixture = next(task for task in settings.tasks if task.pretraining)
    found = measure.task_features(mixture, untrained, settings)
    data, classes = settings.task_data(mixture)
    world = SyntheticWorld(data.synthetic, classes, data.image_size, "eval")
    grey = torch.tensor([bool(world.draw(i).component) for i in range(found.eval_rows)])
    correct = []
    for index, rep in enumerate(found.probed):
        train, evaluation = (
            Split(*f.torch(), f.record["split"]) for f in (found.train[index], found.eval[index])
        )
        rows = lbfgs.convex_fit(
            train,
            evaluation,
            classes,
            settings.probe.heldout_fraction,
            settings.probe.seed,
            torch.device("cpu"),
        )
        head = lbfgs.zero_head(train.features.shape[1], classes)
        fits, predictions = [], []
        for decay in sorted(args.weight_decays, reverse=True):  # the probe's path
            fits.append((decay, rows.fit(head, decay, LBFGS_MAX_ITER)))
            with torch.no_grad():
                predictions.append(head(rows.standardised(evaluation.features)).argmax(1))
        counts = {decay: int(round(fit["eval_top1"] * found.eval_rows)) for decay, fit in fits}
        allowed = sorted(args.weight_decays)[: args.choose_from]
        chosen = max(
            (fit["heldout_top1"], decay, i)
            for i, (decay, fit) in enumerate(fits)
            if decay in allowed
        )
        right = predictions[chosen[2]] == evaluation.labels
        correct.append(right)
        print(
            f"replicate {rep.replicate} ({', '.join(c.parent.name for c in rep.checkpoints)}): "
            f"images right per weight decay {counts}; held-out choice among {allowed}: "
            f"{chosen[1]:g}, {int(right.sum())} right ({int((right & ~grey).sum())} of "
            f"{int((~grey).sum())} coloured, {int((right & grey).sum())} of {int(grey.sum())} "
            "grey)"
        )
    overlaps = [int((a & b).sum()) for a, b in itertools.combinations(correct, 2)]
    print(f"images right in both, per pair of replicates: {overlaps}")
    first, second = (found.eval[i].torch()[0] for i in range(2))
    print(
        f"linear CKA of replicates 0 and 1's features: {diagnostics.linear_cka(first, second):.2f}"
    )


if __name__ == "__main__":
    main()
