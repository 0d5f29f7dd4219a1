"""One endpoint's client, one class per protocol: :class:`GrpcClient` and :class:`HttpClient`.

Both wrap Triton's maintained asyncio clients (``tritonclient.grpc.aio``,
``tritonclient.http.aio``); nothing is hand-written on the wire. :class:`ProtocolClient` is what
the remote model calls, the same for both: readiness, metadata and configuration, one inference
(inputs by value or in a shared-memory slot, outputs by name, optionally classified),
shared-memory registration, and :meth:`ProtocolClient.classify`, which turns any failure of a
call into a typed :class:`~triton_ros.ros.targets.remote.errors.RemoteError` by its status code or
exception type (never its text). What differs between the protocols (how tensors go on the wire,
the client-side deadline, the answer's shape, the status codes) is each subclass's.
:func:`client_for` picks the class for an address.

TLS uses the CA, client certificate and key files given; the restricted-protocol header is sent
with every call. A protocol's client library is imported when an endpoint of that protocol is
first used, so a node without remote bindings starts without them.
"""

from __future__ import annotations

import abc
import asyncio
import ssl
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from ....core.errors import StatusCode
from .config import (
    PROBE_BACKOFF_MAX_S,
    PROBE_BACKOFF_MIN_S,
    PROBE_TIMEOUT_S,
    EndpointAddress,
    RemoteConfig,
)
from .errors import CLIENT_ERROR, MODEL_ERROR, REJECTED, TIMEOUT, UNREACHABLE, RemoteError


@dataclass
class Answer:
    """An inference's answer: the outputs it holds, by name, and the version that served it."""

    outputs: dict[str, np.ndarray]
    model_version: str


