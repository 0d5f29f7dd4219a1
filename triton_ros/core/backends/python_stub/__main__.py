"""The stub process of one Python model instance (Triton's ``triton_python_backend_stub``).

Started by the server as ``python -m triton_ros.core.backends.python_stub --fd N --prefix P``
with one end of a socket pair. A reader thread takes every frame from the server: answers to
this process's own BLS and model-control calls resolve their futures (a decoupled BLS call's
responses go to its iterator's queue), ``cancel`` marks a request cancelled, and commands go to
the main thread, which runs the model: ``auto_complete`` (call
``TritonPythonModel.auto_complete_config``), ``initialize``, ``execute`` and ``finalize``. Each
command gets exactly one reply. A decoupled model's responses are ``response`` frames, sent by
whichever thread calls its sender, at any time; the ``execute`` reply carries none.

The model is imported as Triton's stub imports it: the version directory and the model directory
are appended to ``sys.path`` and the module is ``<version>.<file name>``; only ``lib/`` (with
``triton_python_backend_utils``) is put in front. The stub ignores SIGINT (a Ctrl-C meant for the
server must not kill the models before ``finalize``) and exits on its own when the server goes
away, removing any shared memory it created. After ``finalize`` it ends with ``os._exit``: the
model has released what it holds, and the interpreter's own teardown (its garbage collector over
numpy and the model's modules, about 0.1 s of CPU) would only delay the server's stop, which
waits for every stub; on a loaded host that is seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import inspect
import os
import queue
import signal
import socket
import sys
import threading
import traceback
import weakref
from concurrent.futures import Future
from pathlib import Path

from . import LIB_DIR, ipc


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` and the frames, most recent first (as Triton's stub reports them)."""
    # The stub's own frames say nothing about the model: show the model's.
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if os.path.abspath(f.filename) != os.path.abspath(__file__)
    ]
    text = f"{type(exc).__name__}: {exc}"
    if frames:
        text += "\n\nAt:\n" + "\n".join(
            f"  {f.filename}({f.lineno}): {f.name}" for f in reversed(frames)
        )
    return text


