"""Admin env rules: validation names the rule; matching and application follow the topology facts."""

from __future__ import annotations

import tomllib

import pytest

from gpuperf.files import config
from gpuperf.env import policy as ep, rules as envrules

from test_envpolicy import MULTI, hgx


def _cfg(text: str) -> config.Config:
    return config.parse(text, "/etc/gpuperf/config.toml")


def test_valid_rules_load_through_the_config():
    cfg = _cfg('''
[env]
[[env.rules]]
name = "h100-qps"
match = { gpu_model = "*h100*", interconnect = "nvlink", nic_kind = ["ib", "roce"], node = "gpu*", multi_node = true }
set = { NCCL_IB_QPS_PER_CONNECTION = "2", NCCL_IB_TC = 106 }
reason = "measured on fabric A"
[[env.rules]]
name = "no-alloc-conf"
forbid = ["PYTORCH_CUDA_ALLOC_CONF"]
reason = "site runs PyTorch 1.13"
''')
    rules = envrules.parse(cfg.env.rules)
    assert [r.name for r in rules] == ["h100-qps", "no-alloc-conf"]
    assert rules[0].set == {"NCCL_IB_QPS_PER_CONNECTION": "2", "NCCL_IB_TC": "106"}


@pytest.mark.parametrize("body,words", [
    ('name = "algo"\nset = { NCCL_ALGO = "Tree" }', ["'algo'", "NCCL_ALGO", "force = true"]),
    ('name = "cdmc"\nset = { CUDA_DEVICE_MAX_CONNECTIONS = "1" }', ["'cdmc'", "CUDA_DEVICE_MAX_CONNECTIONS"]),
    ('name = "preload"\nset = { LD_PRELOAD = "/x.so" }', ["'preload'", "unknown variable class", "LD_PRELOAD"]),
    ('name = "typo"\nmatch = { gpu = "H100" }\nset = { NCCL_IB_TC = "1" }', ["'typo'", "unknown match key 'gpu'"]),
    ('name = "kind"\nmatch = { nic_kind = "infiniband" }\nset = { NCCL_IB_TC = "1" }', ["'kind'", "nic_kind"]),
    ('name = "nl"\nset = { NCCL_IB_TC = "1\\nexport LD_PRELOAD=/x" }', ["'nl'", "one line"]),
    ('name = "empty"\nreason = "x"', ["'empty'", "sets nothing"]),
    ('name = "both"\nset = { NCCL_IB_TC = "1" }\nforbid = ["NCCL_IB_TC"]', ["'both'", "both sets and forbids"]),
    ('name = "extra"\nset = { NCCL_IB_TC = "1" }\nwhen = "always"', ["'extra'", "unknown key 'when'"]),
])
def test_bad_rule_is_one_clear_error_naming_it(body, words):
    with pytest.raises(config.ConfigError) as e:
        _cfg(f"[env]\n[[env.rules]]\n{body}\n")
    msg = str(e.value)
    assert "env.rules" in msg
    for w in words:
        assert w in msg, msg


def test_toml_error_is_a_config_error():
    with pytest.raises(config.ConfigError) as e:
        _cfg("[env]\n[[env.rules]]\nname = \"x\nset = {}\n")
    assert "not valid TOML" in str(e.value)


def test_forced_variable_with_force_true_is_accepted_and_applied():
    cfg = _cfg('[env]\n[[env.rules]]\nname = "tp-overlap"\nforce = true\nreason = "Megatron TP partition"\n'
               'match = { partition = "megatron" }\nset = { CUDA_DEVICE_MAX_CONNECTIONS = "1" }\n')
    rules = envrules.parse(cfg.env.rules)
    shape = MULTI._replace(partition="megatron")
    plan = ep.plan(hgx(), shape, rules)
    var = plan.get("CUDA_DEVICE_MAX_CONNECTIONS")
    assert var.value == "1" and var.rule == "admin:tp-overlap" and var.reason == "Megatron TP partition"
    other = ep.plan(hgx(), MULTI._replace(partition="batch"), rules)
    assert other.get("CUDA_DEVICE_MAX_CONNECTIONS") is None


def test_rules_change_add_and_forbid_in_order():
    rules = envrules.parse([
        {"name": "tc", "match": {"nic_kind": "ib"}, "set": {"NCCL_IB_TC": "106", "OMP_NUM_THREADS": "4"}},
        {"name": "no-gdr", "forbid": ["NCCL_NET_GDR_LEVEL", "NCCL_IB_TC"], "reason": "GDR broken on this BIOS"},
        {"name": "late", "set": {"NCCL_IB_TC": "5"}},
        {"name": "roce-only", "match": {"nic_kind": "roce"}, "set": {"NCCL_IB_SL": "3"}},
    ])
    plan = ep.plan(hgx(), MULTI._replace(cpus_per_task=16, gpus_per_task=8), rules)
    v = {x.name: x for x in plan.vars}
    assert v["OMP_NUM_THREADS"].value == "4" and v["OMP_NUM_THREADS"].rule == "admin:tc"  # changed in place
    assert plan.names().index("OMP_NUM_THREADS") < plan.names().index("NCCL_IB_HCA")
    assert "NCCL_NET_GDR_LEVEL" not in v and "NCCL_IB_TC" not in v  # forbidden, later set refused too
    assert any(s.name == "NCCL_IB_TC" and "forbidden by admin:no-gdr" in s.reason for s in plan.skipped)
    assert "NCCL_IB_SL" not in v  # no RoCE on this node


def test_user_still_wins_over_admin_rules():
    rules = envrules.parse([{"name": "tc", "set": {"NCCL_IB_TC": "106"}}])
    shape = MULTI._replace(user_set=frozenset({"NCCL_IB_TC"}))
    assert ep.plan(hgx(), shape, rules).get("NCCL_IB_TC") is None


def test_match_globs_node_and_model_case_insensitively():
    r = envrules.parse([{"name": "a", "match": {"gpu_model": "*h100*", "node": "gpu0?"}, "set": {"NCCL_IB_TC": "1"}}])[0]
    facts = ep.node_facts(hgx(), MULTI)
    assert r.matches(facts)
    assert not r.matches({**facts, "node": ["login1"]})
    assert not r.matches({**facts, "gpu_model": ["NVIDIA L40S"]})


def test_duplicate_names_refused():
    with pytest.raises(envrules.RuleError, match="same name"):
        envrules.parse([{"name": "a", "set": {"NCCL_IB_TC": "1"}}, {"name": "a", "set": {"NCCL_IB_SL": "1"}}])


def test_to_toml_round_trips_with_evidence():
    rule = envrules.Rule("tune-h200", {"gpu_model": "*H200*"}, {"NCCL_IB_QPS_PER_CONNECTION": "4"}, (), False,
                         "gpuperf tune: +3.1% median bus bandwidth at 64 MiB-1 GiB",
                         {"sizes": [67108864, 1073741824], "ratio": [1.031, 1.02], "spread": 0.008})
    text = "[env]\n" + envrules.to_toml(rule)
    raw = tomllib.loads(text)["env"]["rules"]
    assert envrules.parse(raw)[0] == rule
