"""Python backend (Triton's python_backend): ``backend: "python"`` with ``<version>/model.py``.

Every model instance runs its ``TritonPythonModel`` in its own stub process
(:mod:`triton_ros.core.backends.python_stub`, started with this interpreter), as Triton does:
instances execute in parallel on several cores, and a model that raises, crashes or hangs cannot
take the server down.

- ``initialize(args)`` gets Triton's keys (``model_config`` as Triton's JSON,
  ``model_instance_kind``, ``model_instance_name``, ``model_instance_device_id``,
  ``model_repository``, ``model_version``, ``model_name``); raising fails the model's load with
  the error as its reason.
- ``execute(requests)`` gets one ``pb_utils.InferenceRequest`` per request of the batch (the
  dynamic batcher's batch, not concatenated) and must return one ``InferenceResponse`` per
  request; a response's ``TritonError`` fails only that request. A raised exception or a wrong
  return value fails the batch with INTERNAL "Failed to process the request(s) for model
  instance ...", as in Triton.
- A stub that dies while executing (``os._exit``, a segfault, the OOM killer) fails that batch with
  INTERNAL and is restarted; so is one that runs longer than ``execute_timeout_seconds`` (model
  parameter, default 60, 0 = no limit), which is killed. If the restart fails the instance stops
  taking batches, and once no instance is left the model version is reported UNAVAILABLE.
- ``auto_complete_config`` runs in a short-lived stub at load unless ``--strict-model-config``.
- ``finalize()`` runs at unload; then the process is reaped and its shared memory removed.
- Models may call back into the server: ``InferenceRequest.exec()`` / ``async_exec()`` (BLS;
  with ``decoupled=True``, the responses stream back as they come) and
  ``pb_utils.load_model`` / ``unload_model`` / ``is_model_ready``.
- A decoupled model (``model_transaction_policy { decoupled: true }``) sends its responses at
  any time through each request's sender: a reader thread takes them from the stub and hands
  them, in order, to the request's response factory (the execution itself only says whether
  ``execute`` raised). A request cancelled by its client is told to the stub
  (``is_cancelled()``). A stub that dies or is restarted ends every request still open with an
  error, so no client waits for a final flag that will never come.
- The sequence batcher's requests carry their correlation ID and START/END flags to the model
  (``correlation_id()``, ``flags()``).

Model parameters read here: ``execute_timeout_seconds`` (60), ``initialize_timeout_seconds``
(300; also bounds ``auto_complete_config``), ``finalize_timeout_seconds`` (30).
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from google.protobuf import json_format

import triton_ros

from ..backend_model import STREAMED, BackendModel, BackendModelInstance, ExecuteResult
from ..errors import (
    StatusCode,
    TritonRosError,
    as_triton_error,
    internal,
    invalid_arg,
    unavailable,
    unsupported,
)
from ..infer_request import InferRequest, InferResponse, RequestedOutput, model_facing_inputs
from ..model_config import PYTHON_FILENAME, ModelConfig, model_config_to_json, version_dirs
from .python_stub import ipc

_log = logging.getLogger("triton_ros.python")

DEFAULT_EXECUTE_TIMEOUT_S = 60.0
DEFAULT_INITIALIZE_TIMEOUT_S = 300.0
DEFAULT_FINALIZE_TIMEOUT_S = 30.0
_KIND_NAMES = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL"}


class StubDied(Exception):
    """The stub process exited (or closed its channel)."""


class StubTimeout(Exception):
    """The stub did not answer before the deadline."""


def _seconds(config: ModelConfig, key: str, default: float) -> float:
    value = config.parameters.get(key)
    if value is None or value == "":
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise invalid_arg(
            f"model '{config.name}': parameter '{key}' must be a number of seconds, got '{value}'"
        ) from None
    if seconds < 0:
        raise invalid_arg(f"model '{config.name}': parameter '{key}' must be >= 0, got '{value}'")
    return seconds


def _exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "is unresponsive"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


def _stub_environment() -> dict[str, str]:
    # The stub must import this very triton_ros, wherever the server found it.
    root = str(Path(triton_ros.__file__).resolve().parents[1])
    env = dict(os.environ)
    paths = [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"  # model prints reach the log even if the stub crashes
    return env


class StubProcess:
    """One running stub: its process, its end of the channel, and the calls it makes back.

    With ``on_response`` (decoupled models) a reader thread takes every frame as it comes:
    ``response`` frames go to ``on_response``, the stub's calls are served, and replies to this
    side's commands wait in a queue for :meth:`wait_reply`. Without it, the thread that sends a
    command reads the channel itself until its reply (no thread hop per execution)."""

    def __init__(
        self, *, tag: str, server: Any = None, model_name: str = "", on_response=None
    ) -> None:
        self.tag = tag
        self.server = server
        self.model_name = model_name
        self._on_response = on_response
        self._replies: queue.Queue | None = None
        self._bls_requests: dict[Any, InferRequest] = {}  # decoupled BLS calls, by id
        # One name space per process and side, so that names never collide; sweep() takes both.
        self.prefix = ipc.new_prefix(tag)
        self.own_prefix = self.prefix + "p"
        self._send_lock = threading.Lock()
        parent_sock, child_sock = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "triton_ros.core.backends.python_stub",
                    "--fd",
                    str(child_sock.fileno()),
                    "--prefix",
                    self.prefix + "s",
                ],
                pass_fds=(child_sock.fileno(),),
                env=_stub_environment(),
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            parent_sock.close()
            raise unavailable(
                f"failed to start the Python backend stub for '{tag}': {exc}"
            ) from None
        finally:
            child_sock.close()
        self.sock = parent_sock
        if on_response is not None:
            self._replies = queue.Queue()
            threading.Thread(target=self._read, daemon=True, name=f"{tag}-reader").start()

    # ---------------------------------------------------------------- channel
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: dict) -> None:
        with self._send_lock:
            try:
                ipc.send_frame(self.sock, message)
            except ipc.ChannelClosed:
                raise StubDied() from None

    def call(self, message: dict, timeout: float | None) -> dict:
        """Send a command and wait for its reply, serving the stub's calls meanwhile."""
        self.send(message)
        return self.wait_reply(f"{message['cmd']}_response", timeout)

    def _read(self) -> None:
        """The reader thread (decoupled models): every frame, as it comes."""
        while True:
            try:
                message = ipc.recv_frame(self.sock, None)
            except (ipc.ChannelClosed, OSError, ValueError):
                break
            try:
                if not self._dispatch(message):
                    self._replies.put(message)
            except Exception as exc:  # a fault of ours: logged, the channel keeps going
                _log.error(
                    "model '%s' (%s): handling a frame from the stub failed: %s",
                    self.model_name,
                    self.tag,
                    as_triton_error(exc),
                )
        self._replies.put(None)

    def _dispatch(self, message: dict) -> bool:
        """Serve a frame the stub sent on its own; False for a reply to our command."""
        cmd = message.get("cmd")
        if cmd == "response" and self._on_response is not None:
            self._on_response(message)
        elif cmd == "bls":
            self._start_bls(message)
        elif cmd == "bls_cancel":
            request = self._bls_requests.get(message.get("id"))
            if request is not None:
                request.cancel()
        elif cmd == "control":
            threading.Thread(
                target=self._control, args=(message,), daemon=True, name=f"{self.tag}-control"
            ).start()
        else:
            return False
        return True

    def wait_reply(self, expected: str, timeout: float | None) -> dict:
        if self._replies is not None:
            return self._wait_queued(expected, timeout)
        deadline = None if not timeout else time.monotonic() + timeout
        while True:
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                raise StubTimeout()
            readable, _, _ = select.select([self.sock], [], [], wait)
            if not readable:
                # A grandchild may hold the socket open: look at the process itself too.
                if not self.alive():
                    raise StubDied()
                continue
            try:
                message = ipc.recv_frame(self.sock, deadline)
            except ipc.ChannelClosed:
                raise StubDied() from None
            except ipc.ChannelTimeout:
                raise StubTimeout() from None
            if message.get("cmd") == expected:
                return message
            if not self._dispatch(message):
                raise StubDied()  # a peer that breaks the protocol is as good as dead

    def _wait_queued(self, expected: str, timeout: float | None) -> dict:
        deadline = None if not timeout else time.monotonic() + timeout
        while True:
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                raise StubTimeout()
            try:
                message = self._replies.get(timeout=wait)
            except queue.Empty:
                if not self.alive():
                    raise StubDied() from None
                continue
            if message is None:
                self._replies.put(None)  # the channel is closed for every later wait too
                raise StubDied()
            if message.get("cmd") == expected:
                return message
            raise StubDied()  # a peer that breaks the protocol is as good as dead

    def command(
        self,
        message: dict,
        *,
        timeout: float | None,
        what: str,
        code: StatusCode = StatusCode.INTERNAL,
    ) -> dict:
        """:meth:`call` for load-time commands: a stub that dies or hangs (it is then killed)
        becomes an error saying ``what`` failed."""
        try:
            return self.call(message, timeout=timeout)
        except StubDied:
            raise TritonRosError(
                code, f"{what}: the stub process {_exit_description(self.reap(5.0))}"
            ) from None
        except StubTimeout:
            self.kill()
            raise TritonRosError(code, f"{what}: did not finish within {timeout:g} s") from None

    def kill(self) -> None:
        if self.alive():
            try:
                self.proc.kill()
            except OSError:
                pass
        self.reap(timeout=10.0)

    def reap(self, timeout: float) -> int | None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            self.sock.close()
        except OSError:
            pass
        ipc.sweep(self.prefix)
        return self.proc.returncode

    def shutdown(self, timeout: float) -> None:
        """Ask the model to finalize, then reap the process (killing it if it does not exit)."""
        if self.alive():
            try:
                reply = self.call({"cmd": "finalize"}, timeout=timeout or None)
                if not reply.get("ok"):
                    _log.warning("finalize() of %s failed: %s", self.tag, reply.get("error"))
            except StubTimeout:
                _log.warning(
                    "finalize() of %s did not return within %.0f s; killing it", self.tag, timeout
                )
                self.proc.kill()
            except StubDied:
                pass
        self.reap(timeout=10.0)

    # ---------------------------------------------------------------- calls from the model
    def _reply(self, message: dict) -> None:
        try:
            self.send(message)
        except StubDied:
            ipc.unlink(message.get("segment"))  # the stub is gone; nobody maps the answer

    def _start_bls(self, message: dict) -> None:
        call_id = message.get("id")
        stream = bool(message.get("decoupled"))
        try:
            if self.server is None:
                raise unsupported("BLS requests need a running server")
            (inputs,) = ipc.unpack_tensors(message.get("segment"), [message.get("inputs", [])])
            names = message.get("requested_outputs") or []
            flags = int(message.get("flags", 0) or 0)
            correlation_id = message.get("correlation_id", 0)
            request = InferRequest(
                model_name=str(message.get("model_name", "")),
                inputs=inputs,
                model_version=int(message.get("model_version", -1)),
                id=str(message.get("request_id", "")),
                requested_outputs=tuple(RequestedOutput(str(n)) for n in names) or None,
                timeout_us=int(message.get("timeout", 0)),
                parameters=json.loads(message.get("parameters") or "{}"),
                sequence_id=correlation_id if isinstance(correlation_id, (int, str)) else 0,
                sequence_start=bool(flags & 1),
                sequence_end=bool(flags & 2),
            )
            if not stream:
                target = self.server.get_model(request.model_name, request.model_version)
                if target.config.decoupled:
                    raise internal(
                        f"Model {request.model_name} - Error when running "
                        f"inference: Model {request.model_name} is using the "
                        f"decoupled. The "
                        f"current BLS request call doesn't support models using the "
                        f"decoupled transaction policy. Please use 'decoupled=True' "
                        f"argument to the 'exec' or 'async_exec' calls for decoupled "
                        f"models.'"
                    )
            else:
                request.response_sink = lambda response, final: self._stream_bls(
                    call_id, response, final
                )
                self._bls_requests[call_id] = request
            future = self.server.infer(request)
        except Exception as exc:
            error = (
                exc if isinstance(exc, TritonRosError) else invalid_arg(f"bad BLS request: {exc}")
            )
            self._reply(
                {
                    "cmd": "bls_response",
                    "id": call_id,
                    "stream": stream,
                    "final": True,
                    "error": {"code": error.code.name, "message": error.message},
                }
            )
            self._bls_requests.pop(call_id, None)
            return
        if stream:
            future.add_done_callback(lambda f: self._end_bls_stream(call_id, f))
        else:
            future.add_done_callback(lambda f: self._finish_bls(call_id, f))

    def _stream_bls(self, call_id, response, final: bool) -> None:
        """One response of a decoupled BLS call, to the stub's iterator."""
        reply = {"cmd": "bls_response", "id": call_id, "stream": True, "final": final}
        if isinstance(response, TritonRosError):
            reply["error"] = {"code": response.code.name, "message": response.message}
        elif response is not None:
            try:
                segment, (descs,) = ipc.pack_tensors(
                    self.own_prefix, [list(response.outputs.items())]
                )
            except Exception as exc:
                reply["error"] = {"code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"}
            else:
                reply.update(
                    segment=segment,
                    outputs=descs,
                    parameters=json.dumps(response.parameters, default=str),
                )
        if final:
            self._bls_requests.pop(call_id, None)
        self._reply(reply)

    def _end_bls_stream(self, call_id, future: Future) -> None:
        """A decoupled BLS call refused before it reached its model: its one, final, error."""
        self._bls_requests.pop(call_id, None)
        exc = future.exception()
        if exc is not None:
            error = as_triton_error(exc)
            self._reply(
                {
                    "cmd": "bls_response",
                    "id": call_id,
                    "stream": True,
                    "final": True,
                    "error": {"code": error.code.name, "message": error.message},
                }
            )

    def _finish_bls(self, call_id, future: Future) -> None:
        try:
            response: InferResponse = future.result()
            segment, (descs,) = ipc.pack_tensors(self.own_prefix, [list(response.outputs.items())])
        except TritonRosError as exc:
            self._reply(
                {
                    "cmd": "bls_response",
                    "id": call_id,
                    "error": {"code": exc.code.name, "message": exc.message},
                }
            )
            return
        except Exception as exc:
            self._reply(
                {
                    "cmd": "bls_response",
                    "id": call_id,
                    "error": {"code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"},
                }
            )
            return
        self._reply(
            {
                "cmd": "bls_response",
                "id": call_id,
                "segment": segment,
                "outputs": descs,
                "parameters": json.dumps(response.parameters, default=str),
            }
        )

    def _control(self, message: dict) -> None:
        reply: dict = {"cmd": "control_response", "id": message.get("id")}
        try:
            if self.server is None:
                raise unsupported("model control needs a running server")
            action = message.get("action")
            name = str(message.get("model_name", ""))
            if action == "ready":
                version = str(message.get("model_version") or "")
                reply["result"] = self.server.is_ready(name, int(version) if version else -1)
            elif action == "load":
                files = {
                    k.removeprefix("file:"): base64.b64decode(v)
                    for k, v in (message.get("files") or {}).items()
                }
                self.server.load(
                    name, config_json=message.get("config") or None, files=files or None
                )
            elif action == "unload":
                if name == self.model_name:
                    raise invalid_arg(f"model '{name}' cannot unload itself from its own code")
                self.server.unload(name, unload_dependents=bool(message.get("unload_dependents")))
            else:
                raise invalid_arg(f"unknown model control action '{action}'")
        except TritonRosError as exc:
            reply["error"] = exc.message
        except Exception as exc:
            reply["error"] = f"{type(exc).__name__}: {exc}"
        self._reply(reply)


