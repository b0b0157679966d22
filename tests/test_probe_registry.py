"""The probe registry holds every probe: no code outside kit/probes names one, and a probe of
one's own, registered once, runs notebook 03's experiment with nothing else changed."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import polars as pl
import pytest
import torch
from pydantic import Field

from kit.data.settings import DataSettings
from kit.experiments.timecat import claims, comparisons, estimates, jobs, measure, planning
from kit.files import paths
from kit.params import params
from kit.probes import registry
from kit.probes.base import FeatureProbe, ProbeSettings
from kit.probes.rows import Split, heldout_indices, labels_of
from kit.probes.selection import RULES, ProbeResult, select
from kit.runtime import machine

KIT = paths.REPO_ROOT / "kit"
NOTEBOOKS = paths.REPO_ROOT / "notebooks"


def _names_a_probe(node: ast.AST, names: set[str]) -> bool:
    """A string constant naming a probe, alone or in a tuple, list or set."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_probe(item, names) for item in node.elts)
    return False


def _is_probe_kind(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "probe_kind") or (
        isinstance(node, ast.Attribute) and node.attr == "probe_kind"
    )


def probe_branches(source: str, names: set[str]) -> Iterator[tuple[int, str]]:
    """(line, code) of each place `source` branches on a probe by name: a comparison with a
    probe's name or with `probe_kind`, a call given a probe's name, a `case` of one."""
    lines = source.splitlines()
    for node in sorted(ast.walk(ast.parse(source)), key=lambda node: getattr(node, "lineno", 0)):
        found = False
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            found = any(_names_a_probe(o, names) or _is_probe_kind(o) for o in operands)
        elif isinstance(node, ast.Call):
            arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
            found = any(_names_a_probe(argument, names) for argument in arguments)
        elif isinstance(node, ast.MatchValue):
            found = _names_a_probe(node.value, names)
        if found:
            yield node.lineno, lines[node.lineno - 1].strip()


def test_the_finder_sees_every_way_of_naming_a_probe() -> None:
    names = {"fast", "lbfgs"}
    source = "\n".join(
        [
            'if params.probe_kind == "lbfgs": pass',
            'if kind in ("fast", "other"): pass',
            "if settings.probe_kind != kind: pass",
            'chosen = registry.get("lbfgs")',
            'match kind:\n    case "fast": pass',
            'default = "fast"',  # a default names a probe without branching on it
            'if mode == "faster": pass',
        ]
    )
    assert [line for line, _ in probe_branches(source, names)] == [1, 2, 3, 4, 6]


def test_nothing_outside_kit_probes_branches_on_a_probe_by_name() -> None:
    """Adding a probe is its module and its registration: the experiments, the launchers and the
    notebooks ask the probe (kit.probes.base.Probe) rather than compare its name."""
    names = set(registry.PROBES)
    found = [
        f"{path.relative_to(paths.REPO_ROOT)}:{line}: {code}"
        for path in sorted(KIT.rglob("*.py"))
        if KIT / "probes" not in path.parents
        for line, code in probe_branches(path.read_text(), names)
    ]
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                found += [
                    f"{notebook.relative_to(paths.REPO_ROOT)} cell {index}, line {line}: {code}"
                    for line, code in probe_branches(source, names)
                ]
    assert not found, "probes named outside kit/probes:\n" + "\n".join(found)


class NearestMeanSettings(ProbeSettings):
    """Nearest class mean on cached features: a probe with nothing to tune."""

    kind: Literal["nearest-mean"] = "nearest-mean"
    heldout_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)


