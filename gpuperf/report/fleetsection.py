"""The HTML report's fleet section: GPUs of the job the fleet flags as slower than their model, and the
XID events NVML reported while the job ran. Empty when there is nothing to say."""

from __future__ import annotations

import html
from typing import Any


def render(s: dict[str, Any], fleet: dict[str, Any] | None) -> str:
    """The section's HTML ('' when no GPU of the job is flagged and no XID came)."""
    items = []
    for g in (fleet or {}).get("flagged") or []:
        items.append(f"<li class='flagged'>{html.escape(g['headline'])}</li>")
    for g in s.get("gpus") or []:
        x = g.get("xids")
        if isinstance(x, dict) and x.get("count"):
            codes = ", ".join(map(str, x.get("codes") or [])) or "?"
            items.append(f"<li class='xid'>{html.escape(str(g.get('node')))} GPU {g.get('gpu')}: {int(x['count'])} XID "
                         f"event(s) during the job (XID {html.escape(codes)})</li>")
    if not items:
        return ""
    note = ("<p class='note'>Flagged GPUs run far from their model's fleet median (<code>gpuperf fleet</code>); "
            "a job on one runs at its speed.</p>" if (fleet or {}).get("flagged") else "")
    return "<h2 id='fleet'>Fleet health</h2><ul>" + "".join(items) + "</ul>" + note
