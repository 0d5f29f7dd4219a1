"""Direct execution (``Model._execute_directly``): a request for a model whose executions are
short, with nothing queued and an instance idle, executes on the thread that submits it, so its
future is answered when ``infer`` returns; a batching delay, a slow model or a large request
goes through the queue to the instance threads as before; an instance never runs two executions
at once either way, and the statistics count both alike."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from model_factory import add_sub_graph, slow_config, slow_graph, write_model
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.infer_request import InferRequest
from triton_ros.core.model import DIRECT_INPUT_BYTES


pytestmark = pytest.mark.unit


@pytest.fixture
def server(explicit_core):
    return explicit_core


class Spy:
    """Wraps an instance's real execute: which thread ran each execution, and how many ran on
    the instance at once."""

    def __init__(self, instance) -> None:
        self.threads: list[str] = []
        self.active = 0
        self.most_active = 0
        self._lock = threading.Lock()
        real = instance.execute

        def execute(requests):
            with self._lock:
                self.active += 1
                self.most_active = max(self.most_active, self.active)
                self.threads.append(threading.current_thread().name)
            try:
                return real(requests)
            finally:
                with self._lock:
                    self.active -= 1

        instance.execute = execute


def load(server, name: str, *, width: int = 16, extra: str = "", instances: int = 1) -> list[Spy]:
    config = "\n".join(
        [
            'backend: "onnxruntime"',
            "max_batch_size: 8",
            f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }}, '
            f'{{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {width} ] }} ]',
            f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }}, '
            f'{{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {width} ] }} ]',
            f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]",
            extra,
        ]
    )
    write_model(server.repo_path, name, add_sub_graph("FP32", ["N", width]), config)
    server.load_model(name)
    return [Spy(instance) for instance in server.get_model(name).instances]


def request(name: str, width: int = 16, seed: int = 0) -> InferRequest:
    rng = np.random.default_rng(seed)
    return InferRequest(
        name,
        {
            "INPUT0": rng.standard_normal((1, width)).astype(np.float32),
            "INPUT1": rng.standard_normal((1, width)).astype(np.float32),
        },
    )


def check(req: InferRequest, timeout: float = 10.0) -> None:
    response = req.future.result(timeout=timeout)
    a, b = req.inputs["INPUT0"], req.inputs["INPUT1"]
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(response.outputs["OUTPUT1"], a - b)


def until_direct(server, name: str, spy: Spy, tries: int = 500) -> int:
    """Requests until one executes on this thread (the model's mean execution time has been
    measured as short); the number sent. A slow first run of ONNX Runtime raises the mean for a
    while, and so may a loaded machine: hence up to ``tries``."""
    for i in range(tries):
        req = request(name, seed=100 + i)
        before = len(spy.threads)
        future = server.infer(req)
        done = future.done()
        check(req)
        if done:
            assert spy.threads[before:] == [threading.current_thread().name]
            return i + 1
    raise AssertionError(f"no request of {tries} executed on the caller")


def warm(server, name: str, width: int = 16, n: int = 20) -> None:
    """Executions enough for the model's mean execution time to be measured."""
    for i in range(n):
        req = request(name, width, seed=100 + i)
        server.infer(req)
        check(req)


@pytest.mark.parametrize("extra", ["", "dynamic_batching { }"], ids=["no-batcher", "no-delay"])
def test_a_short_model_executes_on_the_caller(server, extra):
    (spy,) = load(server, "quick", extra=extra)
    sent = until_direct(server, "quick", spy)
    assert spy.most_active == 1
    (stats,) = server.model_statistics("quick", 1)
    # counted as the instance's own thread counts an execution
    assert stats.inference_count == stats.execution_count == sent
    assert stats.success.count == stats.queue.count == stats.compute_infer.count == sent


def queued(server, name: str, spy: Spy, width: int = 16) -> None:
    """The next request goes through the queue to the instance's own thread."""
    before = len(spy.threads)
    req = request(name, width, seed=2)
    future = server.infer(req)
    assert not future.done()
    check(req, timeout=60)
    (thread,) = spy.threads[before:]
    assert thread.startswith(f"{name}:1:"), thread


