"""What each recorded CPU model gave (kit.numerics.cpu_records, docs/data/cpus/) and what the kit
says of other machines from it: exact expectations only on a recorded model, the measured move and
the agreed outcomes elsewhere, a sentence that claims no more than the records, and the numerics
fingerprint that tells where two machines part."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.cli import cpu_figures, figures, fingerprint
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu_records, numerics

INTEL, AMD = "GenuineIntel 6/85", "AuthenticAMD 25/17"


def test_the_identity_is_vendor_family_and_model(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n"
    )
    found = cpu_records.identity(info)
    assert found["cpu_id"] == AMD and found["cpu"] == "AMD EPYC"
    assert cpu_records.slug(AMD) == "authenticamd-25-17"
    assert cpu_records.describe(found) == "AMD EPYC (AuthenticAMD, family 25, model 17)"


def test_both_recorded_models_are_kept_with_every_part() -> None:
    found = {r["cpu_id"]: r for r in cpu_records.records()}
    assert {INTEL, AMD} <= found.keys()
    for record in found.values():
        assert {"fingerprint", "ci", "main_job"} <= record.keys()
        assert set(record["ci"]["outcomes"]) == {
            "03 time-concat",
            "03 bottleneck",
            "04 budget 20",
            "04 budget 40",
            "04 claim",
        }


def _records(tmp_path: Path, parts: dict[str, dict]) -> Path:
    for cpu_id, record in parts.items():
        path = cpu_records.path_of(cpu_id, tmp_path)
        path.write_text(json.dumps({"cpu": cpu_id, "cpu_id": cpu_id, "cpu_isa": "avx2"} | record))
    return tmp_path


def test_a_recorded_model_is_held_to_its_own_bits_and_another_to_what_all_agree(
    tmp_path: Path,
) -> None:
    folder = _records(
        tmp_path,
        {
            "A 1/1": {
                "ci": {
                    "kit_commit": "a" * 40,
                    "values": {"x": 10.0, "y": 20.0},
                    "outcomes": {"c1": "reproduced", "c2": "contradicted"},
                    "numerics": numerics.VERSION,
                }
            },
            "B 2/2": {
                "ci": {
                    "kit_commit": "b" * 40,
                    "values": {"x": 11.2, "y": 20.0},
                    "outcomes": {"c1": "inconclusive", "c2": "contradicted"},
                    "numerics": numerics.VERSION,
                }
            },
        },
    )
    own = cpu_records.expected("ci", "B 2/2", folder=folder)
    assert own.exact and own.values == {"x": 11.2, "y": 20.0} and own.bound == 0.0
    assert own.outcomes == {"c1": "inconclusive", "c2": "contradicted"}
    other = cpu_records.expected("ci", "C 3/3", floor=0.4, folder=folder)
    assert not other.exact and other.bound == 1.5  # the largest move, 1.2, up to half a point
    assert other.outcomes == {"c2": "contradicted"}  # only what every record gave
    assert other.disputed == {"c1": {"A 1/1": "reproduced", "B 2/2": "inconclusive"}}
    assert cpu_records.expected("ci", "C 3/3", floor=3.2, folder=folder).bound == 3.5
    said = cpu_records.statement(folder)
    assert "moved by up to 1.20 points (x; kit aaaaaaa, bbbbbbb)" in said
    assert "same bits" not in said.split("; across")[1]  # nothing promised across models


def test_with_one_record_the_sentence_says_other_models_are_unknown(tmp_path: Path) -> None:
    folder = _records(
        tmp_path,
        {"A 1/1": {"ci": {"kit_commit": "a" * 40, "values": {"x": 1.0}, "outcomes": {}}}},
    )
    assert "no second CPU model has been recorded" in cpu_records.statement(folder)


def test_a_record_of_earlier_numerics_is_no_exact_pin(tmp_path: Path) -> None:
    """A model recorded before the numerics changed is held to the measured move, not its old
    bits, and the sentence names the change."""
    old = {"kit_commit": "a" * 40, "values": {"x": 10.0}, "outcomes": {"c": "reproduced"}}
    folder = _records(
        tmp_path,
        {
            "A 1/1": {"ci": old},
            "B 2/2": {"ci": old | {"values": {"x": 12.0}, "kit_commit": "b" * 40}},
            "C 3/3": {"ci": old | {"numerics": numerics.VERSION}},
        },
    )
    expect = cpu_records.expected("ci", "A 1/1", folder=folder)
    assert not expect.exact and expect.bound == 2.0 and expect.values == {"x": 10.0}
    assert cpu_records.expected("ci", "C 3/3", folder=folder).exact
    said = cpu_records.statement(folder)
    assert f"{numerics.EARLIER[1]}, across A 1/1" in said and "up to 2.00 points" in said


def test_a_part_recorded_again_under_new_numerics_keeps_the_earlier_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recording this model again under the current numerics keeps its part of earlier numerics:
    what those numerics gave across models stays measured, and stays said."""
    old = {"kit_commit": "a" * 40, "values": {"x": 10.0}, "outcomes": {"c": "reproduced"}}
    mine = cpu_records.identity()["cpu_id"]
    folder = _records(tmp_path, {mine: {"ci": old}, "B 2/2": {"ci": old | {"values": {"x": 12.0}}}})
    new = old | {"numerics": numerics.VERSION, "values": {"x": 11.0}}
    cpu_records.update("ci", new, folder)
    assert cpu_records.record_of(mine, folder)["ci"] == new
    assert cpu_records.largest_move("ci", folder, made_under=1)[0] == 2.0
    assert cpu_records.versions("ci", folder) == [1, numerics.VERSION]
    assert "up to 2.00 points" in cpu_records.statement(folder)
    # a model without a record is held to the larger of every version's move
    assert cpu_records.expected("ci", "D 4/4", folder=folder).bound == 2.0
    cpu_records.update("ci", new | {"values": {"x": 11.5}}, folder)  # the same numerics: replaced
    assert cpu_records.record_of(mine, folder)["earlier"] == {"ci": {"1": old}}


