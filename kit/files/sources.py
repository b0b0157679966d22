"""Which folders hold the kit's sources, so that no run writes its outputs among them.

An output folder is refused inside the repository's source folders (SOURCE_FOLDERS), unless git
ignores it there (the test suite's copies, tests/_notebooks/), and anywhere it already holds a
file git tracks (the repository's or another work tree's): an executed notebook written to
notebooks/ would replace the notebook it ran. Git answers where it can; without git (an installed
or copied kit) the source folders are refused but for FALLBACK_IGNORED.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kit.files.paths import REPO_ROOT

#: the repository's top folders that hold its sources (git tracks files in each, or is .git)
SOURCE_FOLDERS = ("notebooks", "kit", "parameters", "tests", "docs", "benchmarks", ".ci", ".git")
#: folders inside SOURCE_FOLDERS that .gitignore names for outputs, when git cannot be asked
FALLBACK_IGNORED = ("tests/_notebooks",)
#: where a refused output folder should go instead
INSTEAD = (
    "write to a folder under outputs/ (the default is outputs/<profile>) or outside the "
    "repository (output_dir)"
)


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """git's answer in `folder`, or None where git is missing or cannot answer."""
    try:
        return subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None


def ignored(relative: Path) -> bool:
    """Whether git ignores `relative` (a folder, taken from the repository root), or, where git
    cannot say, whether it lies in FALLBACK_IGNORED."""
    answer = _git(REPO_ROOT, "check-ignore", "-q", "--", f"{relative.as_posix()}/")
    if answer is None or answer.returncode not in (0, 1):
        return any(relative.is_relative_to(folder) for folder in FALLBACK_IGNORED)
    return answer.returncode == 0


def tracked_files(folder: Path) -> list[str]:
    """The files git tracks in `folder` or below it (in whichever work tree holds it), relative
    to it; none where it is no folder or git cannot say."""
    if not folder.is_dir():
        return []
    answer = _git(folder, "ls-files", "-z", "--", ".")
    if answer is None or answer.returncode != 0:
        return []
    return [name for name in answer.stdout.split("\0") if name]


def source_problems(folder: Path) -> list[str]:
    """Why `folder` would put a run's outputs among sources: inside a source folder of the
    repository (not ignored by git) or holding files git tracks; none otherwise."""
    real = folder.resolve()
    if real.is_relative_to(REPO_ROOT) and real != REPO_ROOT:
        relative = real.relative_to(REPO_ROOT)
        if relative.parts[0] in SOURCE_FOLDERS and not ignored(relative):
            return [
                f"{folder}: inside the kit's sources ({relative.parts[0]}/), whose files a run "
                f"would write over; {INSTEAD}"
            ]
    if tracked := tracked_files(real):
        more = f" and {len(tracked) - 1} more" if len(tracked) > 1 else ""
        return [
            f"{folder}: holds files git tracks ({tracked[0]}{more}), which a run would write "
            f"over; {INSTEAD}"
        ]
    return []
