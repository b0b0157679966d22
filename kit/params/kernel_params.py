"""A running notebook's parameters: what its kernel resolves from the parameters cell and from
papermill's injected cell, through the layering of kit.params.params.

The notebook's parameters cell declares every top-level name its schema takes (so that papermill
lists them), each None but `profile`, and each section an empty `Section`
(kit.params.parameters_cell): both mean "the profile's value", so the layering stays the one source
of defaults and no value of an interactive session can leak into a profile run. A `Section` takes
papermill's `-p train.lr 0.1` (which papermill writes as the statement `train.lr = 0.1`) and gives
the key to the layering. Values papermill injects (`-p`, `-f`) are one more layer on top of the
profile they name; a name the schema does not take is refused.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kit.files import checkouts
from kit.files.paths import PARAMETERS_DIR, resolve
from kit.params.parameters_cell import Section
from kit.params.params import (
    RECORD_SUFFIX,
    NotebookSettings,
    ParameterError,
    check_inputs,
    merge,
    resolve_layers,
    smoke_test_label,
    validate,
)
from kit.readout import notices

#: what parameters are made of (papermill injects literals)
PLAIN_VALUES = (str, int, float, bool, list, dict, type(None))
#: IPython's input and output history, in every kernel's namespace
KERNEL_HISTORY = ("In", "Out")
#: the first line of the cell papermill injects (the notebook's own cell starts '# parameters:')
PAPERMILL_CELL = "# Parameters"


def from_notebook(
    notebook: str, namespace: Mapping[str, Any], parameters_dir: Path = PARAMETERS_DIR
) -> NotebookSettings:
    """The parameters of a running notebook: its profile (from the parameters cell or injected)
    resolved from parameters/, with every other value papermill injected merged on top. A name
    the parameters cell leaves None is left to the profile, unless papermill's own cell sets it
    (to None too: a run's file may clear a value); a `Section` gives only the keys set in it
    (`-p train.lr 0.1`), merged over the profile's section. An injected name the schema does
    not know is refused (papermill itself only warns). Run in a kernel that `python -m kit run`
    did not start (plain papermill, JupyterLab), it removes the runner's parameters record of
    the notebook from the output folder: the results there are about to be rewritten, and
    notebook 04 must not take them for those of the recorded parameters. The names are those
    assigned by the cells that start with '# parameters' in the kernel's history, or, where the
    kernel keeps none, every plain value of the namespace (call this in the first cell after
    the parameters)."""
    checkouts.check_kernel()  # the kit of the command that started this kernel, if any
    names = parameter_names(namespace.get("In") or []) or [
        name
        for name, value in namespace.items()  # a kernel that keeps no history (nbval)
        if not name.startswith("_")
        and name not in KERNEL_HISTORY
        and isinstance(value, (*PLAIN_VALUES, Section))
    ]
    by_papermill = set(parameter_names(namespace.get("In") or [], PAPERMILL_CELL))
    given = {
        name: (value.as_dict() or None) if isinstance(value, Section) else value
        for name in names
        if name in namespace
        for value in [namespace[name]]
    }
    injected = {
        name: value for name, value in given.items() if value is not None or name in by_papermill
    }
    source = "the notebook's parameters (its parameters cell or papermill's injected cell)"
    profile = injected.pop("profile", None)
    if not isinstance(profile, str) or not profile:
        raise ParameterError(
            f"{source}: 'profile' must name a folder of parameters/, got {profile!r}"
        )
    values, sources = resolve_layers(notebook, profile, parameters_dir=parameters_dir)
    merge(values, sources, injected, source)
    validated = validate(notebook, values, sources)
    checkouts.check_kernel(resolve(validated.output_dir))  # before anything is written
    check_inputs(notebook, validated, sources)
    if in_a_kernel() and notices.NOTICES_FILE_ENV not in os.environ:  # not started by kit run
        (resolve(validated.output_dir) / f"{notebook}{RECORD_SUFFIX}").unlink(missing_ok=True)
    label = smoke_test_label(profile, parameters_dir)
    if label:
        print(label)  # the notebook's first output says it
    return validated


def in_a_kernel() -> bool:
    """Whether this process is a Jupyter kernel (papermill's, JupyterLab's)."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return type(shell).__name__ == "ZMQInteractiveShell"


def parameter_names(history: list[str], first_line: str = "# parameters") -> list[str]:
    """Names assigned by the cells a kernel ran that start with a '# parameters' comment (any
    case): the notebook's parameters cell and papermill's injected cell; with `first_line`
    PAPERMILL_CELL, those of papermill's cell only."""
    names: list[str] = []
    for source in history:
        head = source.lstrip().split("\n", 1)[0]
        if not (
            head == first_line
            if first_line == PAPERMILL_CELL
            else head.lower().startswith(first_line)
        ):
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        names += [
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        ]
    return list(dict.fromkeys(names))
