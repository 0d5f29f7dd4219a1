"""Triton's dynamic batcher semantics, on the real core with real onnxruntime models.

Timing is only ever asserted as a lower bound (a delay was waited) or with a wide margin against
a long configured delay, so a slow or loaded machine cannot make these tests fail.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from model_factory import add_sub_graph, identity_graph, slow_config, slow_graph, write_model
from processes import wait_until
from triton_ros.core import InferenceServer, InferRequest, ServerOptions, StatusCode, TritonRosError
from triton_ros.core.dynamic_batch_scheduler import TIMER_SLACK_NS


pytestmark = pytest.mark.unit


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(**models) -> InferenceServer:
        repo = tmp_path / "repo"
        for name, (graph, config) in models.items():
            write_model(repo, name, graph, config)
        server = InferenceServer(ServerOptions(model_repositories=(str(repo),)))
        server.start()
        servers.append(server)
        for name in models:
            assert server.model_ready(name), server.repository_index()
        return server

    yield start
    for server in servers:
        server.stop()


def add_sub_config(
    name: str,
    *,
    max_batch_size: int = 8,
    dynamic_batching: str = "dynamic_batching { }",
    instances: int = 1,
) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{dynamic_batching}
"""


def add_sub_request(model: str, rows: int, seed: int, **kw) -> InferRequest:
    rng = np.random.default_rng(seed)
    return InferRequest(
        model,
        {
            "INPUT0": rng.random((rows, 4), dtype=np.float32),
            "INPUT1": rng.random((rows, 4), dtype=np.float32),
        },
        **kw,
    )


def slow_request(rows: int = 1, value: float = 0.0, **kw) -> InferRequest:
    return InferRequest("slow", {"INPUT0": np.full((rows, 1), value, np.float32)}, **kw)


def batch_sizes(server: InferenceServer, model: str) -> dict[int, int]:
    stats = server.model_statistics(model)[0]
    return {b.batch_size: b.compute_infer.count for b in stats.batch_stats}


def wait_until_executing(server: InferenceServer, model: str, timeout: float = 30.0) -> None:
    """Until the model's queue is empty while a request is in flight (the blocker runs)."""
    m = server.get_model(model)
    wait_until(
        lambda: m.scheduler.queue_size() == 0 and m.in_flight_count() > 0,
        timeout,
        "the blocker to start executing",
        interval=0.002,
    )


def completion_order(requests: list[InferRequest]) -> list[str]:
    order: list[str] = []
    lock = threading.Lock()
    for r in requests:

        def done(_f, rid=r.id):
            with lock:
                order.append(rid)

        r.future.add_done_callback(done)
    return order


def test_preferred_batch_size_executes_at_once(serve):
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m",
                dynamic_batching="dynamic_batching { preferred_batch_size: [ 4 ] "
                "max_queue_delay_microseconds: 20000000 }",
            ),
        )
    )
    start = time.monotonic()
    futures = [server.infer(add_sub_request("m", 1, i)) for i in range(4)]
    for f in futures:
        f.result(timeout=15)
    # The 20 s delay was not waited: the preferred size sent the batch at once.
    assert time.monotonic() - start < 15
    assert batch_sizes(server, "m") == {4: 1}


def test_max_queue_delay_is_honoured(serve):
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m",
                dynamic_batching="dynamic_batching { preferred_batch_size: [ 4 ] "
                "max_queue_delay_microseconds: 300000 }",
            ),
        )
    )
    start = time.monotonic()
    futures = [server.infer(add_sub_request("m", 1, i)) for i in range(2)]
    for f in futures:
        f.result(timeout=30)
    assert time.monotonic() - start >= 0.3  # waited for more requests
    assert batch_sizes(server, "m") == {2: 1}  # and sent what had gathered, together