class NearestMeanProbe(FeatureProbe):
    """Each class's mean feature vector, a row taken for the class of the closest mean."""

    settings = NearestMeanSettings

    def describe(self, settings: NearestMeanSettings, tasks: Mapping[str, DataSettings]) -> str:
        return f"nearest class mean on cached features of {len(tasks)} task(s)"

    def fit(
        self,
        train: Split,
        evaluation: Split,
        num_classes: int,
        settings: NearestMeanSettings,
        progress: bool = True,
        extra: Mapping[str, Split] | None = None,
    ) -> ProbeResult:
        assert not extra, "the nearest-mean probe scores no extra evaluation split"
        features, labels = torch.as_tensor(train.features).double(), labels_of(train)
        kept, held = heldout_indices(len(labels), settings.heldout_fraction, seed=0)
        means = torch.stack(
            [features[kept][labels[kept] == c].mean(0) for c in range(num_classes)]
        ).nan_to_num(nan=float("inf"))  # a class absent from the fit rows is never nearest

        def top(rows: torch.Tensor, truth: torch.Tensor, k: int) -> float:
            ranked = torch.cdist(rows, means).topk(min(k, num_classes), largest=False).indices
            return float((ranked == truth[:, None]).any(1).double().mean())

        scored = torch.as_tensor(evaluation.features).double(), labels_of(evaluation)
        history = pl.DataFrame(
            [
                {
                    "epoch": 1,
                    "train_top1": top(features[kept], labels[kept], 1),
                    "heldout_top1": top(features[held], labels[held], 1),
                    "eval_top1": top(*scored, 1),
                    "eval_top5": top(*scored, 5),
                }
            ]
        )
        return ProbeResult(history, select(history, [], num_classes))


@pytest.fixture()
def nearest_mean(monkeypatch: pytest.MonkeyPatch) -> str:
    """The nearest-mean probe registered for one test, as a probe module registers itself."""
    monkeypatch.setattr(registry.PROBES, "_entries", dict(registry.PROBES._entries))
    return registry.register_probe(NearestMeanSettings, f"{__name__}:NearestMeanProbe")


def test_a_probe_of_ones_own_runs_notebook_03s_ci_experiment(
    nearest_mean: str, tmp_path: Path
) -> None:
    settings = jobs.load_settings(
        "ci",
        [],
        [f"output_dir={tmp_path}", f"probe_kind={nearest_mean}", "lbfgs_check=false"],
    )
    assert isinstance(settings.probe, NearestMeanSettings)
    assert (
        measure.probe_description(settings) == "nearest class mean on cached features of 3 task(s)"
    )
    assert jobs.probe_processes(settings) == 1
    assert estimates.estimate(settings, "h100")[2].images == 0  # no passes given: not estimated
    experiment = planning.plan(settings)
    planning.launch(experiment.trainings, settings)
    planning.initialise(experiment.initial)
    measured = measure.probe_all(experiment.representations, settings)
    results = measured.results
    cells = sum(
        rep.task in (None, task.name)
        for task in settings.tasks
        for rep in experiment.representations
    )
    assert results.height == cells * len(RULES)
    assert results["top1"].is_between(0, 1).all() and results["lbfgs_top1"].is_null().all()
    # one head: both rules choose it, and chance is beaten where the features carry the class
    wide = results.pivot("rule", index=["variant", "replicate", "task"], values="top1")
    assert (wide["paper"] == wide["heldout"]).all()
    assert (
        results.filter(pl.col("variant") == "cat1", pl.col("task") == "mixture")["top1"].min() > 0.2
    )
    table = comparisons.table3(results, settings.probe_rule)
    assert table["variant"].to_list() == [v.name for v in settings.variants]
    ran = claims.what_ran(settings, 1.0, machine.describe())
    assert f"{nearest_mean} probe" in ran
    summary = comparisons.summarize(
        results,
        settings.probe_rule,
        settings.baseline,
        settings.max_probe_optimism,
        settings.smallest_effect,
        ran,
    )
    assert {claim["status"] for claim in summary["claims"]} <= {
        "reproduced",
        "contradicted",
        "inconclusive",
    }
    agreement = comparisons.probe_agreement(results, settings.probe_rule)
    assert comparisons.agreement_line(agreement, settings).startswith(
        f"the {nearest_mean} probe has no converged L-BFGS reference"
    )


def test_lbfgs_check_is_refused_for_a_probe_without_a_reference(nearest_mean: str) -> None:
    with pytest.raises(
        params.ParameterError, match=f"lbfgs_check: the {nearest_mean} probe has no"
    ):
        jobs.load_settings("ci", [], [f"probe_kind={nearest_mean}"])


def test_a_probes_reference_is_fitted_by_a_probe_of_cached_features() -> None:
    reference = registry.settings_class("fast")().reference()
    assert reference is not None
    assert isinstance(registry.reference_probe(reference), FeatureProbe)
    reads_images = ProbeSettings.model_construct(kind="faithful")
    with pytest.raises(TypeError, match="reference probe faithful does not fit cached features"):
        registry.reference_probe(reads_images)
