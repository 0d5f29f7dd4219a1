"""The wire between the server and a Python backend stub process.

Control messages are JSON objects in length-prefixed frames over a Unix socket pair. Tensor data
never goes through the socket: the sender writes every tensor of a message into one fresh shared
memory segment (a file in /dev/shm) and sends its name with each tensor's offset, shape and data
type; the receiver maps the segment and wraps numpy arrays around it. That is one copy per
direction (into the segment) and none on the receiving side; the mapping stays alive as long as
any array uses it. BYTES tensors travel in Triton's length-prefixed serialization.

Segment names carry the instance's prefix, so that whatever a crash leaves behind is removed by
:func:`sweep` when the instance restarts or closes. The receiver of a segment unlinks it as soon
as it is mapped; the creator unlinks it if the message was never received.
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import re
import secrets
import select
import socket
import struct
import tempfile
import time
from typing import Any, Iterable, Mapping

import numpy as np

from triton_ros.core.datatypes import (
    deserialize_bytes_tensor,
    from_numpy_dtype,
    serialize_bytes_tensor,
    to_numpy_dtype,
)

SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
SEGMENT_PREFIX = "triton_ros_py_"
_NAME_RE = re.compile(r"^triton_ros_py_[A-Za-z0-9_]+$")
_ALIGN = 64
_HEADER = struct.Struct("<I")
MAX_FRAME = 64 * 1024 * 1024  # control frames are small; anything larger is a broken peer
_counter = itertools.count()


class ChannelClosed(Exception):
    """The peer closed the socket or died."""


class ChannelTimeout(Exception):
    """No frame arrived before the deadline."""


def new_prefix(tag: str) -> str:
    """A segment-name prefix unique to one stub process of one instance."""
    safe = re.sub(r"[^A-Za-z0-9]", "_", tag)[:40]
    return f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}_{safe}_"


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------


def encode_frame(message: Mapping[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), default=str).encode("utf-8")
    return _HEADER.pack(len(body)) + body


def send_frame(sock: socket.socket, message: Mapping[str, Any]) -> None:
    try:
        sock.sendall(encode_frame(message))
    except OSError as exc:
        raise ChannelClosed(f"send failed: {exc}") from None


def recv_frame(sock: socket.socket, deadline: float | None = None) -> dict:
    """One message; ChannelTimeout at the deadline (time.monotonic()), ChannelClosed at EOF."""
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if length > MAX_FRAME:
        raise ChannelClosed(f"frame of {length} bytes exceeds the limit")
    return json.loads(_recv_exact(sock, length, deadline))


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout()
            readable, _, _ = select.select([sock], [], [], remaining)
            if not readable:
                raise ChannelTimeout()
        try:
            chunk = sock.recv(min(n - got, 1 << 20))
        except OSError as exc:
            raise ChannelClosed(f"receive failed: {exc}") from None
        if not chunk:
            raise ChannelClosed("peer closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------------------------
# Shared memory segments
# --------------------------------------------------------------------------------------------


def _path(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid shared memory segment name {name!r}")
    return os.path.join(SHM_DIR, name)


def create_segment(prefix: str, size: int) -> tuple[str, mmap.mmap]:
    """A new segment of ``size`` bytes, mapped. Space is reserved up front so that a full
    /dev/shm is an error here rather than a SIGBUS while writing."""
    name = f"{prefix}{next(_counter)}"
    path = _path(name)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno == 28:  # ENOSPC
                raise MemoryError(
                    f"not enough shared memory in {SHM_DIR} for {size} bytes of "
                    f"tensors (enlarge /dev/shm, e.g. docker --shm-size)"
                ) from None
            os.ftruncate(fd, size)  # a file system without fallocate
        mapping = mmap.mmap(fd, size)
    except BaseException:
        os.close(fd)
        unlink(name)
        raise
    os.close(fd)
    return name, mapping


def open_segment(name: str) -> mmap.mmap:
    fd = os.open(_path(name), os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def unlink(name: str | None) -> None:
    if not name:
        return
    try:
        os.unlink(_path(name))
    except (FileNotFoundError, ValueError):
        pass


def sweep(prefix: str) -> None:
    """Remove every segment left with this prefix (after a crash, at close)."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            unlink(name)


# --------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------


def pack_tensors(
    prefix: str, groups: Iterable[Iterable[tuple[str, np.ndarray]]]
) -> tuple[str | None, list[list[dict]]]:
    """Write groups of (name, array) (one group per request or response) into one new segment.
    Returns the segment name (None when there is no data) and per group the tensor descriptors."""
    layout: list[list[tuple[dict, np.ndarray | bytes]]] = []
    size = 0
    for group in groups:
        entries = []
        for name, array in group:
            datatype = from_numpy_dtype(array.dtype)
            data: np.ndarray | bytes
            if datatype == "BYTES":
                data = serialize_bytes_tensor(array)
                nbytes = len(data)
            else:
                data = array
                nbytes = array.nbytes
            size = (size + _ALIGN - 1) // _ALIGN * _ALIGN
            entries.append(
                (
                    {
                        "name": name,
                        "datatype": datatype,
                        "shape": list(array.shape),
                        "offset": size,
                        "nbytes": nbytes,
                    },
                    data,
                )
            )
            size += nbytes
        layout.append(entries)
    descriptors = [[desc for desc, _ in entries] for entries in layout]
    if size == 0:
        return None, descriptors
    name, mapping = create_segment(prefix, size)
    try:
        for entries in layout:
            for desc, data in entries:
                if not desc["nbytes"]:
                    continue
                if isinstance(data, np.ndarray):
                    dst = np.ndarray(
                        data.shape, dtype=data.dtype, buffer=mapping, offset=desc["offset"]
                    )
                    np.copyto(dst, data, casting="no")
                else:
                    mapping[desc["offset"] : desc["offset"] + desc["nbytes"]] = data
    except BaseException:
        unlink(name)
        raise
    return name, descriptors


def unpack_tensors(segment: str | None, groups: list[list[dict]]) -> list[dict[str, np.ndarray]]:
    """Arrays for each group of descriptors, viewing the segment (mapped once, then unlinked)."""
    mapping = None
    if segment:
        try:
            mapping = open_segment(segment)
        finally:
            unlink(segment)
    out: list[dict[str, np.ndarray]] = []
    for group in groups:
        arrays: dict[str, np.ndarray] = {}
        for desc in group:
            shape = tuple(int(d) for d in desc["shape"])
            datatype = desc["datatype"]
            offset, nbytes = int(desc["offset"]), int(desc["nbytes"])
            if datatype == "BYTES":
                count = int(np.prod(shape, dtype=np.int64))
                raw = mapping[offset : offset + nbytes] if (mapping is not None and nbytes) else b""
                arrays[desc["name"]] = deserialize_bytes_tensor(raw, count).reshape(shape)
            else:
                dtype = to_numpy_dtype(datatype)
                if nbytes == 0 or mapping is None:
                    arrays[desc["name"]] = np.zeros(shape, dtype=dtype)
                else:
                    arrays[desc["name"]] = np.ndarray(
                        shape, dtype=dtype, buffer=mapping, offset=offset
                    )
        out.append(arrays)
    return out
