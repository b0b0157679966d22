"""Notebook tests: every notebook runs once per session, in one executed ci main job.

The tests that read a finished run (its results, report, paper files, executed copies, what
`kit run` printed, or the checked cells' outputs) share one executed ci main job, SHARED_RUN:
`python -m kit run` of every notebook in turn, as a user runs it, built once per session by the
first test process to ask (a file lock, and a record per notebook written when its run has
ended, so that either process may run any reader) and started in the background as soon as a
process has collected a test that reads it. The tests never write into it: what they write goes
to a copy. The cells tagged `nbval-check-output` are compared with their reference outputs
(tests/nbval_references/) in the main job's executed copies, as nbval compares them
(tests/checked_outputs.py), so no notebook runs a second time for that check.

Every process the tests start runs in the kit's reproducible CPU numerics (kit.numerics.numerics,
set by `import kit`), as users' runs do by default: the pinned results are the same bits on any
x86-64 processor, core count or load (docs/reproducibility.md).
"""

from __future__ import annotations

import ast
import contextlib
import html
import os
import platform
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
import scheduling
import torch
from xdist.scheduler import LoadScopeScheduling

# the pinned results are the reproducible mode's, whatever the user's shell says
os.environ["TIMECAT_CPU_NUMERICS"] = "reproducible"
#: what torchrun and Slurm set in the processes they start: the tests start their own launches,
#: so a suite run inside an allocation (`srun pytest`, a job's shell) or a torchrun worker's
#: shell must not have its trainers join that job's ranks or rendezvous on its port
LAUNCHERS_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
LAUNCHERS_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_", "SALLOC_", "TORCHELASTIC_")
for _name in [*os.environ]:
    if _name in LAUNCHERS_VARIABLES or _name.startswith(LAUNCHERS_PREFIXES):
        del os.environ[_name]
#: the environment the tests start from (a test that starts a process group may set RANK later)
ENVIRONMENT_AT_START = dict(os.environ)

import main_job  # noqa: E402  (imports kit: after the environment above)

TESTS_DIR = Path(__file__).parent
#: set by the session's first process to its own folder's name (its test processes, and the
#: pytest runs a test starts, inherit it): each session's main job is its own (main_job.claim)
SESSION_ENV = "KIT_TESTS_SESSION"
NOTEBOOK_COPIES = TESTS_DIR / "_notebooks" / os.environ.setdefault(SESSION_ENV, f"{os.getpid()}")
PROFILE = "ci"
#: the executed ci main job the readers share (tests/main_job.py): `kit run` of each notebook
#: into SHARED_RUN / PROFILE, built in the background in this order (the longest, which the
#: most tests read, first); beside that folder, a record of what each run printed, written
#: when it ended (the marker that it is finished), and the build's lock
SHARED_RUN = NOTEBOOK_COPIES / "run"
MAIN_JOB = (
    "03_time_concat",
    "04_when_concat_helps",
    "01_toy_counterexample",
    "02_surveyed_evidence",
)
#: 04 reuses 03's runs, so 03 runs first (run first, 04 would leave 03 nothing to train)
READS = {"04_when_concat_helps": "03_time_concat"}
#: set for a pytest that a test starts (tests/test_environment.py): the main job is the outer
#: session's, which its tests may be reading, so the inner one leaves it alone
NESTED_ENV = "KIT_TESTS_NESTED"


#: the lock on this session's folder (main_job.claim), held by the session's first process
_SESSION_LOCK: list[IO[str]] = []


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller cleared the folder
        return
    if os.environ.get(NESTED_ENV):
        return
    # emptied (a pid's earlier session has ended), its lock held while this process lives
    _SESSION_LOCK.append(main_job.claim(NOTEBOOK_COPIES))


#: what the fast lane (`pytest -m "not slow"`) leaves out, each a minute or more of the full
#: suite on 2 cores: whole modules (the dress rehearsal, the browser, process faults), tests
#: that read a notebook's outputs (the shared main job), and tests
#: whose name says they start torchrun, Slurm, submitit, gloo groups or warm workers
SLOW_MODULES = ("test_rehearsal.py", "test_browser.py", "test_faults_processes.py", "test_lab.py")
SLOW_FIXTURES = ("runner_output", "notebook_outputs")
SLOW_NAMES = (
    "torchrun",
    "slurm",
    "submitit",
    "gloo",
    "warm_process",
    "two_process",
    "signal_to_the_runner",
    "plain_papermill",
    "outside_kit_run",
    "killed_right_after",
    "spread_script",
    "gpu_input_script",
    "tiny_gpu_decode_run",
    "emulated_amd",
)

