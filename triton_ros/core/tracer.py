"""Triton's request tracing (tracer.cc's ``TraceManager``, the core's ``InferenceTrace``).

A sampled request gets a :class:`Trace`. When the request is answered (``InferRequest``'s
``set_response`` / ``set_error``) the core reports, from the timestamps it already keeps for
the statistics (nothing is timed twice), Triton's activities: REQUEST_START (arrival),
QUEUE_START (queued), COMPUTE_START (its batch started), COMPUTE_INPUT_END and
COMPUTE_OUTPUT_START (from the backend's measured input and output times: the batch start plus
its input time, the batch end less its output time), COMPUTE_END (the batch's execution
returned) and REQUEST_END (answered). An ensemble has no compute of its own: its trace has
REQUEST_START, QUEUE_START and REQUEST_END, and each step a child trace (``parent_id``), as in
Triton. The frontends add theirs with :meth:`Trace.capture` (HTTP_RECV_START/END,
HTTP_SEND_START/END, GRPC_WAITREAD_START/END, GRPC_SEND_START/END), and so may any caller of
the core, such as the ROS node (frame received, preprocessed, published): a caller that sets
``InferRequest.caller_releases_trace`` keeps the request's trace (``InferRequest.trace``) open
after the answer and calls :meth:`Trace.release` once it has added its last timestamp. The
TENSORS level adds each input as the request was queued (TENSOR_QUEUE_INPUT) and each output
of its response (TENSOR_BACKEND_OUTPUT). Timestamps are ``time.monotonic_ns()``: Linux's
CLOCK_MONOTONIC, the steady clock Triton's traces use.

Settings have Triton's names and semantics (docs/protocol/extension_trace.md): ``trace_level``
(OFF, or TIMESTAMPS and/or TENSORS), ``trace_rate`` (one request in N is traced),
``trace_count`` (traces left to take; -1: no limit), ``log_frequency`` (0: one file; N: every
N traces go to ``<trace_file>.<index>``) and ``trace_file`` (given at start only; the protocol
cannot change where the server writes). A model's setting overrides the global one field by
field; a field cleared (null, or an empty value list over gRPC) falls back to the global
value, and a global field cleared to the command line's. :class:`TraceManager` applies them by
model name, so a request of any frontend or of the ROS node is traced alike.

The file is Triton's JSON: an array with, per trace, ``{"id", "model_name", "model_version",
"request_id"?, "parent_id"?}`` and one ``{"id", "timestamps": [{"name", "ns"}]}`` per activity
(qa/common/trace_summary.py reads it). With ``log_frequency`` 0 Triton keeps every trace in
memory until the server stops; here, where no ``trace_count`` limits them, they are appended to
the file as they complete (the same array, closed with ``]`` when the server stops), so a robot
tracing for hours does not grow. Traces are formatted and written by one background thread,
in batches (it wakes every 0.1 s or once 256 wait, so a traced request costs no wake-up and no
write of its own), from a bounded queue: a full queue drops the trace (counted), and a file
that cannot be written never fails a request (logged once per file, every failure counted:
:meth:`TraceManager.statistics`); nor does a trace that cannot be reported.

When no setting can trace (the default), :attr:`TraceManager.active` is False, and a request
costs one attribute test at the core's entry and one at its answer.

Hand-written because no library writes Triton's trace format (OpenTelemetry's span model is
Triton's other mode, not supported here).
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import logging
import operator
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import numpy as np

from .datatypes import from_numpy_dtype
from .errors import invalid_arg, unsupported

if TYPE_CHECKING:
    from .infer_request import InferRequest, InferResponse

_log = logging.getLogger("triton_ros.trace")

# Trace levels (TRITONSERVER_InferenceTraceLevel): a bit set; 0 is OFF.
LEVEL_OFF = 0
TIMESTAMPS = 1
TENSORS = 2
LEVEL_NAMES = (("TIMESTAMPS", TIMESTAMPS), ("TENSORS", TENSORS))

DEFAULT_RATE = 1000
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
MIN_COUNT = -1
#: Completed traces waiting for the writer thread, at most; beyond, a trace is dropped.
WRITER_QUEUE = 4096
WRITER_BATCH = 256  # the writer wakes once this many wait ...
WRITER_INTERVAL_S = 0.1  # ... or this long after it last wrote
MODE = "triton"

# The settings a client may change, by their protocol names.
SETTING_NAMES = ("trace_level", "trace_rate", "trace_count", "log_frequency")
_FIELD = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
}


def level_names(level: int) -> list[str]:
    """A level as the protocol lists it: ["OFF"] or the levels set."""
    names = [name for name, bit in LEVEL_NAMES if level & bit]
    return names or ["OFF"]


@dataclass(frozen=True)
class TraceConfig:
    """Trace settings: the global ones given at start (``--trace-config``), and the values of
    any setting (global or per model)."""

    level: int = LEVEL_OFF
    rate: int = DEFAULT_RATE
    count: int = -1
    log_frequency: int = 0
    file: str = ""

    def invalid_reason(self) -> str:
        """Why a setting with these values traces nothing ('' when it can), Triton's words."""
        if self.level == LEVEL_OFF:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if not self.file:
            return "trace file name is not given"
        return ""