def test_batches_never_exceed_max_batch_size(serve):
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m",
                max_batch_size=8,
                dynamic_batching="dynamic_batching { preferred_batch_size: [ 8 ] "
                "max_queue_delay_microseconds: 200000 }",
            ),
        )
    )
    futures = [server.infer(add_sub_request("m", 1, i)) for i in range(12)]
    for f in futures:
        f.result(timeout=30)
    sizes = batch_sizes(server, "m")
    assert sum(size * count for size, count in sizes.items()) == 12
    assert max(sizes) <= 8
    assert sizes.get(8) == 1


def test_each_response_gets_exactly_its_own_rows(serve):
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m",
                max_batch_size=8,
                instances=2,
                dynamic_batching="dynamic_batching { max_queue_delay_microseconds: 2000 }",
            ),
        )
    )
    requests = [add_sub_request("m", 1 + i % 3, i, id=str(i)) for i in range(60)]
    futures = [server.infer(r) for r in requests]
    for request, future in zip(requests, futures):
        response = future.result(timeout=60)
        a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
        assert response.id == request.id
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], a + b)
        np.testing.assert_array_equal(response.outputs["OUTPUT1"], a - b)
    stats = server.model_statistics("m")[0]
    assert stats.inference_count == sum(1 + i % 3 for i in range(60))
    assert stats.success.count == 60
    assert stats.execution_count < 60  # requests were batched together


def variable_length_model(*, preferred: int, delay_us: int) -> tuple:
    """An identity model "var" over FP32 rows of any length, batched by its dynamic batcher."""
    config = f"""
name: "var"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ preferred_batch_size: [ {preferred} ]
                   max_queue_delay_microseconds: {delay_us} }}
"""
    return identity_graph("FP32", ["N", "L"]), config


def test_without_dynamic_batching_each_request_executes_alone(serve):
    server = serve(m=(add_sub_graph(), add_sub_config("m", dynamic_batching="")))
    futures = [server.infer(add_sub_request("m", 2, i)) for i in range(10)]
    for f in futures:
        f.result(timeout=30)
    assert batch_sizes(server, "m") == {2: 10}


def test_only_requests_of_equal_shape_batch_together(serve):
    server = serve(var=variable_length_model(preferred=8, delay_us=300000))
    requests = [
        InferRequest("var", {"INPUT0": np.full((1, length), i, np.float32)})
        for i, length in enumerate([3, 3, 5, 5])
    ]
    futures = [server.infer(r) for r in requests]
    for r, f in zip(requests, futures):
        np.testing.assert_array_equal(f.result(timeout=30).outputs["OUTPUT0"], r.inputs["INPUT0"])
    # Triton stops a batch at the first request of another shape: [3,3] then [5,5].
    assert batch_sizes(server, "var") == {2: 2}


def test_higher_priority_requests_execute_first(serve):
    server = serve(
        slow=(
            slow_graph(),
            slow_config(
                "slow",
                dynamic_batching="dynamic_batching { priority_levels: 2 "
                "default_priority_level: 2 }",
            ),
        )
    )
    blocker = slow_request(id="blocker")
    server.infer(blocker)
    wait_until_executing(server, "slow")
    queued = [
        slow_request(id="low0", priority=2),
        slow_request(id="low1"),  # default level 2
        slow_request(id="high0", priority=1),
        slow_request(id="high1", priority=1),
    ]
    order = completion_order(queued)
    futures = [server.infer(r) for r in queued]
    for f in futures:
        f.result(timeout=60)
    assert order == ["high0", "high1", "low0", "low1"]


def test_full_queue_rejects_with_unavailable(serve):
    server = serve(
        slow=(
            slow_graph(),
            slow_config(
                "slow",
                dynamic_batching="dynamic_batching { default_queue_policy { max_queue_size: 2 } }",
            ),
        )
    )
    server.infer(slow_request(id="blocker"))
    wait_until_executing(server, "slow")
    accepted = [server.infer(slow_request(id=f"q{i}")) for i in range(2)]
    rejected = server.infer(slow_request(id="over"))
    with pytest.raises(TritonRosError) as err:
        rejected.result(timeout=5)
    assert err.value.code is StatusCode.UNAVAILABLE
    assert "Exceeds maximum queue size" in err.value.message
    for f in accepted:  # nobody else lost their data
        assert f.result(timeout=60).outputs["OUTPUT0"].shape == (1, 1)
    stats = server.model_statistics("slow")[0]
    assert stats.failures_by_reason == {"REJECTED": 1}