class PythonModel(BackendModel):
    """Model-level state: the model file and the stub settings."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        self.model_file = version_path / (config.default_model_filename or PYTHON_FILENAME)
        if not self.model_file.is_file():
            raise unavailable(f"Python model file not found in '{self.model_file}'")
        self.execute_timeout = _seconds(
            config, "execute_timeout_seconds", DEFAULT_EXECUTE_TIMEOUT_S
        )
        self.initialize_timeout = _seconds(
            config, "initialize_timeout_seconds", DEFAULT_INITIALIZE_TIMEOUT_S
        )
        self.finalize_timeout = _seconds(
            config, "finalize_timeout_seconds", DEFAULT_FINALIZE_TIMEOUT_S
        )
        if config.parameters.get("EXECUTION_ENV_PATH"):
            _log.warning(
                "model '%s': EXECUTION_ENV_PATH is ignored; the stub runs with the "
                "server's Python environment",
                config.name,
            )
        if config.parameters.get("FORCE_CPU_ONLY_INPUT_TENSORS", "").strip().lower() == "no":
            # Triton may then hand GPU tensors to a KIND_GPU model; here every input tensor is in
            # CPU memory (is_cpu() is true), which such a model must accept anyway.
            _log.warning(
                "model '%s': FORCE_CPU_ONLY_INPUT_TENSORS 'no' is ignored; input "
                "tensors are always in CPU memory",
                config.name,
            )

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """Run the model's ``TritonPythonModel.auto_complete_config`` in a stub, if it has one."""
        versions = version_dirs(model_path)
        if not versions:
            return []
        version = versions[-1]
        model_file = model_path / str(version) / (proto.default_model_filename or PYTHON_FILENAME)
        try:
            source = model_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []  # the load reports the missing file
        if "auto_complete_config" not in source:
            return []  # no stub start for the common case
        stub = StubProcess(tag=f"{proto.name or model_path.name}_autocomplete")
        reply = stub.command(
            {
                "cmd": "auto_complete",
                "model_file": str(model_file),
                "version": str(version),
                "config": model_config_to_json(proto),
            },
            timeout=DEFAULT_INITIALIZE_TIMEOUT_S,
            code=StatusCode.INVALID_ARG,
            what=f"auto_complete_config of model '{proto.name}'",
        )
        stub.shutdown(DEFAULT_FINALIZE_TIMEOUT_S)
        if not reply.get("ok"):
            raise invalid_arg(
                f"auto_complete_config of model '{proto.name}' failed: {reply.get('error')}"
            )
        completed = type(proto)()
        try:
            json_format.ParseDict(reply["config"], completed)
        except (json_format.ParseError, ValueError, TypeError) as exc:
            raise invalid_arg(
                f"auto_complete_config of model '{proto.name}' returned an invalid "
                f"configuration: {exc}"
            ) from None
        proto.CopyFrom(completed)
        return []

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance:
        return PythonInstance(self, name=name, kind=kind, device_id=device_id)


