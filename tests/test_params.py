"""Parameter layering and validation: profiles merge section by section, users add their own files
and dotted overrides, and bad input is refused naming the file and the (dotted) key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill
import pytest

from kit.cli import runner
from kit.files.paths import NOTEBOOKS_DIR, PARAMETERS_DIR, REPO_ROOT, importable_environment
from kit.params import kernel_params, params

NOTEBOOK = "01_toy_counterexample"


@pytest.fixture()
def parameters_dir(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text("chart_formats: [png]\n")
    (tmp_path / "mini").mkdir()
    (tmp_path / "mini" / "profile.yaml").write_text("")
    return tmp_path


def load(parameters_dir: Path, notebook_yaml: str, overrides=None, files=None):
    (parameters_dir / "mini" / f"{NOTEBOOK}.yaml").write_text(notebook_yaml)
    return params.load(NOTEBOOK, "mini", files, overrides, parameters_dir=parameters_dir)


def test_layers_later_wins_and_sources_are_tracked(parameters_dir: Path, tmp_path: Path) -> None:
    (parameters_dir / "mini" / "profile.yaml").write_text("seed: 3\nsteps: 10\nnoise: 0.2\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("noise: 0.3\nreplicates: 5\n")
    loaded, sources = load(
        parameters_dir, "steps: 20\n", params.parse_overrides(["lr=0.25"]), [mine]
    )
    assert (loaded.seed, loaded.steps, loaded.noise, loaded.replicates, loaded.lr) == (
        3,
        20,
        0.3,
        5,
        0.25,
    )
    assert sources["seed"].endswith("mini/profile.yaml")
    assert sources["steps"].endswith(f"mini/{NOTEBOOK}.yaml")
    assert sources["noise"] == str(mine)
    assert sources["lr"] == "the command line"
    assert loaded.profile == "mini" and loaded.output_dir == "outputs/mini"
    assert loaded.n_train == 512  # the schema's default: one home for it


def test_user_files_apply_in_order_after_the_profile(parameters_dir: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("seed: 1\nsteps: 11\n")
    second.write_text("seed: 2\n")
    loaded, sources = load(parameters_dir, "seed: 9\nsteps: 9\n", files=[first, second])
    assert (loaded.seed, loaded.steps) == (2, 11)
    assert sources["seed"] == str(second)


def test_deep_merge_replaces_leaves_and_lists_keeps_the_rest() -> None:
    values: dict = {
        "train": {"lr": 0.1, "data": {"kind": "synthetic", "image_size": 24}},
        "ns": [1, 2],
    }
    sources: dict = {}
    params.merge(values, sources, {"train": {"data": {"image_size": 16}}, "ns": [4]}, "f.yaml")
    assert values == {
        "train": {"lr": 0.1, "data": {"kind": "synthetic", "image_size": 16}},
        "ns": [4],
    }
    assert sources == {
        "train": "f.yaml",
        "train.data": "f.yaml",
        "train.data.image_size": "f.yaml",
        "ns": "f.yaml",
    }


def test_dotted_overrides_nest_and_read_values_as_yaml() -> None:
    assert params.parse_overrides(["train.lr=0.25", "train.data.image_size=32", "ns=[1, 2]"]) == {
        "train": {"lr": 0.25, "data": {"image_size": 32}},
        "ns": [1, 2],
    }
    with pytest.raises(params.ParameterError, match="key=value"):
        params.parse_overrides(["lr"])
    with pytest.raises(params.ParameterError, match="as a value and as a section"):
        params.parse_overrides(["train=1", "train.lr=2"])


def test_profiles_extend_each_other(parameters_dir: Path) -> None:
    (parameters_dir / "big").mkdir()
    (parameters_dir / "big" / "profile.yaml").write_text("seed: 7\n")
    (parameters_dir / "big" / f"{NOTEBOOK}.yaml").write_text("steps: 70\nnoise: 0.3\n")
    (parameters_dir / "mini" / "profile.yaml").write_text("extends: big\n")
    loaded, sources = load(parameters_dir, "steps: 5\n")
    assert (loaded.seed, loaded.steps, loaded.noise, loaded.profile) == (7, 5, 0.3, "mini")
    assert sources["noise"].endswith(f"big/{NOTEBOOK}.yaml")
    (parameters_dir / "big" / "profile.yaml").write_text("extends: mini\n")
    with pytest.raises(params.ParameterError, match="in a loop: mini -> big -> mini"):
        load(parameters_dir, "")
    (parameters_dir / "big" / "profile.yaml").write_text("extends: nothing\n")
    with pytest.raises(params.ParameterError, match="unknown profile 'nothing'.*extended by"):
        load(parameters_dir, "")


def test_unknown_key_is_refused_with_file_key_and_suggestion(parameters_dir: Path) -> None:
    with pytest.raises(params.ParameterError) as error:
        load(parameters_dir, "weight_decai: 0.1\n")
    message = str(error.value)
    assert f"mini/{NOTEBOOK}.yaml" in message
    assert "unknown parameter 'weight_decai'" in message
    assert "did you mean 'weight_decay'" in message


def test_yaml_string_number_is_refused_with_hint(parameters_dir: Path) -> None:
    with pytest.raises(params.ParameterError) as error:
        load(parameters_dir, "lr: 1e-3\n")  # YAML 1.1: a string
    message = str(error.value)
    assert f"mini/{NOTEBOOK}.yaml" in message and "'lr'" in message
    assert "'1e-3'" in message and "1.0e-3" in message


def test_nested_typos_and_strings_name_the_dotted_key() -> None:
    with pytest.raises(params.ParameterError) as error:
        runner.plan(
            ["03"],
            "ci",
            overrides=params.parse_overrides(["train.lrr=0.1", "train.data.synthetic.noise=1e-3"]),
        )
    message = str(error.value)
    assert "the command line: unknown parameter 'train.lrr'; did you mean 'train.lr'?" in message
    assert "'train.data.synthetic.noise'" in message and "1.0e-3" in message


@pytest.mark.parametrize(
    "text, key",
    [
        ("steps: 0\n", "steps"),
        ("noise: -0.1\n", "noise"),
        ("replicates: 2.5\n", "replicates"),
        ("shares: [0.1, 0.7]\n", "shares"),
        ("concat_sizes: [1, 64]\n", "concat_sizes"),
        ("batch_size: 100000\n", "batch_size"),
        ("seed: true\n", "seed"),
        ("chart_formats: [jpg]\n", "chart_formats"),
    ],
)
def test_wrong_types_and_ranges_are_refused(parameters_dir: Path, text: str, key: str) -> None:
    with pytest.raises(params.ParameterError) as error:
        load(parameters_dir, text)
    assert key in str(error.value)


def test_unknown_profile_lists_known_ones(parameters_dir: Path) -> None:
    with pytest.raises(params.ParameterError, match="unknown profile 'gpu'.*mini"):
        params.load(NOTEBOOK, "gpu", parameters_dir=parameters_dir)


def test_non_mapping_broken_and_missing_files_are_refused(
    parameters_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(params.ParameterError, match="expected a mapping"):
        load(parameters_dir, "- 1\n- 2\n")
    with pytest.raises(params.ParameterError, match="not valid YAML"):
        load(parameters_dir, "steps: [1, 2\n")
    with pytest.raises(params.ParameterError, match="mine.yaml: parameter file not found"):
        load(parameters_dir, "", files=[tmp_path / "mine.yaml"])


def test_a_notebook_resolves_its_profile_and_refuses_unknown_injected_names(
    parameters_dir: Path,
) -> None:
    (parameters_dir / "mini" / f"{NOTEBOOK}.yaml").write_text("steps: 20\n")
    history = [
        '# parameters\nprofile = "mini"',
        "x = 1",
        "# Parameters\nlr = 0.25\nno_such_key_qq = 1\n",
    ]
    namespace = {"In": history, "profile": "mini", "lr": 0.25, "no_such_key_qq": 1, "x": 1}
    with pytest.raises(params.ParameterError) as error:
        kernel_params.from_notebook(NOTEBOOK, namespace, parameters_dir)
    assert "injected cell): unknown parameter 'no_such_key_qq'" in str(error.value)
    history[2] = "# Parameters\nlr = 0.25\n"
    loaded = kernel_params.from_notebook(NOTEBOOK, namespace, parameters_dir)
    assert (loaded.steps, loaded.lr, loaded.profile) == (20, 0.25, "mini")  # x is no parameter
    without_history = {
        "profile": "mini",
        "lr": 0.5,
        "params": params,
        "_private": 3,
        "In": [],
        "Out": {},
    }
    assert kernel_params.from_notebook(NOTEBOOK, without_history, parameters_dir).lr == 0.5
    with pytest.raises(params.ParameterError, match="unknown parameter 'x'"):
        kernel_params.from_notebook(NOTEBOOK, without_history | {"x": 1}, parameters_dir)


def test_a_name_the_parameters_cell_leaves_none_takes_the_profiles_value(
    parameters_dir: Path,
) -> None:
    (parameters_dir / "mini" / f"{NOTEBOOK}.yaml").write_text("steps: 20\nlr: 0.25\n")
    history = [
        '# parameters\nprofile = "mini"\nsteps = None\nlr = None\n',
        "# Parameters\nlr = 0.5\n",
    ]
    namespace = {"In": history, "profile": "mini", "steps": None, "lr": 0.5}
    loaded = kernel_params.from_notebook(NOTEBOOK, namespace, parameters_dir)
    assert (loaded.steps, loaded.lr) == (20, 0.5)  # steps from the profile, lr injected
    history[1] = "# Parameters\nlr = 0.5\nsteps = None\n"  # papermill's None is a value
    with pytest.raises(params.ParameterError, match="parameter 'steps'"):
        kernel_params.from_notebook(NOTEBOOK, namespace, parameters_dir)


def declared_parameters(notebook: Path) -> list[str]:
    """Names the notebook's parameters cell assigns, in order."""
    cell = next(
        c
        for c in nbformat.read(notebook, as_version=4).cells
        if "parameters" in c.metadata.get("tags", [])
    )
    return kernel_params.parameter_names(["# parameters\n" + cell.source])


