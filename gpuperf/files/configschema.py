"""The config file's schema: every section and key gpuperf understands, its type, default, help line
and validator (``Key``). Data only, read by ``gpuperf.files.config`` (which parses and checks a file
against it) and by ``example_toml`` (packaging/config.example.toml).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a fresh hook process ~3 ms: annotations stay strings
    from collections.abc import Callable
    from typing import Any


class Key:
    """One config key: its Python type, default, a help line and an optional validator.

    A key that a feature owns names that feature's validator as ``"module:function"`` (``env.rules``
    knows what a rule is, not this module): config sits below every feature and imports none of them;
    the named module is imported only when a file sets the key to a non-empty value, so the hooks,
    which load defaults and common settings, never pay for it.
    """

    __slots__ = ("type", "default", "help", "choices", "validate", "item_type")

    def __init__(self, type: type | tuple[type, ...], default: Any, help: str = "",
                 choices: tuple[Any, ...] | None = None,
                 validate: Callable[[Any], Any] | str | None = None,
                 item_type: type | tuple[type, ...] | None = None) -> None:
        self.type, self.default, self.help, self.choices = type, default, help, choices
        # validate(value) raises ValueError with a message naming what is wrong; its result is unused
        self.validate = validate
        self.item_type = item_type  # for lists


def _positive(v: float) -> None:
    if v <= 0:
        raise ValueError("must be > 0")


def _http_url(v: str) -> None:
    # the report queries it with urllib: anything but http(s)://host[:port][/path] would fail late
    if v and not (v.startswith(("http://", "https://")) and len(v.split("://", 1)[1].strip("/")) > 0):
        raise ValueError("must be empty or an http:// or https:// URL (\"http://prometheus:9090\")")


def _hook_bound(v: float) -> None:
    # above an hour a hook is not bounded in any useful sense (Slurm's own timeouts are minutes)
    if not 0 < v <= 3600:
        raise ValueError("must be > 0 and <= 3600 seconds")


def _share(v: float) -> None:
    if not 0 <= v <= 1:
        raise ValueError("must be between 0 and 1")


CHECK_CODES = "gpuperf.checks:validate_codes"  # the check registry names the known codes


# The schema. Sections: general (shared), checks, daemon, env, affinity, report, controller, fleet.
SCHEMA: dict[str, dict[str, Key]] = {
    "general": {
        "run_dir": Key(str, "/run/gpuperf", "per-job state of running jobs (tmpfs)"),
        "job_dir_keep_days": Key(float, 7.0, "a job's run_dir records are removed this long after they last changed "
                                 "(never while the job runs on the node)", validate=_positive),
        "state_dir": Key(str, "/var/lib/gpuperf", "durable state (SQLite stores)"),
        "state_group": Key(str, "", "group that may read the job stores (state_dir 0750, stores 0640); empty: root only (0700/0600)"),
        "log_file": Key(str, "/var/log/gpuperf/gpuperf.log", "log file; empty string: stderr only"),
        "log_level": Key(str, "info", "", choices=("debug", "info", "warning", "error")),
        "slurm_bin_dir": Key(str, "/usr/bin", "where scontrol, sacct, sacctmgr live (hooks get no PATH)"),
        "node_root": Key(str, "", "read a recorded node (DIR/sys, DIR/gpus.json) instead of the live one"),
        "admin_users": Key(list, ["root"], "users who may read every job and act as admins", item_type=str),
        "slurm_user": Key(str, "slurm", "SlurmUser: may register and finalise jobs like root"),
    },
    "checks": {
        "disabled": Key(list, [], "check codes never run", item_type=str, validate=CHECK_CODES),
        "fail": Key(list, [], "check codes whose warnings become failures", item_type=str, validate=CHECK_CODES),
        "enable": Key(list, [], "checks that are off by default to run", item_type=str, validate=CHECK_CODES),
        "drain": Key(bool, True, "drain the node when a check fails"),
        "max_drained_share": Key(float, 0.10, "never drain while this share of nodes is drained by gpuperf", validate=_share),
        "timeout_s": Key(float, 5.0, "a check running longer is an error", validate=_positive),
        "expected_gpus": Key(int, 0, "GPUs the node must show; 0: what Slurm allocated/configured"),
        "driver_version": Key(str, "", "expected driver version; empty: not checked"),
        "xid_window_s": Key(float, 7200.0, "XIDs older than this are ignored", validate=_positive),
        "ib_min_rate_gbps": Key(float, 0.0, "IB/RoCE ports below this rate fail; 0: rate not checked"),
        "ib_ports": Key(list, [], "IB/RoCE ports to check ('mlx5_0' or 'mlx5_0:1'); empty: all", item_type=str),
        "xid_fatal": Key(list, [48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120],
                         "XIDs that fail the node (Azure aznhc's set)", item_type=int),
        "nvlink_expected": Key(int, 0, "active NVLinks each GPU must have; 0: every link NVML reports"),
        "nvlink_max_error_growth": Key(int, 0, "NVLink replay and recovery errors a GPU may gain between clean checks"),
        "nvlink_crc_max_per_s": Key(float, 100.0, "corrected NVLink CRC errors (flit, data) per second on one link that "
                                    "fail the node; fewer only warn (DCGM's limit: RM says they matter from 100/s)",
                                    validate=_positive),
        "deep_timeout_s": Key(float, 300.0, "time limit of one deep check (dcgmi diag)", validate=_positive),
        "daemon_max_age_s": Key(float, 30.0, "the prolog uses the daemon's health result if this fresh", validate=_positive),
    },
    "daemon": {
        "backend": Key(str, "auto", "sampler: auto, nvml, dcgm or replay:FILE"),
        "interval_s": Key(float, 1.0, "sampling interval", validate=_positive),
        "socket_dir": Key(str, "/run/gpuperf/daemon", "directory of the control socket (root only)"),
        "metrics_port": Key(int, 9402, "Prometheus /metrics port; 0 disables"),
        "metrics_address": Key(str, "127.0.0.1", "address /metrics binds (0.0.0.0 or the node's address: "
                               "reachable from the network, for a Prometheus elsewhere)"),
        "metrics_job_labels": Key(bool, False, "/metrics lists each job id and user per GPU (gpuperf_job_gpu_info: "
                                  "the Grafana dashboard's job panels need it); readable by whoever reaches the port"),
        "pub_port": Key(int, 0, "TCP port of the PUB stream; 0: IPC socket in socket_dir only"),
        "store": Key(str, "", "SQLite store; empty: <state_dir>/daemon.sqlite"),
        "replay_speed": Key(float, 1.0, "replay backend speed-up", validate=_positive),
        "request_timeout_s": Key(float, 2.0, "hooks wait this long for the daemon", validate=_positive),
        "user_socket_dir": Key(str, "/run/gpuperf/daemon-user", "directory of the read-only user socket (0755)"),
        "checkpoint_s": Key(float, 30.0, "aggregates are written to the store this often", validate=_positive),
        "full_res_s": Key(float, 3600.0, "full-resolution samples kept this long, then 1-minute means", validate=_positive),
        "retention_days": Key(float, 90.0, "1-minute series and finished jobs kept this long", validate=_positive),
        "host_interval_s": Key(float, 5.0, "per-job CPU/RSS/IO scan interval", validate=_positive),
        "energy_interval_s": Key(float, 600.0, "energy counter read this often between job start and end", validate=_positive),
        "health_interval_s": Key(float, 20.0, "cached fast health checks refreshed this often (below checks.daemon_max_age_s)", validate=_positive),
        "prolog_fast_path": Key(bool, True, "the prolog hands its steps to the daemon over the hook socket (one round trip)"),
    },
    "env": {
        "enabled": Key(bool, True, "inject environment in the TaskProlog"),
        "notice": Key(bool, False, "print a one-line notice in the job's output"),
        "rules": Key(list, [], "admin policy rules ([[env.rules]] tables)", item_type=dict, validate="gpuperf.env.rules:validate"),
        "nccl_version": Key(str, "", "NCCL version jobs use when gpuperf cannot find it (\"2.21.5\"); empty: unknown"),
    },
    "affinity": {
        "enabled": Key(bool, True, "pin tasks next to their GPUs"),
        "mem_policy": Key(str, "bind", "", choices=("bind", "prefer", "none")),
        "hyperthreads": Key(bool, True, "use SMT siblings after whole cores"),
        "warn_in_job": Key(bool, False, "print affinity warnings in the job's output"),
        "topology_file": Key(str, "", "node topology JSON (gpuperf topology --json) to plan from; empty: discover"),
        "cgroup_root": Key(str, "/sys/fs/cgroup", "where the prolog looks for the job's cpuset cgroup"),
    },
    "report": {
        "admin_comment": Key(bool, True, "write the summary into the job's AdminComment"),
        "mail_program": Key(str, "/usr/bin/mail", "the mail program gpuperf-mail (Slurm's MailProg) hands every mail "
                            "to, with gpuperf's lines added to end-of-job mails"),
        "mail_wait_s": Key(float, 20.0, "how long gpuperf-mail waits for a job's summary before sending the mail "
                           "as Slurm wrote it", validate=_positive),
        "cpu_jobs": Key(bool, False, "follow jobs that hold no GPU on a node too (daemon registration, summary, "
                        "AdminComment, gpuperf jobs); default: they cost nothing and say nothing"),
        "thresholds": Key(dict, {}, "diagnosis thresholds overriding the defaults", validate="gpuperf.diagnosis.thresholds:resolve_thresholds"),
        "html_max_points": Key(int, 2000, "points per time-series line in --html pages (longer series are averaged)", validate=_positive),
        "prometheus_url": Key(str, "", "Prometheus that scrapes the daemons' /metrics: reports chart jobs from it first "
                              "(then the node daemon, then the controller store); empty: not used", validate=_http_url),
        "prometheus_timeout_s": Key(float, 5.0, "time limit of one Prometheus query", validate=_positive),
        "prometheus_node_label": Key(str, "instance", "label naming the node in the daemons' series "
                                     "(its value: node, node:port or node.domain:port)"),
        "prometheus_scrape_s": Key(float, 15.0, "the daemons' scrape interval: the shortest step of a query", validate=_positive),
    },
    "controller": {
        "address": Key(str, "", "host:port of the controller's collector; empty: SlurmctldHost"),
        "port": Key(int, 9403, "port the controller's collector listens on"),
        "store": Key(str, "", "controller SQLite store; empty: <state_dir>/cluster.sqlite"),
        "merge_wait_s": Key(float, 30.0, "how long the controller service waits for late nodes after a job ends", validate=_positive),
        "bind": Key(str, "0.0.0.0", "address the controller's collector binds"),
        "munge_socket": Key(str, "", "munged socket for node-summary credentials; empty: munge's default"),
        "admin_comment_wait_s": Key(float, 21600.0, "retry horizon: how long the service retries a job's AdminComment "
                                    "before marking it 'accounting unavailable'", validate=_positive),
        "spool_dir": Key(str, "", "where gpuperf-epilog-slurmctld drops job-end notices; empty: <state_dir>/ended"),
        "writers": Key(int, 16, "accounting writer threads: the most sacctmgr processes at once, during a backlog "
                       "(few run while little is due)", validate=_positive),
        "write_batch": Key(int, 50, "AdminComments written per sacctmgr process", validate=_positive),
        "retry_max_s": Key(float, 60.0, "longest pause between two tries of one job's AdminComment", validate=_positive),
        "admin_comment_recheck_s": Key(float, 60.0, "after its end, how long a job's AdminComment is read again in case "
                                       "another tool (jobstats' EpilogSlurmctld) wrote over gpuperf's part; 0: never"),
        "orphan_after_s": Key(float, 3600.0, "a node summary whose job slurmctld never reported ending is merged "
                              "(and flagged) after this long", validate=_positive),
        "series_points": Key(int, 500, "points per metric per GPU in the series a node summary carries (0: none)"),
        "series_keep_days": Key(float, 90.0, "the controller's store keeps node series this long (100 points a metric "
                                "after a job's first ~11 minutes); 0: for ever"),
    },
    "fleet": {
        "store": Key(str, "", "controller's fleet fingerprints (SQLite); empty: <state_dir>/fleet.sqlite"),
        "policy": Key(str, "warn", "a GPU far slower than its model's fleet: warn only, or drain its node", choices=("warn", "drain")),
        "z": Key(float, 5.0, "deviation from the model's median (robust spreads) that flags a GPU", validate=_positive),
        "probe_python": Key(str, "", "CUDA-capable Python (with PyTorch) that runs the active probe; empty: no probe"),
        "probe_every_s": Key(float, 0.0, "the daemon probes an idle node this often; 0: only gpuperf check --deep"),
        "probe_timeout_s": Key(float, 120.0, "time limit of one probe run (all GPUs of the node)", validate=_positive),
    },
    "watchdog": {
        # below Slurm's PrologEpilogTimeout (packaging/slurm.conf.snippet states the margin)
        "prolog_s": Key(float, 60.0, "the prolog's work ends after this; it exits 0 (unless a drain was decided)", validate=_hook_bound),
        "epilog_s": Key(float, 60.0, "the epilog's work ends after this; it exits 0", validate=_hook_bound),
        "taskprolog_s": Key(float, 10.0, "the TaskProlog's work ends after this (the task then starts); exit 0", validate=_hook_bound),
    },
}
