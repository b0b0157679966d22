"""JupyterLab for this repository: `jupyter lab --config jupyter_server_config.py` at its root.

Notebooks under notebooks/ are saved the way they are committed: no outputs, no execution
counts, no `language_info` metadata, cell ids kept (nbstripout's stripping, as the git filter of
the README does it). Running them in Lab therefore leaves `git status` clean and the test suite
unaffected; what a run computes is in outputs/<profile>/, written by the notebook itself.
"""

from pathlib import PurePosixPath
from typing import Any

import nbformat
from nbstripout import strip_output

#: metadata dropped besides outputs: the kernel's version details that Lab writes on save
EXTRA_KEYS = ["metadata.language_info", "metadata.widgets"]


def strip_on_save(model: dict[str, Any], path: str, **kwargs: Any) -> None:
    """FileContentsManager.pre_save_hook: strip a notebook of notebooks/ before it is written."""
    if model.get("type") != "notebook" or PurePosixPath(path.strip("/")).parts[:1] != (
            "notebooks",):
        return
    notebook = nbformat.from_dict(model["content"])
    model["content"] = strip_output(notebook, keep_output=False, keep_count=False, keep_id=True,
                                    extra_keys=EXTRA_KEYS)


c = get_config()  # noqa: F821 (given by Jupyter when it reads this file)
c.FileContentsManager.pre_save_hook = strip_on_save
