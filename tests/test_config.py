"""Parameter layering and validation: bad input is refused, naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit import config, runner

NOTEBOOK = "01_toy_counterexample"


@pytest.fixture()
def defaults() -> dict:
    return runner.notebook_defaults(runner.find_notebooks(["01"])[0])


@pytest.fixture()
def parameters_dir(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text("chart_formats: [png]\n")
    (tmp_path / "mini").mkdir()
    (tmp_path / "mini" / "profile.yaml").write_text("")
    return tmp_path


def load(defaults: dict, parameters_dir: Path, notebook_yaml: str, overrides=None):
    (parameters_dir / "mini" / f"{NOTEBOOK}.yaml").write_text(notebook_yaml)
    return config.load(NOTEBOOK, "mini", defaults, overrides, parameters_dir=parameters_dir)


def test_layers_later_wins_and_sources_are_tracked(defaults, parameters_dir) -> None:
    (parameters_dir / "mini" / "profile.yaml").write_text("seed: 3\nsteps: 10\n")
    params, sources = load(defaults, parameters_dir, "steps: 20\n", {"lr": 0.25})
    assert (params.seed, params.steps, params.lr) == (3, 20, 0.25)
    assert sources["seed"].endswith("mini/profile.yaml")
    assert sources["steps"].endswith(f"mini/{NOTEBOOK}.yaml")
    assert sources["lr"] == "the command line"
    assert sources["noise"].endswith("(parameters cell)")
    assert params.profile == "mini"


def test_unknown_key_is_refused_with_file_key_and_suggestion(defaults, parameters_dir) -> None:
    with pytest.raises(config.ParameterError) as error:
        load(defaults, parameters_dir, "weight_decai: 0.1\n")
    message = str(error.value)
    assert f"mini/{NOTEBOOK}.yaml" in message
    assert "unknown parameter 'weight_decai'" in message
    assert "did you mean 'weight_decay'" in message


def test_yaml_string_number_is_refused_with_hint(defaults, parameters_dir) -> None:
    with pytest.raises(config.ParameterError) as error:
        load(defaults, parameters_dir, "lr: 1e-3\n")  # YAML 1.1: a string
    message = str(error.value)
    assert f"mini/{NOTEBOOK}.yaml" in message and "'lr'" in message
    assert "'1e-3'" in message and "1.0e-3" in message


@pytest.mark.parametrize("text, key", [
    ("steps: 0\n", "steps"),
    ("noise: -0.1\n", "noise"),
    ("replicates: 2.5\n", "replicates"),
    ("shares: [0.1, 0.7]\n", "shares"),
    ("concat_sizes: [1, 64]\n", "concat_sizes"),
    ("batch_size: 100000\n", "batch_size"),
    ("seed: true\n", "seed"),
    ("chart_formats: [jpg]\n", "chart_formats"),
])
def test_wrong_types_and_ranges_are_refused(defaults, parameters_dir, text, key) -> None:
    with pytest.raises(config.ParameterError) as error:
        load(defaults, parameters_dir, text)
    assert key in str(error.value)


def test_unknown_profile_lists_known_ones(defaults, parameters_dir) -> None:
    with pytest.raises(config.ParameterError, match="unknown profile 'gpu'.*mini"):
        config.load(NOTEBOOK, "gpu", defaults, parameters_dir=parameters_dir)


def test_non_mapping_and_broken_yaml_are_refused(defaults, parameters_dir) -> None:
    with pytest.raises(config.ParameterError, match="expected a mapping"):
        load(defaults, parameters_dir, "- 1\n- 2\n")
    with pytest.raises(config.ParameterError, match="not valid YAML"):
        load(defaults, parameters_dir, "steps: [1, 2\n")


def test_notebook_namespace_is_validated(defaults) -> None:
    namespace = dict(defaults, lr="0.1", unrelated_variable=object())
    with pytest.raises(config.ParameterError, match="'lr'.*'0.1'"):
        config.from_namespace(NOTEBOOK, namespace)
    assert config.from_namespace(NOTEBOOK, defaults).lr == defaults["lr"]


def test_every_shipped_profile_is_valid_for_every_notebook() -> None:
    for profile in ("cpu", "ci"):
        assert runner.plan(None, profile)


def test_notebook_without_schema_is_refused() -> None:
    with pytest.raises(config.ParameterError, match="no parameter schema"):
        config.schema_for("99_unknown")