class ProtocolClient(abc.ABC):
    """One endpoint's client; touched only on the remote model's event loop."""

    # How tensors travel in an inference (HTTP: as binary data after the JSON header).
    _wire: dict[str, Any] = {}

    def __init__(self, address: EndpointAddress, settings: RemoteConfig) -> None:
        self.address = address
        self._settings = settings
        self._headers = settings.headers
        self._client = self._connect()

    # ---------------------------------------------------------------- per protocol
    @abc.abstractmethod
    def _connect(self) -> Any:
        """tritonclient's asyncio client for this endpoint (and ``self._lib``, its module)."""

    @abc.abstractmethod
    def _deadline(self, remaining: float | None) -> dict[str, Any]:
        """The client-side deadline of an inference, as keyword arguments."""

    @abc.abstractmethod
    def _answered(self, response: Any) -> tuple[list[str], Any]:
        """(output names, model version) of an inference's response."""

    @abc.abstractmethod
    def _json(self) -> dict[str, Any]:
        """Keyword arguments that make metadata and configuration come as JSON dictionaries."""

    @abc.abstractmethod
    def _unwrap_config(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The ModelConfig dictionary in a configuration answer."""

    @abc.abstractmethod
    def _classify_status(self, exc: InferenceServerException, where: str) -> RemoteError:
        """A failure the server (or the client library) answered with a status."""

    def _unreachable(self, exc: BaseException) -> bool:
        """Whether an exception means the endpoint could not be reached."""
        return isinstance(exc, (OSError, ssl.SSLError))

    def _input(self, name: str, array: np.ndarray, slot: Any, offset: int) -> Any:
        """An InferInput holding ``array``, or pointing into ``slot`` at ``offset``."""
        x = self._lib.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        if slot is not None:
            x.set_shared_memory(slot.name, array.nbytes, offset)
        else:
            x.set_data_from_numpy(array, **self._wire)
        return x

    def _requested(self, name: str, class_count: int) -> Any:
        return self._lib.InferRequestedOutput(name, class_count=class_count, **self._wire)

    # ---------------------------------------------------------------- calls
    async def is_model_ready(self, model: str, version: str) -> bool:
        return await self._client.is_model_ready(model, version, headers=self._headers)

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return await self._client.get_model_metadata(
            model, version, headers=self._headers, **self._json()
        )

    async def config(self, model: str, version: str) -> dict[str, Any]:
        """The model's configuration (Triton's extension) as a ModelConfig dictionary."""
        return self._unwrap_config(
            await self._client.get_model_config(
                model, version, headers=self._headers, **self._json()
            )
        )

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        class_count: int = 0,
        version: str = "",
        priority: int = 0,
        timeout_us: int = 0,
        slot: Any = None,
        remaining: float | None = None,
        sequence: tuple[int | str, bool, bool] | None = None,
    ) -> Answer:
        """One inference; inputs by value, or in ``slot`` (registered with this endpoint, the
        inputs written into it one after the other). ``class_count``: the outputs classified
        (Triton's classification extension). ``remaining``: the client-side deadline, s."""
        offset = 0
        wire = []
        for name, array in inputs.items():
            wire.append(self._input(name, array, slot, offset))
            offset += array.nbytes
        wanted = [self._requested(n, class_count) for n in outputs] if outputs else None
        kwargs: dict[str, Any] = dict(
            model_version=version,
            outputs=wanted,
            priority=priority,
            headers=self._headers,
            **self._deadline(remaining),
        )
        if timeout_us:
            kwargs["timeout"] = timeout_us
        if sequence is not None:  # a stateful model's (ID, START, END)
            kwargs.update(
                sequence_id=sequence[0], sequence_start=sequence[1], sequence_end=sequence[2]
            )
        result = await self._client.infer(model, wire, **kwargs)
        names, model_version = self._answered(result.get_response())
        return Answer({n: result.as_numpy(n) for n in names}, model_version)

    async def register_shared_memory(self, name: str, key: str, byte_size: int) -> None:
        await self._client.register_system_shared_memory(
            name, key, byte_size, headers=self._headers
        )

    async def unregister_shared_memory(self, name: str) -> None:
        await self._client.unregister_system_shared_memory(name, headers=self._headers)

    async def close(self) -> None:
        await self._client.close()

    def classify(self, exc: BaseException, *, probe: bool = False) -> RemoteError:
        """A failure of a call as a typed RemoteError, by its status code or exception type."""
        where = self.address.url
        if isinstance(exc, RemoteError):
            return exc
        if isinstance(exc, asyncio.TimeoutError):
            limit = (
                f"{PROBE_TIMEOUT_S:g} s (health probe)"
                if probe
                else f"{self._settings.timeout_ms} ms (server_timeout_ms)"
            )
            return RemoteError(
                StatusCode.UNAVAILABLE, f"{where}: no answer within {limit}", TIMEOUT
            )
        if isinstance(exc, InferenceServerException):
            return self._classify_status(exc, where)
        if self._unreachable(exc):
            return RemoteError(
                StatusCode.UNAVAILABLE, f"{where}: {type(exc).__name__}: {exc}", UNREACHABLE
            )
        return RemoteError(
            StatusCode.INTERNAL, f"{where}: {type(exc).__name__}: {exc}", CLIENT_ERROR
        )


class GrpcClient(ProtocolClient):
    """``grpc://`` and ``grpcs://`` endpoints (inference.GRPCInferenceService)."""

    # gRPC status -> Triton status of a failure the model (not the endpoint) caused
    _MODEL_STATUS = {
        "INVALID_ARGUMENT": StatusCode.INVALID_ARG,
        "NOT_FOUND": StatusCode.NOT_FOUND,
        "UNIMPLEMENTED": StatusCode.UNSUPPORTED,
        "ALREADY_EXISTS": StatusCode.ALREADY_EXISTS,
        "CANCELLED": StatusCode.CANCELLED,
    }

    def _connect(self) -> Any:
        import tritonclient.grpc.aio as grpc_aio
        from tritonclient.grpc import KeepAliveOptions

        self._lib = grpc_aio
        s = self._settings
        keepalive = KeepAliveOptions()
        # tritonclient's own channel options, plus reconnects bounded like the probes: by
        # default a gRPC channel backs its reconnects off to 2 minutes, which would keep a
        # restarted server unused long after it answers.
        options = [
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
            ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
            ("grpc.initial_reconnect_backoff_ms", int(PROBE_BACKOFF_MIN_S * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(PROBE_BACKOFF_MAX_S * 1000)),
        ]
        return grpc_aio.InferenceServerClient(
            self.address.target,
            ssl=self.address.tls,
            root_certificates=s.tls_ca_file or None,
            private_key=s.tls_key_file or None,
            certificate_chain=s.tls_cert_file or None,
            channel_args=options,
        )

    def _deadline(self, remaining: float | None) -> dict[str, Any]:
        return {} if remaining is None else {"client_timeout": max(0.001, remaining)}

    def _answered(self, response: Any) -> tuple[list[str], Any]:
        return [o.name for o in response.outputs], response.model_version

    def _json(self) -> dict[str, Any]:
        return {"as_json": True}

    def _unwrap_config(self, raw: dict[str, Any]) -> dict[str, Any]:
        return raw.get("config", raw)

    def _classify_status(self, exc: InferenceServerException, where: str) -> RemoteError:
        code = str(exc.status() or "").replace("StatusCode.", "")
        text = f"{where}: {exc.message()}"
        if code == "DEADLINE_EXCEEDED":
            return RemoteError(
                StatusCode.UNAVAILABLE,
                f"{where}: no answer within {self._settings.timeout_ms} ms (server_timeout_ms)",
                TIMEOUT,
            )
        if code == "UNAVAILABLE":
            return RemoteError(StatusCode.UNAVAILABLE, text, UNREACHABLE)
        if code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            return RemoteError(StatusCode.UNAVAILABLE, text, REJECTED)
        return RemoteError(self._MODEL_STATUS.get(code, StatusCode.INTERNAL), text, MODEL_ERROR)


class HttpClient(ProtocolClient):
    """``http://`` and ``https://`` endpoints (KServe v2 HTTP/REST, binary tensor data)."""

    _wire = {"binary_data": True}
    # HTTP status -> Triton status of a failure the model (not the endpoint) caused
    _MODEL_STATUS = {
        "400": StatusCode.INVALID_ARG,
        "404": StatusCode.NOT_FOUND,
        "501": StatusCode.UNSUPPORTED,
        "503": StatusCode.UNAVAILABLE,
    }

    def _connect(self) -> Any:
        import aiohttp
        import tritonclient.http.aio as http_aio

        self._lib = http_aio
        self._aiohttp_error = aiohttp.ClientError
        s = self._settings
        context = None
        if self.address.tls:
            context = ssl.create_default_context(cafile=s.tls_ca_file or None)
            if s.tls_cert_file:
                context.load_cert_chain(s.tls_cert_file, s.tls_key_file)
        return http_aio.InferenceServerClient(
            self.address.target,
            ssl=self.address.tls,
            ssl_context=context,
            conn_timeout=PROBE_TIMEOUT_S,
        )

    def _deadline(self, remaining: float | None) -> dict[str, Any]:
        return {}  # the request's asyncio deadline bounds it

    def _answered(self, response: Any) -> tuple[list[str], Any]:
        return ([o["name"] for o in response.get("outputs", [])], response.get("model_version", ""))

    def _json(self) -> dict[str, Any]:
        return {}

    def _unwrap_config(self, raw: dict[str, Any]) -> dict[str, Any]:
        return raw

    def _unreachable(self, exc: BaseException) -> bool:
        return super()._unreachable(exc) or isinstance(exc, self._aiohttp_error)

    def _classify_status(self, exc: InferenceServerException, where: str) -> RemoteError:
        status = str(exc.status() or "")
        text = f"{where}: {exc.message()}"
        if status in ("401", "403"):
            return RemoteError(StatusCode.UNAVAILABLE, text, REJECTED)
        if not status or status == "None":  # no HTTP answer at all
            return RemoteError(StatusCode.UNAVAILABLE, text, UNREACHABLE)
        return RemoteError(self._MODEL_STATUS.get(status, StatusCode.INTERNAL), text, MODEL_ERROR)


CLIENTS: dict[str, type[ProtocolClient]] = {"grpc": GrpcClient, "http": HttpClient}


def client_for(address: EndpointAddress, settings: RemoteConfig) -> ProtocolClient:
    """A new client for an endpoint, of its protocol's class."""
    return CLIENTS[address.protocol](address, settings)
