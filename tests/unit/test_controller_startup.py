"""A controller service whose collector cannot start says so and stops, instead of running deaf."""

from __future__ import annotations

import socket
import threading

import pytest

from gpuperf.controller import accounting, service
from gpuperf.files import config


def test_a_port_in_use_stops_the_service_with_the_reason(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path}"\nlog_file = ""\n[controller]\n'
                       f'port = {port}\nbind = "127.0.0.1"\n[report]\nadmin_comment = false\n')
    stop = threading.Event()
    try:
        # before: the collector thread died, serve() went on ticking forever and never said ready
        with pytest.raises(service.ServiceError, match="collector did not start .*Address already in use"):
            service.serve(cfg, stop, None, accounting.StubWriter(0.0))
    finally:
        stop.set()
        taken.close()
    assert isinstance(service.ServiceError("x"), OSError)  # gpuperf daemon --controller: logged, exit 2


def test_a_collector_that_dies_after_starting_ends_the_service_with_the_reason(tmp_path, monkeypatch):
    from gpuperf.controller import intake

    def broken_poll(self, timeout):
        raise RuntimeError("intake broke")

    monkeypatch.setattr(intake.Intake, "poll", broken_poll)
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path}"\nlog_file = ""\n[controller]\n'
                       f'port = 0\nbind = "127.0.0.1"\n[report]\nadmin_comment = false\n')
    stop = threading.Event()
    ready: list[str] = []
    # before: the thread's exception went unhandled and the service ticked on, deaf to every node
    with pytest.raises(service.ServiceError, match="collector stopped .*intake broke"):
        service.serve(cfg, stop, ready.append, accounting.StubWriter(0.0))
    assert ready and stop.is_set()
