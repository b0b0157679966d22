"""Every count and size of the settings has an upper bound a machine can meet (kit.params.bounds):
refused before compute, naming the key and the bound, at once; a large but valid value is run
after its cost is said."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from kit.cli import runner
from kit.cli.main import main as kit_main
from kit.files.paths import REPO_ROOT, importable_environment
from kit.params import bounds, params
from kit.train.settings import TrainSettings

#: what `kit check` may spend before refusing a count out of bounds (CPU seconds: the
#: interpreter, the settings' imports and the validation, whatever the machine's load)
REFUSED_WITHIN_S = 5.0


def unbounded(schema: Any, path: str = "", seen: frozenset[str] = frozenset()) -> list[str]:
    """Every integer without an upper bound and every list or mapping without a longest length
    in a pydantic core schema, by the dotted path of its field."""
    found = []
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "definitions":
            definitions = {d["ref"]: d for d in schema["definitions"]}
            return unbounded(schema["schema"], path, seen) + [
                problem
                for ref, definition in definitions.items()
                for problem in unbounded(definition, f"<{ref.split(':')[0]}>", seen | {ref})
            ]
        if kind == "int" and "le" not in schema and "lt" not in schema:
            found.append(f"{path}: an integer without an upper bound")
        if kind in ("list", "dict", "set", "tuple") and "max_length" not in schema:
            found.append(f"{path}: a {kind} without a longest length")
        if kind == "model-fields":
            for name, field in schema["fields"].items():
                found += unbounded(field["schema"], f"{path}.{name}", seen)
            return found
        for key, value in schema.items():
            if key not in ("metadata", "serialization"):
                found += unbounded(value, path, seen)
    elif isinstance(schema, list):
        for item in schema:
            found += unbounded(item, path, seen)
    return found


@pytest.mark.parametrize(
    "schema",
    [*params.SCHEMAS.values(), TrainSettings],
    ids=lambda schema: schema.__name__,
)
def test_every_count_and_list_of_the_settings_has_a_bound(schema: type[BaseModel]) -> None:
    assert unbounded(schema.__pydantic_core_schema__) == []


class _Planted(BaseModel):
    count: int
    names: list[str] = []


def test_the_bound_check_finds_an_unbounded_count() -> None:
    assert unbounded(_Planted.__pydantic_core_schema__) == [
        ".count: an integer without an upper bound",
        ".names: a list without a longest length",
    ]


@pytest.mark.parametrize(
    ("notebook", "override", "key", "bound"),
    [
        ("03_time_concat", "replicates=1000000000", "replicates", bounds.REPLICATES),
        ("03_time_concat", "rounds={most: 5000, wall_s: 60}", "rounds.most", bounds.REPLICATES),
        ("03_time_concat", "train.batch_size=10000000000", "train.batch_size", bounds.BATCH),
        ("03_time_concat", "train.width=1000.0", "train.width", bounds.WIDTH),
        ("03_time_concat", "probes.fast.epochs=1000000000", "probes.fast.epochs", bounds.EPOCHS),
        ("03_time_concat", "train.data.synthetic.num_train=10000000000", "num_train", bounds.ROWS),
        ("04_when_concat_helps", f"budgets={list(range(1, 100))}", "budgets", bounds.SWEPT),
    ],
)
def test_a_count_above_its_bound_is_refused_naming_the_key_and_the_bound(
    notebook: str, override: str, key: str, bound: float
) -> None:
    with pytest.raises(params.ParameterError) as raised:
        params.load(notebook, "ci", overrides=params.parse_overrides([override]))
    said = str(raised.value)
    assert f"{key}'" in said
    assert f"less than or equal to {bound:.0f}," in said or f"at most {bound} items" in said, said


@pytest.mark.parametrize("command", ["check", "run"])
def test_an_unbounded_count_is_refused_at_once(command: str, tmp_path: Path) -> None:
    """`kit check|run 03 --set replicates=1000000000`: refused before the notebook tools are
    imported or anything is planned (without a bound, it planned a billion replicates, its
    memory growing by 25 MB/s in silence)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "kit", command, "03", "--profile", "ci"]
        + ["--set", "replicates=1000000000", "--set", f"output_dir={tmp_path}"],
        cwd=REPO_ROOT,
        env=importable_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        "parameter 'replicates': Input should be less than or equal to "
        f"{bounds.REPLICATES}, got 1000000000"
    ) in done.stderr
    assert spent < REFUSED_WITHIN_S, f"{spent:.1f} CPU seconds"


def test_a_large_valid_count_says_its_cost_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def started(*_: object, **__: object) -> int:
        said = capsys.readouterr().out
        assert "03_time_concat: expected cost at 60 replicates: 300 training runs" in said
        assert "GB of checkpoints and features" in said or "MB of checkpoints" in said
        return 0

    monkeypatch.setattr(runner, "run", started)
    command = ["run", "03", "--profile", "ci", "--set", "replicates=60"]
    assert kit_main([*command, "--set", f"output_dir={tmp_path}"]) == 0


@pytest.mark.parametrize(
    ("notebook", "override", "key", "said"),
    [
        ("03_time_concat", "probes.fast.lrs=[0.0]", "probes.fast.lrs.0", "greater than 0"),
        ("03_time_concat", "probes.fast.lrs=[0.1, -1.0]", "probes.fast.lrs.1", "greater than 0"),
        ("03_time_concat", "probes.fast.lrs=[1.0e+3]", "probes.fast.lrs.0", "less than or equal"),
        ("03_time_concat", "probes.fast.weight_decays=[-1.0]", "weight_decays.0", "or equal to 0"),
        ("03_time_concat", "probes.lbfgs.weight_decays=[1.0e+4]", "weight_decays.0", "to 1000"),
        ("03_time_concat", "train.betas=[0.9, 1.5]", "train.betas.1", "less than 1"),
        ("01_toy_counterexample", "weight_decays=[-0.1]", "weight_decays.0", "or equal to 0"),
        ("01_toy_counterexample", "shares=[1.5]", "shares.0", "less than or equal to 1"),
        ("01_toy_counterexample", "sparsity_weights=[0.5, 0.5, -0.2, 0.2]", "weights.2", "to 0"),
    ],
)
def test_every_element_of_a_grid_of_rates_decays_or_shares_is_bounded(
    notebook: str, override: str, key: str, said: str
) -> None:
    """`probes.fast.lrs=[0.0]` was called valid and `[-1.0]` changed the results table in
    silence: each element of a learning-rate, weight-decay or share list is positive (or not
    negative) and within its bound, refused naming the element (a non-finite one already was:
    params.Strict)."""
    with pytest.raises(params.ParameterError) as raised:
        params.load(notebook, "ci", overrides=params.parse_overrides([override]))
    message = str(raised.value)
    assert f"{key}'" in message and said in message, message
