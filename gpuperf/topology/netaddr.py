"""IPv4 addresses per network interface: live from the kernel (SIOCGIFCONF), recorded from ``DIR/net.json``.

sysfs has no addresses, so the recorder keeps them in ``DIR/net.json``:
``{"ipv4": {"eth0": ["10.0.0.5"], ...}}``.
"""

from __future__ import annotations

import array
import fcntl
import json
import socket
import struct

from gpuperf.topology.sysfs import Root

NET_JSON = "net.json"
_SIOCGIFCONF = 0x8912
_IFREQ = 40  # sizeof(struct ifreq) on 64-bit Linux


def ipv4_live() -> dict[str, list[str]] | None:
    """Primary and labelled IPv4 addresses of every interface that has one; None if the kernel will not say."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            buf = array.array("B", bytes(_IFREQ * 256))
            addr, _ = buf.buffer_info()
            req = struct.pack("iL", len(buf), addr)
            n = struct.unpack("iL", fcntl.ioctl(s.fileno(), _SIOCGIFCONF, req))[0]
    except OSError:
        return None
    return parse_ifconf(buf.tobytes()[:n])


def parse_ifconf(data: bytes) -> dict[str, list[str]]:
    """The ifreq array SIOCGIFCONF fills -> {interface: [dotted quad, ...]} (``eth0:1`` labels folded into ``eth0``)."""
    out: dict[str, list[str]] = {}
    for off in range(0, len(data) - _IFREQ + 1, _IFREQ):
        name = data[off:off + 16].split(b"\0", 1)[0].decode("ascii", "replace").split(":", 1)[0]
        ip = socket.inet_ntoa(data[off + 20:off + 24])
        if name and ip not in out.setdefault(name, []):
            out[name].append(ip)
    return out


def ipv4(root: Root) -> dict[str, list[str]] | None:
    """IPv4 addresses for the node behind ``root``; None when unknown (recorded without net.json, or garbage)."""
    if root.live:
        return ipv4_live()
    raw = root.read(NET_JSON)
    if raw is None:
        return None
    try:
        table = json.loads(raw).get("ipv4")
    except (ValueError, AttributeError):
        return None
    if not isinstance(table, dict):
        return None
    return {str(k): [str(a) for a in v] for k, v in table.items() if isinstance(v, list)}