@pytest.mark.parametrize("notebook", runner.find_notebooks(None), ids=lambda p: p.stem)
def test_each_notebook_declares_its_schemas_top_level_keys_for_papermill(notebook: Path) -> None:
    declared = declared_parameters(notebook)
    assert sorted(declared) == sorted(params.schema_for(notebook.stem).model_fields), (
        f"{notebook}: its parameters cell must declare every top-level key of its schema"
    )
    listed = subprocess.run(
        [sys.executable, "-m", "papermill", "--help-notebook", str(notebook)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    shown = re.findall(r"^  (\w+): ", listed.stdout, flags=re.MULTILINE)
    assert sorted(shown) == sorted(declared), listed.stdout


def test_every_shipped_cpu_profile_is_valid_for_every_notebook() -> None:
    for profile in ("cpu", "ci", "interactive"):
        assert runner.plan(None, profile)


def test_notebook_without_schema_is_refused() -> None:
    with pytest.raises(params.ParameterError, match="no registered parameter schema"):
        params.schema_for("99_unknown")


#: `kit run 03 04` in this process up to its first kernel, which is replaced by one that says
#: what the command line's process imported and stops there
RUN_UNTIL_THE_KERNEL = """
import sys, papermill
from kit.cli.main import main

def kernel(*args, **kwargs):
    print(sorted({"torch", "torchvision"} & set(sys.modules)))
    raise SystemExit(0)

papermill.execute_notebook = kernel
main(["run", "03", "04", "--profile", "ci", "--set", "output_dir=" + sys.argv[1]])
raise SystemExit("the kernel was not launched")
"""


def test_kit_check_and_kit_run_say_what_the_plans_cost_without_importing_torch(
    tmp_path: Path,
) -> None:
    """`kit check` and `kit run`, up to their kernels, import neither torch nor torchvision: the
    plans' costs need the networks' sizes only (kit.architectures), the probes' passes their
    settings only, and the numerics line what the environment and the CPU say (torch's own
    kernels are recorded by each process that computes). Each process would otherwise spend
    seconds of CPU importing them, and the suite starts many."""
    check = (
        "import sys\nfrom kit.cli.main import main\n"
        "assert main(['check', '03', '04', '--profile', 'ci']) == 0\n"
        "print(sorted({'torch', 'torchvision'} & set(sys.modules)))"
    )
    for code, arguments in ((check, []), (RUN_UNTIL_THE_KERNEL, [str(tmp_path / "out")])):
        done = subprocess.run(
            [sys.executable, "-c", code, *arguments],
            cwd=REPO_ROOT,
            env=importable_environment(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        assert "expected cost" in done.stdout, done.stdout
        assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]


@pytest.mark.parametrize(
    "shipped",
    sorted(PARAMETERS_DIR.glob("*/[0-9]*.yaml")),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_papermill_knows_every_key_of_a_shipped_parameter_file(
    shipped: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notebook = NOTEBOOKS_DIR / f"{shipped.stem}.ipynb"
    papermill.execute_notebook(
        str(notebook),
        str(tmp_path / "prepared.ipynb"),
        parameters=params.read_yaml(shipped),
        prepare_only=True,
        kernel_name="python3",
    )
    assert params.read_yaml(shipped)  # the file gives parameters for papermill to check
    assert not [r.getMessage() for r in caplog.records if "unknown parameter" in r.getMessage()]


def test_a_section_override_without_notebook_names_goes_where_the_section_is() -> None:
    runs = {
        r.notebook.stem: r
        for r in runner.plan(
            None, "ci", overrides=params.parse_overrides(["train.lr=0.125", "chart_formats=[png]"])
        )
    }
    assert runs["03_time_concat"].parameters["train"]["lr"] == 0.125
    assert all(r.parameters["chart_formats"] == ["png"] for r in runs.values())
    with pytest.raises(
        params.ParameterError, match="unknown parameter 'train'"
    ):  # named: must take it
        runner.plan(["01"], "ci", overrides=params.parse_overrides(["train.lr=0.125"]))
    with pytest.raises(
        params.ParameterError, match="no notebook takes parameter 'trian'; did you mean 'train'"
    ):
        runner.plan(None, "ci", overrides=params.parse_overrides(["trian.lr=0.125"]))


def test_an_unknown_profile_is_said_once_for_every_notebook() -> None:
    with pytest.raises(params.ParameterError) as error:
        runner.plan(None, "no_such_profile_qq")
    assert str(error.value).count("unknown profile 'no_such_profile_qq'") == 1


def test_smoke_test_profiles_say_so_first_and_every_profile_is_in_the_readme(
    capsys: pytest.CaptureFixture[str],
) -> None:
    profiles = sorted(p.name for p in PARAMETERS_DIR.iterdir() if p.is_dir())
    smoke = [name for name in profiles if params.smoke_test_label(name)]
    assert smoke == ["ci", "interactive"]
    kernel_params.from_notebook("02_surveyed_evidence", {"profile": "interactive", "In": []})
    assert capsys.readouterr().out.startswith("SMOKE TEST (profile interactive: ")
    kernel_params.from_notebook("02_surveyed_evidence", {"profile": "cpu", "In": []})
    assert "SMOKE TEST" not in capsys.readouterr().out
    readme = (PARAMETERS_DIR.parent / "README.md").read_text()
    for name in profiles:
        assert f"| `{name}` |" in readme, f"README's profile table lacks {name}"
        assert params.read_yaml(PARAMETERS_DIR / name / "profile.yaml").get(params.PURPOSE), name


# Strict, bounded YAML: one line naming the file and line, before any memory is spent

ALIAS_BOMB = (
    "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    + "".join(
        f"{b}: &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]\n"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "lrs: *i\n"
)


@pytest.mark.parametrize(
    "text, message",
    [
        (ALIAS_BOMB, "line 1: anchors (&a) are not allowed"),
        ("seed: 1\nsteps: 2\nseed: 3\n", "line 3: key 'seed' is given twice (first on line 1)"),
        ("train: {lr: 0.1, lr: 0.2}\n", "line 1: key 'lr' is given twice (first on line 1)"),
        (
            "seed: !!python/object/apply:os.system ['true']\n",
            "line 1: tag '!!python/object/apply:os.system' is not allowed",
        ),
        ("shares: [" + ", ".join(["0.5"] * 10_001) + "]\n", "a list of 10,001 items"),
        ("steps: [1, 2\n", "line 2, column 1: not valid YAML: expected ',' or ']'"),
        ("steps: 1\ntrain:\n  <<: {lr: 0.1}\n", "line 3: merge keys (<<) are not allowed"),
    ],
)
def test_aliases_duplicates_tags_and_huge_lists_are_refused_in_one_line(
    parameters_dir: Path, text: str, message: str
) -> None:
    with pytest.raises(params.ParameterError) as error:
        load(parameters_dir, text)
    assert str(error.value).startswith(str(parameters_dir / "mini" / f"{NOTEBOOK}.yaml"))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_parameter_file_over_the_size_limit_is_refused_unread(parameters_dir: Path) -> None:
    with pytest.raises(
        params.ParameterError,
        match=r"1,000,001 bytes; parameter files take "
        r"at most 1,000,000",
    ):
        load(parameters_dir, "#" * 1_000_000 + "\n")


@pytest.mark.parametrize(
    "override, message",
    [
        ("baseline=`x`", "command line: 'baseline=`x`': line 1, column 1: not valid YAML"),
        ("seed=!!python/name:os.system", "tag '!!python/name:os.system' is not allowed"),
        ("lr=&x 1", "anchors (&x) are not allowed"),
    ],
)
def test_command_line_values_are_read_as_strict_yaml(override: str, message: str) -> None:
    with pytest.raises(params.ParameterError) as error:
        params.parse_overrides([override])
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "override, key",
    [("probes.fast.lrs=[.nan, 0.1]", "probes.fast.lrs.0"), ("train.lr=.inf", "train.lr")],
)
def test_nan_and_infinity_are_refused_where_a_number_is_meant(override: str, key: str) -> None:
    with pytest.raises(
        params.ParameterError,
        match=re.escape(f"parameter '{key}': Input should be a finite number"),
    ):
        params.load("03_time_concat", "ci", overrides=params.parse_overrides([override]))


def test_the_profile_is_chosen_by_name_not_set_as_a_value(
    parameters_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(
        params.ParameterError,
        match=re.escape("the command line: 'profile' is 'cpu' but the profile used is 'mini'"),
    ):
        load(parameters_dir, "", overrides={"profile": "cpu"})
    mine = tmp_path / "mine.yaml"
    mine.write_text("profile: ci\n")
    with pytest.raises(params.ParameterError, match=re.escape(f"{mine}: 'profile' is 'ci'")):
        load(parameters_dir, "", files=[mine])
    mine.write_text("profile: mini\nseed: 4\n")  # a saved record replayed under its own profile
    assert load(parameters_dir, "", files=[mine])[0].seed == 4
    result = subprocess.run(
        [sys.executable, "-m", "kit", "check", "02", "--profile", "ci", "--set", "profile=cpu"],
        capture_output=True,
        text=True,
        cwd=PARAMETERS_DIR.parent,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