def test_queued_request_past_its_timeout_is_rejected(serve):
    # The blocker runs for about 12 times the timeout (4 rows of a 9-MatMul chain, ~0.15 s on
    # a fast core), so the late request cannot slip into a batch before it expires.
    server = serve(
        slow=(
            slow_graph(repeats=9),
            slow_config(
                "slow",
                max_batch_size=4,
                dynamic_batching=(
                    "dynamic_batching { default_queue_policy { timeout_action: REJECT "
                    "default_timeout_microseconds: 10000 } }"
                ),
            ),
        )
    )
    blocker = server.infer(slow_request(rows=4, id="blocker"))
    wait_until_executing(server, "slow")
    late = server.infer(slow_request(id="late"))
    with pytest.raises(TritonRosError) as err:
        late.result(timeout=60)
    assert err.value.code is StatusCode.UNAVAILABLE
    assert "Request timeout expired" in err.value.message
    assert blocker.result(timeout=60).outputs["OUTPUT0"].shape == (4, 1)


def test_request_may_lower_the_timeout_when_override_is_allowed(serve):
    server = serve(
        slow=(
            slow_graph(),
            slow_config(
                "slow",
                max_batch_size=4,
                dynamic_batching=(
                    "dynamic_batching { default_queue_policy { "
                    "default_timeout_microseconds: 60000000 "
                    "allow_timeout_override: true } }"
                ),
            ),
        )
    )
    server.infer(slow_request(rows=4, id="blocker"))
    wait_until_executing(server, "slow")
    short = server.infer(slow_request(id="short", timeout_us=1000))
    patient = server.infer(slow_request(id="patient"))
    with pytest.raises(TritonRosError) as err:
        short.result(timeout=60)
    assert err.value.code is StatusCode.UNAVAILABLE
    assert patient.result(timeout=60).outputs["OUTPUT0"].shape == (1, 1)


def test_delay_action_moves_expired_requests_behind_the_others(serve):
    server = serve(
        slow=(
            slow_graph(),
            slow_config(
                "slow",
                dynamic_batching=(
                    "dynamic_batching { default_queue_policy { timeout_action: DELAY "
                    "default_timeout_microseconds: 60000000 allow_timeout_override: true } }"
                ),
            ),
        )
    )
    server.infer(slow_request(id="blocker"))
    wait_until_executing(server, "slow")
    expiring = slow_request(id="expiring", timeout_us=1000)
    fresh = slow_request(id="fresh")
    order = completion_order([expiring, fresh])
    futures = [server.infer(expiring), server.infer(fresh)]
    for f in futures:
        f.result(timeout=60)  # DELAY never rejects
    assert order == ["fresh", "expiring"]


def test_preserve_ordering_returns_responses_in_request_order(serve):
    server = serve(
        slow=(
            slow_graph(),
            slow_config(
                "slow",
                max_batch_size=4,
                instances=2,
                dynamic_batching="dynamic_batching { preserve_ordering: true }",
            ),
        )
    )
    # A heavy request first, light ones after: the second instance finishes the light ones
    # first, yet their responses must wait for the heavy one.
    requests = [slow_request(rows=4, id="heavy")] + [slow_request(id=f"light{i}") for i in range(3)]
    order = completion_order(requests)
    futures = []
    for r in requests:
        futures.append(server.infer(r))
        time.sleep(0.01)  # arrival order is the order to preserve
    for f in futures:
        f.result(timeout=60)
    assert order == [r.id for r in requests]