def test_the_kit_says_of_other_machines_only_what_the_records_show() -> None:
    said = cpu_records.statement()
    move, _ = cpu_records.largest_move("ci", made_under=1)
    assert move > 1.0  # the recorded Intel and AMD models gave different bits
    assert f"moved by up to {move:.2f} points" in said
    assert "expect the same bits" not in said
    page = (REPO_ROOT / "docs" / "reproducibility.md").read_text()
    assert said in page  # the page's sentence is the generated one, and README's its short form
    assert cpu_records.brief() in (REPO_ROOT / "README.md").read_text()
    for page in (REPO_ROOT / "docs").rglob("*.md"):
        assert "on another machine expect the same bits" not in page.read_text(), page


def test_the_fingerprint_compares_op_by_op() -> None:
    mine = {"ops": {"basic": {"a": "1", "b": "2"}, "pipeline": {"c": "3"}}}
    theirs = [{"ops": {"basic": {"a": "1", "b": "9"}}}]
    assert fingerprint.compare(mine, theirs) == [
        ["basic: a", "same"],
        ["basic: b", "differs"],
        ["pipeline: c", "not recorded"],
    ]


@pytest.mark.slow
def test_the_numerics_check_prints_its_table_against_every_recorded_model(tmp_path) -> None:
    """`kit check --numerics` on this machine, whatever it is: a row per operation and a column
    per recorded CPU model; exit 0 unless this very model's record differs."""
    done = subprocess.run(
        [sys.executable, "-m", "kit", "check", "--numerics"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    header = next(line for line in done.stdout.splitlines() if line.startswith("operation |"))
    for record in cpu_records.records():
        assert cpu_records.describe(record) in header
    assert "basic: L-BFGS f64 2048x512 10 classes 50 it" in done.stdout
    assert "pipeline: trainer:" in done.stdout
    # the Intel and AMD records agree on every basic operation both hold
    intel, amd = (cpu_records.record_of(c) for c in (INTEL, AMD))
    assert intel is not None and amd is not None
    shared = intel["fingerprint"]["ops"]["basic"].keys() & amd["fingerprint"]["ops"]["basic"].keys()
    assert len(shared) == 16
    assert all(
        intel["fingerprint"]["ops"]["basic"][k] == amd["fingerprint"]["ops"]["basic"][k]
        for k in shared
    )


def test_recording_the_main_job_keeps_this_models_claims(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "folder"
    shutil.copytree(figures.RESULTS / "cpu", folder)
    monkeypatch.setattr(figures, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(cpu_records, "RECORDS", tmp_path / "cpus")
    figures.record("cpu", folder)
    (kept,) = cpu_records.records()
    assert kept["cpu_id"] == cpu_records.identity()["cpu_id"]
    summary = json.loads((folder / "time_concat_summary.json").read_text())
    assert kept["main_job"]["outcomes"] == {c["claim"]: c["status"] for c in summary["claims"]}


def test_recording_a_second_models_main_job_leaves_the_recorded_results(
    tmp_path, monkeypatch
) -> None:
    """`kit figures --record-cpu FOLDER` keeps this model's claims and copies nothing into
    docs/results, which stays the recorded main job's."""
    folder = tmp_path / "folder"
    shutil.copytree(figures.RESULTS / "cpu", folder)
    monkeypatch.setattr(figures, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(cpu_records, "RECORDS", tmp_path / "cpus")
    figures.record_cpu(folder)
    (kept,) = cpu_records.records()
    assert kept["cpu_id"] == cpu_records.identity()["cpu_id"]
    summary = json.loads((folder / "time_concat_summary.json").read_text())
    assert kept["main_job"]["outcomes"] == {c["claim"]: c["status"] for c in summary["claims"]}
    assert not (tmp_path / "results").exists()


def test_values_are_compared_only_between_records_of_one_numerics_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cpu-models table sets side by side only records made under the same numerics (another
    version changed the arithmetic, so its move is no machine's), and says so where the current
    records agree on every value."""
    old = {"kit_commit": "a" * 40, "values": {"x": 10.0, "y": 5.0}, "outcomes": {"c": "reproduced"}}
    now = old | {"numerics": numerics.VERSION, "values": {"x": 13.0, "y": 5.0}}
    folder = _records(
        tmp_path,
        {
            "A 1/1": {"ci": old},
            "B 2/2": {"ci": old | {"values": {"x": 12.0, "y": 5.0}}},
            "C 3/3": {"ci": now},
            "D 4/4": {"ci": now},
        },
    )
    monkeypatch.setattr(cpu_records, "RECORDS", folder)
    table = cpu_figures.cpu_models()
    assert f"{numerics.EARLIER[1].capitalize()}, 1 of the ci profile's 2" in table
    assert "| x | 10.00 | 12.00 | 2.00 |" in table
    assert "13.00" not in table  # the current records are not set beside the earlier ones
    assert (
        "Under the current numerics, all 2 of the ci profile's Table 3 values are the same" in table
    )
    said = cpu_records.statement(folder)
    assert "model 3) and D 4/4 (D, family 4, model 4) the ci profile's values were the same" in said
    assert "values the same on 2 recorded models" in cpu_records.brief(folder)


@pytest.mark.parametrize(
    ("other", "said"),
    [(7.5, "moved by up to 0.50 points (k, replicate 1)"), (7.0, "per replicate were the same")],
)
def test_the_main_jobs_values_per_replicate_are_compared_beside_its_claims(
    tmp_path: Path, other: float, said: str
) -> None:
    """Two models can agree on every ci value and on the main job's claims while the main job's
    values moved: the sentence says how far, replicate by replicate."""
    ci = {
        "kit_commit": "a" * 40,
        "values": {"x": 1.0},
        "outcomes": {},
        "numerics": numerics.VERSION,
    }
    job = {
        "kit_commit": "a" * 40,
        "numerics": numerics.VERSION,
        "outcomes": {"claim": "reproduced"},
        "values": {"k": 6.5},
        "replicates": {"k": [6.0, 7.0]},
    }
    moved = job | {"replicates": {"k": [6.0, other]}, "values": {"k": (6.0 + other) / 2}}
    folder = _records(
        tmp_path,
        {"A 1/1": {"ci": ci, "main_job": job}, "B 2/2": {"ci": ci, "main_job": moved}},
    )
    statement = cpu_records.statement(folder)
    assert "the ci profile's values were the same" in statement
    assert said in statement and "its claims came out the same (claim reproduced)" in statement
    assert ("moved by up to 0.50 points a replicate" in cpu_records.brief(folder)) == (other == 7.5)


def test_main_job_records_without_replicates_are_named_by_their_claims_alone(
    tmp_path: Path,
) -> None:
    ci = {"kit_commit": "a" * 40, "values": {"x": 1.0}, "outcomes": {}, "numerics": 2}
    job = {"kit_commit": "a" * 40, "numerics": 2, "outcomes": {"c": "reproduced"}, "values": {}}
    folder = _records(
        tmp_path, {"A 1/1": {"ci": ci, "main_job": job}, "B 2/2": {"ci": ci, "main_job": job}}
    )
    assert cpu_records.replicate_move(folder) == (None, None)
    said = cpu_records.statement(folder)
    assert "and the main job's claims came out the same (c reproduced)" in said
    assert "per replicate" not in said
