"""The kernels `python -m kit lab` starts talk to Lab's server over Unix sockets (ZeroMQ's `ipc`
transport), as `python -m kit run`'s do (kit.cli.runner), not over TCP ports on localhost: local
TCP is unencrypted (each kernel would log "Kernel is running over TCP without encryption"), and a
port found free can be taken by another process before the kernel binds it.

The sockets lie beside the kernel's connection file in Jupyter's runtime folder (private to its
user), named after it. A Unix socket's path holds at most 107 bytes; where the runtime folder's
is too long for one, the sockets go to a private temporary folder of their own. The server loads
this module by name (`--MappingKernelManager.kernel_manager_class`, kit.cli.lab.arguments), so
that `python -m kit lab` itself starts without importing the server.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from jupyter_server.services.kernels.kernelmanager import ServerKernelManager
from traitlets import default

#: the longest socket base path taken: jupyter_client adds '-<n>' to it, a Unix socket's path
#: holds at most 107 bytes (the same bound as kit.cli.runner.SOCKET_PATH_MAX)
SOCKET_PATH_MAX = 90


class LocalSocketKernelManager(ServerKernelManager):
    """Lab's kernel manager with its kernels on Unix sockets (module docstring)."""

    @default("transport")
    def _default_transport(self) -> str:
        return "ipc"

    def _ip_default(self) -> str:
        """The sockets' base path: beside the connection file, or in a temporary folder of
        their own where that path would be too long for a socket."""
        if self.transport != "ipc":
            return str(super()._ip_default())
        beside = os.path.splitext(self.connection_file)[0] + "-ipc" if self.connection_file else ""
        if beside and len(beside) <= SOCKET_PATH_MAX:
            return beside
        self._socket_folder = tempfile.mkdtemp(prefix="kit-lab-")
        return os.path.join(self._socket_folder, "kernel")

    def cleanup_ipc_files(self) -> None:
        """jupyter_client's removal of the sockets, then of their own folder where there is
        one."""
        super().cleanup_ipc_files()
        folder = getattr(self, "_socket_folder", None)
        if folder:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