# ------------------------------------------------------------------------------------------
# Parsing: --trace-config on the command line, and the protocol's setting values
# ------------------------------------------------------------------------------------------


def parse_level_option(text: str) -> int:
    """A level as tritonserver's command line takes it (case-insensitive)."""
    value = text.strip().lower()
    if value in ("false", "off"):
        return LEVEL_OFF
    if value in ("true", "on", "min", "max", "timestamps"):
        return TIMESTAMPS
    if value == "tensors":
        return TENSORS
    raise invalid_arg(f"invalid value for trace level option: {text}")


def _parse_int(text: str, what: str, low: int, high: int) -> int:
    value = text.strip()
    digits = value[1:] if value[:1] in "+-" else value
    if not digits.isdigit() or not digits.isascii():
        raise invalid_arg(f"Unable to parse '{what}', got: {text}")
    number = int(value)
    if not low <= number <= high:
        if what == "trace_count" and number < low:
            raise invalid_arg(
                f"Unable to parse 'trace_count'. Expecting value >= {low}, got: {text}"
            )
        raise invalid_arg(
            f"Unable to parse '{what}', value is out of range [ {low}, {high} ], got: {text}"
        )
    return number


_CLI_RANGES = {
    "rate": ("trace_rate", 0, UINT32_MAX),
    "count": ("trace_count", MIN_COUNT, INT32_MAX),
    "log_frequency": ("log_frequency", 0, UINT32_MAX),
}