def test_priority_and_timeout_request_parameters_over_grpc():
    """tritonclient's priority= and timeout= arrive in the core's request unchanged (the batcher's
    handling of them is tested in-process above)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc._utils import _get_inference_request

    from triton_ros.frontend.grpc.grpc_codec import decode_infer_request

    x = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    x.set_data_from_numpy(np.zeros((1, 1), np.float32))
    message = _get_inference_request(
        model_name="slow",
        inputs=[x],
        model_version="",
        request_id="r1",
        outputs=None,
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=1,
        timeout=1500,
        parameters=None,
    )
    request = decode_infer_request(message)
    assert (request.priority, request.timeout_us, request.id) == (1, 1500, "r1")
    assert request.inputs["INPUT0"].shape == (1, 1)


def test_responses_survive_the_reuse_of_the_batch_buffer(serve):
    """Batches are assembled in a buffer each instance reuses; an Identity model's outputs may be
    the input's memory. Responses of earlier batches must keep their values after later batches
    overwrite the buffer."""
    config = """
name: "ident"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 20000000 }
"""
    server = serve(ident=(identity_graph("FP32", ["N", 3]), config))
    kept = []
    for batch in range(5):
        values = [np.full((1, 3), 10 * batch + i, np.float32) for i in range(4)]
        futures = [server.infer(InferRequest("ident", {"INPUT0": v})) for v in values]
        kept += [(v, f.result(timeout=30)) for v, f in zip(values, futures)]
    for value, response in kept:
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], value)
    assert batch_sizes(server, "ident") == {4: 5}


def test_a_backend_returning_its_input_buffer_gets_it_copied(serve):
    """A backend whose output is its (reused) batch input: responses keep their own values."""
    import types

    from triton_ros.core.backend_model import BatchedTensorInstance
    from triton_ros.core.infer_request import normalize_request

    class Echo(BatchedTensorInstance):
        def run(self, inputs, output_names):
            return {"OUTPUT0": inputs["INPUT0"]}

    config_text = """
