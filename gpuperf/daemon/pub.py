"""The daemon's PUB stream: one message per sweep, topic ``sweep``, for ``gpuperf top`` and tools.

It carries every GPU and job of the node, so it is bound where only root can connect (the control
socket's directory, or a TCP port an admin opened); users read their own jobs through the user socket
(``live`` op), which filters by the caller's uid.
"""

from __future__ import annotations

from typing import Any

import zmq

from gpuperf.daemon import protocol
from gpuperf.samplers.base import GpuSample

TOPIC = b"sweep"


def sweep_message(t: float, samples: list[GpuSample], jobs: dict[int, list[int]]) -> dict[str, Any]:
    """The message of one sweep: samples without process lists, and gpu -> job ids."""
    gpus = []
    for s in samples:
        d = s.to_dict()
        d.pop("processes", None)
        gpus.append(d)
    return {"v": protocol.VERSION, "t": t, "gpus": gpus, "jobs": {str(g): j for g, j in jobs.items()}}


class Publisher:
    """A bound PUB socket; sending never blocks (slow subscribers drop messages)."""

    def __init__(self, ctx: zmq.Context, endpoint: str):
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 10)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.endpoint = endpoint

    def publish(self, msg: dict[str, Any]) -> None:
        """Send one message; dropped if it cannot go out now."""
        try:
            self.sock.send_multipart([TOPIC, protocol.encode(msg)], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(0)
