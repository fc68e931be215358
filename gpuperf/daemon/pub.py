"""The daemon's PUB stream: one message per sweep, topic ``sweep``, for ``gpuperf top`` and tools.

It carries every GPU and job of the node, so it is bound where only root can connect (the control
socket's directory, or a TCP port an admin opened); users read their own jobs through the user socket
(``live`` op), which filters by the caller's uid.
"""

from __future__ import annotations

from typing import Any

import zmq

from dataclasses import fields

from gpuperf.daemon import protocol
from gpuperf.samplers.base import GpuSample

_FIELDS = tuple(f.name for f in fields(GpuSample) if f.name != "processes")

TOPIC = b"sweep"


def sweep_message(t: float, samples: list[GpuSample], jobs: dict[int, list[int]]) -> dict[str, Any]:
    """The message of one sweep: samples without process lists, and gpu -> job ids."""
    return {"v": protocol.VERSION, "t": t, "gpus": [sample_dict(s) for s in samples],
            "jobs": {str(g): j for g, j in jobs.items()}}


def sample_dict(s: GpuSample) -> dict[str, Any]:
    """A sample as plain data without its process list (cheaper than dataclasses.asdict)."""
    return {f: v for f in _FIELDS if (v := getattr(s, f)) is not None}


class Publisher:
    """A bound XPUB socket; sending never blocks (slow subscribers drop messages) and nothing is
    encoded while nobody subscribes (XPUB tells us who does)."""

    def __init__(self, ctx: zmq.Context, endpoint: str):
        self.sock = ctx.socket(zmq.XPUB)
        self.subscribers = 0
        self.sock.setsockopt(zmq.SNDHWM, 10)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.endpoint = endpoint

    def wanted(self) -> bool:
        """Whether anyone subscribes now (reads pending (un)subscription notices)."""
        while True:
            try:
                note = self.sock.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                return self.subscribers > 0
            if note[:1] == b"\x01":
                self.subscribers += 1
            elif note[:1] == b"\x00":
                self.subscribers = max(0, self.subscribers - 1)

    def publish(self, msg: dict[str, Any]) -> None:
        """Send one message; dropped if it cannot go out now."""
        try:
            self.sock.send_multipart([TOPIC, protocol.encode(msg)], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(0)