class PythonInstance(BackendModelInstance):
    """One stub process; restarted when it crashes or hangs."""

    def __init__(self, model: PythonModel, *, name: str, kind: str, device_id: int | None) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        self.model: PythonModel = model
        self.stub: StubProcess | None = None
        self._decoupled = model.config.decoupled
        # Requests of a decoupled model whose final response has not come yet, by token.
        self._open: dict[int, InferRequest] = {}
        self._open_lock = threading.Lock()
        self._tokens = itertools.count(1)
        self._start()

    # ---------------------------------------------------------------- lifecycle
    def _start(self) -> None:
        """Start a stub and initialize the model in it; raise with the reason on failure."""
        model, config = self.model, self.model.config
        stub = StubProcess(
            tag=self.name,
            server=model.server,
            model_name=config.name,
            on_response=self._on_response if self._decoupled else None,
        )
        args = {
            "model_config": model_config_to_json(config.proto),
            "model_instance_kind": _KIND_NAMES.get(self.kind, self.kind),
            "model_instance_name": self.name,
            "model_instance_device_id": str(self.device_id or 0),
            "model_repository": str(model.model_path),
            "model_version": str(model.version),
            "model_name": config.name,
        }
        reply = stub.command(
            {
                "cmd": "initialize",
                "model_file": str(model.model_file),
                "version": str(model.version),
                "args": args,
                "decoupled": self._decoupled,
            },
            timeout=model.initialize_timeout,
            what=f"initialize() of Python model '{config.name}' instance "
            f"{self.name} (initialize_timeout_seconds "
            f"{model.initialize_timeout:g})",
        )
        if not reply.get("ok"):
            stub.shutdown(self.model.finalize_timeout)
            raise internal(
                f"Python model '{config.name}' instance {self.name} failed to "
                f"initialize: {reply.get('error')}"
            )
        self.stub = stub

    def _restart(self, why: str) -> None:
        """Replace a dead or killed stub; on failure the instance stops serving."""
        if self.stub is not None:
            self.stub.kill()
            self.stub = None
        self._end_open(f"Stub process '{self.name}' is not healthy: {why}")
        _log.warning(
            "model '%s' instance %s: %s; restarting the stub",
            self.model.config.name,
            self.name,
            why,
        )
        try:
            self._start()
        except TritonRosError as exc:
            self.failure = f"{why}; restarting it failed: {exc.message}"

    def close(self) -> None:
        if self.stub is not None:
            self.stub.shutdown(self.model.finalize_timeout)
            self.stub = None
        self._end_open(
            f"model '{self.model.config.name}' instance {self.name} was unloaded "
            f"before the request's final response"
        )

    # ---------------------------------------------------------------- decoupled responses
    def _on_response(self, message: dict) -> None:
        """A ``response`` frame (the reader thread): to its request's response factory."""
        token = message.get("token")
        final = bool(message.get("final"))
        with self._open_lock:
            request = self._open.pop(token, None) if final else self._open.get(token)
        if request is None:  # ended already (a failed execute, a restart)
            ipc.unlink(message.get("segment"))
            return
        error = message.get("error")
        response: InferResponse | TritonRosError | None = None
        if error:
            code = StatusCode.__members__.get(error.get("code"), StatusCode.INTERNAL)
            response = TritonRosError(code, str(error.get("message")))
        elif message.get("has_response"):
            try:
                (outputs,) = ipc.unpack_tensors(
                    message.get("segment"), [message.get("outputs", [])]
                )
                parameters = json.loads(message.get("parameters") or "{}")
                response = InferResponse(
                    self.model.config.name,
                    self.model.version,
                    request.id,
                    self._reshaped(outputs),
                    parameters,
                )
            except (KeyError, TypeError, ValueError, OSError, TritonRosError) as exc:
                ipc.unlink(message.get("segment"))
                response = internal(f"malformed response from the stub: {exc}")
        request.response_factory(response, final)

    def _forget(self, specs: list[dict]) -> None:
        if self._decoupled:
            with self._open_lock:
                for spec in specs:
                    self._open.pop(spec["token"], None)

    def _cancel(self, stub: StubProcess, token: int) -> None:
        """A request's client went away: tell the stub (its ``is_cancelled()``), while the
        request is open."""
        with self._open_lock:
            if token not in self._open:
                return
        try:
            stub.send({"cmd": "cancel", "token": token})
        except StubDied:
            pass

    def _end_open(self, message: str) -> None:
        """Every decoupled request still open ends with ``message`` (its stub is gone)."""
        with self._open_lock:
            requests, self._open = list(self._open.values()), {}
        for request in requests:
            request.response_factory(internal(message), True)

    # ---------------------------------------------------------------- execution
    def execute(self, requests: list[InferRequest]) -> ExecuteResult:
        config = self.model.config
        if self.stub is None or not self.stub.alive():
            # Died between batches (this batch is not to blame): restart before running it.
            returncode = None if self.stub is None else self.stub.reap(1.0)
            self._restart(f"the stub process {_exit_description(returncode)}")
        if self.failure is not None or self.stub is None:
            error = unavailable(
                f"model '{config.name}' instance {self.name} is unavailable: {self.failure}"
            )
            return ExecuteResult([error] * len(requests))
        stub = self.stub

        t0 = time.monotonic_ns()
        segment = None
        try:
            specs = []
            groups = []
            for request in requests:
                groups.append(list(model_facing_inputs(config, request).items()))
                token = next(self._tokens)
                specs.append(
                    {
                        "id": request.id,
                        "timeout": request.timeout_us,
                        "parameters": json.dumps(request.parameters, default=str),
                        "requested_outputs": request.output_names(config),
                        "token": token,
                        "correlation_id": request.sequence_id,
                        "flags": int(request.sequence_start) | (int(request.sequence_end) << 1),
                        "cancelled": request.cancelled,
                    }
                )
                if self._decoupled and not request.null_request:
                    with self._open_lock:
                        self._open[token] = request
                    request.on_cancel(functools.partial(self._cancel, stub, token))
            segment, descs = ipc.pack_tensors(stub.own_prefix, groups)
            for spec, desc in zip(specs, descs):
                spec["inputs"] = desc
        except (MemoryError, OSError) as exc:
            ipc.unlink(segment)
            error = unavailable(f"model '{config.name}': cannot pass the inputs to the stub: {exc}")
            return ExecuteResult([error] * len(requests), time.monotonic_ns() - t0)
        t1 = time.monotonic_ns()
        try:
            reply = stub.call(
                {
                    "cmd": "execute",
                    "model_name": config.name,
                    "segment": segment,
                    "requests": specs,
                },
                timeout=self.model.execute_timeout,
            )
        except StubDied:
            why = f"the stub process {_exit_description(stub.reap(5.0))} while executing"
            self._forget(specs)  # this batch fails below; earlier open requests end here
            self._restart(why)
            return self._batch_error(
                requests, f"Stub process '{self.name}' is not healthy: {why}", t0, t1
            )
        except StubTimeout:
            why = (
                f"execute() did not return within {self.model.execute_timeout:g} s "
                f"(execute_timeout_seconds); the stub process was killed"
            )
            self._forget(specs)
            self._restart(why)
            return self._batch_error(requests, why, t0, t1)
        finally:
            ipc.unlink(segment)
        t2 = time.monotonic_ns()
        if not reply.get("ok"):  # a failed execute: the model sends no more responses
            self._forget(specs)
            return self._batch_error(requests, str(reply.get("error")), t0, t1)
        if self._decoupled:
            return ExecuteResult(
                [STREAMED] * len(requests), t1 - t0, t2 - t1, time.monotonic_ns() - t2
            )

        try:
            answers = reply["responses"]
            arrays = ipc.unpack_tensors(reply.get("segment"), [a["outputs"] for a in answers])
        except (KeyError, TypeError, ValueError, OSError, TritonRosError) as exc:
            ipc.unlink(reply.get("segment"))
            return self._batch_error(requests, f"malformed reply from the stub: {exc}", t0, t1)
        responses: list[InferResponse | TritonRosError] = []
        for request, answer, outputs in zip(requests, answers, arrays):
            error = answer.get("error")
            if error:
                code = StatusCode.__members__.get(error.get("code"), StatusCode.INTERNAL)
                responses.append(TritonRosError(code, str(error.get("message"))))
                continue
            try:
                parameters = json.loads(answer.get("parameters") or "{}")
            except ValueError:
                parameters = {}
            responses.append(
                InferResponse(
                    config.name, self.model.version, request.id, self._reshaped(outputs), parameters
                )
            )
        t3 = time.monotonic_ns()
        return ExecuteResult(responses, t1 - t0, t2 - t1, t3 - t2)

    def _reshaped(self, outputs: dict) -> dict:
        """Outputs with ``reshape`` come back in their configured dims (as in Triton)."""
        config = self.model.config
        for name, array in outputs.items():
            tensor = config.output(name)
            if tensor is not None and tensor.reshape is not None and -1 not in tensor.dims:
                batch = (array.shape[0],) if config.max_batch_size > 0 and array.ndim else ()
                try:
                    outputs[name] = array.reshape(batch + tensor.dims)
                except ValueError:
                    pass  # the client sees what the model produced
        return outputs

    def _batch_error(
        self, requests: list[InferRequest], message: str, t0: int, t1: int
    ) -> ExecuteResult:
        # Triton's Python backend names the instance so; for a decoupled model, its stub does
        # (without "instance").
        what = "model" if self._decoupled else "model instance"
        error = internal(
            f"Failed to process the request(s) for {what} '{self.name}', message: {message}"
        )
        return ExecuteResult([error] * len(requests), t1 - t0, time.monotonic_ns() - t1)
