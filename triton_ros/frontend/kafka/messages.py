"""The Kafka frontend's message conventions: a KServe v2 inference request in a Kafka record, its
reply, its error and its dead letter (docs/kafka.md gives the same as a reference).

A request record's value is the KServe v2 inference request of the HTTP/REST protocol: JSON, or
JSON followed by binary tensor data (Triton's binary tensor extension) with the JSON's size in the
header ``inference-header-content-length``, exactly as an HTTP body; it is read by the HTTP
codec (``http_codec.decode_infer_header``), so every field, limit and error message is the HTTP
endpoint's. The model is named by the headers ``model-name`` / ``model-version`` or by the JSON
fields ``model_name`` / ``model_version`` (both given: they must agree). Request-reply headers:
``correlation-id`` (also accepted: ``correlation_id``, Spring's ``kafka_correlationId``) is echoed
on the reply as received; ``reply-topic`` (also ``reply_topic``, ``reply-to``, Spring's
``kafka_replyTopic``) names the reply's topic, else the server's ``--kafka-reply-topic``. The
reply is keyed by the request's key, so replies to one key keep their order on one partition.

A reply's value is the HTTP endpoint's response body (JSON, or JSON + binary outputs with
``inference-header-content-length``); an error reply's value is ``{"error": "<message>"}``. Every
reply carries ``triton-status``: ``OK`` or Triton's status code (``INVALID_ARG``, ``NOT_FOUND``,
``UNAVAILABLE``, ``INTERNAL``...), ``triton-server-id`` (the server's ``--id``), and
``model-name`` / ``model-version`` when known.

A record that cannot be read goes to the dead-letter topic unchanged (key, value, headers) with
``triton-dlq-reason`` (``malformed``, ``too_large``, ``no_reply_topic``, ``undeliverable``),
``triton-error-code``, ``triton-error-message`` and where it came from
(``triton-source-topic``, ``-partition``, ``-offset``); when its reply topic is known, an error
reply is sent as well, so a waiting client learns at once.

Header names are matched without regard to case. A header the server reads (the model, the
reply topic, the JSON's length) must be UTF-8 text, not null, and given once (or repeated with
one value); the others, correlation ids included, may hold any bytes or null. A record has at
most :data:`MAX_HEADERS` headers of :data:`MAX_HEADER_BYTES` in all.

Reading: :func:`read_record` is the one step that reads a consumed record (confluent-kafka's
``Message``): its key, value and headers become plain data (:class:`Incoming`), and whatever
cannot be read becomes the record's ``problem`` (INVALID_ARG) instead of an exception, so the
record still goes to the dead-letter topic. Nothing after it touches the client's message.
"""

from __future__ import annotations

import gc
import operator
import re
from dataclasses import dataclass
from typing import Sequence

from ...core.errors import TritonRosError, invalid_arg
from ...core.infer_request import InferRequest, InferResponse
from ..http import http_codec

Headers = list[tuple[str, "bytes | None"]]  # a header's value may be null

CORRELATION_ID = "correlation-id"
CORRELATION_HEADERS = (CORRELATION_ID, "correlation_id", "kafka_correlationid")
REPLY_TOPIC = "reply-topic"
REPLY_TOPIC_HEADERS = (REPLY_TOPIC, "reply_topic", "reply-to", "kafka_replytopic")
MODEL_NAME = "model-name"
MODEL_NAME_HEADERS = (MODEL_NAME, "model_name")
MODEL_VERSION = "model-version"
MODEL_VERSION_HEADERS = (MODEL_VERSION, "model_version")
CONTENT_LENGTH = http_codec.INFER_HEADER  # inference-header-content-length
STATUS = "triton-status"
SERVER_ID = "triton-server-id"
DLQ_REASON = "triton-dlq-reason"
DLQ_CODE = "triton-error-code"
DLQ_MESSAGE = "triton-error-message"
DLQ_TOPIC = "triton-source-topic"
DLQ_PARTITION = "triton-source-partition"
DLQ_OFFSET = "triton-source-offset"

