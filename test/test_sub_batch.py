"""ONNX Runtime on the CPU runs a batch of large samples in parts (``max_sub_batch_size``): the
answers are each request's own rows, exactly; a part is whole requests of at most as many rows
as the parameter (or the default element bound) says, and a larger request runs alone, never
split; the reused batch buffers hold one part, not the batch; ``0`` runs the batch whole, as
Triton's backend does; a bad value fails the load. A part's requests are answered before the
next part runs (not under ``preserve_ordering``), each with its own rows. Served by the core,
the scheduler hands a batch out part by part to whichever instance is free; where it cannot
(priority levels, timeouts, ``preserve_ordering``) one instance runs every part. Either way the
statistics count one execution of the whole batch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from model_factory import add_sub_graph, write_model
from triton_ros.core.backends.onnxruntime_backend import SUB_BATCH_ELEMENTS
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.infer_request import InferRequest, InferResponse, RequestedOutput


pytestmark = pytest.mark.unit


@pytest.fixture
def server(explicit_core):
    return explicit_core


def write(
    server, name: str, width: int, parameters: dict[str, str], extra: str = "", instances: int = 1
) -> None:
    lines = [
        'backend: "onnxruntime"',
        "max_batch_size: 16",
        extra,
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }}, '
        f'{{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {width} ] }} ]',
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }}, '
        f'{{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {width} ] }} ]',
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]",
    ]
    lines += [
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
        for k, v in parameters.items()
    ]
    write_model(server.repo_path, name, add_sub_graph("FP32", ["N", width]), "\n".join(lines))
    server.load_model(name)


def load(server, name: str, width: int, parameters: dict[str, str], extra: str = ""):
    write(server, name, width, parameters, extra)
    (instance,) = server.get_model(name).instances
    runs: list[int] = []
    real_run = instance.run

    def counted(inputs, output_names):  # the real session runs; only its rows are noted
        runs.append(int(inputs["INPUT0"].shape[0]))
        return real_run(inputs, output_names)

    instance.run = counted
    return instance, runs


def execute(instance, name: str, width: int, batch_sizes: list[int]):
    rng = np.random.default_rng(len(batch_sizes))
    requests = []
    for rows in batch_sizes:
        request = InferRequest(
            name,
            {
                "INPUT0": rng.standard_normal((rows, width)).astype(np.float32),
                "INPUT1": rng.standard_normal((rows, width)).astype(np.float32),
            },
        )
        request.batch_size = rows
        requests.append(request)
    result = instance.execute(requests)
    for request, response in zip(requests, result.responses):
        assert not isinstance(response, TritonRosError), response
        a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], a + b)
        np.testing.assert_array_equal(response.outputs["OUTPUT1"], a - b)
    assert result.compute_infer_ns > 0
    return result


def test_a_batch_runs_in_parts_of_whole_requests(server):
    instance, runs = load(server, "parts", 4, {"max_sub_batch_size": "3"})
    execute(instance, "parts", 4, [1, 1, 1, 2, 1, 1])  # 7 rows: parts of 3, 3 and 1
    assert runs == [3, 3, 1]
    # the buffers that assemble a part hold one part, not the batch
    assert all(buf.shape[0] <= 3 for buf in instance._batch_buffers.values())
    runs.clear()
    # a request is never split: one of more rows than a part runs alone
    execute(instance, "parts", 4, [2, 4, 1, 1])
    assert runs == [2, 4, 2]
    runs.clear()
    execute(instance, "parts", 4, [2, 1])  # within one part: one run
    assert runs == [3]
    runs.clear()
    execute(instance, "parts", 4, [5])  # one request: one run
    assert runs == [5]


def test_zero_runs_the_batch_whole(server):
    instance, runs = load(server, "whole", 4, {"max_sub_batch_size": "0"})
    execute(instance, "whole", 4, [2, 4, 1, 5])
    assert runs == [12]
    # nothing to hand out: the scheduler sends whole batches without asking for parts
    assert server.get_model("whole").scheduler._part_rows is None


def test_default_bounds_the_elements_of_a_run(server):
    # small rows (8 elements over both inputs): the whole batch, where batching pays
    instance, runs = load(server, "small", 4, {})
    execute(instance, "small", 4, [3, 5, 8])
    assert runs == [16]
    # 2 x 20000 elements a row: as many rows as fit in SUB_BATCH_ELEMENTS, over both inputs
    width = 20_000
    assert SUB_BATCH_ELEMENTS // (2 * width) == 3
    instance, runs = load(server, "large", width, {})
    execute(instance, "large", width, [1, 1, 2, 1])
    assert runs == [2, 3]
    # camera-sized images run one a run; small ones together
    assert instance.rows_per_run(3 * 224 * 224) == 1
    assert instance.rows_per_run(3 * 64 * 64) == 10


@pytest.mark.parametrize("value", ["-1", "three"])
def test_a_bad_value_fails_the_load(server, value):
    with pytest.raises(TritonRosError) as err:
        load(server, "bad", 4, {"max_sub_batch_size": value})
    assert err.value.code == StatusCode.INVALID_ARG
    assert "max_sub_batch_size" in err.value.message


# How the batch's parts run: handed out by the scheduler (a plain FIFO queue), or all by one
# instance, answered part by part (priority levels) or together (preserve_ordering).
QUEUES = {
    "handed_out": "",
    "levels": "priority_levels: 2 default_priority_level: 1",
    "ordered": "preserve_ordering: true",
}


@pytest.mark.parametrize("queue", sorted(QUEUES))
def test_a_part_is_answered_before_the_next_part_runs(server, queue):
    # The batcher sends the batch once its 4 requests are queued (a preferred size; the delay is
    # far longer); each request is a part of its own.
    batching = (
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: "
        f"10000000 {QUEUES[queue]} }}"
    )
    instance, runs = load(server, "early", 4, {"max_sub_batch_size": "1"}, batching)
    rng = np.random.default_rng(7)
    seen: list[tuple[int, int]] = []  # (request, runs made when it was answered)
    lock = threading.Lock()
    requests = []
    for index in range(4):
        request = InferRequest(
            "early",
            {
                "INPUT0": rng.standard_normal((1, 4)).astype(np.float32),
                "INPUT1": rng.standard_normal((1, 4)).astype(np.float32),
            },
            id=str(index),
        )
        request.future.add_done_callback(
            lambda _, index=index: (lock.acquire(), seen.append((index, len(runs))), lock.release())
        )
        requests.append(request)
    futures = [server.infer(r) for r in requests]
    for request, future in zip(requests, futures):
        response = future.result(timeout=30)
        a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], a + b)
        np.testing.assert_array_equal(response.outputs["OUTPUT1"], a - b)
        assert response.id == request.id and response.model_name == "early"
    assert runs == [1, 1, 1, 1]
    if queue == "ordered":  # the batch's answers leave together, after its last run
        assert sorted(seen) == [(0, 4), (1, 4), (2, 4), (3, 4)]
    else:  # each answered after its own run, before the next
        assert sorted(seen) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    stats = server.get_model("early").stats.snapshot()
    assert (stats.inference_count, stats.execution_count) == (4, 1)
    assert stats.success.count == 4 and stats.fail.count == 0
    assert stats.compute_infer.count == 4
    assert server.get_model("early").in_flight_count() == 0


@pytest.mark.parametrize("queue", ["handed_out", "levels"])
def test_a_failing_part_fails_only_the_requests_not_answered(server, queue):
    instance, runs = load(
        server,
        "halfway",
        4,
        {"max_sub_batch_size": "1"},
        "dynamic_batching { preferred_batch_size: [ 3 ] "
        f"max_queue_delay_microseconds: 10000000 {QUEUES[queue]} }}",
    )
    real_run = instance.run
    calls = []

    def second_fails(inputs, output_names):
        calls.append(1)
        if len(calls) == 2:  # the first part ran; the second fails
            raise RuntimeError("device lost")
        return real_run(inputs, output_names)

    instance.run = second_fails
    requests = [
        InferRequest(
            "halfway",
            {"INPUT0": np.ones((1, 4), np.float32), "INPUT1": np.ones((1, 4), np.float32)},
        )
        for _ in range(3)
    ]
    futures = [server.infer(r) for r in requests]
    outcomes = [f.exception(timeout=30) for f in futures]
    assert outcomes[0] is None  # its part ran: answered
    error = outcomes[1]  # the failing part
    assert isinstance(error, TritonRosError) and "device lost" in error.message
    stats = server.get_model("halfway").stats.snapshot()
    if queue == "handed_out":  # the last part is an execution of its own: it runs
        assert outcomes[2] is None and runs == [1, 1]
        assert (stats.success.count, stats.fail.count) == (2, 1)
    else:  # one instance's execution of the batch: the rest fails with it
        assert isinstance(outcomes[2], TritonRosError) and outcomes[2].message == error.message
        assert runs == [1] and (stats.success.count, stats.fail.count) == (1, 2)
    # one execution of the batch either way, of the rows that were answered
    assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [
        (stats.success.count, 1)
    ]
    assert server.get_model("halfway").in_flight_count() == 0


def test_a_batch_is_handed_out_part_by_part_to_the_free_instances(server):
    # Two instances, one request a part: the batch of four the batcher sends is run by both,
    # in arrival order, instead of by one instance in turn while the other idles.
    write(
        server,
        "shared",
        4,
        {"max_sub_batch_size": "1"},
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000 }",
        instances=2,
    )
    model = server.get_model("shared")
    started: list[tuple[str, int]] = []  # (instance, request) as each run starts
    lock = threading.Lock()
    second_started = threading.Event()
    for instance in model.instances:

        def run(inputs, output_names, instance=instance, real_run=instance.run):
            with lock:
                started.append((instance.name, int(inputs["INPUT0"][0, 0])))
                if len(started) == 2:
                    second_started.set()
            if len(started) == 1:  # the first part waits for the second to start
                assert second_started.wait(timeout=30), "the other instance never started"
            return real_run(inputs, output_names)

        instance.run = run
    requests = [
        InferRequest(
            "shared",
            {"INPUT0": np.full((1, 4), index, np.float32), "INPUT1": np.ones((1, 4), np.float32)},
        )
        for index in range(4)
    ]
    futures = [server.infer(r) for r in requests]
    for index, future in enumerate(futures):
        np.testing.assert_array_equal(
            future.result(timeout=30).outputs["OUTPUT0"], np.full((1, 4), index + 1, np.float32)
        )
    first_two = started[:2]
    assert sorted(r for _, r in first_two) == [0, 1]  # the batch's first two parts,
    assert first_two[0][0] != first_two[1][0]  # on both instances at once
    assert sorted(r for _, r in started) == [0, 1, 2, 3]
    stats = model.stats.snapshot()  # the batch the batcher sent: one execution of 4
    assert (stats.inference_count, stats.execution_count) == (4, 1)
    assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [(4, 1)]
    assert stats.compute_infer.count == 4


def test_a_response_that_fails_to_finish_is_left_as_it_was(server):
    # _answer_early leaves such a request to its batch, which finishes it again: the second
    # attempt must see the outputs the model produced, not ones half classified by the first.
    load(server, "finish", 4, {})
    model = server.get_model("finish")
    request = InferRequest(
        "finish",
        {},
        requested_outputs=(
            RequestedOutput("OUTPUT0", class_count=2),
            RequestedOutput("MISSING", class_count=2),
        ),
    )
    produced = np.array([[0.1, 0.9, 0.3, 0.2]], dtype=np.float32)
    response = InferResponse("finish", 1, "", {"OUTPUT0": produced})
    for _ in range(2):
        with pytest.raises(TritonRosError, match="did not produce output 'MISSING'"):
            model._finish_response(request, response)
        assert response.outputs["OUTPUT0"] is produced


@pytest.mark.parametrize("drain", [True, False])
def test_a_batch_whose_parts_wait_is_answered_when_the_model_stops(server, drain):
    # Unloading while the rest of a sent batch waits at the head of the queue: drained, every
    # part still runs; failed, the parts not taken are answered UNAVAILABLE. Nothing hangs.
    write(
        server,
        "stops",
        4,
        {"max_sub_batch_size": "1"},
        "dynamic_batching { preferred_batch_size: [ 6 ] max_queue_delay_microseconds: 10000000 }",
        instances=2,
    )
    model = server.get_model("stops")
    running = threading.Event()
    for instance in model.instances:

        def run(inputs, output_names, real_run=instance.run):
            running.set()
            threading.Event().wait(0.2)  # long enough for the unload to find parts
            return real_run(inputs, output_names)

        instance.run = run
    requests = [
        InferRequest(
            "stops",
            {"INPUT0": np.full((1, 4), i, np.float32), "INPUT1": np.ones((1, 4), np.float32)},
        )
        for i in range(6)
    ]
    futures = [server.infer(r) for r in requests]
    assert running.wait(timeout=30)
    if drain:
        server.unload_model("stops")
    else:
        model.scheduler.stop(drain=False)
    outcomes = [f.exception(timeout=30) for f in futures]  # every request answered
    answered = [i for i, error in enumerate(outcomes) if error is None]
    for i in answered:
        np.testing.assert_array_equal(
            futures[i].result().outputs["OUTPUT0"], np.full((1, 4), i + 1, np.float32)
        )
    if drain:
        assert answered == list(range(6))
    else:  # the parts already running answered; the rest refused as stopping
        assert 1 <= len(answered) < 6
        for error in outcomes:
            assert error is None or error.code == StatusCode.UNAVAILABLE
    assert model.in_flight_count() == 0


def test_the_rest_of_a_sent_batch_is_not_counted_against_max_queue_size(server):
    # As in Triton, a batch the batcher sent has left the queue: its parts still waiting for an
    # instance do not make max_queue_size refuse new requests.
    write(
        server,
        "bounded",
        4,
        {"max_sub_batch_size": "1"},
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000 "
        "default_queue_policy { max_queue_size: 4 } }",
    )
    model = server.get_model("bounded")
    (instance,) = model.instances
    running = threading.Event()
    real_run = instance.run

    def run(inputs, output_names):
        running.set()
        threading.Event().wait(0.2)
        return real_run(inputs, output_names)

    instance.run = run

    def request(i):
        return InferRequest(
            "bounded",
            {"INPUT0": np.full((1, 4), i, np.float32), "INPUT1": np.ones((1, 4), np.float32)},
        )

    futures = [server.infer(request(i)) for i in range(4)]
    assert running.wait(timeout=30)  # the batch of 4 sent: 3 parts wait
    futures += [server.infer(request(i)) for i in range(4, 8)]
    for i, future in enumerate(futures):
        np.testing.assert_array_equal(
            future.result(timeout=30).outputs["OUTPUT0"], np.full((1, 4), i + 1, np.float32)
        )
