"""Triton data types: protocol names, model-config names, numpy dtypes, BYTES encoding.

The KServe v2 protocol names tensors' types "FP32", "BYTES"...; config.pbtxt names them
``TYPE_FP32``, ``TYPE_STRING``... BYTES tensors are numpy object arrays of ``bytes`` in the core and
travel as 4-byte little-endian length-prefixed elements on the wire, as in Triton.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from .errors import TritonRosError, invalid_arg

# protocol datatype -> numpy dtype (BYTES is an object array of bytes)
_NP_OF: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}

# Every protocol name Triton knows; BF16 has no numpy dtype and is refused with a clear error.
PROTOCOL_DATATYPES = frozenset(_NP_OF) | {"BF16"}


def config_to_protocol(type_name: str) -> str:
    """'TYPE_FP32' -> 'FP32', 'TYPE_STRING' -> 'BYTES' (model_config.proto DataType names)."""
    if type_name == "TYPE_STRING":
        return "BYTES"
    if not type_name.startswith("TYPE_") or type_name == "TYPE_INVALID":
        raise invalid_arg(f"invalid data type '{type_name}'")
    return type_name[len("TYPE_") :]


def protocol_to_config(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def to_numpy_dtype(datatype: str) -> np.dtype:
    try:
        return _NP_OF[datatype]
    except KeyError:
        if datatype == "BF16":
            raise invalid_arg("data type BF16 is not supported: numpy has no bfloat16") from None
        raise invalid_arg(f"invalid data type '{datatype}'") from None


# The reverse of _NP_OF: every tensor of every request and response is named through it.
_NAME_OF: dict[np.dtype, str] = {np_dtype: name for name, np_dtype in _NP_OF.items()}


def from_numpy_dtype(dtype: np.dtype) -> str:
    try:
        name = _NAME_OF.get(dtype)  # a dtype hashes as its type and byte order
    except TypeError:  # unhashable: not a dtype, numpy says why below
        name = None
    if name is not None:
        return name
    dtype = np.dtype(dtype)  # a scalar type or a type string: as a dtype
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    name = _NAME_OF.get(dtype)
    if name is None:
        raise invalid_arg(f"numpy dtype {dtype} has no Triton data type")
    return name


def element_size(datatype: str) -> int:
    """Bytes per element; 0 for BYTES (variable)."""
    if datatype == "BYTES":
        return 0
    return to_numpy_dtype(datatype).itemsize


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """Length-prefixed encoding of a BYTES tensor (row-major)."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes_tensor(buffer: bytes | memoryview, count: int | None = None) -> np.ndarray:
    """Decode length-prefixed elements into a 1-D object array; errors name what is wrong."""
    view = memoryview(buffer)
    total = len(view)
    uniform = _uniform_elements(view, total)
    if uniform is not None:
        items = uniform
        if count is not None and len(items) != count:
            raise invalid_arg(f"BYTES tensor holds {len(items)} elements, expecting {count}")
        out = np.empty(len(items), dtype=np.object_)
        out[:] = items
        return out
    items: list[bytes] = []
    offset = 0
    while offset < total:
        if offset + 4 > total:
            raise invalid_arg("malformed BYTES tensor: truncated 4-byte length prefix")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > total:
            raise invalid_arg(
                f"malformed BYTES tensor: element of {length} bytes runs past the end of the data"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if count is not None and len(items) != count:
        raise invalid_arg(f"BYTES tensor holds {len(items)} elements, expecting {count}")
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def _uniform_elements(view: memoryview, total: int) -> list[bytes] | None:
    """The elements when every one has the first one's length (the usual case: fixed-size
    strings), checked with one vectorized look at the length prefixes; else None."""
    if total < 4:
        return None
    (length,) = struct.unpack_from("<I", view, 0)
    stride = 4 + length
    if total % stride or total // stride < 2:
        return None
    n = total // stride
    prefixes = np.ndarray((n,), dtype="<u4", buffer=view, offset=0, strides=(stride,))
    if not (prefixes == length).all():
        return None
    data = (
        view.tobytes()
        if not isinstance(view.obj, bytes) or view.nbytes != len(view.obj)
        else view.obj
    )
    return [data[o : o + length] for o in range(4, 4 + n * stride, stride)]


def tensor_to_bytes(array: np.ndarray) -> bytes | memoryview:
    """A tensor's wire bytes: raw row-major data, or the length-prefixed form for BYTES."""
    if array.dtype == np.object_:
        return serialize_bytes_tensor(array)
    # A flat uint8 view: no copy for a contiguous array, and valid for empty tensors too
    # (memoryview.cast refuses shapes with a zero).
    return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


#: The most dimensions an input may have (numpy 1.x's limit; numpy 2 allows 64).
MAX_RANK = 32
_MAX_BYTES = 2**63 - 1


def check_input_shape(shape, datatype: str, *, input_name: str, model_name: str) -> tuple[int, ...]:
    """The shape of an input as a tuple of ints, refused with INVALID_ARG before anything is
    allocated when a dimension is negative or not an integer, the rank is absurd, or the tensor's
    size overflows (``[0, 2**62, 2**62]`` holds no element, but no array of that shape can exist:
    the product of its non-zero dimensions times the element size must fit in int64).
    Shared by every frontend, so that gRPC, HTTP and shared memory inputs get the same answer."""
    dims = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise invalid_arg(
                f"invalid shape for input '{input_name}' for model '{model_name}': "
                f"dimensions must be integers"
            )
        dims.append(int(d))
    if any(d < 0 for d in dims):
        raise invalid_arg(
            f"All input dimensions should be specified for input '{input_name}' for "
            f"model '{model_name}', got {dims[: MAX_RANK + 1]}"
        )
    if len(dims) > MAX_RANK:
        raise invalid_arg(
            f"input '{input_name}' for model '{model_name}' has {len(dims)} "
            f"dimensions; at most {MAX_RANK} are supported"
        )
    itemsize = _NP_OF[datatype].itemsize if datatype in _NP_OF else 8
    total = itemsize
    for d in dims:
        if d:
            total *= d
            if total > _MAX_BYTES:
                raise invalid_arg(
                    f"input '{input_name}' for model '{model_name}': shape {dims} "
                    f"is too large, its byte size overflows int64"
                )
    return tuple(dims)


def tensor_from_bytes(
    raw: bytes | memoryview,
    datatype: str,
    shape: tuple[int, ...],
    *,
    input_name: str,
    model_name: str,
    shape_checked: bool = False,
) -> np.ndarray:
    """An input tensor from its wire bytes (raw contents, binary data or shared memory), with
    Triton's errors for a byte count that does not match the shape. Fixed-size types are wrapped
    without a copy (read-only). ``shape_checked``: ``shape`` is what :func:`check_input_shape`
    returned already (not checked again)."""
    dtype = to_numpy_dtype(datatype)
    if not shape_checked:
        shape = check_input_shape(shape, datatype, input_name=input_name, model_name=model_name)
    count = math.prod(shape)
    if datatype == "BYTES":
        try:
            return deserialize_bytes_tensor(raw, count).reshape(shape)
        except TritonRosError as exc:
            raise invalid_arg(
                f"input '{input_name}' for model '{model_name}': {exc.message}"
            ) from None
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise invalid_arg(
            f"input byte size mismatch for input '{input_name}' for model "
            f"'{model_name}'. Expected {expected}, got {len(raw)}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape)