#: single tests the fast lane leaves out besides: each took 5 s or more (a parametrised one, in
#: one of its cases) in the full suite on 2 cores (`python -m pytest --durations=0`, a fresh
#: clone, 2026-11-29), together three quarters of what the lane took, and those whose call took
#: 5 s or more in the lane itself on 2 cores of an AMD EPYC family 25 model 17 (`-m "not slow"
#: --durations=80`, load average 5 to 8 from other jobs, 2026-12-07); the lane is for daily
#: work, the full suite runs them all. tests/test_project.py checks that each names a test.
SLOW_TESTS = frozenset(
    (
        "test_a_batch_crosses_from_a_worker_with_a_constant_number_of_descriptors",
        "test_a_changed_archive_is_refused_until_accepted",
        "test_a_checkpoint_read_without_its_hash_is_listed_in_the_summary_and_the_report",
        "test_a_disk_filling_while_unpacking_keeps_the_archive_and_names_the_path",
        "test_a_failed_run_keeps_the_previous_good_notebook",
        "test_a_failed_run_leaves_no_parameters_record_and_a_folder_the_report_refuses",
        "test_a_file_of_the_users_inside_an_earlier_download_is_never_deleted",
        "test_a_finished_widget_shows_its_count_over_its_own_time",
        "test_a_flagged_cell_keeps_only_the_judgement_its_bias_cannot_have_made",
        "test_a_forked_child_computes_its_blocks_on_threads_of_its_own",
        "test_a_kept_bar_stays_at_its_end_in_the_saved_notebook",
        "test_a_kill_while_a_snapshot_is_written_resumes_exactly",
        "test_a_notebook_saved_with_outputs_is_told_how_to_strip_them",
        "test_a_probe_of_ones_own_runs_notebook_03s_ci_experiment",
        "test_a_saved_parameter_file_replays_where_its_profile_says",
        "test_a_second_download_into_a_folder_is_refused_naming_the_first",
        "test_a_snapshot_sweep_trains_once_and_reads_each_cell_s_own_step",
        "test_a_source_checkout_without_the_notebook_tools_trains_and_says_it_is_not_installed",
        "test_a_stop_between_logging_steps_checkpoints_within_the_check_interval",
        "test_a_stray_record_never_says_verified",
        "test_a_stuck_extraction_worker_becomes_an_error_naming_the_checkpoint",
        "test_a_stuck_probe_worker_becomes_an_error_naming_the_probe",
        "test_a_training_step_gives_the_same_bits_on_emulated_machines_and_fast_mode_does_not",
        "test_agreement_benchmark_reads_a_feature_cache_and_prints_each_difference",
        "test_an_absurd_budget_says_what_it_would_cost",
        "test_an_archive_planting_its_own_record_deletes_nothing",
        "test_an_extended_run_logs_on_in_its_mlflow_run_in_the_store_mlflow_tracking_uri_names",
        "test_an_imagenet_task_scores_its_probes_on_an_extra_evaluation_set",
        "test_an_unbounded_count_is_refused_at_once",
        "test_an_unwritable_output_folder_is_refused_before_anything_runs",
        "test_augmentation_depends_on_epoch_and_index_not_on_workers",
        "test_batchnorm_recalibration_at_x_is_needed_and_sufficient",
        "test_bayes_ceiling_matches_the_best_lookup_table_learned_from_samples",
        "test_boundaries_fall_look_by_look",
        "test_cifar_workers_get_a_handle_to_its_arrays_not_a_copy",
        "test_command_line_reports_bad_input_without_traceback",
        "test_concatenating_a_phi1_and_a_phi2_model_recovers_all_four_components",
        "test_cpu_subset_passes_and_says_it_is_the_cpu_subset",
        "test_direct_training_solves_every_component_with_its_feature",
        "test_each_layout_downloads_and_every_file_is_found_verified",
        "test_failing_cell_gives_nonzero_exit_and_keeps_partial_output",
        "test_faithful_and_fast_agree_where_both_converge",
        "test_input_rates_measure_dali_where_it_is_installed",
        "test_input_rates_measure_each_path_that_works_here",
        "test_kit_check_and_extraction_read_a_downloaded_release_in_each_layout",
        "test_kit_check_and_kit_run_say_what_the_plans_cost_without_importing_torch",
        "test_kit_check_prints_the_numerics",
        "test_kit_check_refuses_a_crafted_cifar_batch_of_a_task",
        "test_kit_check_refuses_an_output_folder_that_cannot_be_written",
        "test_kit_type_checks",
        "test_local_workers_are_pinned_to_disjoint_cores",
        "test_local_workers_train_several_runs_in_turn_each_as_if_alone",
        "test_members_outside_the_release_are_skipped_and_said",
        "test_memory_benchmark_prints_the_ratio_on_a_small_proxy",
        "test_mlflow_metrics_are_the_metrics_and_do_not_change_the_run",
        "test_paths_outside_the_output_folder_and_absurd_budgets_are_refused_at_check",
        "test_planted_failures_make_it_exit_non_zero_naming_each",
        "test_resume_after_sigkill_ends_with_the_uninterrupted_weights",
        "test_second_launch_into_a_held_run_folder_is_refused_naming_the_holder",
        "test_site_builds_strictly",
        "test_sparse_models_on_dominated_mixtures_keep_one_feature_and_fail_half",
        "test_the_batched_resize_stays_within_a_grey_level_of_the_per_image_one",
        "test_the_cpu_of_each_test_and_of_the_processes_it_starts_is_told_apart",
        "test_the_docs_figures_are_their_recorded_sources",
        "test_the_kit_runs_haswell_kernels_whatever_was_imported_first_and_leaves_numpys_alone",
        "test_the_page_gathers_verdicts_tables_charts_notebooks_and_parameters",
        "test_the_report_writes_every_table_as_latex_and_csv_and_every_chart_as_pdf",
        "test_the_training_command_and_the_gpu_input_benchmark_start",
        "test_untrained_networks_made_with_other_settings_are_written_again",
        "test_verified_means_the_files_the_profile_reads",
    )
)


