"""Progress bars that read cleanly wherever they run.

In a kernel a bar is tqdm.auto's widget, shown under a display id and shown again when it
closes: a notebook executed without a frontend (papermill) then keeps the bar's final state as
text, not the empty bar the widget was when first displayed. On a terminal a bar redraws every
second; in a log, every 30 s at most. A widget shown through `Described` reads as a sentence,
not as its repr, where no frontend draws it."""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm
from tqdm.notebook import tqdm as widget_tqdm

WIDGETS = issubclass(tqdm, widget_tqdm)


class KeptBar(tqdm):
    """A tqdm.auto bar whose last state stays in a saved notebook."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._shown = None  # before tqdm's __init__, which may close a disabled bar
        interactive = sys.stderr.isatty() or "ipykernel" in sys.modules
        kwargs.setdefault("mininterval", 1 if interactive else 30)
        if WIDGETS:
            kwargs["display"] = False
        super().__init__(*args, **kwargs)
        if WIDGETS and not self.disable:
            from IPython.display import display

            self._shown = display(self.container, display_id=True)

    def close(self) -> None:
        super().close()
        if self._shown is not None:
            self._shown.update(self.container)
            self._shown = None


class Described:
    """A widget that reads as `text` wherever no frontend draws it (a notebook executed
    headless and shown on GitHub, nbviewer or as HTML) instead of its `VBox(children=...)` repr;
    JupyterLab draws the widget itself."""

    def __init__(self, widget: Any, text: str) -> None:
        self.widget, self.text = widget, text

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return self.widget._repr_mimebundle_(**kwargs) | {"text/plain": self.text}