# Dead-letter reasons (also the ``reason`` label of the failure counter)
MALFORMED = "malformed"
TOO_LARGE = "too_large"
NO_REPLY_TOPIC = "no_reply_topic"
UNDELIVERABLE = "undeliverable"

# The most headers, and bytes of header names and values, that a request record may have (as
# HTTP servers bound a request's header fields): beyond them it goes to the dead-letter topic.
MAX_HEADERS = 100
MAX_HEADER_BYTES = 64 * 1024

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_DIGITS = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True)
class Record:
    """A record to produce."""

    topic: str
    value: bytes | None
    key: bytes | None
    headers: Headers
    kind: str = "reply"  # reply, error or dead_letter
    bare: bool = False  # a dead letter without the record's value and headers


@dataclass(frozen=True)
class Routing:
    """Where a request's reply goes: its topic ("" when none), the correlation header(s) to echo
    and the key."""

    reply_topic: str
    correlation: Headers
    key: bytes | None


@dataclass(frozen=True)
class Incoming:
    """A consumed record as :func:`read_record` read it. ``headers`` is None when they could not
    be read; ``size`` counts key, value and headers; ``problem``: why the record cannot be
    served (it goes to the dead-letter topic), None when it could be read."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    size: int
    problem: TritonRosError | None = None


def read_record(message, topic: str, partition: int, offset: int) -> Incoming:
    """The record of a consumed ``message``, read in one step that never raises: what cannot be
    read (a header name that is not UTF-8, too many or too large headers, any exception of the
    client library) is the record's ``problem``."""
    key = value = headers = None
    header_bytes = 0
    problem = None
    try:
        key = _optional_bytes(message.key(), "key")
        value = _optional_bytes(message.value(), "value")
        headers = _read_headers(message)
        header_bytes = sum(len(name.encode()) + len(v or b"") for name, v in headers)
        if len(headers) > MAX_HEADERS:
            problem = invalid_arg(
                f"the record has {len(headers)} headers, more than the "
                f"{MAX_HEADERS} a request may have"
            )
        elif header_bytes > MAX_HEADER_BYTES:
            problem = invalid_arg(
                f"the record's headers are {header_bytes} bytes, more than the "
                f"{MAX_HEADER_BYTES} a request may have"
            )
    except Exception as exc:  # whatever else the record makes the client library do
        problem = unreadable(exc)
    size = len(key or b"") + len(value or b"") + header_bytes
    return Incoming(topic, partition, offset, key, value, headers, size, problem)


def unreadable(exc: BaseException) -> TritonRosError:
    """Why a record cannot be read: the error itself if typed, else INVALID_ARG naming it."""
    if isinstance(exc, TritonRosError):
        return exc
    return invalid_arg(f"the record cannot be read: {type(exc).__name__}: {exc}")


def _optional_bytes(data, what: str) -> bytes | None:
    if data is not None and type(data) is not bytes:
        raise invalid_arg(f"the record's {what} cannot be read (a {type(data).__name__})")
    return data


def _read_headers(message) -> Headers:
    """A message's headers as (name, value) pairs, checked before anything touches them.

    confluent-kafka's ``Message.headers()`` builds each pair's name with a strict UTF-8 decode;
    for a name that is not UTF-8 it leaves the pair's name slot empty (NULL) and returns the
    list with the decode error still set. Called from Python bytecode, that error surfaces as a
    SystemError there, or (once the interpreter has specialised the call site) in whichever
    call comes next, and reading the empty slot crashes the interpreter. So the call is made
    through ``operator.methodcaller``, whose C call path always raises a pending error at once,
    and ``gc.get_referents`` (which lists a tuple's filled slots without reading empty ones)
    checks every pair before it is read."""
    try:
        raw = _HEADERS(message)
        filled = None if raw is None else len(gc.get_referents(raw))
    except SystemError as exc:  # chained: one per name that is not UTF-8
        cause: BaseException | None = exc
        for _ in range(MAX_HEADERS):
            if cause is None or isinstance(cause, UnicodeDecodeError):
                break
            cause = cause.__context__ or cause.__cause__
        if isinstance(cause, UnicodeDecodeError):
            raise _name_not_utf8() from None
        raise
    if raw is None:
        return []
    if type(raw) is not list or filled != len(raw):
        raise invalid_arg("the record's headers cannot be read")
    headers: Headers = []
    for pair in raw:
        if type(pair) is not tuple or len(pair) != 2 or len(gc.get_referents(pair)) != 2:
            raise _name_not_utf8()
        name, value = pair
        if type(name) is not str or (value is not None and type(value) is not bytes):
            raise invalid_arg("the record's headers cannot be read")
        headers.append((name, value))
    return headers


