"""gpuperf-hook (gpuperf/wrappers/gpuperf_hook.c) as Prolog and Epilog: the request it sends over the hook
socket, what each reply makes it do, and when it hands over to the Python hook (GPUPERF_HOOK_FALLBACK).

The C client is compiled once per module; the daemon is a stand-in SEQPACKET server (tests/unit/hookclient.py).
The TaskProlog's tests are in test_hook_client_task.py.
"""

from __future__ import annotations

import json
import re
import time
import tomllib
import zlib

import pytest

from gpuperf.env import plan
from gpuperf.files import config as gconfig
from gpuperf.prolog import fast
from hookclient import SOURCE, Server, base_env, built_client, config, fell_back, make_prefix, run_hook


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return built_client(tmp_path_factory)


@pytest.fixture
def prefix(tmp_path, exe):
    return make_prefix(tmp_path / "opt", exe)


@pytest.fixture
def served(tmp_path):
    servers = []

    def start(reply=b'{"v":1,"ok":true,"done":true,"exit_code":0}', directory=None, **kw):
        s = Server(directory or tmp_path / "sock", reply, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def c_array(name: str) -> tuple[str, ...]:
    """The strings of a NULL-terminated ``static const char *const NAME[]`` in the C source."""
    m = re.search(rf"{name}\[\] = \{{(.*?)NULL\}};", SOURCE.read_text(), re.S)
    assert m, name
    return tuple(re.findall(r'"([^"]*)"', m.group(1)))


def test_the_c_filters_are_pythons():
    assert c_array("HOOK_PREFIXES") == fast.ENV_PREFIXES
    assert c_array("HOOK_NAMES") == fast.ENV_NAMES
    assert c_array("TASK_PREFIXES") == tuple(plan.VARIABLE_CLASSES)


NASTY = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "n1", "SPANK_X": 'a "quoted" \\back\\slash',
         "_SLURM_SPANK_OPTION_gpuperf_gpuperf": "off", "GPUPERF_X": "line1\nline2\ttab\r\x01\x1f",
         "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_NAME": "réseau ✓ 𝄞 日本", "NCCL_DEBUG": "INFO",
         "HOME": "/root", "SLURM_EMPTY": ""}


def test_prolog_sends_pythons_request_and_exits_with_the_daemons_code(tmp_path, prefix, served):
    server = served()
    cfg = config(tmp_path / "config.toml", server.path.parent)
    env = base_env(cfg, **NASTY)
    p = run_hook(prefix, "prolog", env, "ignored-arg")
    assert p.returncode == 0, p.stderr
    assert fell_back(prefix, "prolog") is None
    data = cfg.read_bytes()
    assert server.request() == {"v": 1, "op": "prolog", "job": {
        "env": fast.hook_env(env), "config": {"source": str(cfg), "file": f"{zlib.crc32(data):08x}-{len(data)}"}}}
    assert "NCCL_DEBUG" not in server.request()["job"]["env"] and "HOME" not in server.request()["job"]["env"]


def test_prolog_exit_code_is_the_daemons_and_the_epilogs_is_always_0(tmp_path, prefix, served):
    server = served(b'{"v":1,"ok":true,"done":true,"exit_code":1}')
    env = base_env(config(tmp_path / "c.toml", server.path.parent), SLURM_JOB_ID="7")
    assert run_hook(prefix, "prolog", env).returncode == 1
    p = run_hook(prefix, "epilog", env)
    assert p.returncode == 0 and fell_back(prefix, "epilog") is None
    assert json.loads(server.requests[1])["op"] == "epilog"


def test_a_reply_with_nested_values_before_the_members_is_read(tmp_path, prefix, served):
    reply = (b'{"extra":{"a":[1,-2.5e3,{"b":"}]\\"x"},[[]],{}],"c":null,"d":true},"why":"\\u00e9",'
             b'"v":1,"ok":true,"list":["exit_code",0],"done":true,"exit_code":3}')
    server = served(reply)
    p = run_hook(prefix, "prolog", base_env(config(tmp_path / "c.toml", server.path.parent)))
    assert p.returncode == 3 and fell_back(prefix, "prolog") is None


