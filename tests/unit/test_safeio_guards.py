"""Each guard of ``gpuperf/files/safeio.py`` held by a test that fails when that guard alone is removed
(checked by hand: docs/SECURITY.md, "Threat model: files and parsers", lists guard -> test).

The races a user can run against root's reader (a file swapped between the ``lstat`` and the ``open``,
or grown after the ``fstat``) are played here by wrapping ``os.stat``/``os.fstat`` so the swap happens
exactly in that window.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuperf.files import safeio

ROOT = os.geteuid() == 0


@pytest.fixture
def d(tmp_path) -> Path:
    d = tmp_path / "d"
    d.mkdir()
    (d / "rec").write_text("mine")
    return d


def _after_lstat(monkeypatch, name: str, swap) -> None:
    """Run ``swap()`` right after safeio's ``lstat`` of ``name`` (before its ``open``)."""
    real = os.stat

    def stat(path, *a, **kw):
        st = real(path, *a, **kw)
        if path == name and kw.get("dir_fd") is not None:
            swap()
        return st

    monkeypatch.setattr(os, "stat", stat)


def _read(d: Path, **kw) -> tuple[list[tuple[str, bytes]], list[str]]:
    ign = safeio.Ignored()
    return safeio.read_dir(d, ignored=ign, **kw), ign.reasons


def test_a_link_swapped_in_after_the_lstat_is_not_followed(d, tmp_path, monkeypatch):
    # guard: O_NOFOLLOW on the file's open. Without it root opens the link's target: here a FIFO whose
    # writer is waiting, which that open releases (a device's open has effects of its own: a watchdog, a tape)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    released = threading.Event()

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY)          # blocks until someone opens the FIFO to read
        released.set()
        os.close(fd)

    t = threading.Thread(target=writer, daemon=True)
    t.start()

    def swap() -> None:
        os.unlink(d / "rec")
        os.symlink(fifo, d / "rec")

    _after_lstat(monkeypatch, "rec", swap)
    got, reasons = _read(d)
    monkeypatch.undo()
    opened_by_root = released.wait(0.5)
    if not opened_by_root:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))   # let the writer go
    t.join(5)
    assert got == [] and reasons == ["record ignored: d/rec: a symbolic link"]
    assert not opened_by_root


def test_a_fifo_swapped_in_after_the_lstat_does_not_block_the_open(d, monkeypatch):
    # guard: O_NONBLOCK on the file's open (without it the open of a FIFO with no writer never returns)
    def swap() -> None:
        os.unlink(d / "rec")
        os.mkfifo(d / "rec")

    _after_lstat(monkeypatch, "rec", swap)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(r=_read(d)), daemon=True)
    t.start()
    t.join(5)
    monkeypatch.undo()
    if t.is_alive():
        os.close(os.open(d / "rec", os.O_WRONLY | os.O_NONBLOCK))   # release the blocked reader
        t.join(5)
        pytest.fail("the reader blocked on a FIFO swapped in after its lstat")
    got, reasons = box["r"]
    assert got == [] and reasons == ["record ignored: d/rec: a FIFO, not a regular file"]


def test_another_regular_file_swapped_in_after_the_lstat_is_refused(d, tmp_path, monkeypatch):
    # guard: the (inode, device) comparison of what was opened with what was looked at
    other = tmp_path / "other"
    other.write_text("someone else's")

    def swap() -> None:
        os.replace(other, d / "rec")

    _after_lstat(monkeypatch, "rec", swap)
    got, reasons = _read(d)
    assert got == [] and reasons == ["record ignored: d/rec: replaced while opened"]


def test_a_file_that_grows_after_its_fstat_is_cut_off(d, monkeypatch):
    # guard: the byte count while reading (the size checks before read only what the file was)
    real = os.fstat

    def fstat(fd):
        st = real(fd)
        if not os.path.isdir(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}").endswith("/rec"):
            with open(d / "rec", "a") as f:
                f.write("x" * 5000)
        return st

    monkeypatch.setattr(os, "fstat", fstat)
    got, reasons = _read(d, max_bytes=4096)
    assert got == [] and reasons == ["record ignored: d/rec: grew over the 4096-byte limit while read"]


@pytest.mark.skipif(not ROOT, reason="needs root to give a file to another uid")
def test_a_file_of_another_owner_in_a_directory_that_passes_is_refused(d):
    # guard: the per-file owner check (the directory is the reader's own, so its check passes)
    os.chown(d / "rec", 65534, -1)
    (d / "ok").write_text("x")
    got, reasons = _read(d)
    assert [n for n, _ in got] == ["ok"] and reasons == [f"record ignored: d/rec: owned by uid 65534, not the job's uid {os.getuid()}"]
    # and through read_bytes with the uid named
    ign = safeio.Ignored()
    assert safeio.read_bytes(d / "rec", uid=os.getuid(), ignored=ign) is None and "owned by uid 65534" in ign.reasons[0]


def test_a_directory_of_another_owner_is_refused(d):
    # guard: the directory's owner check when the caller names the uid
    got, reasons = _read(d, uid=os.getuid() + 1)
    assert got == [] and reasons == [f"record ignored: d: directory owned by uid {os.getuid()}, not the job's uid {os.getuid() + 1}"]
