"""A local HTTP server for `kit download`'s tests (127.0.0.1, a thread; nothing touches the
internet), and the archives it serves: the authors' release in each layout their repository
describes, made of tiny AlgoPerf-format checkpoints."""

from __future__ import annotations

import io
import socket
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

from kit import models
from kit.cli import download
from kit.experiments.timecat import layouts

#: the stand-ins' width: a ResNet-50 of 1/16 the channels (about 200 kB a file)
WIDTH = 0.0625
#: the release's archive, at its path on the server, and its layout as it unpacks (their
#: config's names)
ARCHIVE = "/" + download.SOURCES["checkpoints"].archive
UNPACKED = layouts.Layout("ckpt_resnet50_sfadamw_imagenet1k_supervised", "config")


@dataclass
class Served:
    """What the server answers: files by path; a path answering an HTTP error; whether it
    ignores Range; how many bytes the next answer sends before dropping the connection; the
    Range headers it was sent."""

    files: dict[str, bytes] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    ignore_range: bool = False
    drop_after: int | None = None
    ranges: list[str | None] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    served: Served

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        served = self.served
        served.ranges.append(self.headers.get("Range"))
        if self.path in served.errors:
            self.send_error(served.errors[self.path])
            return
        data = served.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        asked = self.headers.get("Range")
        start = 0
        if asked and not served.ignore_range:
            start = int(asked.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        if served.drop_after is not None:
            body, served.drop_after = body[: served.drop_after], None
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up on purpose (a refused download): no traceback


def serve() -> Iterator[tuple[str, Served]]:
    """A server on 127.0.0.1 in a thread: its base URL and what it serves (a generator for a
    fixture)."""
    served = Served()
    handler = type("Handler", (_Handler,), {"served": served})
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def algoperf_bytes(seed: int) -> bytes:
    """A tiny ResNet-50 saved as the authors' files are: {'model_params': ...} with AlgoPerf's
    names (kit.models.to_algoperf_names), no hash beside it."""
    torch.manual_seed(seed)
    model = models.build("resnet50", 1000, WIDTH)
    return as_released({name: tensor.detach() for name, tensor in model.state_dict().items()})


def as_released(state: dict[str, torch.Tensor]) -> bytes:
    """A network's state (the kit's names) in the released files' format."""
    buffer = io.BytesIO()
    torch.save({"model_params": models.to_algoperf_names(state)}, buffer)
    return buffer.getvalue()


def released(layout: layouts.Layout, checkpoints: dict[layouts.Key, bytes]) -> dict[str, bytes]:
    """Every released file at its name in `layout` (its own suffix)."""
    return {layout.names(*key)[0]: content for key, content in checkpoints.items()}


def tar_gz(
    members: dict[str, bytes],
    links: dict[str, str] | None = None,
    sparse: dict[str, int] | None = None,
) -> bytes:
    """A .tar.gz of `members` (and symbolic links `links`: name -> target; and sparse files
    `sparse`: name -> the size they unpack to, one byte stored, in GNU's sparse format 0.1 of
    pax headers, as GNU tar writes them with --sparse)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name, size in (sparse or {}).items():
            info = tarfile.TarInfo(name)
            info.size = 1
            info.pax_headers = {
                "GNU.sparse.map": f"{size - 1},1",
                "GNU.sparse.numblocks": "1",
                "GNU.sparse.realsize": str(size),
            }
            tar.addfile(info, io.BytesIO(b"x"))
    return buffer.getvalue()


def write_tree(root: Path, members: dict[str, bytes]) -> None:
    for name, content in members.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