def test_declined_and_refused_hand_over_to_the_python_hook(tmp_path, prefix, served):
    server = served(b'{"v":1,"ok":true,"done":false,"why":"config differs"}')
    env = base_env(config(tmp_path / "c.toml", server.path.parent))
    p = run_hook(prefix, "prolog", env, "a b", "c")
    assert p.returncode == 0
    assert fell_back(prefix, "prolog") == "declined: config differs"
    assert (prefix / "venv/bin/gpuperf-prolog.args").read_text() == "a b\nc\n"
    server.reply = b'{"v":1,"ok":false,"error":"busy"}'
    run_hook(prefix, "epilog", env)
    assert fell_back(prefix, "epilog") == "declined: daemon refused: busy"


def test_no_socket_is_down_naming_the_path(tmp_path, prefix):
    env = base_env(config(tmp_path / "c.toml", tmp_path / "nodaemon"))
    assert run_hook(prefix, "prolog", env).returncode == 0
    assert fell_back(prefix, "prolog") == f"down: {tmp_path}/nodaemon/hook.sock: No such file or directory"


@pytest.mark.parametrize("reply,delay,why", [
    (None, 0, "closed the connection without a reply"),
    (b"not json", 0, "reply is not JSON"),
    (b'{"v":1,"ok":true,"done":true,"exit_code":0', 0, "reply is not JSON"),
    (b'{"v":1,"ok":true,"done":true}  x', 0, "reply is not JSON"),
    (b'{"v":2,"ok":true,"done":true,"exit_code":0}', 0, "unknown protocol version"),
    (b'{"v":1,"ok":true,"done":true,"exit_code":0}', 3.0, "timed out"),
])
def test_a_daemon_that_fails_to_answer_is_down_within_the_timeout(tmp_path, prefix, served, reply, delay, why):
    server = served(reply, delay_s=delay)
    env = base_env(config(tmp_path / "c.toml", server.path.parent, extra="request_timeout_s = 0.3\n"))
    t0 = time.monotonic()
    p = run_hook(prefix, "prolog", env)
    assert time.monotonic() - t0 < 0.3 + 1.0
    assert p.returncode == 0
    got = fell_back(prefix, "prolog")
    assert got.startswith("down: ") and why in got, got


@pytest.mark.parametrize("more,why", [
    ({"SLURM_BAD": b"caf\xe9"}, "non-UTF-8 environment"),
    ({f"SLURM_V{i}": "x" for i in range(257)}, "over 256 environment variables"),
    ({"SLURM_BIG": "x" * 8193}, "over 8192 bytes"),
    ({f"SLURM_V{i}": "y" * 8000 for i in range(9)}, "request over 65536 bytes"),
])
def test_what_the_daemon_would_refuse_stays_in_the_client(tmp_path, prefix, served, more, why):
    server = served()
    env = {k.encode(): v if isinstance(v, bytes) else v.encode()
           for k, v in {**base_env(config(tmp_path / "c.toml", server.path.parent)), **more}.items()}
    assert run_hook(prefix, "prolog", env).returncode == 0
    assert fell_back(prefix, "prolog").startswith("client: ") and why in fell_back(prefix, "prolog")
    assert server.requests == []


def test_prolog_fast_path_false_and_an_absent_config_stay_in_python(tmp_path, prefix, served):
    server = served()
    cfg = config(tmp_path / "c.toml", server.path.parent, extra="prolog_fast_path = false\n")
    run_hook(prefix, "prolog", base_env(cfg))
    assert fell_back(prefix, "prolog") == "client: daemon.prolog_fast_path = false"
    assert run_hook(prefix, "epilog", base_env(cfg)).returncode == 0  # the epilog ignores it
    assert fell_back(prefix, "epilog") is None and len(server.requests) == 1
    run_hook(prefix, "prolog", base_env(tmp_path / "absent.toml"))
    assert fell_back(prefix, "prolog").startswith("client: ")


