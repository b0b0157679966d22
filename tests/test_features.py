"""Feature extraction: concatenation order and shapes, the on-disk cache, checkpoint formats."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch.utils.data import TensorDataset

from kit import feature_cache, features, models
from kit.data import pipeline, workers
from kit.data.fixtures import write_image_folder
from kit.data.settings import DataSettings
from kit.files.paths import REPO_ROOT
from kit.readout.progress import STAGE_FILE_ENV
from kit.train import backbones
from kit.train.settings import load_train_settings


def tiny_checkpoint(folder: Path, name: str, seed: int, width: float = 0.125) -> Path:
    """A kit-format checkpoint ('model' + 'config') of a freshly initialised tiny ResNet."""
    settings = {
        "model": "resnet10",
        "width": width,
        "num_classes": 3,
        "seed": seed,
        "data": {
            "kind": "synthetic",
            "image_size": 16,
            "synthetic": {
                "num_train": 8,
                "num_eval": 8,
                "components": [{"weight": 1.0, "cues": ["colour"]}],
            },
        },
        "batch_size": 8,
        "iterations": 1,
        "output_dir": str(folder / name),
    }
    cfg = load_train_settings(_yaml(folder / f"{name}.yaml", settings))
    torch.manual_seed(seed)
    model = models.build(cfg.model, cfg.num_classes, cfg.width, cfg.stem, cfg.data.image_size)
    for module in model.modules():  # non-trivial BN statistics, so eval mode matters
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
    path = folder / f"{name}.pt"
    torch.save({"model": model.state_dict(), "config": cfg.model_dump()}, path)
    return path


def _yaml(path: Path, values: dict) -> Path:
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.fixture()
def images() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(37, 3, 16, 16, generator=generator),
        torch.randint(0, 3, (37,), generator=generator),
    )


def noise_extraction(dataset, tmp_path: Path, batch_size: int = 16) -> dict:
    """The arguments of an extraction of `dataset` (noise images) into tmp_path/cache."""
    return {
        "dataset": dataset,
        "dataset_id": "noise",
        "split": "test",
        "transform": "none",
        "cache_dir": tmp_path / "cache",
        "batch_size": batch_size,
        "progress": False,
    }


def test_concatenation_follows_the_order_given(tmp_path: Path, images) -> None:
    a, b = tiny_checkpoint(tmp_path, "a", 1), tiny_checkpoint(tmp_path, "b", 2, width=0.25)
    both = features.extract(
        [a, b], images, "noise", "test", "none", tmp_path / "cache", batch_size=8, progress=False
    )
    alone_a = features.extract(
        [a], images, "noise", "test", "none", tmp_path / "cache", batch_size=8, progress=False
    )
    alone_b = features.extract(
        [b], images, "noise", "test", "none", tmp_path / "cache", batch_size=8, progress=False
    )
    assert both.features.shape == (37, 64 + 128)
    assert both.record["widths"] == [64, 128]
    np.testing.assert_array_equal(both.features[:, :64], alone_a.features)
    np.testing.assert_array_equal(both.features[:, 64:], alone_b.features)
    np.testing.assert_array_equal(both.labels, images.tensors[1].numpy())
    model = backbones.load_backbone(a)
    with torch.no_grad():
        expected = model.features(images.tensors[0]).numpy()
    np.testing.assert_allclose(alone_a.features, expected, rtol=1e-5, atol=1e-6)


def test_backbones_side_by_side_write_each_backbones_own_features(tmp_path: Path, images) -> None:
    """Three backbones extracted two at a time, one intra-op thread each: every entry holds its
    own backbone's features (as extracted one at a time, up to float32 rounding), and the
    process keeps its intra-op threads."""
    paths = [tiny_checkpoint(tmp_path, name, seed) for seed, name in enumerate("abc")]
    threads = torch.get_num_threads()
    found = [
        features.extract_many(
            [[p] for p in paths],
            images,
            "noise",
            "test",
            "none",
            tmp_path / f"cache{side}",
            batch_size=8,
            progress=False,
            side_by_side=side,
        )
        for side in (1, 2)
    ]
    assert torch.get_num_threads() == threads
    for alone, together in zip(*found, strict=True):
        np.testing.assert_allclose(together.features, alone.features, rtol=1e-5, atol=1e-6)
    assert not np.allclose(found[1][0].features, found[1][1].features)


def test_side_by_side_the_next_batch_is_read_while_the_backbones_run(
    tmp_path: Path, images, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a batch (rendering a synthetic world's images, decoding) overlaps the backbones'
    work on the previous one, so no core waits for it: each backbone's first batch waits until
    the second batch has been read, which a pass that reads only after every backbone finished
    never does (its wait would time out)."""
    paths = [tiny_checkpoint(tmp_path, name, seed) for seed, name in enumerate("ab")]
    second = threading.Event()

    class Watched(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(images)

        def __getitem__(self, index: int):
            if index == 8:  # the first row of the second batch of 8
                second.set()
            return images[index]

    waited: list[bool] = []
    real = models.KitResNet.features

    def features_of(model, batch):
        if not second.is_set():
            waited.append(second.wait(timeout=10))
        return real(model, batch)

    monkeypatch.setattr(models.KitResNet, "features", features_of)
    found = features.extract_many(
        [[p] for p in paths],
        Watched(),
        "noise",
        "test",
        "none",
        tmp_path / "cache",
        batch_size=8,
        progress=False,
        side_by_side=2,
    )
    assert waited and all(waited)
    monkeypatch.setattr(models.KitResNet, "features", real)
    alone = features.extract([paths[1]], **noise_extraction(images, tmp_path / "alone", 8))
    np.testing.assert_allclose(found[1].features, alone.features, rtol=1e-5, atol=1e-6)


def test_a_checkpoint_is_hashed_once_for_every_pass_until_it_changes(
    tmp_path: Path, images, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notebook 03 keys each task's and split's entries by the contents of the same 66 files:
    each is hashed once, and again once it changes."""
    path = tiny_checkpoint(tmp_path, "a", 1)
    hashed: list[Path] = []
    real = feature_cache.files.file_hash
    monkeypatch.setattr(
        feature_cache.files, "file_hash", lambda file: hashed.append(file) or real(file)
    )
    for split in ("train", "eval", "test"):
        features.extract([path], **noise_extraction(images, tmp_path) | {"split": split})
    assert hashed.count(path) == 1
    tiny_checkpoint(tmp_path, "a", 2)  # another network written in its place
    again = features.extract([path], **noise_extraction(images, tmp_path))
    assert hashed.count(path) == 2 and not again.cache_hit


def test_a_checkpoint_copied_from_another_run_is_refused_not_served_from_the_cache(
    tmp_path: Path, images
) -> None:
    """A run's checkpoint replaced by another run's file (its hash file copied along) is refused
    naming what it records and what the run expects; features cached for the same bytes under
    the other run are never served for this one, as the identity is part of the cache key."""
    ours, theirs = tiny_checkpoint(tmp_path, "cat1", 1), tiny_checkpoint(tmp_path, "wide1", 1, 0.25)
    expected = {
        ours: {"model": "resnet10", "width": 0.125, "seed": 1, "run": "cat1"},
        theirs: {"model": "resnet10", "width": 0.25, "seed": 1, "run": "wide1"},
    }
    kwargs = noise_extraction(images, tmp_path) | {"identities": expected}
    features.extract_many([[ours], [theirs]], **kwargs)  # each is its own run's: both cached
    ours.write_bytes(theirs.read_bytes())
    with pytest.raises(models.CheckpointError) as refused:
        features.extract_many([[ours]], **kwargs)
    said = str(refused.value)
    assert said.startswith(f"{ours}: this checkpoint records model resnet10, width 0.25, seed 1, ")
    assert "run wide1" in said and "expects model resnet10, width 0.125, seed 1, run cat1" in said
    assert "(width, run differ)" in said and "\n" not in said
    records = [
        feature_cache.record_of([ours], {ours: "same"}, "noise", "test", "none", "float32", 37, ids)
        for ids in ({ours: expected[ours]}, {ours: expected[theirs]})
    ]
    assert feature_cache.key(records[0]) != feature_cache.key(records[1])


def test_a_checkpoint_is_checked_against_its_expected_identity_when_opened(tmp_path: Path) -> None:
    """`kit check`'s opening of a variant's files checks what each records: the run's own file
    passes, one recording another seed or step is named."""
    path = tiny_checkpoint(tmp_path, "run0", 2)
    assert backbones.checkpoint_problems([str(path)], {str(path): {"seed": 2}}) == []
    problems = backbones.checkpoint_problems([str(path)], {str(path): {"seed": 550, "step": 5}})
    assert problems == [
        f"{path}: this checkpoint records seed 2, step none, but this run expects seed 550, "
        "step 5 (seed, step differ): a file copied or renamed from another run is not used. Put "
        "this run's own file back, or delete this one and its .sha256 (for a run the kit trained, "
        "delete the run's folder and run again to retrain it)."
    ]


def test_second_call_is_a_cache_hit_and_a_changed_checkpoint_a_miss(tmp_path: Path, images) -> None:
    path = tiny_checkpoint(tmp_path, "a", 1)
    kwargs = dict(
        dataset=images,
        dataset_id="noise",
        split="test",
        transform="none",
        cache_dir=tmp_path / "cache",
        batch_size=16,
        progress=False,
    )
    first = features.extract([path], **kwargs)
    second = features.extract([path], **kwargs)
    assert not first.cache_hit and second.cache_hit
    assert isinstance(second.features, np.memmap)  # read from disk, not held in RAM
    np.testing.assert_array_equal(first.features, second.features)
    state = torch.load(path, weights_only=True)
    state["model"]["fc.bias"] += 1.0  # any change of the file's content
    torch.save(state, path)
    third = features.extract([path], **kwargs)
    assert not third.cache_hit and third.path != first.path
    assert features.extract([path], **kwargs | {"split": "train"}).cache_hit is False
    assert features.extract([path], **kwargs | {"dtype": "float16"}).features.dtype == np.float16


def test_the_stage_says_what_was_extracted_again_and_what_concatenated(
    tmp_path: Path, images, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corrupt entry of a two-checkpoint representation is rebuilt from its checkpoints'
    entries, and a corrupt checkpoint entry extracted again: the stage's last line says which,
    not `extracted 0`."""
    stages = tmp_path / "stages.jsonl"
    monkeypatch.setenv(STAGE_FILE_ENV, str(stages))
    first, second = tiny_checkpoint(tmp_path, "a", 1), tiny_checkpoint(tmp_path, "b", 2)
    kwargs = noise_extraction(images, tmp_path)

    def last_note() -> str:
        notes = [json.loads(line) for line in stages.read_text().splitlines()]
        return [note["note"] for note in notes if note["final"]][-1]

    both = features.extract([first, second], **kwargs)
    assert last_note().endswith(
        "extracted 2 checkpoints, concatenated 1 representation from cached checkpoints"
    )
    np.save(both.path / "features.npy", np.zeros_like(np.load(both.path / "features.npy")))
    assert not features.extract([first, second], **kwargs).cache_hit
    assert last_note() == (
        "reused 0 of 1 cached representation, extracted 0 checkpoints, concatenated 1 "
        "representation from cached checkpoints"
    )
    alone = features.extract([first], **kwargs)
    np.save(alone.path / "features.npy", np.zeros_like(np.load(alone.path / "features.npy")))
    assert not features.extract([first], **kwargs).cache_hit
    assert last_note() == "reused 0 of 1 cached representation, extracted 1 checkpoint"


@pytest.mark.environment
@pytest.mark.parametrize("damage", ["zeroed", "shuffled", "truncated", "labels"])
def test_a_corrupt_cache_is_extracted_again_not_trusted(
    tmp_path: Path, images, damage: str, capsys
) -> None:
    path = tiny_checkpoint(tmp_path, "a", 1)
    kwargs = dict(
        dataset=images,
        dataset_id="noise",
        split="test",
        transform="none",
        cache_dir=tmp_path / "cache",
        batch_size=16,
        progress=False,
    )
    good = features.extract([path], **kwargs)
    expected = np.array(good.features)
    stored = good.path / "features.npy"
    # damaged through write(2), as another program would: a write through a shared mapping
    # changes no time of a file on tmpfs (a TMPDIR under /dev/shm), so no stamp would show it
    array = np.load(stored)
    if damage == "zeroed":
        np.save(stored, np.zeros_like(array))
    elif damage == "shuffled":
        np.save(stored, array[::-1].copy())
    elif damage == "labels":
        np.save(good.path / "labels.npy", np.roll(np.load(good.path / "labels.npy"), 1))
    if damage == "truncated":
        os.truncate(stored, stored.stat().st_size // 2)
    again = features.extract([path], **kwargs)
    assert not again.cache_hit and again.path == good.path
    assert f"{good.path}: cached features are corrupt" in capsys.readouterr().err
    np.testing.assert_array_equal(again.features, expected)
    np.testing.assert_array_equal(again.labels, images.tensors[1].numpy())
    assert features.extract([path], **kwargs).cache_hit


@pytest.mark.parametrize("damage", ["overwritten", "truncated", "empty", "garbage"])
def test_a_damaged_checkpoint_is_refused_naming_the_file(tmp_path: Path, damage: str) -> None:
    model = models.build("resnet10", 3, 0.125, image_size=16)
    path = tmp_path / "paper.pt"
    models.save_algoperf_checkpoint(model, path)
    content = bytearray(path.read_bytes())
    if damage == "overwritten":  # same size, 4 KB of random bytes in the middle
        middle = len(content) // 2
        content[middle : middle + 4096] = np.random.default_rng(0).bytes(4096)
    elif damage == "truncated":
        content = content[: len(content) // 2]
    elif damage == "empty":
        content = bytearray()
    else:
        content = bytearray(b"not a checkpoint at all" * 10)
    path.write_bytes(bytes(content))
    if damage != "overwritten":  # a file replaced by something else, without its hash
        path.with_name(path.name + ".sha256").unlink(missing_ok=True)
    with pytest.raises(models.CheckpointError, match=f"^{path}: "):
        backbones.load_backbone(path)


def test_algoperf_checkpoints_are_read(tmp_path: Path) -> None:
    model = models.build("resnet50", 1000)
    path = tmp_path / "algoperf.pt"
    models.save_algoperf_checkpoint(model, path)
    loaded = backbones.load_backbone(path)
    assert loaded.feature_dim == 2048
    for (name, mine), theirs in zip(
        model.state_dict().items(), loaded.state_dict().values(), strict=True
    ):
        assert torch.equal(mine, theirs), name


def test_unknown_checkpoint_and_empty_split_are_refused(tmp_path: Path, images) -> None:
    torch.save({"weights": torch.zeros(1)}, tmp_path / "odd.pt")
    with pytest.raises(models.CheckpointError, match="neither a kit checkpoint"):
        backbones.load_backbone(tmp_path / "odd.pt")
    empty = TensorDataset(torch.zeros(0, 3, 16, 16), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="empty"):
        features.extract(
            [tiny_checkpoint(tmp_path, "a", 1)],
            empty,
            "none",
            "test",
            "none",
            tmp_path / "cache",
            progress=False,
        )


SHARDED_SCRIPT = """
import sys
import threading
from pathlib import Path
import torch, torch.distributed as dist
from torch.utils.data import TensorDataset
from kit import features
dist.init_process_group("gloo")
generator = torch.Generator().manual_seed(0)
images = TensorDataset(torch.randn(37, 3, 16, 16, generator=generator),
                       torch.randint(0, 3, (37,), generator=generator))
result = features.extract([Path(p) for p in sys.argv[2:]], images, "noise", "test", "none",
                          Path(sys.argv[1]), batch_size=8, progress=False)
dist.destroy_process_group()
"""


def test_torchrun_shards_write_the_same_features(tmp_path: Path, images) -> None:
    a, b = tiny_checkpoint(tmp_path, "a", 1), tiny_checkpoint(tmp_path, "b", 2)
    script = tmp_path / "shard.py"
    script.write_text(SHARDED_SCRIPT)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            str(script),
            str(tmp_path / "sharded"),
            str(a),
            str(b),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    single = features.extract(
        [a, b], images, "noise", "test", "none", tmp_path / "single", batch_size=8, progress=False
    )
    sharded = features.extract(
        [a, b], images, "noise", "test", "none", tmp_path / "sharded", batch_size=8, progress=False
    )
    assert sharded.cache_hit
    np.testing.assert_allclose(sharded.features, single.features, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sharded.labels, single.labels)


class CountingReads(torch.utils.data.Dataset):
    """A dataset that counts how often its images are read (decoded, for files)."""

    def __init__(self, base: TensorDataset) -> None:
        self.base, self.reads = base, 0

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        self.reads += 1
        return self.base[index]


def test_each_image_is_read_once_for_every_backbone_and_representation(
    tmp_path: Path, images
) -> None:
    a, b, c = (tiny_checkpoint(tmp_path, name, seed) for seed, name in enumerate("abc"))
    counted = CountingReads(images)
    kwargs = noise_extraction(counted, tmp_path, batch_size=8)
    three = features.extract([a, b, c], **kwargs)
    assert counted.reads == len(images)  # not 3 x 37
    assert not three.cache_hit and three.record["widths"] == [64, 64, 64]
    counted.reads = 0
    cat1, cat2, other = features.extract_many([[a], [c, a], [b, c, a]], **kwargs)
    assert counted.reads == 0  # every checkpoint is cached: representations are assembled
    assert cat1.cache_hit and not cat2.cache_hit and not other.cache_hit
    np.testing.assert_array_equal(cat2.features, three.features[:, [*range(128, 192), *range(64)]])
    np.testing.assert_array_equal(other.labels, images.tensors[1].numpy())
    again = features.extract_many([[c, a], [a, b]], **kwargs)
    assert [s.cache_hit for s in again] == [True, False] and counted.reads == 0
    fresh = CountingReads(images)
    d = tiny_checkpoint(tmp_path, "d", 7)
    features.extract_many(
        [[d], [a, d], [d, tiny_checkpoint(tmp_path, "e", 8)]], **kwargs | {"dataset": fresh}
    )
    assert fresh.reads == len(images)  # d and e, new, share one read


def test_a_cache_hit_is_hashed_once_then_vouched_for_by_its_marker(
    tmp_path: Path, images, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry's arrays are hashed where they are written, and its marker vouches for them from
    then on: the hits that follow hash nothing. An entry without a marker (written by an earlier
    kit, or its marker removed) is hashed by its first hit only."""
    path = tiny_checkpoint(tmp_path, "a", 1)
    kwargs = noise_extraction(images, tmp_path)
    first = features.extract([path], **kwargs)
    assert json.loads((first.path / feature_cache.VERIFIED).read_text())["ok"] is True
    hashed: list[Path] = []
    real = feature_cache.files.file_hash
    monkeypatch.setattr(
        feature_cache.files, "file_hash", lambda file: hashed.append(file) or real(file)
    )
    for _ in range(3):
        assert features.extract([path], **kwargs).cache_hit
    assert not [file for file in hashed if first.path in file.parents]
    (first.path / feature_cache.VERIFIED).unlink()
    for _ in range(3):
        assert features.extract([path], **kwargs).cache_hit
    in_cache = [file for file in hashed if first.path in file.parents]
    assert sorted(file.name for file in in_cache) == sorted(feature_cache.ARRAYS)
    assert json.loads((first.path / feature_cache.VERIFIED).read_text())["ok"] is True


@pytest.mark.parametrize("damage", ["zeroed", "one value"])
def test_a_vouched_for_entry_changed_with_its_times_put_back_is_extracted_again(
    tmp_path: Path, images, damage: str, capsys
) -> None:
    """A marker used to vouch for sizes and modification times, which `touch -r` restores:
    zeroed features were then trusted, and the results changed in silence."""
    path = tiny_checkpoint(tmp_path, "a", 1)
    kwargs = noise_extraction(images, tmp_path)
    expected = np.array(features.extract([path], **kwargs).features)
    entry = features.extract([path], **kwargs).path  # hashed: the marker vouches from here on
    assert json.loads((entry / feature_cache.VERIFIED).read_text())["ok"] is True
    stored = entry / "features.npy"
    times = stored.stat()
    array = np.load(stored, mmap_mode="r+")
    if damage == "zeroed":
        array[:] = 0
    else:
        array[0, 0] += 1.0
    array.flush()
    del array
    os.utime(stored, ns=(times.st_atime_ns, times.st_mtime_ns))  # as `touch -r`
    assert stored.stat().st_mtime_ns == times.st_mtime_ns
    again = features.extract([path], **kwargs)
    assert not again.cache_hit
    assert f"{entry}: cached features are corrupt" in capsys.readouterr().err
    np.testing.assert_array_equal(again.features, expected)


def test_other_ranks_take_rank_0s_verdict_without_hashing(
    tmp_path: Path, images, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tiny_checkpoint(tmp_path, "a", 1)
    kwargs = noise_extraction(images, tmp_path)
    entry = features.extract([path], **kwargs).path
    (entry / feature_cache.VERIFIED).unlink()  # rank 0 has not vouched for it yet
    monkeypatch.setattr(feature_cache.distributed, "rank_and_world", lambda: (1, 2))
    monkeypatch.setattr(feature_cache, "array_content", lambda _path: pytest.fail("rank 1 hashed"))
    waits: list[float] = []

    def rank_0_meanwhile(seconds: float) -> None:  # rank 0 hashes and leaves its verdict
        waits.append(seconds)
        (entry / feature_cache.VERIFIED).write_text(
            json.dumps({"ok": True, "signature": feature_cache.stamps(entry)})
        )

    monkeypatch.setattr(feature_cache.time, "sleep", rank_0_meanwhile)
    assert feature_cache.verified(entry) is not None and len(waits) == 1


def test_a_checkpoint_is_read_once_for_consecutive_passes_until_it_changes(
    tmp_path: Path, images, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notebook 03 extracts each task's splits in consecutive passes over the same checkpoints:
    each file is loaded once for them, and again once its contents change."""
    a, b = (tiny_checkpoint(tmp_path, name, seed) for seed, name in enumerate("ab"))
    loads, load = [], features.load_backbone
    monkeypatch.setattr(
        features, "load_backbone", lambda path, *rest: loads.append(path) or load(path, *rest)
    )
    kwargs = dict(
        dataset=images,
        dataset_id="noise",
        transform="none",
        cache_dir=tmp_path / "cache",
        batch_size=16,
        progress=False,
    )
    first = features.extract_many([[a], [b, a]], split="train", **kwargs)
    features.extract_many([[a], [b, a]], split="eval", **kwargs)
    assert sorted(loads) == sorted([a, b])
    state = torch.load(a, weights_only=True)
    state["model"]["conv1.weight"] *= 2.0  # other contents, other features
    torch.save(state, a)
    changed = features.extract_many([[a]], split="train", **kwargs)
    assert loads[2:] == [a] and not changed[0].cache_hit
    assert not np.array_equal(changed[0].features, first[0].features)


def test_a_stuck_extraction_worker_becomes_an_error_naming_the_checkpoint(tmp_path: Path) -> None:
    """A loader worker that never hands over a batch (here one blocked opening a FIFO planted
    among the images) left extraction waiting forever: it now fails after the loader timeout,
    naming the checkpoint, the split and the batch, and leaves no worker behind."""
    folder = write_image_folder(tmp_path / "images", ("ant", "bee", "cat"), {"train": 4, "val": 1})
    data = DataSettings(kind="imagefolder", root=str(folder), image_size=16, verify_images=False)
    dataset, _ = pipeline.probe_datasets(data, 3)
    first, second = tiny_checkpoint(tmp_path, "a", 1), tiny_checkpoint(tmp_path, "b", 2)
    options = dict(batch_size=2, num_workers=1, progress=False, loader_timeout_s=10)
    features.extract([first], dataset, "images", "train", "plain", tmp_path / "c", **options)
    os.mkfifo(folder / "train" / "ant" / "stuck.png")  # row 4: the third batch of 7
    dataset, _ = pipeline.probe_datasets(data, 3)
    with pytest.raises(workers.LoaderError) as error:
        features.extract([second], dataset, "images", "train", "plain", tmp_path / "c", **options)
    assert str(error.value).startswith(f"extracting features of {second} on features train (13")
    assert "DataLoader timed out after 10 seconds at batch 3 of 7" in str(error.value)
    assert "feature_loader_timeout_s: 10" in str(error.value)
    assert not multiprocessing.active_children()
