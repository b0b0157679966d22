"""JupyterLab started by `python -m kit lab` saves the notebooks of notebooks/ as they are
committed (kit.cli.lab), so running them in Lab leaves `git status` clean."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager
from traitlets.config.loader import KVArgParseConfigLoader

from kit.cli import lab, runner
from kit.files import checkouts
from kit.files.paths import REPO_ROOT


def lab_contents_manager(root: Path) -> FileContentsManager:
    """The contents manager Lab saves with, configured by `kit lab`'s command line."""
    options = [arg for arg in lab.arguments([]) if arg.startswith("--FileContentsManager")]
    config = KVArgParseConfigLoader(options).load_config()
    return FileContentsManager(root_dir=str(root), config=config)


@pytest.mark.parametrize("notebook", runner.find_notebooks(None), ids=lambda p: p.stem)
def test_a_notebook_run_and_saved_in_lab_is_written_as_committed(
    notebook: Path, tmp_path: Path
) -> None:
    """Saved by a server whose root is another checkout than the one its `kit` was imported
    from (tmp_path, several clones sharing one environment), the notebook is still stripped."""
    (tmp_path / "notebooks").mkdir()
    relative = f"notebooks/{notebook.name}"
    executed = nbformat.read(notebook, as_version=4)
    code = [cell for cell in executed.cells if cell.cell_type == "code"]
    for count, cell in enumerate(code, start=1):  # what a Lab session leaves in the notebook
        cell.execution_count = count
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {count}\n")]
        # a collapsed input and a collapsed, scrolled output, as Lab saves them
        cell.metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": True}
        cell.metadata.update(collapsed=True, scrolled=True)
    executed.metadata["language_info"] = {
        "name": "python",
        "version": "3.11.9",
        "mimetype": "text/x-python",
        "file_extension": ".py",
    }
    manager = lab_contents_manager(tmp_path)
    manager.save({"type": "notebook", "format": "json", "content": executed}, relative)
    assert (tmp_path / relative).read_bytes() == notebook.read_bytes()


def test_files_outside_notebooks_are_saved_as_they_are(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "1 + 1",
            execution_count=1,
            outputs=[
                nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)
            ],
        )
    ]
    lab_contents_manager(tmp_path).save(
        {"type": "notebook", "format": "json", "content": notebook}, "scratch.ipynb"
    )
    saved = nbformat.read(tmp_path / "scratch.ipynb", as_version=4)
    assert saved.cells[0].outputs and saved.cells[0].execution_count == 1


def test_lab_refuses_to_start_inside_another_checkout_than_its_kit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started inside another checkout, whose notebooks the user means, Lab would serve this
    kit's: it refuses, naming both (two real checkouts and one environment, whose kernels would
    import the other's kit: tests/test_checkouts.py)."""
    other = tmp_path / "clone"
    (other / "kit").mkdir(parents=True)
    (other / "kit" / "__init__.py").write_text("")
    (other / "notebooks").mkdir()
    monkeypatch.chdir(other / "notebooks")
    monkeypatch.setattr(lab.os, "execve", lambda *_: pytest.fail("Lab started"))
    assert lab.command([]) == 2
    said = capsys.readouterr().err
    assert str(other) in said and str(REPO_ROOT) in said and "pip install -e ." in said
    assert checkouts.checkout_of(REPO_ROOT / "notebooks") == REPO_ROOT
    assert checkouts.checkout_of(tmp_path) is None  # not in any checkout: Lab starts as asked


def lab_server(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """`python -m kit lab`'s server (its command line and environment), its user settings and
    configuration in `tmp_path`; returns it and its URL once it answers."""
    port, token = free_port(), secrets.token_hex(16)
    command = lab.arguments(
        [
            "--no-browser",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
            f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ]
    )
    env = lab.environment() | {
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).close()
            return server, f"{url}/{{}}?token={token}"
        except OSError:
            time.sleep(0.5)
    server.kill()
    pytest.fail(f"JupyterLab did not answer; its log: {(tmp_path / 'lab.log').read_text()[-2000:]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_lab_starts_without_news_announcements_or_their_question(tmp_path: Path) -> None:
    """Lab asks "Would you like to get notified about official Jupyter news?" while its
    `fetchNews` setting is 'none' (its default): `kit lab`'s server makes 'false' (never) the
    default, and fetches nothing (no news URL)."""
    assert "--LabApp.news_url=None" in lab.arguments([])
    server, url = lab_server(tmp_path)
    try:
        plugin = "lab/api/settings/@jupyterlab/apputils-extension:notification"
        with urllib.request.urlopen(url.format(plugin), timeout=30) as answer:
            setting = json.load(answer)
    finally:
        server.terminate()
        server.wait(30)
    # the schema Lab's page reads, its default overridden; no user setting
    assert setting["schema"]["properties"]["fetchNews"]["default"] == "false", setting
    assert "fetchNews" not in (setting.get("settings") or {}), setting


def test_kit_lab_help_says_what_it_does_then_jupyterlabs_options() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "kit", "lab", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: python -m kit lab"), shown.stdout[:500]
    kit_part, _, lab_part = shown.stdout.partition("JupyterLab's own help follows.")
    assert "saving a notebook of notebooks/" in kit_part and "news" in kit_part
    assert "--port" in lab_part and "LabApp" in lab_part, lab_part[:500]


def test_lab_starts_its_kernels_on_unix_sockets(tmp_path: Path) -> None:
    """`kit lab` names its kernel manager (kit.cli.lab_kernels), whose kernels use the ipc
    transport: their sockets beside the connection file, or in a private folder of their own
    (removed with the sockets) where that path is too long for a socket."""
    from kit.cli import lab_kernels

    assert f"--MappingKernelManager.kernel_manager_class={lab.KERNEL_MANAGER}" in lab.arguments([])
    module, name = lab.KERNEL_MANAGER.rsplit(".", 1)
    assert getattr(sys.modules[module], name) is lab_kernels.LocalSocketKernelManager
    short = lab_kernels.LocalSocketKernelManager(connection_file=str(tmp_path / "kernel-1.json"))
    assert short.transport == "ipc" and short.ip == str(tmp_path / "kernel-1-ipc")
    deep = tmp_path / ("x" * lab_kernels.SOCKET_PATH_MAX) / "kernel-2.json"
    long = lab_kernels.LocalSocketKernelManager(connection_file=str(deep))
    folder = Path(long.ip).parent
    assert long.transport == "ipc" and len(long.ip) <= lab_kernels.SOCKET_PATH_MAX
    assert folder.is_dir() and folder.stat().st_mode & 0o077 == 0  # private
    long.cleanup_ipc_files()
    assert not folder.exists()


def test_a_kernel_of_lab_runs_code_over_its_unix_sockets(tmp_path: Path) -> None:
    """A kernel started by `kit lab`'s kernel manager answers over its sockets and never warns
    of TCP without encryption."""
    import asyncio

    from kit.cli import lab_kernels

    async def run() -> tuple[str, str]:
        manager = lab_kernels.LocalSocketKernelManager(
            connection_file=str(tmp_path / "kernel-3.json")
        )
        await manager.start_kernel(stderr=(tmp_path / "kernel.log").open("w"))
        client = manager.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            reply = await client.execute_interactive("print(6 * 7)", timeout=60)
            return manager.transport, reply["content"]["status"]
        finally:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)

    assert asyncio.run(run()) == ("ipc", "ok")
    assert "without encryption" not in (tmp_path / "kernel.log").read_text()