# {A}: the directory the file means, {B}: a decoy; MUST: the C reads it itself (no fallback allowed)
TOMLS = [
    ("plain", '[daemon]\nsocket_dir = "{A}"\n', True),
    ("comments", '# top\n[daemon] # the daemon\n  socket_dir = "{A}" # was "{B}"\n#socket_dir = "{B}"\n', True),
    ("single quotes", "[daemon]\nsocket_dir = '{A}'\n", True),
    ("crlf and tabs", '[ daemon ]\r\n\tsocket_dir\t=\t"{A}"\r\nrequest_timeout_s = 3\r\n', True),
    ("other sections", '[checks]\ndaemon_max_age_s = 10.0\n[daemon]\nsocket_dir = "{A}"\n[general]\nx = "[daemon]"\n', True),
    ("same key elsewhere", '[env]\nsocket_dir = "{B}"\n[daemon]\nsocket_dir = "{A}"\n[general]\nsocket_dir = "{B}"\n', False),
    ("dotted", 'daemon.socket_dir = "{A}"\n', False),
    ("dotted spaced", '[daemon]\nsocket_dir = "{B}"\n[general]\nlog_dir = "/x"\n[y]\n "daemon" . socket_dir = "{A}"\n', False),
    ("top dotted spaced", ' daemon . socket_dir = "{A}"\n', False),
    ("inline table", 'daemon = {{ socket_dir = "{A}" }}\n', False),
    ("quoted table", '["daemon"]\nsocket_dir = "{A}"\n', False),
    ("quoted key", '[daemon]\n"socket_dir" = "{A}"\n', False),
    ("multi-line string", '[daemon]\nsocket_dir = """{A}"""\n', False),
    ("multi-line literal", "[daemon]\nsocket_dir = '''{A}'''\n", False),
    ("backslash escape", '[daemon]\nsocket_dir = "{A}\\u0078"\n', False),
    ("duplicate key", '[daemon]\nsocket_dir = "{B}"\nsocket_dir = "{A}"\n', False),
    ("table twice", '[daemon]\nsocket_dir = "{B}"\n[daemon]\nrequest_timeout_s = 1.0\n', False),
    ("array of tables", '[[daemon]]\nsocket_dir = "{A}"\n', False),
    ("wrong type", '[daemon]\nsocket_dir = 5\n', False),
    ("bad timeout", '[daemon]\nsocket_dir = "{A}"\nrequest_timeout_s = 0\n', False),
    ("timeout underscore", '[daemon]\nsocket_dir = "{A}"\nrequest_timeout_s = 1_0\n', False),
    ("array leaves the table", '[daemon]\nbackend = [\n[1]\n]\nsocket_dir = "{A}"\n', False),
    ("trailing garbage", '[daemon]\nsocket_dir = "{A}" "{B}"\n', False),
]


@pytest.mark.parametrize("name,text,must", TOMLS, ids=[t[0] for t in TOMLS])
def test_the_config_subset_reads_socket_dir_as_python_or_stays_in_python(tmp_path, prefix, served, name, text, must):
    a, b = tmp_path / "A", tmp_path / "B"
    servers = {str(d): served(directory=d) for d in (a, b)}
    body = text.format(A=a, B=b)
    cfg = tmp_path / "config.toml"
    cfg.write_text(body)
    try:
        want = gconfig.from_bytes(body.encode(), str(cfg)).daemon.socket_dir
    except gconfig.ConfigError:
        try:  # a file Python refuses: the C may still read tomllib's value (the daemon declines that file)
            want = tomllib.loads(body).get("daemon", {}).get("socket_dir")
        except (tomllib.TOMLDecodeError, AttributeError):
            want = None
    run_hook(prefix, "prolog", base_env(cfg))
    why = fell_back(prefix, "prolog")
    reached = [d for d, server in servers.items() if server.requests]
    if why is None:
        assert reached == [want], (name, reached, want)
    else:
        assert why.startswith("client: ") and not must and reached == [], (name, why)
