"""Every threshold of the diagnosis states its source (issue 35): a datasheet, a kernel class measured on a named
GPU with its recording, or a policy bar; and every recording a source names exists."""

from __future__ import annotations

import re
from pathlib import Path

from gpuperf.diagnosis.thresholds import DEFAULTS, SOURCES

ROOT = Path(__file__).resolve().parents[2]


def test_every_default_states_its_source():
    assert set(SOURCES) == set(DEFAULTS)
    for key, src in SOURCES.items():
        assert re.match(r"(datasheet|measured|policy): ", src), key


def test_a_measured_source_names_its_gpu_and_recording_and_the_recording_exists():
    for key, src in SOURCES.items():
        files = re.findall(r"tests/data/recordings/\S+?\.jsonl\.gz", src)
        if "measured:" in src:
            assert files and re.search(r"H100|H200", src), key
        for f in files:
            assert (ROOT / f).is_file(), (key, f)
