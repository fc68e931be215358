"""All NVML calls go through here: lazy init, NotSupported -> default, each missing function logged once.

pynvml (nvidia-ml-py) is imported only when NVML is first needed, so hooks that read a
recorded node (or a CPU-only machine) never pay for it.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from gpuperf.files import log

_lock = threading.Lock()
_state: dict[str, Any] = {"init": False, "error": None, "mod": None}
_warned: set[str] = set()


class NvmlUnavailable(Exception):
    """NVML cannot be loaded or initialised on this machine."""


def nvml() -> Any:
    """The initialised pynvml module, or NvmlUnavailable with the reason."""
    with _lock:
        if _state["init"]:
            return _state["mod"]
        if _state["error"] is not None:
            raise NvmlUnavailable(_state["error"])
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
        except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, driver not loaded...
            _state["error"] = f"{type(e).__name__}: {e}"
            raise NvmlUnavailable(_state["error"]) from None
        _state["mod"], _state["init"] = pynvml, True
        return pynvml


def query(fn: str | Callable[..., Any], *args: Any, default: Any = None) -> Any:
    """Call an NVML function by name (or callable); NotSupported/NoPermission/missing -> ``default``."""
    mod = nvml()
    func = getattr(mod, fn, None) if isinstance(fn, str) else fn
    name = fn if isinstance(fn, str) else getattr(fn, "__name__", repr(fn))
    if func is None:
        _warn_once(name, "not in this nvidia-ml-py")
        return default
    try:
        return func(*args)
    except mod.NVMLError as e:
        code = getattr(e, "value", None)
        quiet = {getattr(mod, "NVML_ERROR_NOT_SUPPORTED", -1), getattr(mod, "NVML_ERROR_NO_PERMISSION", -1),
                 getattr(mod, "NVML_ERROR_FUNCTION_NOT_FOUND", -1), getattr(mod, "NVML_ERROR_INVALID_ARGUMENT", -1)}
        if code not in quiet:
            _warn_once(name, str(e))
        return default


def _warn_once(name: str, why: str) -> None:
    if name not in _warned:
        _warned.add(name)
        log.get("nvml").info("NVML %s unavailable: %s", name, why)


def shutdown() -> None:
    """Release NVML (tests, clean daemon exit)."""
    with _lock:
        if _state["init"]:
            try:
                _state["mod"].nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
        _state.update(init=False, error=None, mod=None)


class XidEvents:
    """NVML's critical-XID events of some GPUs (nvmlEventSetCreate / nvmlDeviceRegisterEvents), polled
    without waiting (nvmlEventSetWait, timeout 0) from the daemon's loop. A GPU that cannot deliver
    events (NotSupported, no permission) is left out and logged once; ``watched`` lists the others."""

    def __init__(self, indices: list[int]):
        m = self.m = nvml()
        self.set = m.nvmlEventSetCreate()
        self.watched: list[int] = []
        for i in indices:
            try:
                h = m.nvmlDeviceGetHandleByIndex(i)
                m.nvmlDeviceRegisterEvents(h, m.nvmlEventTypeXidCriticalError, self.set)
                self.watched.append(i)
            except m.NVMLError as e:
                _warn_once(f"nvmlDeviceRegisterEvents({i})", str(e))
        self._wait = getattr(m, "nvmlEventSetWait_v2", None) or m.nvmlEventSetWait

    def poll(self, max_events: int = 64) -> list[tuple[int, int]]:
        """Events that arrived since the last poll: (GPU index, XID), without blocking."""
        m, out = self.m, []
        while len(out) < max_events:
            try:
                data = self._wait(self.set, 0)
            except m.NVMLError as e:
                if getattr(e, "value", None) != getattr(m, "NVML_ERROR_TIMEOUT", -1):  # timeout: nothing pending
                    _warn_once("nvmlEventSetWait", str(e))
                break
            if data.eventType & m.nvmlEventTypeXidCriticalError:
                out.append((int(m.nvmlDeviceGetIndex(data.device)), int(data.eventData)))
        return out

    def close(self) -> None:
        """Free the event set."""
        try:
            self.m.nvmlEventSetFree(self.set)
        except Exception:  # noqa: BLE001 - NVML already shut down
            pass