_HEADERS = operator.methodcaller("headers")


def _name_not_utf8() -> TritonRosError:
    return invalid_arg(
        "a header name is not UTF-8 (Kafka header names are strings): the "
        "record's headers cannot be read, its dead letter carries its key and "
        "value only"
    )


def _header(
    headers: Sequence[tuple[str, bytes | None]] | None, names: tuple[str, ...]
) -> tuple[str, bytes] | None:
    """The header whose lower-cased name is in ``names`` (None: none); INVALID_ARG when it is
    null, or given more than once with different values."""
    found = [(name, value) for name, value in headers or () if name.lower() in names]
    if not found:
        return None
    for name, value in found:
        if value is None:
            raise invalid_arg(f"the '{name}' header is null")
    name, value = found[0]
    if any(other != value for _, other in found[1:]):
        raise invalid_arg(f"the '{name}' header is given {len(found)} times with different values")
    return name, value


def _text(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_arg(f"the '{what}' header is not UTF-8") from None


def read_routing(
    headers: Sequence[tuple[str, bytes | None]] | None, key: bytes | None, default_reply_topic: str
) -> Routing:
    """The reply topic and correlation of a request record; INVALID_ARG for an unreadable
    reply-topic header."""
    correlation: Headers = []  # the first of each name, as received (null too)
    for n, v in headers or ():
        if n.lower() in CORRELATION_HEADERS and all(n != c for c, _ in correlation):
            correlation.append((n, v))
    if correlation and correlation[0][0] != CORRELATION_ID:
        correlation.append((CORRELATION_ID, correlation[0][1]))  # also under our own name
    reply = _header(headers, REPLY_TOPIC_HEADERS)
    topic = default_reply_topic
    if reply is not None:
        topic = _text(reply[1], reply[0]).strip()
        if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
            raise invalid_arg(f"the '{reply[0]}' header does not name a valid Kafka topic")
    return Routing(topic, correlation, key)


def header_length(headers: Sequence[tuple[str, bytes | None]] | None, size: int) -> int | None:
    """The JSON part's size from ``inference-header-content-length`` (None: all JSON)."""
    found = _header(headers, (CONTENT_LENGTH,))
    if found is None:
        return None
    text = found[1].decode("ascii", errors="replace").strip()
    if not _DIGITS.fullmatch(text):
        raise invalid_arg(f"Unable to parse Inference-Header-Content-Length, got: {text}")
    value = int(text)
    if value <= 0 or value > size:
        raise invalid_arg(f"inference header size should be in range (0, {size}], got: {text}")
    return value


def _agreed(headers, names: tuple[str, ...], body: dict, field: str, *, number: bool) -> str:
    """What a header (any of ``names``) or a JSON field says (both given: they must agree); ""
    when neither. ``number``: the field may also be a JSON integer."""
    found = _header(headers, names)
    header_name = found[0] if found else names[0]
    from_header = _text(found[1], header_name).strip() if found else ""
    from_body = body.get(field, "")
    if number and isinstance(from_body, int) and not isinstance(from_body, bool):
        from_body = str(from_body)
    if not isinstance(from_body, str):
        raise invalid_arg(f"Unable to parse '{field}': expected a string")
    if from_header and from_body and from_header != from_body:
        raise invalid_arg(
            f"the '{header_name}' header ('{from_header}') and '{field}' ('{from_body}') differ"
        )
    return from_header or from_body


def _model(headers, header: dict) -> tuple[str, int]:
    name = _agreed(headers, MODEL_NAME_HEADERS, header, "model_name", number=False)
    if not name:
        raise invalid_arg(f"no model named: give the '{MODEL_NAME}' header or 'model_name'")
    version = _agreed(headers, MODEL_VERSION_HEADERS, header, "model_version", number=True)
    if not version:
        return name, -1
    if not _DIGITS.fullmatch(version):
        raise invalid_arg(f"model version must be a non-negative integer, got '{version}'")
    return name, int(version)


def decode_request(
    value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None
) -> tuple[InferRequest, http_codec.OutputPlan]:
    """The inference request of a record's value and headers; INVALID_ARG naming what is
    wrong. Shared memory regions are not reachable over Kafka."""
    if not value:
        raise invalid_arg("the message has no value: expected a KServe v2 inference request")
    view = memoryview(value)
    length = header_length(headers, len(view))
    json_part = view if length is None else view[:length]
    header = http_codec.parse_json_object(json_part, "inference", allow_empty=False)
    name, version = _model(headers, header)
    binary = view[len(json_part) :]
    return http_codec.decode_infer_header(name, version, header, binary)


def _reply_headers(
    routing: Routing, status: str, model_name: str, model_version: str, server_id: str
) -> Headers:
    headers: Headers = list(routing.correlation)
    headers.append((STATUS, status.encode()))
    if server_id:
        headers.append((SERVER_ID, server_id.encode()))
    if model_name:
        headers.append((MODEL_NAME, model_name.encode()))
    if model_version:
        headers.append((MODEL_VERSION, model_version.encode()))
    return headers


def reply(
    routing: Routing, response: InferResponse, plan: http_codec.OutputPlan, server_id: str = ""
) -> Record:
    """The reply record of a served request (INVALID_ARG when an output cannot be written as
    asked, e.g. FP16 as JSON)."""
    chunks, json_length = http_codec.encode_infer_response(response, plan)
    headers = _reply_headers(
        routing, "OK", response.model_name, str(response.model_version), server_id
    )
    if json_length is not None:
        headers.append((CONTENT_LENGTH, str(json_length).encode()))
    return Record(routing.reply_topic, b"".join(chunks), routing.key, headers)


def error_reply(
    routing: Routing,
    error: TritonRosError,
    model_name: str = "",
    model_version: int = -1,
    server_id: str = "",
) -> Record:
    """The reply record of a failed request: ``{"error": ...}`` and Triton's status."""
    return Record(
        routing.reply_topic,
        http_codec.error_body(error.message),
        routing.key,
        _reply_headers(
            routing,
            error.code.name,
            model_name,
            str(model_version) if model_version >= 0 else "",
            server_id,
        ),
        "error",
    )


def dead_letter(
    topic: str, record: Incoming, reason: str, error: TritonRosError, *, bare: bool = False
) -> Record:
    """The record, unchanged (key, value, the headers that could be read), with why it was not
    served and where it came from; ``bare``: its key only (the full one was refused)."""
    out: Headers = [] if bare else list(record.headers or ())
    out += [
        (DLQ_REASON, reason.encode()),
        (DLQ_CODE, error.code.name.encode()),
        (DLQ_MESSAGE, error.message.encode("utf-8", errors="replace")),
        (DLQ_TOPIC, record.topic.encode()),
        (DLQ_PARTITION, str(record.partition).encode()),
        (DLQ_OFFSET, str(record.offset).encode()),
    ]
    return Record(topic, None if bare else record.value, record.key, out, "dead_letter", bare)


def header_dict(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Headers as text by lower-cased name (the last of a repeated name): for clients."""
    return {n.lower(): (v or b"").decode("utf-8", errors="replace") for n, v in headers or ()}
