"""JupyterLab in a real browser: notebook 01 runs with the interactive profile, its progress bar
appears and completes, its charts are drawn by Vega-Lite 6 (altair's widget, no version warning)
with working tooltips, no cell fails, the browser logs no error and requests nothing from outside
Lab's server, Lab asks nothing about news, and each finished bar (one more of uneven units, run
in a cell added in Lab) shows its count over its elapsed time as its rate; a cell collapsed and
saved in Lab leaves the notebook file as committed.

The report and the page of each executed notebook are those of notebooks 01-04 as this test
session's shared main job executed them at the ci profile (`notebook_outputs`, tests/main_job.py),
read with the network cut off: the paper's versioned arXiv id visible, nothing wider than a
1,400-px window, no chart scrolling sideways at 1,280 or 1,400 px, no code name of the label map
in the text, and no progress bar's elapsed time more than a second above its work's own time as
the kernel's stage records (kit.readout.progress.Stage, paused time left out) and each training
run's folder (its settings written at its start, its DONE marker at its end) time it, nor a rate
other than its count over that elapsed time, to the precision the bar shows (tests/bar_lines.py).

Playwright drives Debian's Chromium (`apt-get install chromium`, as .ci/run does) through its
executable path, since no browser build can be downloaded here; the test skips, saying so, where
neither Playwright nor Chromium is installed. Lab runs as `python -m kit lab` starts it (its save
hook), with its configuration, runtime, settings and workspace folders in a temporary folder and
autosave off, so nothing in the repository is written but the notebook's own outputs under
outputs/interactive (ignored by git); the notebook files are compared byte for byte afterwards.
On failure the test saves a screenshot and prints its path.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
import yaml
from bar_lines import BAR_COUNTS, BAR_LINE, clock_seconds, rate_disagrees
from chart_checks import repeated_captions, signed_both_ways, unreadable
from PIL import Image
from test_notebook_results import WRITES
from test_paper_files import PDFLATEX, compile_latex, has_booktabs

from kit.cli import lab as lab_cli
from kit.files.paths import NOTEBOOKS_DIR, REPO_ROOT
from kit.launch.progress import shown
from kit.readout import numbers
from kit.readout.citation import PAPER
from kit.report import notebook_html
from kit.report import page as report_page
from kit.report.labels import LABELS, SYMBOLS, VALUE_PATTERNS, VALUES, label, quantity
from kit.train.run_files import RunFolder

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[dev]')"
)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM = os.environ.get("TIMECAT_CHROMIUM") or next(
    (found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (apt-get install "
    "chromium, or set TIMECAT_CHROMIUM to a Chromium executable)",
)
NOTEBOOK = NOTEBOOKS_DIR / "01_toy_counterexample.ipynb"
#: seconds Lab gets to start, and the notebook to run to its end
START_S, RUN_S = 60, 240
#: Lab's settings for the test: no autosave (nothing written into notebooks/), every cell drawn
#: (not only those in view); no news setting: `kit lab`'s own default keeps Lab from asking
LAB_SETTINGS = {
    "docmanager-extension/plugin": {"autosave": False},
    "notebook-extension/tracker": {"windowingMode": "none"},
}
#: what Lab asks when its news setting is left to the user
NEWS_QUESTION = "Would you like to get notified about official Jupyter news?"
#: a bar whose units take uneven times (3 of 0.1 s, then 3 of 1.2 s), run in a cell added in
#: Lab: ended on tqdm's smoothed rate of its last units, it read about 1.1 step/s, 6 steps in
#: about 4 s belying it
UNEVEN_BAR = (
    "import time; from kit.readout.progress import KeptBar; "
    "bar = KeptBar(total=6, desc='uneven', unit='step', mininterval=0); "
    "[(time.sleep(0.1 if i < 3 else 1.2), bar.update()) for i in range(6)]; bar.close()"
)
#: browser console errors that say nothing about the kit (none known today)
IGNORED_CONSOLE: tuple[str, ...] = ()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on the repository; yields its URL with the token."""
    port, token = free_port(), secrets.token_hex(16)
    home = tmp_path / "jupyter"
    for plugin, value in LAB_SETTINGS.items():
        path = home / "settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = lab_cli.environment() | {  # `kit lab`'s: its setting defaults, its kit for kernels
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    command = lab_cli.arguments(  # `python -m kit lab`'s: the repository as root, its save hook
        [
            "--no-browser",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--LabApp.user_settings_dir={home / 'settings'}",
            f"--LabApp.workspaces_dir={home / 'workspaces'}",
            f"--FileCheckpoints.checkpoint_dir={home / 'checkpoints'}",
            *(["--allow-root"] if os.geteuid() == 0 else []),  # CI containers run as root
        ]
    )
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", server, tmp_path)
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def wait_for(url: str, server: subprocess.Popen, tmp_path: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited; its log: {tmp_path / 'lab.log'}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {START_S} s; its log: {tmp_path / 'lab.log'}")


@pytest.fixture
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


def screenshot_on_failure(page: object, path: Path):
    """A context: on any failure inside, a screenshot at `path`, its path printed."""

    class Shot:
        def __enter__(self) -> None:
            return None

        def __exit__(self, kind: object, *_: object) -> bool:
            if kind is not None:
                page.screenshot(path=str(path), full_page=True)
                print(f"screenshot of the failure: {path}")
            return False

    return Shot()


def test_notebook_01_runs_in_lab_with_widgets_charts_and_tooltips(
    lab, browser, tmp_path: Path
) -> None:
    """Notebook 01 run in Lab, its charts drawn by the Vega-Lite they are written in (altair's
    widget, its JavaScript sent by the kernel; not Lab's own Vega-Lite 5, which warns on each),
    no request leaving Lab's own server, the kernel on Unix sockets (no warning of TCP without
    encryption in the server's log)."""
    url, token = lab
    before = NOTEBOOK.read_bytes()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    outside: list[str] = []

    def lab_only(route: object) -> None:
        if route.request.url.startswith(url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", lab_only)
    page = context.new_page()
    errors: list[str] = []
    messages: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("console", lambda m: messages.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    with screenshot_on_failure(page, tmp_path / "lab_failure.png"):
        page.goto(f"{url}/lab/tree/notebooks/{NOTEBOOK.name}?reset&token={token}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=START_S * 1000)
        choose_the_kernel(page)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
        page.locator(".jupyter-widgets .widget-hprogress, .widget-hprogress").first.wait_for(
            timeout=RUN_S * 1000
        )
        wait_until_every_cell_ran(page)
        run_a_cell_below(page, UNEVEN_BAR)  # not saved: autosave is off
        assert_no_error_outputs(page)
        bars = page.locator(".widget-hprogress")
        assert bars.count() >= 1
        assert page.locator(".widget-hprogress .progress-bar-success").count() == bars.count(), (
            "a progress bar did not complete"
        )
        lines = [
            found
            for text in page.locator(".widget-hbox:has(.widget-hprogress)").all_inner_texts()
            if (found := BAR_COUNTS.search(" ".join(text.split())))
        ]
        assert len(lines) == bars.count(), "a bar without its counts, time and rate"
        assert any(line[0].startswith("6/6 ") for line in lines), "the uneven bar did not run"
        disagreeing = [said for line in lines if (said := rate_disagrees(line))]
        assert not disagreeing, f"finished bars whose rate belies their time: {disagreeing}"
        assert NEWS_QUESTION not in page.locator("body").inner_text(), "Lab asks about news"
        by_lab = page.locator("[class*='jp-RenderedVega']")  # Lab's Vega extension's outputs
        assert by_lab.count() == 0, f"{by_lab.count()} charts drawn by Lab's own Vega-Lite"
        drawn = page.locator(".vega-embed :is(svg, canvas)")
        assert drawn.count() >= 5, f"{drawn.count()} charts drawn by Vega"
        assert_a_tooltip_appears(page)
        versions = [m for m in messages if re.search(r"Vega-Lite v?\d", m)]
        assert not versions, f"console messages about the Vega-Lite version: {versions}"
        relevant = [e for e in errors if not any(i in e for i in IGNORED_CONSOLE)]
        assert not relevant, f"browser console errors: {relevant}"
        assert not outside, f"Lab's page asked the network for {outside}"
    context.close()
    assert NOTEBOOK.read_bytes() == before, "running the notebook in Lab changed notebooks/"
    log = (tmp_path / "lab.log").read_text()  # the kernel's log joins the server's
    assert "without encryption" not in log, "Lab's kernel ran over local TCP (kit.cli.lab_kernels)"


def choose_the_kernel(page: object) -> None:
    """Accept Lab's kernel dialog (a stripped notebook names no kernel) where it asks."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    try:
        accept.wait_for(timeout=15_000)
    except sync_api.TimeoutError:
        return
    accept.click()


def wait_until_every_cell_ran(page: object) -> None:
    """Every code cell has an execution count and the kernel is idle."""
    deadline = time.monotonic() + RUN_S
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt")
    while time.monotonic() < deadline:
        texts = prompts.all_inner_texts()
        if texts and all(re.fullmatch(r"\[\d+\]:", t.strip()) for t in texts):
            return
        time.sleep(1)
    pytest.fail(f"the notebook did not finish within {RUN_S} s: prompts {texts}")


def run_a_cell_below(page: object, source: str) -> None:
    """Add a cell below the notebook's last, type `source` in it, run it, and wait for it."""
    page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.insert_text(source)
    page.keyboard.press("Control+Enter")  # run in place: no empty cell added below
    wait_until_every_cell_ran(page)


def assert_no_error_outputs(page: object) -> None:
    stderr = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
    failures = [t for t in stderr.all_inner_texts() if re.search(r"Traceback|Error\b", t)]
    assert not failures, f"error outputs: {failures}"


def assert_a_tooltip_appears(page: object) -> None:
    """Hover over the marks of a bar chart until Vega's tooltip element shows."""
    tooltip = page.locator("#vg-tooltip-element.visible")
    for chart in page.locator(".vega-embed").all():
        chart.scroll_into_view_if_needed()
        box = chart.bounding_box()
        if not box:
            continue
        for fx in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
            for fy in (0.4, 0.5, 0.6, 0.7, 0.8):
                page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
                page.wait_for_timeout(30)
                if tooltip.count():
                    assert tooltip.first.inner_text().strip(), "an empty tooltip"
                    return
    pytest.fail("no Vega tooltip appeared while hovering over the charts")


def test_a_cell_collapsed_in_lab_and_saved_leaves_the_notebook_as_committed(
    lab, browser, tmp_path: Path
) -> None:
    """Collapsing a cell's input is saved by Lab as cell metadata (`jupyter.source_hidden`);
    `kit lab`'s save hook strips it, so the saved file is the committed one, byte for byte."""
    url, token = lab
    notebook = NOTEBOOKS_DIR / "02_surveyed_evidence.ipynb"
    before = notebook.read_bytes()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.route(
        "**/*",
        lambda route: route.continue_() if route.request.url.startswith(url) else route.abort(),
    )  # Lab's own server only: no request leaves the machine
    page = context.new_page()
    try:
        with screenshot_on_failure(page, tmp_path / "collapse_failure.png"):
            page.goto(f"{url}/lab/tree/notebooks/{notebook.name}?reset&token={token}")
            page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=START_S * 1000)
            choose_the_kernel(page)
            page.locator(".jp-Notebook .jp-CodeCell .jp-InputCollapser").nth(1).click()
            page.locator(".jp-Notebook .jp-CodeCell .jp-InputPlaceholder").first.wait_for(
                timeout=10_000
            )  # the input is folded to its first line
            dirty = page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty")
            dirty.wait_for(timeout=10_000)  # Lab has a change to save
            page.keyboard.press("Control+s")
            dirty.wait_for(state="detached", timeout=20_000)
            saved = notebook.read_bytes()
            status = subprocess.run(
                ["git", "status", "--porcelain", "--", str(notebook)],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                check=False,
            ).stdout
    finally:
        context.close()
        if notebook.read_bytes() != before:
            notebook.write_bytes(before)  # a failure never leaves notebooks/ changed
    assert saved == before, "saving the collapsed cell changed the notebook file"
    assert status == "", f"git status after the save: {status}"


def offline_context(browser: object, width: int = 1280) -> tuple[object, list[str]]:
    """A browser context that serves files and refuses (and records) every other request."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    requested: list[str] = []

    def only_files(route: object) -> None:
        if route.request.url.startswith(("file:", "data:")):
            route.continue_()
        else:
            requested.append(route.request.url)
            route.abort()

    context.route("**/*", only_files)
    return context, requested


#: the widest an element may be: a 1,400-px window shows it whole
WIDEST_PX = 1400
#: the window widths a chart must fit without scrolling sideways
WINDOWS_PX = (1280, 1400)
#: the code names a reader must never see: keys of the label map with an underscore (the
#: others are words: 'low', 'share', 'k'), and values the label map puts in words by pattern
#: (an architecture 'cat4resnet50', a variant's per-task run 'direct-shape') or by symbol (the
#: toy's feature 'phi1', shown as 'φ1')
CODE_NAMES = (
    [re.escape(key) for key in (*LABELS, *VALUES) if "_" in key]
    + [pattern.pattern for patterns in VALUE_PATTERNS.values() for pattern, _ in patterns]
    + [SYMBOLS[0].pattern]
)
#: a p-value as kit.readout.numbers prints it: two significant digits, or below a thousandth
P_VALUE = re.compile(r"< 0\.001|–|1\.0|0\.0*[1-9]\d")
#: elements wider than their box (scrollWidth over clientWidth): any that clips or spills its
#: content, and any table (a table reflows, it never scrolls); inline elements have no box
WIDER_THAN_THEIR_BOX = """Array.from(document.querySelectorAll('body, body *'))
  .filter(e => e instanceof HTMLElement && e.clientWidth > 0
    && e.scrollWidth > e.clientWidth + 1
    && (!['auto', 'scroll'].includes(getComputedStyle(e).overflowX) || e.querySelector('table')))
  .map(e => [e.tagName, String(e.className).slice(0, 60), e.scrollWidth, e.clientWidth,
             (e.textContent || '').trim().slice(0, 80)])"""
#: the longest a claim's sentence may be, its detail folded
CLAIM_CHARS = 300


def assert_nothing_wider_than_its_box(page: object, where: str) -> None:
    """No element is wider than the box it sits in: a table reflows, code wraps; the page no
    wider than the window."""
    wide = page.evaluate(WIDER_THAN_THEIR_BOX)
    assert not wide, f"{where}: elements wider than their box: {wide}"
    widest = page.evaluate(
        "Math.max(...Array.from(document.querySelectorAll('body *'), "
        "e => e.getBoundingClientRect().width))"
    )
    assert widest <= WIDEST_PX, f"{where}: an element is {widest} px wide"


def _quantity_of(header: str) -> numbers.Quantity | None:
    """The quantity of a table column from its header (kit.report.labels: the code name whose
    label it is, or the header itself)."""
    named = next((key for key in LABELS if label(key) == header), header)
    return quantity(named)


#: a number in a cell: its sign, digits and decimals
NUMBER = re.compile(r"(?<![\w.])[+\-−]?\d[\d,]*(?:\.(\d+))?(?![\d.]|e-)")


def one_decimal(text: str) -> bool:
    """Whether every number in `text` has one decimal (kit.readout.numbers' accuracy and gain), an
    interval's end that would round to 0 its first significant digit."""
    for found in NUMBER.finditer(text):
        value = float(found[0].replace(",", "").replace("−", "-"))
        wanted = numbers.significant_places(value, 1) if 0 < abs(value) < 0.05 else 1
        if len(found[1] or "") != wanted:
            return False
    return True


def assert_one_precision_per_quantity(page: object, where: str) -> None:
    """Every table cell of an accuracy or a gain (by its column's quantity) has one decimal,
    every p-value two significant digits or '< 0.001' (kit.readout.numbers), and no two columns
    show the same numbers one signed and the other not (tests/chart_checks.py)."""
    found = page.evaluate(
        "Array.from(document.querySelectorAll('table:not(.kit-settings)'), t => [Array.from("
        "t.querySelectorAll("
        "'thead th'), h => h.innerText.trim()), Array.from(t.querySelectorAll('tbody tr'), "
        "r => Array.from(r.querySelectorAll('td'), d => d.innerText.trim()))])"
    )
    wrong = []
    for headers, rows in found:
        wrong += [
            ("one quantity signed and unsigned", headers[a : b + 1 : b - a])
            for a, b in signed_both_ways(rows)
            if rows and len(headers) == len(rows[0])
        ]
        for row in rows:
            for header, cell in zip(headers, row, strict=False):
                points = _quantity_of(header) in (numbers.POINTS, numbers.GAIN)
                p_value = header == "p" or header.startswith("p (")
                if (points and cell not in ("", "–") and not one_decimal(cell)) or (
                    p_value and not P_VALUE.fullmatch(cell)
                ):
                    wrong.append((header, cell))
    assert not wrong, f"{where}: numbers off their quantity's precision: {wrong[:12]}"


def assert_reads_for_a_researcher(page: object, where: str = "the page") -> None:
    """The paper's arXiv id with its version is visible; no element is wider than its box
    (`assert_nothing_wider_than_its_box`); every accuracy, gain and p-value at its quantity's
    precision; no code name of the label map shows as a header or in the text
    (kit.report.labels), nor a plural left as 'round(s)', folded parts opened, but for code (a
    code cell's input, a parameter's name in the resolved parameters) and a run's name as its
    folder has it (a path, a launch's line of a run's time). Called last: it leaves the page
    with its folded parts open and its code hidden."""
    text = page.locator("body").inner_text()
    assert f"arXiv {PAPER.arxiv_id}" in text, "the paper's versioned arXiv id is not visible"
    assert_nothing_wider_than_its_box(page, where)
    assert_one_precision_per_quantity(page, where)
    prose = page.evaluate(
        "(() => { document.querySelectorAll('details').forEach(e => { e.open = true; }); "
        "document.querySelectorAll('code, .jp-CodeCell .jp-InputArea')"
        ".forEach(e => { e.style.display = 'none'; }); return document.body.innerText; })()"
    )  # the folded parts opened (a run's time, the parameters), code hidden: the page changes
    # a run is named as its folder is on disk (a path, a launch's line of its time): identifiers
    named = "\n".join(line for line in prose.splitlines() if not RUN_LINE.match(line))
    words = re.sub(r"\S*/\S*", " ", named)
    shown = [key for key in CODE_NAMES if re.search(rf"\b{key}\b", words)]
    assert not shown, f"{where}: code names in the text: {shown}"
    plurals = sorted({m[0] for m in re.finditer(r"\S*\w\(s\)", prose)})
    assert not plurals, f"{where}: plurals left to the reader: {plurals}"
    headers = {h.strip() for h in page.locator("th").all_inner_texts()}
    assert not headers & set(LABELS), f"{where}: code names as headers: {headers & set(LABELS)}"


#: the report of the notebooks executed at the ci profile, written once per session
_REPORT: dict[str, Path] = {}


def executed_report(notebook_outputs, tmp_path_factory) -> tuple[Path, Path]:
    """The report of notebooks 01-04 executed at the ci profile: the session's shared main job
    (`notebook_outputs`: nothing is run again here), their
    result files copied to a folder of their own and the report written there, so that nothing
    here writes the shared folder. Returns that folder and the shared one (whose run folders
    the bars are checked against)."""
    for stem, result in WRITES.items():
        shared = notebook_outputs(stem, result)
    if "folder" not in _REPORT:
        folder = tmp_path_factory.mktemp("report") / "ci"
        folder.mkdir()
        for path in shared.iterdir():
            if path.is_file() and path.name != ".lock" and path.suffix != ".html":
                shutil.copy2(path, folder)
        report_page.write_report("ci", folder)
        _REPORT["folder"] = folder
    return _REPORT["folder"], shared


def wait_for_the_charts(page: object) -> None:
    """Until every chart of the report is drawn (or says it could not be)."""
    page.wait_for_function(
        "Array.from(document.querySelectorAll('.chart > div')).every("
        "d => d.querySelector('svg, canvas') || d.textContent.includes('could not be drawn'))",
        timeout=60_000,
    )


def test_the_report_of_the_executed_notebooks_reads_offline(
    browser, notebook_outputs, tmp_path_factory, tmp_path: Path
) -> None:
    """The report of notebooks 01-04 as executed, opened with the network cut off at 1,280 and
    1,400 px: every chart drawn, none scrolling sideways in its column, each under a caption of
    its own, the page no wider than the window, the machine it ran on under the paper's line;
    every chart's spec reads as a paper's figure (tests/chart_checks.py: no orphan x-axis, no
    row header beside the y-axis title, a mean in every interval tooltip)."""
    folder, _ = executed_report(notebook_outputs, tmp_path_factory)
    charts = sum(
        1
        for notebook in report_page.executed_notebooks(folder)
        for _ in report_page.chart_specs(notebook)
    )
    assert charts >= 10, f"{charts} charts in the executed notebooks"
    unread = {
        caption: found
        for notebook in report_page.executed_notebooks(folder)
        for caption, spec in report_page.chart_specs(notebook)
        if (found := unreadable(spec))
    }
    assert not unread, f"charts that do not read as a paper's figures (chart_checks): {unread}"
    for width in WINDOWS_PX:
        read_the_report_at(browser, folder / report_page.PAGE, width, charts, tmp_path)


def read_the_report_at(
    browser: object, written: Path, width: int, charts: int, tmp_path: Path
) -> None:
    """The report's checks in a window `width` px wide (see the test above)."""
    context, requested = offline_context(browser, width)
    page = context.new_page()
    page.add_init_script(KEEP_THE_VIEWS)
    errors: list[str] = []
    warnings: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    with screenshot_on_failure(page, tmp_path / f"report_{width}_failure.png"):
        page.goto(written.as_uri())
        wait_for_the_charts(page)
        assert page.locator(".chart :is(svg, canvas)").count() == charts
        assert "could not be drawn" not in page.locator("#charts").inner_text()
        captions = page.evaluate(
            "Array.from(document.querySelectorAll('.chart figcaption'), "
            "c => c.firstChild.textContent.trim())"
        )
        assert len(captions) == charts and not repeated_captions(captions), (
            f"charts under one caption: {repeated_captions(captions)}"
        )
        scrolling = page.evaluate(
            "Array.from(document.querySelectorAll('.chart'), e => [e.textContent, "
            "e.scrollWidth, e.clientWidth]).filter(([, s, c]) => s > c)"
        )
        assert not scrolling, f"charts scrolling sideways at {width} px: {scrolling}"
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= width, f"the page is {wide} px wide in a {width}-px window"
        beside = page.locator("#the-kit-beside-the-paper table").first
        assert "the paper's Table 3" in beside.locator("caption").inner_text()
        machine = page.locator("p.machine").first.inner_text()
        assert "cores" in machine and "torch" in machine, machine
        assert_charts_read_for_a_researcher(page, charts, f"the report at {width} px")
        assert_verdicts_scan(page)
        assert_reads_for_a_researcher(page, f"the report at {width} px")
        assert not requested, f"the page asked the network for {requested}"
        assert not errors, f"browser console errors: {errors}"
        vega = [m for m in warnings if m.startswith("WARN")]
        assert not vega, f"Vega's warnings: {vega}"
    context.close()


#: run before the page's scripts: keeps each Vega view vegaEmbed draws in `window.kitViews`,
#: so that the test reads what a chart shows (its texts, each mark's tooltip) from its scene
KEEP_THE_VIEWS = """window.kitViews = [];
Object.defineProperty(window, 'vegaEmbed', {configurable: true,
  set(embed) { this._kitEmbed = (...args) => embed(...args).then(result => {
    window.kitViews.push(result.view); return result; }); },
  get() { return this._kitEmbed; }});"""
#: every text a drawn chart shows (axis and legend labels and titles, marks' texts) and every
#: mark's tooltip, from the scenes of the views KEEP_THE_VIEWS kept
SCENES = """(() => { const texts = [], tips = [];
  const walk = node => { for (const item of (node && node.items) || []) {
    if (node.marktype === 'text' && item.text != null)
      texts.push([].concat(item.text).join(' '));
    if (item.tooltip != null) tips.push(item.tooltip);
    walk(item); } };
  window.kitViews.forEach(view => walk(view.scenegraph().root));
  return [texts, tips]; })()"""


def assert_charts_read_for_a_researcher(page: object, charts: int, where: str) -> None:
    """What every drawn chart shows, read from its scene (the texts of its axes, legends and
    marks, and each mark's tooltip): no code name (a key of the label map as a title, a value
    it puts in words), tooltips' accuracies and gains to one decimal, the paper cited as
    kit.readout.citation cites it."""
    page.wait_for_function(f"window.kitViews.length >= {charts}", timeout=60_000)
    texts, tips = page.evaluate(SCENES)
    assert tips, f"{where}: no chart has a tooltip"
    fields = {(str(k), str(v)) for tip in tips if isinstance(tip, dict) for k, v in tip.items()}
    shown = texts + [v for _, v in fields]
    raw = sorted({t for t in shown for key in CODE_NAMES if re.search(rf"\b{key}\b", t)})
    assert not raw, f"{where}: code names drawn in charts or their tooltips: {raw}"
    titled = sorted({k for k, _ in fields if k in LABELS and label(k) != k})
    assert not titled, f"{where}: tooltip fields titled with their code name: {titled}"
    imprecise = sorted(
        (k, v)
        for k, v in fields
        if re.search(r"%|points|top-1", k.replace("95% ", "")) and not one_decimal(v)
    )
    assert not imprecise, f"{where}: tooltips off one decimal: {imprecise[:12]}"
    cited = {v for _, v in fields if v.startswith(PAPER.authors)}
    assert cited <= {PAPER.short}, f"{where}: the paper cited as {cited}, not {PAPER.short}"


def assert_verdicts_scan(page: object) -> None:
    """Each claim's sentence short (its detail folded in a closed block); the verdict table's
    rounds never repeat the outcome beside them; the replicates that would detect the smallest
    effect shown only for an undecided condition."""
    claims = page.evaluate(
        "Array.from(document.querySelectorAll('#verdicts .claim'), c => { const d = "
        "c.cloneNode(true); d.querySelectorAll('details').forEach(x => x.remove()); "
        "return [d.textContent.trim(), c.querySelectorAll('details:not([open])').length]; })"
    )
    assert claims, "no claim in the verdicts"
    long = [(len(text), text[:80]) for text, _ in claims if len(text) > CLAIM_CHARS]
    assert not long, f"claims' sentences longer than {CLAIM_CHARS} characters: {long}"
    rows = page.evaluate(
        "Array.from(document.querySelectorAll('table.verdicts tbody tr'), r => "
        "[r.querySelector('.badge').textContent.trim(), r.lastElementChild.textContent.trim()])"
    )
    repeated = [(outcome, ran) for outcome, ran in rows if outcome.lower() in ran.lower()]
    assert not repeated, f"the verdict table's rounds repeat the outcome: {repeated}"
    needed = page.evaluate(
        "Array.from(document.querySelectorAll('table.dataframe'), t => { const h = Array.from("
        "t.querySelectorAll('thead th'), x => x.innerText.trim()); const j = h.indexOf("
        "'judgement'); const n = h.findIndex(x => x.startsWith('replicates to detect')); "
        "return j < 0 || n < 0 ? [] : Array.from(t.querySelectorAll('tbody tr'), r => "
        "[r.cells[j].innerText.trim(), r.cells[n].innerText.trim()]); }).flat()"
    )
    decided = [(j, n) for j, n in needed if j != "inconclusive" and n not in ("", "–")]
    assert not decided, f"replicates to detect an effect beside decided conditions: {decided}"


#: a launch's line of one run's own time (kit.launch.progress.RunClock.line)
RUN_LINE = re.compile(r"(?P<name>.+): (?P<n>\d+)/(?P<total>\d+) steps in (?P<seconds>[\d.]+) s ")
#: seconds a bar's elapsed time may exceed its work's (a clock read a poll later)
BAR_SLACK_S = 1.0


def stage_times(records: Path) -> list[tuple[str, int, str, float]]:
    """Every stage the kernel recorded (kit.readout.progress.Stage), in the order they began: its
    name, total, unit and its own seconds (first to last record, less its time paused)."""
    began: dict[str, dict] = {}
    ended = []
    for line in records.read_text().splitlines():
        record = json.loads(line)
        first = began.setdefault(record["stage"], record)
        if record["final"]:
            del began[record["stage"]]
            own = record["time"] - first["time"] - record["paused_s"]
            ended.append((first["time"], record["stage"], record["total"], record["unit"], own))
    return [stage[1:] for stage in sorted(ended)]


def run_seconds(shared: Path, shown_name: str) -> float:
    """A training run's own time, from its folder: its settings written at its start
    (config.yaml) to its DONE marker. `shown_name` is kit.launch.progress.shown's."""
    found = [path for path in shared.glob("*/configs/*.yaml") if shown(path.stem) == shown_name]
    assert len(found) == 1, f"the run {shown_name!r}: settings found {found}"
    (config,) = found
    run = RunFolder(Path(yaml.safe_load(config.read_text())["output_dir"]))
    return run.done.stat().st_mtime - run.config.stat().st_mtime


def assert_bars_take_their_works_time(page: object, records: Path, shared: Path) -> int:
    """Each finished bar's elapsed time is at most its work's own time (the stage it reports
    to the runner, matched in order by count and unit) plus BAR_SLACK_S, and its rate is its
    count over that elapsed time as shown; each run's folded time at most its run's; returns
    the number of bars."""
    bars = [
        found
        for text in page.locator(".kit-widget").all_text_contents()
        if (found := BAR_LINE.match(" ".join(text.split())))
    ]
    stages, at = stage_times(records) if records.exists() else [], 0
    for bar in bars:
        unit, total = bar["unit"] or bar["per"], int(bar["total"])
        assert bar["n"] == bar["total"], f"an unfinished bar: {bar[0]}"
        match = next((i for i in range(at, len(stages)) if stages[i][1:3] == (total, unit)), None)
        assert match is not None, f"no stage recorded for the bar {bar[0]!r} in {records}"
        own = stages[match][3]
        assert clock_seconds(bar["elapsed"]) <= own + BAR_SLACK_S, (bar[0], stages[match])
        assert rate_disagrees(bar) is None, rate_disagrees(bar)
        at = match + 1
    for text in page.locator("details li").all_text_contents():
        if found := RUN_LINE.match(text):
            own = run_seconds(shared, found["name"])
            assert float(found["seconds"]) <= own + BAR_SLACK_S, (text, own)
    return len(bars)


def test_every_executed_notebook_page_renders_offline(
    browser, notebook_outputs, tmp_path_factory, tmp_path: Path
) -> None:
    """Each of notebooks 01-04 as executed, its HTML opened with the network cut off: nothing
    requested, formulas drawn as MathML (no raw LaTeX in the text), every progress bar drawn,
    finished and no slower than its work as its records time it, code hidden on request."""
    folder, shared = executed_report(notebook_outputs, tmp_path_factory)
    pages = sorted(folder.glob("0*.html"))
    assert [p.stem for p in pages] == list(WRITES), "not every executed notebook has a page"
    context, requested = offline_context(browser, WIDEST_PX)
    bars = formulas = 0
    for written in pages:
        page = context.new_page()
        with screenshot_on_failure(page, tmp_path / f"{written.stem}_failure.png"):
            page.goto(written.as_uri())
            text = page.locator("body").inner_text()
            assert not re.search(r"\$\\[a-zA-Z]+|\$\$", text), "raw LaTeX shows"
            widths = page.evaluate(
                "Array.from(document.querySelectorAll('math'), "
                "e => e.getBoundingClientRect().width)"
            )
            assert all(width > 0 for width in widths), "a formula is not drawn"
            formulas += len(widths)
            found = assert_bars_take_their_works_time(
                page, folder / f".{written.stem}.stages.jsonl", shared
            )
            assert page.locator("progress").count() == found, "a bar without its text line"
            bars += found
            code = page.locator(".jp-CodeCell .jp-Cell-inputWrapper").first
            assert code.is_visible()
            page.locator("#kit-hide-code").click()
            assert not code.is_visible(), "Hide code left the code shown"
            notebook = nbformat.read(written.with_suffix(".ipynb"), as_version=4)
            assert page.title() == notebook_html.title(notebook, written.stem)
            assert_reads_for_a_researcher(page, written.name)
        page.close()
    context.close()
    assert bars >= 5, f"{bars} progress bars in the executed notebooks"
    assert formulas >= 2, f"{formulas} formulas drawn in the executed notebooks"
    assert not requested, f"the notebook pages asked the network for {requested}"


#: pixels per inch of the LaTeX pages' screenshots (pdftoppm's -r)
PAGE_DPI = 80


@pytest.mark.skipif(
    not (PDFLATEX and shutil.which("pdftoppm") and has_booktabs()),
    reason="no pdfLaTeX with booktabs or no pdftoppm (apt-get install texlive-latex-extra "
    "poppler-utils)",
)
def test_the_reports_latex_tables_render_as_pages(
    browser, notebook_outputs, tmp_path_factory, tmp_path: Path
) -> None:
    """Every LaTeX table the report wrote for the executed notebooks, compiled together in a
    plain A4 `article`, rendered page by page by pdftoppm and shown in the browser: each page
    drawn with ink on it, its screenshot kept (the folder is printed) for a reader to look at
    what a paper would print."""
    folder, _ = executed_report(notebook_outputs, tmp_path_factory)
    tables = sorted(folder.glob("*.tex"))
    assert len(tables) >= 4, f"{len(tables)} LaTeX tables in the report's folder"
    compile_latex(tables, tmp_path, "a4paper")  # twice: a split table's parts name the first
    pdf = compile_latex(tables, tmp_path, "a4paper")  # by its number, from the first run's .aux
    subprocess.run(
        ["pdftoppm", "-r", str(PAGE_DPI), "-png", str(pdf), str(tmp_path / "page")], check=True
    )
    pages = sorted(tmp_path.glob("page-*.png"))
    assert pages, "pdftoppm rendered no page"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    context, requested = offline_context(browser, WIDEST_PX)
    view = context.new_page()
    for rendered in pages:
        view.goto(rendered.as_uri())
        drawn = view.evaluate("[document.images[0].naturalWidth, document.images[0].complete]")
        assert drawn[0] > 0 and drawn[1], f"{rendered.name}: the browser drew no page"
        with Image.open(rendered) as image:
            ink = sum(image.convert("L").point(lambda v: v < 128 and 255).histogram()[255:])
        assert ink > 100, f"{rendered.name}: a blank page ({ink} dark pixels)"
        view.screenshot(path=str(shots / rendered.name), full_page=True)
    context.close()
    assert not requested, f"the rendered pages asked the network for {requested}"
    print(f"the report's LaTeX tables as pages: {shots}")


def test_the_docs_open_offline(browser, tmp_path: Path) -> None:
    """The built docs request nothing outside the site (no web font from a CDN), name the
    paper with its version on the home page, and break no name of one word in a table
    ('01_toy_counterex ample') across lines at 1,280 px."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )
    context, requested = offline_context(browser)
    for built in (site / "index.html", site / "report" / "index.html"):
        page = context.new_page()
        page.goto(built.as_uri())
        page.wait_for_load_state("load")
        if built.parent == site:
            assert f"arXiv {PAPER.arxiv_id}" in page.locator("body").inner_text()
        broken = page.evaluate(
            "Array.from(document.querySelectorAll('.md-content table code'), c => [c.textContent, "
            "c.getClientRects().length]).filter(([t, n]) => !/\\s/.test(t) && n > 1)"
        )
        assert not broken, f"{built.relative_to(site)}: names broken across lines: {broken}"
        page.close()
    context.close()
    assert not requested, f"the docs asked the network for {requested}"
