"""Stand-in for DCGM's dcgm_structs (testing/python3/dcgm_structs.py): the names gpuperf uses."""

DCGM_ST_OK = 0
DCGM_ST_BADPARAM = -1
DCGM_ST_GENERIC_ERROR = -3
DCGM_ST_NOT_SUPPORTED = -6
DCGM_ST_NO_DATA = -14
DCGM_ST_NOT_WATCHED = -16
DCGM_ST_CONNECTION_NOT_VALID = -21
DCGM_ST_REQUIRES_ROOT = -29

DCGM_OPERATION_MODE_AUTO = 1
DCGM_OPERATION_MODE_MANUAL = 2
DCGM_GROUP_ALL_GPUS = 0x7FFFFFFF

DCGM_FP64_BLANK = 140737488355328.0
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0


class DCGMError(Exception):
    """Base of every DCGM error; ``value`` is the DCGM_ST_* status."""

    def __init__(self, value):
        self.value = value
        super().__init__(f"DCGM error {value}")


_classes = {}


def dcgmExceptionClass(status):
    """The DCGMError subclass for one status code (as the real module builds them)."""
    if status not in _classes:
        _classes[status] = type(f"DCGMError_{abs(status)}", (DCGMError,), {"__init__": lambda self: DCGMError.__init__(self, status)})
    return _classes[status]


def _dcgmCheckReturn(ret):
    if ret != DCGM_ST_OK:
        raise dcgmExceptionClass(ret)()
    return ret


def _dcgmInit(libDcgmPath=None):
    return None