def test_a_batching_delay_keeps_the_queue(server):
    (spy,) = load(
        server, "delayed", extra="dynamic_batching { max_queue_delay_microseconds: 200000 }"
    )
    warm(server, "delayed")
    queued(server, "delayed", spy)


def test_a_large_request_keeps_the_queue(server):
    width = DIRECT_INPUT_BYTES // 4  # two FP32 inputs of this width: twice the bound
    (spy,) = load(server, "wide", width=width)
    warm(server, "wide", width)
    queued(server, "wide", spy, width)


def test_a_slow_model_keeps_the_queue(server):
    write_model(server.repo_path, "slow", slow_graph(size=256, repeats=1), slow_config("slow"))
    server.load_model("slow")
    (instance,) = server.get_model("slow").instances
    spy = Spy(instance)
    for i in range(4):
        req = InferRequest("slow", {"INPUT0": np.full((1, 1), float(i), np.float32)})
        future = server.infer(req)
        assert not future.done()
        np.testing.assert_array_equal(future.result(timeout=60).outputs["OUTPUT0"], [[float(i)]])
    assert all(t.startswith("slow:1:") for t in spy.threads), spy.threads


def test_an_instance_runs_one_execution_at_a_time(server):
    (spy,) = load(server, "shared")
    # Six clients on two cores stretch each execution's wall time: keep the model eligible.
    server.get_model("shared").direct_execution_ns = 50_000_000
    sent = until_direct(server, "shared", spy)
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            for i in range(300):
                req = request("shared", seed=1000 * k + i)
                server.infer(req)
                check(req)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,), name=f"client-{k}") for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert spy.most_active == 1
    ran = spy.threads[sent:]
    assert len(ran) == 1800
    # both ways were taken: on the clients' threads and, when the instance was busy, its own
    assert any(t.startswith("client-") for t in ran)
    assert any(t.startswith("shared:1:") for t in ran)
    (stats,) = server.model_statistics("shared", 1)
    assert stats.success.count == 1800 + sent


def test_a_callback_of_the_answer_may_wait_on_the_same_model(server):
    """The instance's lock is released before the answers go out: a done-callback that waits
    on another request of the same single-instance model gets it answered."""
    load(server, "again")
    server.get_model("again").direct_execution_ns = 50_000_000  # eligible on a loaded machine
    warm(server, "again")
    answered: list[InferRequest] = []
    failures: list[BaseException] = []

    def on_done(_) -> None:
        inner = request("again", seed=7)
        try:
            server.infer(inner).result(timeout=20)
            answered.append(inner)
        except BaseException as exc:  # a callback's exception is only logged: keep it
            failures.append(exc)

    outer = request("again", seed=6)
    outer.future.add_done_callback(on_done)
    assert server.infer(outer).done()  # executed directly, callback included
    check(outer)
    assert not failures, failures
    (inner,) = answered
    check(inner)


def test_unloading_while_clients_execute_directly(server):
    """Unload (and load again) while four clients keep a short model busy: every request is
    answered, correctly or with the status of a model that is not there (never left waiting),
    and the instances are closed only after the direct executions on them end."""
    load(server, "churn", instances=2)
    server.get_model("churn").direct_execution_ns = 50_000_000  # eligible on a loaded machine
    warm(server, "churn")
    stop = threading.Event()
    answered = [0] * 4
    refused: list[StatusCode] = []
    errors: list[BaseException] = []

    def client(k: int) -> None:
        i = 0
        while not stop.is_set():
            req = request("churn", seed=10_000 * k + i)
            i += 1
            try:
                server.infer(req).result(timeout=20)
            except TritonRosError as exc:
                refused.append(exc.code)
                continue
            except BaseException as exc:  # a hang (timeout) or anything unexpected
                errors.append(exc)
                return
            try:
                check(req)
                answered[k] += 1
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            time.sleep(0.2)
            server.unload_model("churn")
            time.sleep(0.1)
            server.load_model("churn")
        time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[0]
    assert all(n > 0 for n in answered), answered
    assert set(refused) <= {StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND}, set(refused)
