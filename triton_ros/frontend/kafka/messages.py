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

Header names are matched without regard to case; values are UTF-8.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ...core.errors import TritonRosError, invalid_arg
from ...core.infer_request import InferRequest, InferResponse
from .. import http_codec

Headers = list[tuple[str, bytes]]

CORRELATION_ID = "correlation-id"
CORRELATION_HEADERS = (CORRELATION_ID, "correlation_id", "kafka_correlationid")
REPLY_TOPIC = "reply-topic"
REPLY_TOPIC_HEADERS = (REPLY_TOPIC, "reply_topic", "reply-to", "kafka_replytopic")
MODEL_NAME = "model-name"
MODEL_NAME_HEADERS = (MODEL_NAME, "model_name")
MODEL_VERSION = "model-version"
MODEL_VERSION_HEADERS = (MODEL_VERSION, "model_version")
CONTENT_LENGTH = http_codec.INFER_HEADER          # inference-header-content-length
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

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_DIGITS = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True)
class Record:
    """A record to produce."""

    topic: str
    value: bytes
    key: bytes | None
    headers: Headers
    kind: str = "reply"          # reply, error or dead_letter


@dataclass(frozen=True)
class Routing:
    """Where a request's reply goes: its topic ("" when none), the correlation header(s) to echo
    and the key."""

    reply_topic: str
    correlation: Headers
    key: bytes | None


def _header(headers: Sequence[tuple[str, bytes | None]] | None, names: tuple[str, ...]
            ) -> tuple[str, bytes] | None:
    """The first header whose lower-cased name is in ``names``."""
    for name, value in headers or ():
        if name.lower() in names:
            return name, value if value is not None else b""
    return None


def _text(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_arg(f"the '{what}' header is not UTF-8") from None


def read_routing(headers: Sequence[tuple[str, bytes | None]] | None, key: bytes | None,
                 default_reply_topic: str) -> Routing:
    """The reply topic and correlation of a request record; INVALID_ARG for an unreadable
    reply-topic header."""
    correlation = [(n, v if v is not None else b"") for n, v in headers or ()
                   if n.lower() in CORRELATION_HEADERS]
    if correlation and correlation[0][0] != CORRELATION_ID:
        correlation.append((CORRELATION_ID, correlation[0][1]))   # also under our own name
    reply = _header(headers, REPLY_TOPIC_HEADERS)
    topic = default_reply_topic
    if reply is not None:
        topic = _text(reply[1], reply[0]).strip()
        if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
            raise invalid_arg(f"the '{reply[0]}' header does not name a valid Kafka topic")
    return Routing(topic, correlation, key)


def header_length(headers: Sequence[tuple[str, bytes | None]] | None,
                  size: int) -> int | None:
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
        raise invalid_arg(f"the '{header_name}' header ('{from_header}') and '{field}' "
                          f"('{from_body}') differ")
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


def decode_request(value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None
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
    binary = view[len(json_part):]
    return http_codec.decode_infer_header(name, version, header, binary)


def _reply_headers(routing: Routing, status: str, model_name: str, model_version: str,
                   server_id: str) -> Headers:
    headers: Headers = list(routing.correlation)
    headers.append((STATUS, status.encode()))
    if server_id:
        headers.append((SERVER_ID, server_id.encode()))
    if model_name:
        headers.append((MODEL_NAME, model_name.encode()))
    if model_version:
        headers.append((MODEL_VERSION, model_version.encode()))
    return headers


def reply(routing: Routing, response: InferResponse, plan: http_codec.OutputPlan,
          server_id: str = "") -> Record:
    """The reply record of a served request (INVALID_ARG when an output cannot be written as
    asked, e.g. FP16 as JSON)."""
    chunks, json_length = http_codec.encode_infer_response(response, plan)
    headers = _reply_headers(routing, "OK", response.model_name, str(response.model_version),
                             server_id)
    if json_length is not None:
        headers.append((CONTENT_LENGTH, str(json_length).encode()))
    return Record(routing.reply_topic, b"".join(chunks), routing.key, headers)


def error_reply(routing: Routing, error: TritonRosError, model_name: str = "",
                model_version: int = -1, server_id: str = "") -> Record:
    """The reply record of a failed request: ``{"error": ...}`` and Triton's status."""
    return Record(routing.reply_topic, http_codec.error_body(error.message), routing.key,
                  _reply_headers(routing, error.code.name, model_name,
                                 str(model_version) if model_version >= 0 else "", server_id),
                  "error")


def dead_letter(topic: str, value: bytes | None, key: bytes | None,
                headers: Sequence[tuple[str, bytes | None]] | None, reason: str,
                error: TritonRosError, source_topic: str, partition: int,
                offset: int) -> Record:
    """The record, unchanged, with why it was not served and where it came from."""
    out: Headers = [(n, v if v is not None else b"") for n, v in headers or ()]
    out += [(DLQ_REASON, reason.encode()), (DLQ_CODE, error.code.name.encode()),
            (DLQ_MESSAGE, error.message.encode("utf-8", errors="replace")),
            (DLQ_TOPIC, source_topic.encode()), (DLQ_PARTITION, str(partition).encode()),
            (DLQ_OFFSET, str(offset).encode())]
    return Record(topic, value or b"", key, out, "dead_letter")


def header_dict(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Headers as text by lower-cased name (the last of a repeated name): for clients."""
    return {n.lower(): (v or b"").decode("utf-8", errors="replace") for n, v in headers or ()}

