"""Stand-in for DCGM's pydcgm (DcgmHandle, DcgmSystem, DcgmGroup, DcgmFieldGroup) over fake_hostengine.

Signatures and return shapes follow NVIDIA/DCGM testing/python3 (DcgmHandle.py, DcgmSystem.py,
DcgmGroup.py, DcgmFieldGroup.py, dcgm_field_helpers.py); only what gpuperf calls is here.
"""

import itertools
import time

import dcgm_fields
import dcgm_structs
import fake_hostengine as he

_ids = itertools.count(1)


class DcgmFieldValue:
    """Like dcgm_field_helpers.DcgmFieldValue: ts (usec), fieldId, fieldType, isBlank, value."""

    def __init__(self, fieldId, value):
        self.ts = int(time.time() * 1e6)
        self.fieldId = fieldId
        self.fieldType = dcgm_fields.DCGM_FT_DOUBLE if isinstance(value, float) else dcgm_fields.DCGM_FT_INT64
        self.isBlank = value is None
        self.value = value


class DcgmFieldValueTimeSeries:
    def __init__(self):
        self.values = []

    def __len__(self):
        return len(self.values)

    def __getitem__(self, key):
        return self.values[key]


class DcgmFieldValueCollection:
    """values: [gpuId][fieldId] -> DcgmFieldValueTimeSeries, as GetLatest returns."""

    def __init__(self, handle, groupId):
        self.values = {}
        self._handle, self._groupId = handle, groupId


class DcgmHandle:
    def __init__(self, handle=None, ipAddress=None, opMode=dcgm_structs.DCGM_OPERATION_MODE_AUTO,
                 persistAfterDisconnect=False, unixSocketPath=None, timeoutMs=0):
        if handle is not None:
            self.handle = handle
            return
        if ipAddress is not None and unixSocketPath is not None:
            raise dcgm_structs.dcgmExceptionClass(dcgm_structs.DCGM_ST_BADPARAM)()
        addr = ipAddress if ipAddress is not None else unixSocketPath
        he.calls.append(("connect", addr, timeoutMs))
        if addr is None:
            raise dcgm_structs.dcgmExceptionClass(dcgm_structs.DCGM_ST_NOT_SUPPORTED)()  # no embedded mode here
        if not he.up or addr != he.address:
            raise dcgm_structs.dcgmExceptionClass(dcgm_structs.DCGM_ST_CONNECTION_NOT_VALID)()
        self.handle = next(_ids)
        self.isEmbedded = False

    def GetSystem(self):
        return DcgmSystem(self)

    def Shutdown(self):
        he.calls.append(("disconnect",))
        self.handle = None


class _Discovery:
    def __init__(self, h):
        self._h = h

    def GetAllSupportedGpuIds(self):
        _check(self._h)
        return sorted(he.gpus)

    def GetAllGpuIds(self):
        return self.GetAllSupportedGpuIds()


class DcgmSystem:
    def __init__(self, dcgmHandle):
        self._dcgmHandle = dcgmHandle
        self.discovery = _Discovery(dcgmHandle)

    def UpdateAllFields(self, waitForUpdate):
        _check(self._dcgmHandle)
        he.calls.append(("update", waitForUpdate))

    def GetGroupWithGpuIds(self, groupName, gpuIds):
        _check(self._dcgmHandle)
        he.groups[groupName] = list(gpuIds)
        return DcgmGroup(self._dcgmHandle, groupName=groupName)


class _Samples:
    def __init__(self, group):
        self._g = group

    def WatchFields(self, fieldGroup, updateFreq, maxKeepAge, maxKeepSamples):
        _check(self._g._dcgmHandle)
        fields = he.field_groups[fieldGroup.fieldGroupId]
        if (not he.prof_supported and any(f in dcgm_fields.PROF_RANGE for f in fields)) or he.unsupported & set(fields):
            raise dcgm_structs.dcgmExceptionClass(dcgm_structs.DCGM_ST_NOT_SUPPORTED)()
        he.calls.append(("watch", self._g.groupName, tuple(fields), updateFreq, maxKeepAge, maxKeepSamples))
        he.watched.update(fields)

    def GetLatest(self, fieldGroup):
        _check(self._g._dcgmHandle)
        dfvc = DcgmFieldValueCollection(self._g._dcgmHandle.handle, self._g.groupName)
        for gpu in he.groups[self._g.groupName]:
            for fid in he.field_groups[fieldGroup.fieldGroupId]:
                ts = DcgmFieldValueTimeSeries()
                val = he.gpus.get(gpu, {}).get(fid) if fid in he.watched else None
                ts.values.append(DcgmFieldValue(fid, val))
                dfvc.values.setdefault(gpu, {})[fid] = ts
        return dfvc


class DcgmGroup:
    def __init__(self, dcgmHandle, groupId=None, groupName=None):
        self._dcgmHandle = dcgmHandle
        self.groupName = groupName
        self.samples = _Samples(self)

    def GetGpuIds(self):
        return list(he.groups[self.groupName])

    def Delete(self):
        he.groups.pop(self.groupName, None)


class DcgmFieldGroup:
    def __init__(self, dcgmHandle, name="", fieldIds=None, fieldGroupId=None):
        _check(dcgmHandle)
        self.name, self.fieldIds, self._dcgmHandle = name, list(fieldIds or []), dcgmHandle
        self.fieldGroupId = next(_ids)
        he.field_groups[self.fieldGroupId] = self.fieldIds

    def Delete(self):
        he.field_groups.pop(self.fieldGroupId, None)


def _check(h):
    if not he.up or h.handle is None:
        raise dcgm_structs.dcgmExceptionClass(dcgm_structs.DCGM_ST_CONNECTION_NOT_VALID)()
