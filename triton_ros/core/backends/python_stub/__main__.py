"""The stub process of one Python model instance (Triton's ``triton_python_backend_stub``).

Started by the server as ``python -m triton_ros.core.backends.python_stub --fd N --prefix P``
with one end of a socket pair. A reader thread takes every frame from the server: answers to
this process's own BLS and model-control calls resolve their futures, commands go to the main
thread, which runs the model: ``auto_complete`` (call ``TritonPythonModel.auto_complete_config``),
``initialize``, ``execute`` and ``finalize``. Each command gets exactly one reply.

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
from concurrent.futures import Future
from pathlib import Path

from . import LIB_DIR, ipc


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` and the frames, most recent first (as Triton's stub reports them)."""
    # The stub's own frames say nothing about the model: show the model's.
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename) != os.path.abspath(__file__)]
    text = f"{type(exc).__name__}: {exc}"
    if frames:
        text += "\n\nAt:\n" + "\n".join(f"  {f.filename}({f.lineno}): {f.name}"
                                        for f in reversed(frames))
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
            if message.get("cmd") in ("bls_response", "control_response"):
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
            segment, (descs,) = ipc.pack_tensors(
                self.prefix, [[(t.name(), t.as_numpy()) for t in request.inputs()]])
            reply = self._call({
                "cmd": "bls", "model_name": request.model_name(),
                "model_version": request.model_version(), "request_id": request.request_id(),
                "requested_outputs": request.requested_output_names(),
                "timeout": request.timeout(), "parameters": request.parameters(),
                "segment": segment, "inputs": descs,
            })
        except pb.TritonModelException:
            ipc.unlink(segment)
            raise
        except Exception as exc:
            ipc.unlink(segment)
            return pb.InferenceResponse(error=pb.TritonError(
                f"failed to send the BLS request: {exc}", pb.TritonError.INTERNAL))
        if reply.get("error"):
            error = reply["error"]
            return pb.InferenceResponse(error=pb.TritonError(
                error["message"], pb.TritonError.__dict__.get(error["code"], pb.TritonError.INTERNAL)))
        (arrays,) = ipc.unpack_tensors(reply.get("segment"), [reply.get("outputs", [])])
        tensors = [pb.Tensor(name, array) for name, array in arrays.items()]
        return pb.InferenceResponse(output_tensors=tensors,
                                    parameters=reply.get("parameters") or None)

    def control(self, action: str, **kwargs):
        reply = self._call({"cmd": "control", "action": action, **kwargs})
        if reply.get("error"):
            raise self.pb.TritonModelException(reply["error"])
        return reply.get("result")

    # ---------------------------------------------------------------- model
    def run_coroutine(self, coroutine):
        """Run a model's ``async def`` on one long-lived loop (BLS ``async_exec`` needs one)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="stub-asyncio",
                             daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

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
                f"{model_file} must define a class named 'TritonPythonModel'")
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
                    "pb.ModelConfig object.")
            return {"config": config.as_dict()}
        if cmd == "initialize":
            self.instance_name = message["args"].get("model_instance_name", "python")
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
        groups = ipc.unpack_tensors(message.get("segment"),
                                    [r["inputs"] for r in message["requests"]])
        requests = []
        for spec, arrays in zip(message["requests"], groups):
            requests.append(pb.InferenceRequest(
                request_id=spec.get("id", ""), correlation_id=0,
                inputs=[pb.Tensor(name, array) for name, array in arrays.items()],
                requested_output_names=spec["requested_outputs"],
                model_name=message.get("model_name", ""), model_version=-1,
                flags=0, timeout=int(spec.get("timeout", 0)), parameters=spec.get("parameters")))
        if not hasattr(self.model, "execute"):
            raise pb.TritonModelException("Python model does not implement `execute` method.")
        returned = self.model.execute(requests)
        if inspect.iscoroutine(returned):
            returned = self.run_coroutine(returned)
        responses = self._collect(requests, returned)

        outputs, errors, parameters = [], [], []
        for request, response in zip(requests, responses):
            if isinstance(response, str):           # a per-request protocol error
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
                outputs.append([(t.name(), t.as_numpy()) for t in response.output_tensors()
                                if t.name() in wanted])
                errors.append(None)
                parameters.append(response.parameters())
        segment, descs = ipc.pack_tensors(self.prefix, outputs)
        return {"segment": segment, "responses": [
            {"outputs": d, "error": e, "parameters": p}
            for d, e, p in zip(descs, errors, parameters)]}

    def _collect(self, requests: list, returned) -> list:
        """One InferenceResponse (or a message) per request, with Triton's checks."""
        pb = self.pb
        if returned is None:
            returned = [None] * len(requests)
        if not isinstance(returned, list):
            raise pb.TritonModelException(
                f"Expected a list in the execute return, found type '{type(returned)}'.")
        if len(returned) != len(requests):
            raise pb.TritonModelException(
                f"Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(returned)}")
        out = []
        for request, response in zip(requests, returned):
            sender = request._sender
            if response is None:
                if sender is not None and sender._response is not None:
                    out.append(sender._response)
                else:
                    out.append("the model returned no response for this request (execute "
                               "returned None and nothing was sent with the response sender)")
                continue
            if not isinstance(response, pb.InferenceResponse):
                raise pb.TritonModelException(
                    f"Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response)}'.")
            if sender is not None and sender._response is not None:
                out.append("the model both returned a response and sent one with the response "
                           "sender for this request")
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
