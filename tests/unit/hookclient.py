"""Helpers for the gpuperf-hook tests: the C client built once, a fake prefix, stand-in daemon sockets.

The prefix is what an install makes (``bin/gpuperf-hook``, the three hook links to it) plus
``venv/bin/gpuperf-<mode>`` stand-ins for the Python hooks that write their ``GPUPERF_HOOK_FALLBACK``
and argv beside themselves: a fallback is seen, not guessed. The servers are plain sockets of the
daemon's two kinds (SEQPACKET hook socket, length-prefixed stream user socket) answering a given reply.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from gpuperf.files import framing

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "gpuperf" / "wrappers" / "gpuperf_hook.c"
MODES = ("prolog", "epilog", "taskprolog")
DONE = b'{"v":1,"ok":true,"done":true,"exit_code":0}'
STAND_IN = "#!/bin/sh\nprintf '%s' \"$GPUPERF_HOOK_FALLBACK\" > \"$0.why\"\nprintf '%s\\n' \"$@\" > \"$0.args\"\n" \
           "echo 'export FROM=python'\nexit 0\n"


def compile_hook(out: Path) -> Path | None:
    """gpuperf-hook compiled with the packaging's flags into ``out``; None without gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    exe = out / "gpuperf-hook"
    subprocess.run([gcc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(SOURCE)],
                   check=True, capture_output=True, text=True)
    return exe


def make_prefix(root: Path, exe: Path, stand_ins: bool = True) -> Path:
    """An install's layout under ``root``: bin/gpuperf-hook, its three links, and the venv's stand-ins."""
    (root / "bin").mkdir(parents=True)
    (root / "venv" / "bin").mkdir(parents=True)
    shutil.copy2(exe, root / "bin" / "gpuperf-hook")
    for m in MODES:
        (root / "bin" / f"gpuperf-{m}").symlink_to("gpuperf-hook")
        if stand_ins:
            script = root / "venv" / "bin" / f"gpuperf-{m}"
            script.write_text(STAND_IN)
            script.chmod(0o755)
    return root


def fell_back(prefix: Path, mode: str) -> str | None:
    """The GPUPERF_HOOK_FALLBACK the Python stand-in saw; None when it did not run."""
    why = prefix / "venv" / "bin" / f"gpuperf-{mode}.why"
    return why.read_text() if why.exists() else None


def run_hook(prefix: Path, mode: str, env: dict, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """Run ``bin/gpuperf-<mode>`` with exactly ``env`` (str or bytes values)."""
    return subprocess.run([str(prefix / "bin" / f"gpuperf-{mode}"), *args], env=env, capture_output=True,
                          timeout=timeout, cwd="/")


def config(path: Path, socket_dir: Path, user_dir: Path | None = None, extra: str = "") -> Path:
    """A config file whose [daemon] points at the stand-in servers' directories."""
    lines = ["[daemon]", f'socket_dir = "{socket_dir}"']
    if user_dir is not None:
        lines.append(f'user_socket_dir = "{user_dir}"')
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


Reply = bytes | None | Callable[[bytes], bytes | None]


class Server:
    """A stand-in daemon socket in ``directory``: records each request, answers ``reply`` (None: closes)."""

    def __init__(self, directory: Path, reply: Reply = DONE, stream: bool = False, delay_s: float = 0.0):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / ("user.sock" if stream else "hook.sock")
        self.reply, self.stream, self.delay_s = reply, stream, delay_s
        self.requests: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM if stream else socket.SOCK_SEQPACKET)
        self.sock.bind(str(self.path))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(5)
                try:
                    data = (framing.recv_part(conn, 1 << 20, time.monotonic() + 5) if self.stream
                            else conn.recv(1 << 20))
                except (OSError, framing.FrameError, framing.Closed):
                    continue
                self.requests.append(data)
                time.sleep(self.delay_s)
                out = self.reply(data) if callable(self.reply) else self.reply
                if out is not None:
                    try:
                        conn.sendall(framing.encode(out) if self.stream else out)
                    except OSError:
                        pass

    def request(self) -> dict:
        """The one request received, decoded."""
        assert len(self.requests) == 1, self.requests
        return json.loads(self.requests[0])

    def close(self) -> None:
        """Stop serving and remove the socket."""
        self.stop = True
        self.thread.join()
        self.sock.close()
        os.unlink(self.path)


def base_env(cfg: Path, **more: str) -> dict[str, str]:
    """A hook's environment: PATH, the config, and ``more``."""
    return {"PATH": "/usr/bin:/bin", "GPUPERF_CONFIG": str(cfg), **more}


def built_client(tmp_path_factory) -> Path:
    """The client compiled once per module (the ``exe`` fixtures); the test is skipped without gcc."""
    import pytest

    built = compile_hook(tmp_path_factory.mktemp("hookbuild"))
    if built is None:
        pytest.skip("gcc is not installed: gpuperf-hook cannot be built here")
    return built