def _reads_the_main_job(item: pytest.Item) -> bool:
    """Whether `item` reads the shared executed main job (SHARED_RUN)."""
    fixtures = getattr(item, "fixturenames", ())
    return any(name in fixtures for name in SLOW_FIXTURES)


def _tests_marked_slow() -> dict[str, set[str]]:
    """By test module, the tests decorated `@pytest.mark.slow`, read from the source (for the
    scheduler, which never collects)."""
    found: dict[str, set[str]] = {}
    for module in TESTS_DIR.glob("test_*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d) == "pytest.mark.slow" for d in node.decorator_list
            ):
                found.setdefault(module.name, set()).add(node.name)
    return found


def _tests_reading_notebooks() -> dict[str, set[str]]:
    """By test module, the tests that take a SLOW_FIXTURES fixture, read from the source: the
    xdist controller schedules by test id and never collects, so it cannot ask the items."""
    found: dict[str, set[str]] = {}
    for module in TESTS_DIR.glob("test_*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.FunctionDef)
                and node.name.startswith("test")
                and {a.arg for a in node.args.args} & set(SLOW_FIXTURES)
            ):
                found.setdefault(module.name, set()).add(node.name)
    return found


class _LongestFirst(LoadScopeScheduling):
    """xdist's scheduling by module, a free worker taking the module taken to last longest
    first (tests/scheduling.py)."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        self.reading = _tests_reading_notebooks()
        self.marked = _tests_marked_slow()
        self.workqueue = scheduling.LongestFirst(self._slow)

    def _slow(self, nodeid: str) -> bool:
        """Whether the fast lane leaves out the test `nodeid`, read from its id alone (the
        controller never collects): what pytest_collection_modifyitems marks `slow`."""
        path, _, test = nodeid.partition("::")
        return (
            Path(path).name in SLOW_MODULES
            or test.split("[")[0] in self.reading.get(Path(path).name, ())
            or any(name in test for name in SLOW_NAMES)
            or scheduling.test_name(nodeid) in SLOW_TESTS
            or scheduling.test_name(nodeid) in self.marked.get(Path(path).name, ())
        )


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadScopeScheduling:
    """Two test processes (`-n 2` in pyproject.toml), scheduled by `_LongestFirst`."""
    return _LongestFirst(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say at the end what the pinned results were checked against and within which bounds
    (tests/pins.py, from the CPU records of docs/data/cpus/)."""
    import pins

    expect = pins.expected()
    terminalreporter.write_line(
        f"pinned results: {expect.cpu_id} "
        + (
            "has a record: its own values bit for bit and its outcomes exactly"
            if expect.exact
            else f"has no record: each value within {expect.bound:g} points of the recorded "
            f"reference, the outcomes every recorded CPU model gave alike "
            f"({', '.join(f'{k} {v}' for k, v in expect.outcomes.items())})"
        )
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests the fast lane leaves out `slow` (see SLOW_MODULES); refuse a test that
    reads the notebooks' outputs where the scheduler, reading the source, cannot see it."""
    reading = _tests_reading_notebooks()
    for item in items:
        name = getattr(item, "originalname", item.name)
        if _reads_the_main_job(item) and name not in reading.get(item.path.name, ()):
            raise pytest.UsageError(
                f"{item.nodeid} uses {' or '.join(SLOW_FIXTURES)} through another fixture: take "
                "it as an argument of the test, so that the scheduler counts it among the slow"
            )
        if (
            item.path.name in SLOW_MODULES
            or _reads_the_main_job(item)
            or any(name in item.name for name in SLOW_NAMES)
            or name in SLOW_TESTS
        ):
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the shared main job in the background if a test selected to run reads it
    (after `-m` and `-k`, so the fast lane never starts it; nor does `--collect-only`)."""
    if session.config.option.collectonly or os.environ.get(NESTED_ENV):
        return
    if any(map(_reads_the_main_job, session.items)):
        threading.Thread(target=_build_in_background, daemon=True).start()


def _main_job(stem: str) -> main_job.RunnerOutput:
    """What `kit run <stem> --profile ci` printed in the shared main job (tests/main_job.py)."""
    return main_job.run(stem, READS, PROFILE, SHARED_RUN, ENVIRONMENT_AT_START)


def _build_in_background() -> None:
    """The whole shared main job, in a thread of a test process that collected a reader (its
    runs are subprocesses, so the thread mostly waits); a failure is left to the test that
    asks, which builds what is missing and shows the error."""
    with contextlib.suppress(Exception):
        for stem in MAIN_JOB:
            _main_job(stem)


def pytest_unconfigure(config: pytest.Config) -> None:
    main_job.end_running()


@pytest.fixture(scope="session")
def runner_output() -> Callable[[str], main_job.RunnerOutput]:
    """runner_output(stem) -> what `python -m kit run <stem> --profile ci` printed in the shared
    main job (each notebook run once per session)."""
    return _main_job


@pytest.fixture(scope="session")
def notebook_outputs() -> Callable[[str, str], Path]:
    """notebook_outputs(stem, result_file) -> the shared main job's folder, once `stem` has run
    there (tests copy what they write to a folder of their own)."""

    def get(stem: str, result_file: str) -> Path:
        output = _main_job(stem)
        assert output.returncode == 0, output.stderr[-3000:]
        assert (output.output_dir / result_file).exists(), f"{stem} did not write {result_file}"
        return output.output_dir

    return get


@pytest.fixture(scope="session")
def chart_texts() -> Callable[[Path], list[str]]:
    """chart_texts(svg) -> every piece of text a saved chart shows (legends, titles, labels)."""

    def read(path: Path) -> list[str]:
        return [
            html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text())
        ]

    return read


#: where NVIDIA publishes nvImageCodec (and DALI) wheels, so where the dev extra installs them
NVIDIA_WHEELS = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")


@pytest.fixture()
def engines():
    """kit.data.hardware's decoder on the CPU: nvImageCodec's CPU backend (libjpeg-turbo),
    standing in for a GPU's hardware JPEG engines in the same code. The dev extra installs
    nvImageCodec where NVIDIA publishes its wheels, so there a missing one fails the test rather
    than skipping it; elsewhere it skips."""
    from kit.data import hardware

    if not NVIDIA_WHEELS:
        pytest.skip("NVIDIA publishes nvImageCodec wheels for Linux x86-64 and aarch64 only")
    try:
        from nvidia import nvimgcodec  # noqa: F401
    except ImportError as error:
        pytest.fail(
            f"nvImageCodec is in the dev extra but cannot be imported ({error}); install it with "
            "`uv sync --locked --inexact --extra dev`"
        )
    decoder = hardware.engine_decoder(torch.device("cpu"))
    assert decoder is not None and decoder.regions
    return decoder