class StubRuntime:
    """This process's side of the channel: commands in, replies and calls out."""

    def __init__(self, sock: socket.socket, prefix: str, pb_utils) -> None:
        self.sock = sock
        self.prefix = prefix
        self.pb = pb_utils
        self.inbox: queue.Queue = queue.Queue()
        self.instance_name = "python"
        self.model_dir = ""
        self.model = None
        self.module = None
        self._send_lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._pending_lock = threading.Lock()
        self._next_id = 0
        self._parent = os.getppid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.model_name = ""
        self.decoupled = False
        self._cancelled: set[int] = set()
        self._open: set[int] = set()  # decoupled requests without their final flag yet
        self._streams: dict[int, queue.Queue] = {}
        threading.Thread(target=self._read, name="stub-reader", daemon=True).start()

    # ---------------------------------------------------------------- channel
    def send(self, message: dict) -> None:
        with self._send_lock:
            ipc.send_frame(self.sock, message)

    def _read(self) -> None:
        while True:
            try:
                message = ipc.recv_frame(self.sock, deadline=None)
            except ipc.ChannelClosed:
                break
            cmd = message.get("cmd")
            if cmd == "cancel":
                self._cancelled.add(int(message.get("token", 0)))
            elif cmd == "bls_response" and message.get("stream"):
                call_id = int(message.get("id", -1))
                with self._pending_lock:
                    stream = (
                        self._streams.pop(call_id, None)
                        if message.get("final")
                        else self._streams.get(call_id)
                    )
                if stream is not None:
                    stream.put(message)
                else:
                    ipc.unlink(message.get("segment"))
            elif cmd in ("bls_response", "control_response"):
                with self._pending_lock:
                    future = self._pending.pop(int(message.get("id", -1)), None)
                if future is not None:
                    future.set_result(message)
            else:
                self.inbox.put(message)
        # The server closed the channel (or died): nobody will read our answers any more.
        ipc.sweep(self.prefix)
        os._exit(0)

    def _call(self, message: dict) -> dict:
        future: Future = Future()
        with self._pending_lock:
            self._next_id += 1
            message["id"] = self._next_id
            self._pending[self._next_id] = future
        try:
            self.send(message)
        except ipc.ChannelClosed as exc:
            with self._pending_lock:
                self._pending.pop(message["id"], None)
            raise self.pb.TritonModelException(f"the server is gone: {exc}") from None
        return future.result()

    # ---------------------------------------------------------------- calls into the server
    def bls(self, request) -> object:
        """Run a pb_utils.InferenceRequest on the server (InferenceRequest.exec)."""
        pb = self.pb
        segment = None
        try:
            message, segment = self._bls_message(request, False)
            reply = self._call(message)
        except pb.TritonModelException:
            ipc.unlink(segment)
            raise
        except Exception as exc:
            ipc.unlink(segment)
            return pb.InferenceResponse(
                error=pb.TritonError(
                    f"failed to send the BLS request: {exc}", pb.TritonError.INTERNAL
                )
            )
        return self._response_of(reply)

    def _bls_message(self, request, decoupled: bool) -> tuple[dict, str | None]:
        segment, (descs,) = ipc.pack_tensors(
            self.prefix, [[(t.name(), t.as_numpy()) for t in request.inputs()]]
        )
        return {
            "cmd": "bls",
            "model_name": request.model_name(),
            "model_version": request.model_version(),
            "request_id": request.request_id(),
            "requested_outputs": request.requested_output_names(),
            "timeout": request.timeout(),
            "parameters": request.parameters(),
            "correlation_id": request.correlation_id(),
            "flags": request.flags(),
            "decoupled": decoupled,
            "segment": segment,
            "inputs": descs,
        }, segment

    def _response_of(self, reply: dict):
        """A BLS answer frame as a pb_utils.InferenceResponse (an error response, or the
        outputs; none when the final flag came alone)."""
        pb = self.pb
        if reply.get("error"):
            error = reply["error"]
            ipc.unlink(reply.get("segment"))
            return pb.InferenceResponse(
                error=pb.TritonError(
                    error["message"],
                    pb.TritonError.__dict__.get(error["code"], pb.TritonError.INTERNAL),
                )
            )
        (arrays,) = ipc.unpack_tensors(reply.get("segment"), [reply.get("outputs", [])])
        tensors = [pb.Tensor(name, array) for name, array in arrays.items()]
        return pb.InferenceResponse(
            output_tensors=tensors, parameters=reply.get("parameters") or None
        )

    def bls_stream(self, request):
        """A decoupled BLS request (``exec(decoupled=True)``): an iterator of its responses."""
        pb = self.pb
        stream: queue.Queue = queue.Queue()
        segment = None
        with self._pending_lock:
            self._next_id += 1
            call_id = self._next_id
            self._streams[call_id] = stream
        try:
            message, segment = self._bls_message(request, True)
            message["id"] = call_id
            self.send(message)
        except Exception as exc:
            ipc.unlink(segment)
            with self._pending_lock:
                self._streams.pop(call_id, None)
            stream.put(
                {
                    "cmd": "bls_response",
                    "final": True,
                    "error": {
                        "code": "INTERNAL",
                        "message": f"failed to send the BLS request: {exc}",
                    },
                }
            )

        def pull():
            reply = stream.get()
            return self._response_of(reply), bool(reply.get("final"))

        def cancel():
            try:
                self.send({"cmd": "bls_cancel", "id": call_id})
            except ipc.ChannelClosed:
                pass

        return pb.ResponseIterator(pull, cancel)

    # ---------------------------------------------------------------- decoupled responses
    def send_response(self, token: int, response, final: bool, requested) -> None:
        """One response of a decoupled model's request (its sender's ``send``)."""
        pb = self.pb
        message = {"cmd": "response", "token": token, "final": final}
        segment = None
        if response is not None:
            if response.has_error():
                error = response.error()
                message["error"] = {"code": error.code().name, "message": error.message()}
            else:
                outputs = [
                    (t.name(), t.as_numpy())
                    for t in response.output_tensors()
                    if requested is None or t.name() in requested
                ]
                segment, (descs,) = ipc.pack_tensors(self.prefix, [outputs])
                message.update(
                    segment=segment,
                    outputs=descs,
                    parameters=response.parameters(),
                    has_response=True,
                )
        if final:
            self._open.discard(token)
        try:
            self.send(message)
        except ipc.ChannelClosed as exc:
            ipc.unlink(segment)
            raise pb.TritonModelException(f"the server is gone: {exc}") from None

    def abandoned(self, token: int) -> None:
        """A decoupled request's sender was released without the final flag: end the request
        with an error rather than leave its client waiting."""
        try:
            self.send(
                {
                    "cmd": "response",
                    "token": token,
                    "final": True,
                    "error": {
                        "code": "INTERNAL",
                        "message": f"Python model '{self.model_name}' released the request without "
                        f"sending a response with TRITONSERVER_RESPONSE_COMPLETE_FINAL",
                    },
                }
            )
        except Exception:
            pass

    def is_cancelled(self, token: int) -> bool:
        return token in self._cancelled

    def control(self, action: str, **kwargs):
        reply = self._call({"cmd": "control", "action": action, **kwargs})
        if reply.get("error"):
            raise self.pb.TritonModelException(reply["error"])
        return reply.get("result")

    # ---------------------------------------------------------------- model
    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(
                target=self._loop.run_forever, name="stub-asyncio", daemon=True
            ).start()
        return self._loop

    def run_coroutine(self, coroutine):
        """Run a model's ``async def`` on one long-lived loop (BLS ``async_exec`` needs one)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._event_loop()).result()

    def import_model(self, model_file: str, version: str):
        path = Path(model_file)
        version_dir, model_dir = path.parent, path.parent.parent
        self.model_dir = str(version_dir)
        for entry in (str(version_dir), str(model_dir)):
            if entry not in sys.path:
                sys.path.append(entry)
        module = None
        try:
            module = importlib.import_module(f"{version}.{path.stem}")
            if Path(getattr(module, "__file__", "") or "").resolve() != path.resolve():
                module = None  # another "<version>" package shadows this model's directory
        except ImportError:
            module = None
        if module is None:
            spec = importlib.util.spec_from_file_location(f"{version}.{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        if not hasattr(module, "TritonPythonModel"):
            raise self.pb.TritonModelException(
                f"{model_file} must define a class named 'TritonPythonModel'"
            )
        self.module = module
        return module.TritonPythonModel

    def handle(self, message: dict) -> dict:
        cmd = message["cmd"]
        if cmd == "auto_complete":
            cls = self.import_model(message["model_file"], message["version"])
            config = self.pb.ModelConfig(message["config"])
            if hasattr(cls, "auto_complete_config"):
                config = cls.auto_complete_config(config)
            if not isinstance(config, self.pb.ModelConfig):
                raise self.pb.TritonModelException(
                    "auto_complete_config function in model must return a valid "
                    "pb.ModelConfig object."
                )
            return {"config": config.as_dict()}
        if cmd == "initialize":
            self.instance_name = message["args"].get("model_instance_name", "python")
            self.model_name = message["args"].get("model_name", "")
            self.decoupled = bool(message.get("decoupled"))
            cls = self.import_model(message["model_file"], message["version"])
            self.model = cls()
            if hasattr(self.model, "initialize"):
                result = self.model.initialize(dict(message["args"]))
                if inspect.iscoroutine(result):
                    self.run_coroutine(result)
            return {}
        if cmd == "execute":
            return self.execute(message)
        raise self.pb.TritonModelException(f"unknown command '{cmd}'")

    def execute(self, message: dict) -> dict:
        pb = self.pb
        groups = ipc.unpack_tensors(
            message.get("segment"), [r["inputs"] for r in message["requests"]]
        )
        requests = []
        for spec, arrays in zip(message["requests"], groups):
            request = pb.InferenceRequest(
                request_id=spec.get("id", ""),
                correlation_id=spec.get("correlation_id", 0),
                inputs=[pb.Tensor(name, array) for name, array in arrays.items()],
                requested_output_names=spec["requested_outputs"],
                model_name=message.get("model_name", ""),
                model_version=-1,
                flags=int(spec.get("flags", 0)),
                timeout=int(spec.get("timeout", 0)),
                parameters=spec.get("parameters"),
            )
            request._token = token = int(spec.get("token", 0))
            if spec.get("cancelled"):
                self._cancelled.add(token)
            if self.decoupled:
                request._decoupled = True
                self._open.add(token)
                weakref.finalize(request.get_response_sender(), self._released, token)
            requests.append(request)
        if not hasattr(self.model, "execute"):
            raise pb.TritonModelException("Python model does not implement `execute` method.")
        if self.decoupled:
            return self.execute_decoupled(requests)
        try:
            returned = self.model.execute(requests)
            if inspect.iscoroutine(returned):
                returned = self.run_coroutine(returned)
        finally:
            for request in requests:
                self._cancelled.discard(request._token)
        responses = self._collect(requests, returned)

        outputs, errors, parameters = [], [], []
        for request, response in zip(requests, responses):
            if isinstance(response, str):  # a per-request protocol error
                errors.append({"code": "INTERNAL", "message": response})
                outputs.append([])
                parameters.append("{}")
            elif response.has_error():
                error = response.error()
                errors.append({"code": error.code().name, "message": error.message()})
                outputs.append([])
                parameters.append("{}")
            else:
                wanted = set(request.requested_output_names())
                outputs.append(
                    [
                        (t.name(), t.as_numpy())
                        for t in response.output_tensors()
                        if t.name() in wanted
                    ]
                )
                errors.append(None)
                parameters.append(response.parameters())
        segment, descs = ipc.pack_tensors(self.prefix, outputs)
        return {
            "segment": segment,
            "responses": [
                {"outputs": d, "error": e, "parameters": p}
                for d, e, p in zip(descs, errors, parameters)
            ],
        }

    def execute_decoupled(self, requests: list) -> dict:
        """A decoupled model's execute: it must return None (an ``async def`` runs on in the
        background, as in Triton); its responses leave through the senders. If it fails, every
        sender still open is closed and the server ends those requests with the error."""
        pb = self.pb
        try:
            returned = self.model.execute(requests)
            if inspect.iscoroutine(returned):
                future = asyncio.run_coroutine_threadsafe(returned, self._event_loop())
                senders = [r.get_response_sender() for r in requests]
                future.add_done_callback(lambda f: self._background_done(f, senders))
            elif returned is not None:
                raise pb.TritonModelException(
                    f"Python model '{self.model_name}' is using the decoupled mode and the "
                    f"execute function must return None."
                )
        except BaseException:
            for request in requests:
                request.get_response_sender().close()
            raise
        return {"responses": []}

    def _background_done(self, future, senders) -> None:
        """An ``async def execute`` of a decoupled model ended: if it raised, each request it
        left open ends with the error (logged once, as Triton logs it)."""
        exc = future.exception()
        if exc is None:
            return
        text = describe_exception(exc)
        self.pb.Logger.log_error(
            f"Failed to process the request(s) for model '{self.model_name}', message: {text}"
        )
        for sender in senders:
            if not sender.is_closed():
                sender.close()
                self.send_error_final(sender._token, text)

    def send_error_final(self, token: int, text: str) -> None:
        try:
            self.send(
                {
                    "cmd": "response",
                    "token": token,
                    "final": True,
                    "error": {"code": "INTERNAL", "message": text},
                }
            )
        except Exception:
            pass

    def _released(self, token: int) -> None:
        """weakref.finalize of a decoupled request's sender: one released before its final
        flag ends its request with an error rather than leave the client waiting."""
        self._cancelled.discard(token)
        if token in self._open:
            self._open.discard(token)
            self.abandoned(token)

    def close_sender(self, token: int) -> None:
        self._open.discard(token)

    def _collect(self, requests: list, returned) -> list:
        """One InferenceResponse (or a message) per request, with Triton's checks."""
        pb = self.pb
        if returned is None:
            returned = [None] * len(requests)
        if not isinstance(returned, list):
            raise pb.TritonModelException(
                f"Expected a list in the execute return, found type '{type(returned)}'."
            )
        if len(returned) != len(requests):
            raise pb.TritonModelException(
                f"Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(returned)}"
            )
        out = []
        for request, response in zip(requests, returned):
            sender = request._sender
            if response is None:
                if sender is not None and sender._response is not None:
                    out.append(sender._response)
                else:
                    out.append(
                        "the model returned no response for this request (execute "
                        "returned None and nothing was sent with the response sender)"
                    )
                continue
            if not isinstance(response, pb.InferenceResponse):
                raise pb.TritonModelException(
                    f"Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response)}'."
                )
            if sender is not None and sender._response is not None:
                out.append(
                    "the model both returned a response and sent one with the response "
                    "sender for this request"
                )
                continue
            out.append(response)
        return out

    def finalize(self) -> None:
        if self.model is not None and hasattr(self.model, "finalize"):
            result = self.model.finalize()
            if inspect.iscoroutine(result):
                self.run_coroutine(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triton_ros python stub")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args(argv)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Only lib/ goes first; the working directory ("-m" puts it on the path) must not shadow
    # the model's own modules.
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path.pop(0)
    sys.path.insert(0, str(LIB_DIR))
    import triton_python_backend_utils as pb_utils

    os.set_inheritable(args.fd, False)
    sock = socket.socket(fileno=args.fd)
    runtime = StubRuntime(sock, args.prefix, pb_utils)
    pb_utils._runtime = runtime

    while True:
        message = runtime.inbox.get()
        cmd = message.get("cmd")
        if cmd == "finalize":
            reply = {"cmd": "finalize_response", "ok": True}
            try:
                runtime.finalize()
            except BaseException as exc:  # finalize errors are logged, never fatal
                reply = {"cmd": "finalize_response", "ok": False, "error": describe_exception(exc)}
            runtime.send(reply)
            break
        try:
            reply = {"cmd": f"{cmd}_response", "ok": True, **runtime.handle(message)}
        except BaseException as exc:  # the model's failure is an answer, not the stub's end
            if isinstance(exc, (SystemExit, KeyboardInterrupt)) and cmd != "execute":
                raise
            reply = {"cmd": f"{cmd}_response", "ok": False, "error": describe_exception(exc)}
        runtime.send(reply)
    sys.stdout.flush()
    sys.stderr.flush()
    ipc.sweep(args.prefix)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