def parse_trace_config(
    specs: Iterable[str],
    *,
    file: str | None = None,
    levels: Iterable[str] = (),
    rate: int | None = None,
    count: int | None = None,
    log_frequency: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> TraceConfig:
    """The global settings from tritonserver's ``--trace-config`` values, in its syntax:
    ``<setting>=<value>`` for ``level`` (repeatable: the levels add up; OFF anywhere turns
    tracing off), ``rate``, ``count`` and ``mode`` (only ``triton``), and
    ``triton,<setting>=<value>`` for ``file`` and ``log-frequency``. ``file`` and
    ``log-frequency`` (or ``log_frequency``) are also taken without the ``triton,`` prefix,
    which tritonserver ignores silently. The deprecated ``--trace-file``, ``--trace-level``,
    ``--trace-rate``, ``--trace-count`` and ``--trace-log-frequency`` come as keywords;
    ``--trace-config`` overrides them, as in tritonserver (``warn`` is told). Anything else is
    an INVALID_ARG (UNSUPPORTED for the opentelemetry mode) naming the option."""
    deprecated = {"file": file, "rate": rate, "count": count, "log_frequency": log_frequency}
    values: dict[str, Any] = {}
    for key, value in deprecated.items():
        if value is None:
            continue
        if key != "file":
            what, low, high = _CLI_RANGES[key]
            if not low <= int(value) <= high:
                raise invalid_arg(
                    f"--trace-{key.replace('_', '-')}: value is out of range "
                    f"[ {low}, {high} ], got: {value}"
                )
        values[key] = value
    level_options = [parse_level_option(text) for text in levels]
    from_config: list[int] = []
    for spec in specs:
        mode, sep, rest = spec.partition(",")
        if not sep:
            mode, rest = "", spec
        elif not mode:
            raise invalid_arg(
                f"No trace mode specified. --trace-config option format is "
                f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {spec}"
            )
        setting, eq, value = rest.partition("=")
        setting = setting.strip()
        if not eq or not setting or not value:
            raise invalid_arg(
                f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {spec}"
            )
        if mode:
            _check_mode(mode)
        where = f"--trace-config {spec}"
        key = "log_frequency" if setting in ("log-frequency", "log_frequency") else setting
        if key == "mode" and not mode:
            _check_mode(value)
            continue
        if key == "level" and not mode:
            from_config.append(parse_level_option(value))
        elif key in ("rate", "count") and not mode or key in ("file", "log_frequency"):
            if key == "file":
                values[key] = value
            else:
                what, low, high = _CLI_RANGES[key]
                values[key] = _cli_int(value, what, low, high, where)
        else:
            raise invalid_arg(
                f"{where}: unknown trace setting '{setting}' (global settings: "
                f"level, rate, count, mode; 'triton,' settings: file, "
                f"log-frequency)"
            )
        flag = {"level": "level", "log_frequency": "log-frequency"}.get(key, key)
        if (key == "level" and level_options) or deprecated.get(key) is not None:
            (warn or _log.warning)(
                f"Overriding deprecated '--trace-{flag}' in favor of "
                f"provided {key} in --trace-config!"
            )
    level = LEVEL_OFF
    for parsed in level_options + from_config:
        level |= parsed
    if LEVEL_OFF in level_options + from_config:
        level = LEVEL_OFF  # an explicit OFF wins, as in tritonserver
    return TraceConfig(level=level, **values)


def _check_mode(text: str) -> None:
    mode = text.strip().lower()
    if mode == MODE:
        return
    if mode == "opentelemetry":
        raise unsupported(
            "trace mode 'opentelemetry' is not supported by triton-ros-server; "
            "use Triton's trace mode ('triton', the default)"
        )
    raise invalid_arg(
        f"invalid value for trace mode option: {text}. Available options are "
        f'"triton" and "opentelemetry"'
    )


def _cli_int(text: str, what: str, low: int, high: int, where: str) -> int:
    try:
        return _parse_int(text, what, low, high)
    except Exception as exc:
        raise invalid_arg(f'Bad option: "{where}": {getattr(exc, "message", exc)}') from None


_CLEAR = object()


def parse_setting_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """A client's changes (Triton's names) as field -> new value, or _CLEAR for a cleared one.

    A value is a string, a list of strings (gRPC gives every value as one; ``trace_level``
    takes several), or None / an empty list to clear the field. Errors are Triton's: a
    ``trace_file`` is UNSUPPORTED (the protocol cannot choose where the server writes); a
    number that does not parse or is out of range, several levels with OFF, or a setting that
    is not Triton's is INVALID_ARG."""
    if "trace_file" in changes:
        raise unsupported("trace file location can not be updated through network protocol")
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if key == "trace_mode":
            values = [value] if isinstance(value, str) else value
            if values is None or (isinstance(values, list) and values in ([], [MODE])):
                continue  # what a GET answered, sent back: Triton's only mode
            raise unsupported("trace mode can not be updated through network protocol")
        field = _FIELD.get(key)
        if field is None:
            raise invalid_arg(
                f"unknown trace setting '{key}' (expected one of {', '.join(SETTING_NAMES)})"
            )
        if value is None or (isinstance(value, list) and not value):
            out[field] = _CLEAR
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            kind = "an array of strings" if key == "trace_level" else "a string"
            raise invalid_arg(f"expect {kind} for '{key}', got {json.dumps(value)}")
        if field == "level":
            out[field] = _parse_levels(value)
            continue
        if len(value) != 1:
            raise invalid_arg(f"expect only 1 value for '{key}'")
        low, high = (MIN_COUNT, INT32_MAX) if field == "count" else (0, UINT32_MAX)
        out[field] = _parse_int(value[0], key, low, high)
    return out


def _parse_levels(values: list[str]) -> int:
    level = LEVEL_OFF
    for text in values:
        if text == "OFF":
            if len(values) != 1:
                raise invalid_arg("Expect only one trace level 'OFF' is specified")
            return LEVEL_OFF
        bit = dict(LEVEL_NAMES).get(text)
        if bit is None:
            raise invalid_arg(
                f"Unable to parse 'trace_level', got: {text} (expected OFF, TIMESTAMPS or TENSORS)"
            )
        level |= bit
    return level


# ------------------------------------------------------------------------------------------
# Traces
# ------------------------------------------------------------------------------------------

_ids = itertools.count(1)  # 0 means "no parent", as in Triton
_failed_reports = [0]  # requests whose report failed (the first one is logged)


class _Group:
    """A sampled request's trace and its children's: written together once every one is
    released (tracer.cc's ``Trace``, which holds the streams of the traces it spawned)."""

    __slots__ = ("manager", "setting", "level", "traces", "holds", "lock")

    def __init__(self, manager: "TraceManager", setting: "_Setting") -> None:
        self.manager = manager
        self.setting = setting
        self.level = setting.values.level
        self.traces: list[Trace] = []
        self.holds = 0
        self.lock = threading.Lock()

    def add(self, trace: "Trace", holds: int = 1) -> None:
        with self.lock:
            self.traces.append(trace)
            self.holds += holds

    def release(self) -> None:
        with self.lock:
            self.holds -= 1
            if self.holds:
                return
        self.manager._finished(self)


class Trace:
    """One traced request (Triton's InferenceTrace): its id, its parent's (0: none), its
    activities. Thread-safe: the frontend and the core may add to it at the same time."""

    __slots__ = (
        "id",
        "parent_id",
        "model_name",
        "model_version",
        "request_id",
        "children",
        "_group",
        "_timestamps",
        "_tensors",
        "_ended",
        "_released",
    )

    def __init__(self, group: _Group, parent_id: int = 0, *, caller_holds: bool = False) -> None:
        self.id = next(_ids)
        self.parent_id = parent_id
        self.model_name: str | None = None  # set when the request ends
        self.model_version = -1
        self.request_id = ""
        self.children: list[Trace] = []  # the traces it spawned, once complete
        self._group = group
        self._timestamps: list[tuple[str, int]] = []
        self._tensors: list[dict] = []
        self._ended = False
        self._released = not caller_holds
        # Held by the core until the request is answered, and by its caller if it asked.
        group.add(self, 2 if caller_holds else 1)

    @property
    def level(self) -> int:
        return self._group.level

    def capture(self, name: str, ns: int | None = None) -> None:
        """Add a timestamp (Triton's Trace::CaptureTimestamp): ``ns`` from ``time.monotonic_ns``
        (now if not given). Kept only where the trace level includes TIMESTAMPS."""
        if self._group.level & TIMESTAMPS:
            self._timestamps.append((name, time.monotonic_ns() if ns is None else int(ns)))

    def captured(self, name: str) -> bool:
        """Whether a timestamp of that name was added."""
        return any(n == name for n, _ in self._timestamps)

    def spawn_child(self) -> "Trace":
        """A trace for a request this one makes (an ensemble step): written with this one."""
        return Trace(self._group, parent_id=self.id)

    def release(self) -> None:
        """The caller is done with the trace (``InferRequest.caller_releases_trace``): it is
        written once the core has answered the request, and every trace of its group is
        complete. Idempotent."""
        if self._released:
            return
        self._released = True
        self._group.release()

    # ---------------------------------------------------------------- the core's report
    def end_request(
        self, request: "InferRequest", response: "InferResponse | None", end_ns: int
    ) -> None:
        """Report the request's activities from the timestamps the core kept for its
        statistics, as it is answered (with ``response``, or an error when None)."""
        if self._ended:
            return
        self._ended = True
        try:
            self._report(request, response, end_ns)
        except Exception as exc:  # tracing never fails a request: its trace is cut short
            _log.log(
                logging.DEBUG if _failed_reports[0] else logging.WARNING,
                "cannot trace a request of model '%s': %s (further failures are logged "
                "at debug level)",
                request.model_name,
                exc,
            )
            _failed_reports[0] += 1
        self._group.release()  # the core's hold; a caller's is its own

    def _report(
        self, request: "InferRequest", response: "InferResponse | None", end_ns: int
    ) -> None:
        self.model_name = request.model_name
        self.model_version = (
            response.model_version if response is not None else request.model_version
        )
        self.request_id = request.id
        level = self._group.level
        if level & TIMESTAMPS:
            add = self._timestamps.append
            add(("REQUEST_START", request.arrival_ns))
            if request.queue_start_ns:
                add(("QUEUE_START", request.queue_start_ns))
            start, end = request.compute_start_ns, request.compute_end_ns
            if start and end >= start:
                # The backend measured its input and output phases inside [start, end].
                input_end = min(start + request.compute_input_ns, end)
                add(("COMPUTE_START", start))
                add(("COMPUTE_INPUT_END", input_end))
                add(("COMPUTE_OUTPUT_START", max(end - request.compute_output_ns, input_end)))
                add(("COMPUTE_END", end))
            add(("REQUEST_END", end_ns))
        if level & TENSORS:
            for name, array in request.inputs.items():
                self._tensors.append(_tensor_entry(self.id, "TENSOR_QUEUE_INPUT", name, array))
            if response is not None:
                for name, array in response.outputs.items():
                    self._tensors.append(
                        _tensor_entry(self.id, "TENSOR_BACKEND_OUTPUT", name, array)
                    )

    def to_json(self) -> str:
        """This trace, then its children, as Triton's JSON entries (the array's items): the
        model entry, each timestamp in time order, the tensors."""
        tid = self.id
        parts = []
        if self.model_name is not None:
            head = (
                f'{{"id":{tid},"model_name":{_json_name(self.model_name)},'
                f'"model_version":{int(self.model_version)}'
            )
            if self.request_id:
                head += f',"request_id":{json.dumps(self.request_id, ensure_ascii=False)}'
            if self.parent_id:
                head += f',"parent_id":{self.parent_id}'
            parts.append(head + "}")
        for name, ns in sorted(self._timestamps, key=_time_of):
            parts.append(f'{{"id":{tid},"timestamps":[{{"name":{_json_name(name)},"ns":{ns}}}]}}')
        parts.extend(
            json.dumps(t, separators=(",", ":"), ensure_ascii=False) for t in self._tensors
        )
        parts.extend(child.to_json() for child in self.children)
        return ",".join(p for p in parts if p)


_json_name = functools.lru_cache(maxsize=4096)(lambda name: json.dumps(name, ensure_ascii=False))
_time_of = operator.itemgetter(1)


def _tensor_entry(trace_id: int, activity: str, name: str, array) -> dict:
    """A TENSORS activity: the data as Triton writes it (comma-separated values, BYTES as
    quoted strings), its shape and data type."""
    array = np.asarray(array)
    if array.dtype == np.object_:
        data = ",".join(
            json.dumps(x.decode("utf-8", "backslashreplace") if isinstance(x, bytes) else str(x))
            for x in array.ravel().tolist()
        )
        dtype = "BYTES"
    else:
        values = array.ravel().tolist()
        if array.dtype == np.bool_:
            values = [int(v) for v in values]
        data = ",".join(map(str, values))
        dtype = from_numpy_dtype(array.dtype)
    return {
        "id": trace_id,
        "activity": activity,
        "tensor": {
            "name": name,
            "data": data,
            "shape": ",".join(str(int(d)) for d in array.shape),
            "dtype": dtype,
        },
    }


# ------------------------------------------------------------------------------------------
# Settings, files and the writer
# ------------------------------------------------------------------------------------------


class TraceFile:
    """Where the traces of the settings naming one path go (tracer.cc's TraceFile): the file
    itself, an array appended to and closed at the end, and ``<path>.<index>`` files of
    ``log_frequency`` traces each. Used by the writer thread only."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index = 0
        self._handle = None
        self._failed = False

    def append(self, traces: list["Trace"], manager: "TraceManager") -> None:
        try:
            first = self._handle is None
            if first:
                self._handle = open(self.path, "w", encoding="utf-8")
                self._handle.write("[")
            text = ",".join(trace.to_json() for trace in traces)
            self._handle.write(text if first else "," + text)
            manager._written(len(traces))
        except OSError as exc:
            self._error(manager, self.path, exc, len(traces))

    def flush(self, manager: "TraceManager") -> None:
        if self._handle is not None:
            try:
                self._handle.flush()
            except OSError as exc:
                self._error(manager, self.path, exc, 0)

    def save_indexed(self, traces: list["Trace"], manager: "TraceManager") -> None:
        path = f"{self.path}.{self._index}"
        self._index += 1
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write("[" + ",".join(trace.to_json() for trace in traces) + "]")
            manager._written(len(traces))
        except OSError as exc:
            self._error(manager, path, exc, len(traces))

    def close(self, manager: "TraceManager") -> None:
        if self._handle is None:
            return
        try:
            self._handle.write("]")
            self._handle.close()
        except OSError as exc:
            self._error(manager, self.path, exc, 0)
        self._handle = None

    def _error(self, manager: "TraceManager", path: str, exc: OSError, lost: int) -> None:
        manager._file_error(lost)
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass
            self._handle = None  # the next append starts the file again
        level = logging.DEBUG if self._failed else logging.ERROR
        self._failed = True
        _log.log(
            level,
            "cannot write trace file '%s': %s; %d trace(s) lost (inference goes "
            "on; further failures of this file are counted, not logged)",
            path,
            exc.strerror or exc,
            lost,
        )


class _Writer:
    """The one thread that formats and writes traces, fed through a bounded queue. It wakes
    every WRITER_INTERVAL_S, or once WRITER_BATCH items wait, and writes what waits at once:
    a traced request costs no thread wake-up and no write of its own."""

    def __init__(self, manager: "TraceManager") -> None:
        self._manager = manager
        self._work: collections.deque = collections.deque()
        self._cv = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stopped = False

    def submit(self, work: tuple, *, urgent: bool = False) -> bool:
        """Queue ``work``, (file, traces, indexed) or (file, None, None) to close the file;
        False when the queue is full or the writer stopped."""
        with self._cv:
            if self._stopped or len(self._work) >= WRITER_QUEUE:
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
                self._thread.start()
            self._work.append(work)
            if urgent or len(self._work) >= WRITER_BATCH:
                self._cv.notify()
        return True

    def _run(self) -> None:
        stopping = False
        while not stopping:
            with self._cv:
                if not self._work and not self._stopped:
                    self._cv.wait(WRITER_INTERVAL_S)
                work, self._work = self._work, collections.deque()
                stopping = self._stopped
            touched = set()
            for file, traces, indexed in work:
                try:
                    if traces is None:
                        file.close(self._manager)
                    elif indexed:
                        file.save_indexed(traces, self._manager)
                    else:
                        file.append(traces, self._manager)
                        touched.add(file)
                except Exception:  # a defect of ours: log it, keep writing the others
                    _log.exception("trace writer")
            for file in touched:
                file.flush(self._manager)

    def stop(self, timeout: float) -> None:
        """Write everything queued, then end the thread."""
        with self._cv:
            self._stopped = True
            thread = self._thread
            self._cv.notify()
        if thread is not None:
            thread.join(timeout)


class _Setting:
    """One trace setting in force (tracer.cc's TraceSetting): its values, which fields were
    given (the others mirror the level above), and its sampling and writing state."""

    def __init__(self, values: TraceConfig, specified: frozenset[str], file: TraceFile) -> None:
        self.values = values
        self.specified = specified
        self.file = file
        self.reason = values.invalid_reason()
        self._lock = threading.Lock()
        self.count = values.count  # traces left (-1: no limit)
        self._sample = 0
        self._created = 0
        self._collected = 0
        self._in_flight = 0
        self._stream: list[Trace] = []  # traces kept for an indexed file, or the end
        self._retired = False
        # Triton keeps traces in memory until a count runs out or the setting ends; without a
        # count or a log frequency they are appended to the file as they come (see the module
        # docstring).
        self._append = values.log_frequency == 0 and values.count == -1

    @property
    def valid(self) -> bool:
        return not self.reason and self.count != 0

    @property
    def pending(self) -> bool:
        """Traces in flight or kept, not yet written."""
        return self._in_flight > 0 or bool(self._stream)

    def current(self) -> TraceConfig:
        return replace(self.values, count=self.count)

    def sample(self) -> bool:
        """Whether the next request is traced (TraceSetting::SampleTrace)."""
        with self._lock:
            if not self.valid:
                return False
            self._sample += 1
            if self._sample % self.values.rate:
                return False
            if self.count > 0:
                self.count -= 1
                self._created += 1
            self._in_flight += 1
            return True

    def finished(self, trace: "Trace", manager: "TraceManager") -> None:
        """A trace of this setting is complete, with its children (TraceSetting::WriteTrace)."""
        with self._lock:
            self._in_flight -= 1
            self._collected += 1
            if self._append and not self._retired:
                batch, indexed = [trace], None
            else:
                self._stream.append(trace)
                batch, indexed = None, None
                lf = self.values.log_frequency
                if (self.count == 0 and self._collected >= self._created) or (
                    lf and len(self._stream) >= lf
                ):
                    batch, self._stream, indexed = self._stream, [], True
                elif self._retired and self._in_flight <= 0:
                    batch, self._stream, indexed = self._stream, [], lf != 0
        if batch:
            manager._save(self.file, batch, bool(indexed))

    def retire(self, manager: "TraceManager", *, force: bool = False) -> None:
        """Replaced or stopping: its kept traces are written once the last one in flight is
        (TraceSetting's destructor)."""
        with self._lock:
            self._retired = True
            if (self._in_flight > 0 and not force) or not self._stream:
                return
            batch, self._stream = self._stream, []
        manager._save(self.file, batch, self.values.log_frequency != 0, urgent=force)


# ------------------------------------------------------------------------------------------
# The manager
# ------------------------------------------------------------------------------------------


@dataclass
class TraceStatistics:
    sampled: int = 0  # requests given a trace
    written: int = 0  # traces written to a file
    file_errors: int = 0  # failed writes of a trace file
    dropped: int = 0  # traces lost: the writer was behind, or a write failed


class TraceManager:
    """The server's trace settings and traces (tracer.cc's TraceManager).

    ``config`` gives the global settings at start; :meth:`update_setting` changes them, or a
    model's. :meth:`sample` decides whether a request of a model is traced. :meth:`close`
    writes what is kept and closes the files (the server calls it when it stops)."""

    def __init__(self, config: TraceConfig | None = None) -> None:
        config = config or TraceConfig()
        self._default = config
        self._files: dict[str, TraceFile] = {}
        self._lock = threading.Lock()  # updates
        self._stats_lock = threading.Lock()
        self._stats = TraceStatistics()
        self._writer = _Writer(self)
        self._closed = False
        self._global = _Setting(config, frozenset(), self._file(config.file))
        self._models: dict[str, _Setting] = {}
        self._retired: list[_Setting] = []
        #: Whether any setting may trace a request; False costs a request nothing else.
        self.active = self._global.valid
        if config.level != LEVEL_OFF and self._global.reason:
            _log.warning(
                "tracing is set to %s but %s: no request is traced",
                "+".join(level_names(config.level)),
                self._global.reason,
            )

    def _file(self, path: str) -> TraceFile:
        file = self._files.get(path)
        if file is None:
            file = self._files[path] = TraceFile(path)
        return file

    # ---------------------------------------------------------------- settings
    def get_setting(self, model_name: str = "") -> dict[str, Any]:
        """The setting in force for a model ('' or one without its own: the global one), in
        the protocol's names and string values."""
        setting = self._models.get(model_name, self._global) if model_name else self._global
        values = setting.current()
        return {
            "trace_level": level_names(values.level),
            "trace_rate": str(values.rate),
            "trace_count": str(values.count),
            "log_frequency": str(values.log_frequency),
            "trace_file": values.file,
            "trace_mode": MODE,
        }

    def update_setting(self, model_name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a client's changes to the global setting ('' ) or a model's, with Triton's
        semantics (TraceManager::UpdateTraceSetting), and return the setting now in force.
        Nothing changes when any resulting setting would be invalid."""
        new = parse_setting_changes(changes)
        with self._lock:
            if self._closed:
                raise invalid_arg("tracing has stopped: the server is stopping")
            updates: dict[str, _Setting | None] = {}
            if model_name:
                updates[model_name] = self._derive(
                    self._models.get(model_name), self._global.current(), new, model=True
                )
            else:
                glob = self._derive(self._global, self._default, new, model=False)
                updates[""] = glob
                # Model settings mirror the global fields they do not give.
                for name, setting in self._models.items():
                    updates[name] = self._derive(setting, glob.current(), {}, model=True)
            for setting in updates.values():
                if setting is not None and setting.values.level != LEVEL_OFF and setting.reason:
                    raise invalid_arg(f"Attempting to set invalid trace setting :{setting.reason}")
            retired = []
            for name, setting in updates.items():
                if name == "":
                    retired.append(self._global)
                    self._global = setting
                else:
                    old = self._models.pop(name, None)
                    if old is not None:
                        retired.append(old)
                    if setting is not None:
                        self._models[name] = setting
            self._refresh_active()
            # Replaced settings whose traces are still in flight: written at close if not before.
            self._retired = [s for s in self._retired + retired if s.pending]
        for old in retired:
            old.retire(self)
        return self.get_setting(model_name)

    def _derive(
        self, current: _Setting | None, fallback: TraceConfig, new: dict[str, Any], *, model: bool
    ) -> _Setting | None:
        """The setting that replaces ``current`` (UpdateTraceSettingInternal): a field takes
        its new value, else the current one if it was given, else the fallback's. A model
        setting that gives no field is removed (None)."""
        values: dict[str, Any] = {}
        specified = set()
        for field in ("level", "rate", "count", "log_frequency"):
            change = new.get(field)
            if change is _CLEAR:
                values[field] = getattr(fallback, field)
                continue
            if change is not None:
                values[field] = change
            elif current is not None and field in current.specified:
                values[field] = getattr(current.current(), field)
            else:
                values[field] = getattr(fallback, field)
                continue
            specified.add(field)
        if model and not specified:
            return None
        config = TraceConfig(file=fallback.file, **values)
        return _Setting(config, frozenset(specified), self._file(config.file))

    def _refresh_active(self) -> None:
        self.active = not self._closed and (
            self._global.valid or any(s.valid for s in self._models.values())
        )

    # ---------------------------------------------------------------- traces
    def sample(self, model_name: str, *, caller_holds: bool = False) -> Trace | None:
        """A trace for the next request of ``model_name``, or None when it is not traced. The
        core holds it until it answers the request (``Trace.end_request``); with
        ``caller_holds`` the caller does too, until it calls ``Trace.release``."""
        setting = self._models.get(model_name, self._global)
        if not setting.sample():
            if setting.count == 0:
                with self._lock:
                    self._refresh_active()
            return None
        with self._stats_lock:
            self._stats.sampled += 1
        if setting.count == 0:
            with self._lock:
                self._refresh_active()
        return Trace(_Group(self, setting), caller_holds=caller_holds)

    def _finished(self, group: _Group) -> None:
        root = group.traces[0]
        root.children, group.traces = group.traces[1:], []  # no cycle left: group, traces
        group.setting.finished(root, self)

    def _save(
        self, file: TraceFile, batch: list[Trace], indexed: bool, *, urgent: bool = False
    ) -> None:
        if not self._writer.submit((file, batch, indexed), urgent=urgent or indexed):
            with self._stats_lock:
                self._stats.dropped += len(batch)
            _log.debug("trace writer is behind: %d trace(s) dropped", len(batch))

    def _written(self, n: int) -> None:
        with self._stats_lock:
            self._stats.written += n

    def _file_error(self, lost: int) -> None:
        with self._stats_lock:
            self._stats.file_errors += 1
            self._stats.dropped += lost

    def statistics(self) -> TraceStatistics:
        with self._stats_lock:
            return replace(self._stats)

    def close(self, timeout: float = 10.0) -> None:
        """Stop tracing: write every kept trace, close the files (each array gets its ``]``)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.active = False
            settings = [*self._retired, self._global, *self._models.values()]
        for setting in settings:
            setting.retire(self, force=True)
        for file in list(self._files.values()):
            self._writer.submit((file, None, None))
        self._writer.stop(timeout)


__all__ = [
    "TraceConfig",
    "TraceManager",
    "Trace",
    "TraceStatistics",
    "parse_trace_config",
    "parse_setting_changes",
    "level_names",
    "LEVEL_OFF",
    "TIMESTAMPS",
    "TENSORS",
]