name: "ident"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { }
"""
    server = serve(ident=(identity_graph("FP32", ["N", 3]), config_text))
    config = server.get_model("ident").config
    echo = Echo(
        types.SimpleNamespace(config=config, version=1),
        name="echo",
        kind="KIND_CPU",
        device_id=None,
    )
    kept = []
    for batch in range(3):
        requests = [
            InferRequest("ident", {"INPUT0": np.full((1, 3), 10 * batch + i, np.float32)})
            for i in range(3)
        ]
        for r in requests:
            normalize_request(config, r)
        result = echo.execute(requests)
        kept += list(zip(requests, result.responses))
    for request, response in kept:
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], request.inputs["INPUT0"])


@pytest.mark.skipif(
    not Path("/proc/self/timerslack_ns").exists(),
    reason="Linux's per-thread timer slack is not readable here",
)
def test_instance_threads_wait_out_the_delay_with_a_tight_timer_slack(serve):
    # The kernel's default slack (50 us) let every timed wait of the batcher end up to 50 us
    # late; the instance threads, which sleep out max_queue_delay_microseconds, lower theirs.
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m", dynamic_batching="dynamic_batching { max_queue_delay_microseconds: 2000 }"
            ),
        )
    )
    server.infer(add_sub_request("m", 1, 0)).result(timeout=30)
    threads = [t for t in threading.enumerate() if t.name.startswith("m:1:")]
    assert threads, [t.name for t in threading.enumerate()]
    for thread in threads:
        slack = int(Path(f"/proc/{thread.native_id}/timerslack_ns").read_text())
        assert slack == TIMER_SLACK_NS, (thread.name, slack)
    # other threads keep the system's slack: the setting is per thread, not the process's
    assert int(Path("/proc/self/timerslack_ns").read_text()) != TIMER_SLACK_NS


def count_batch_decisions(server: InferenceServer, model: str) -> list[int]:
    """A counter of the scheduler's batch decisions (each time an instance thread looks at the
    queue to decide whether to send a batch or sleep on)."""
    scheduler = server.get_model(model).scheduler
    form = scheduler._form_batch
    calls = [0]

    def counted(now):
        calls[0] += 1
        return form(now)

    scheduler._form_batch = counted
    return calls


def test_arrivals_that_cannot_complete_a_batch_let_the_instance_sleep(serve):
    # As in Triton's Enqueue, a request wakes the waiting instance thread only when it can change
    # the decision; five requests within the delay cost two decisions (the first arrival and the
    # delay's end), not one per arrival.
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m", dynamic_batching="dynamic_batching { max_queue_delay_microseconds: 400000 }"
            ),
        )
    )
    calls = count_batch_decisions(server, "m")
    futures = []
    for i in range(5):
        futures.append(server.infer(add_sub_request("m", 1, i)))
        time.sleep(0.02)  # each arrival while the instance thread sleeps
    for f in futures:
        f.result(timeout=30)
    assert batch_sizes(server, "m") == {5: 1}
    assert calls[0] <= 3, calls[0]


def test_the_request_that_fills_a_batch_wakes_the_instance(serve):
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m",
                max_batch_size=4,
                dynamic_batching="dynamic_batching { max_queue_delay_microseconds: 60000000 }",
            ),
        )
    )
    futures = []
    for i in range(4):
        futures.append(server.infer(add_sub_request("m", 1, i)))
        time.sleep(0.02)
    for f in futures:
        f.result(timeout=30)  # the 60 s delay was not waited
    assert batch_sizes(server, "m") == {4: 1}


def test_a_request_of_another_shape_sends_the_waiting_batch(serve):
    server = serve(var=variable_length_model(preferred=4, delay_us=60000000))
    # [3, 3] waits for more until a length-5 request arrives (3 queued rows: no batch is full)
    requests = [
        InferRequest("var", {"INPUT0": np.full((1, length), i, np.float32)})
        for i, length in enumerate([3, 3, 5, 5, 5, 5])
    ]
    futures = []
    for r in requests[:3]:
        futures.append(server.infer(r))
        time.sleep(0.02)
    for r, f in zip(requests[:2], futures):  # not after the 60 s delay
        np.testing.assert_array_equal(f.result(timeout=30).outputs["OUTPUT0"], r.inputs["INPUT0"])
    futures += [server.infer(r) for r in requests[3:]]  # with the waiting one: preferred 4
    for r, f in zip(requests, futures):
        np.testing.assert_array_equal(f.result(timeout=30).outputs["OUTPUT0"], r.inputs["INPUT0"])
    assert batch_sizes(server, "var") == {2: 1, 4: 1}


def record_instances(server: InferenceServer, model: str) -> list[str]:
    """The name of the instance that executes each batch, in order (each instance's own
    ``execute`` still runs)."""
    ran: list[str] = []
    for instance in server.get_model(model).instances:

        def execute(requests, _instance=instance, _execute=instance.execute):
            ran.append(_instance.name)
            return _execute(requests)

        instance.execute = execute
    return ran


def test_the_instance_idle_last_takes_the_next_batch(serve):
    # At low load one instance serves every request, with its model state warm in the cache;
    # with a plain condition variable the longest-idle instance woke, so two took turns.
    server = serve(
        m=(
            add_sub_graph(),
            add_sub_config(
                "m",
                instances=2,
                dynamic_batching="dynamic_batching { max_queue_delay_microseconds: 1000 }",
            ),
        )
    )
    # The first request may come before both threads wait: both then sleep out its delay and
    # either may take it. From the next one on, the thread that ran the last batch is woken.
    server.infer(add_sub_request("m", 1, 0)).result(timeout=30)
    time.sleep(0.02)
    ran = record_instances(server, "m")
    for i in range(8):
        server.infer(add_sub_request("m", 1, i)).result(timeout=30)
        time.sleep(0.02)  # the instance that ran it is waiting again
    assert len(ran) == 8 and len(set(ran)) == 1, ran


def test_every_instance_still_runs_when_requests_overlap(serve):
    server = serve(slow=(slow_graph(), slow_config("slow", instances=2)))
    ran = record_instances(server, "slow")
    futures = [server.infer(slow_request()) for _ in range(2)]
    for f in futures:
        f.result(timeout=60)
    assert sorted(ran) == sorted(i.name for i in server.get_model("slow").instances), ran
