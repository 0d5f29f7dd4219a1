"""The sequence batcher (core/sequence_batch_scheduler.py) served by a real triton-ros-server and
driven with tritonclient over 127.0.0.1, with the answers tritonserver 2.51 gives to the same
requests (compared by hand with the repository test/sequence_repository.py writes; see
docs/stateful.md).

- Triton's own sequence client examples' steps (gRPC sync, HTTP sync, gRPC stream; uint64 and
  string sequence IDs; the dyna models) against examples/client_examples_repository;
- control inputs with their configured types and values, the model's correlation_id() and
  flags(); direct slots and the not-ready null request in a free row; the backlog;
- implicit state: zeros, a data file, kept between requests, per sequence in batched execution,
  reset by START; a state output listed in the configuration is the client's to see;
- Triton's errors with its codes and messages, over gRPC and HTTP; idle sequences and backlog
  timeouts; statistics as tritonserver counts them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from model_factory import save
from onnx import TensorProto, helper
from processes import wait_until
from sequence_repository import write_sequence_repository
from server_process import ROOT

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples" / "client_examples_repository"
VALUES = [11, 7, 5, 3, 2, 0, 1]


@pytest.fixture(scope="module")
def examples(start_module_server):
    return start_module_server(
        "--model-repository",
        str(EXAMPLES),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple_sequence",
        "--load-model",
        "simple_dyna_sequence",
        "--load-model",
        "simple_string_dyna_sequence",
        timeout=120,
    )


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = write_sequence_repository(tmp_path_factory.mktemp("sequence") / "models")
    return start_module_server("--model-repository", str(repo), timeout=120)


def _int32(module, shape, value, name="INPUT"):
    tensor = module.InferInput(name, list(shape), "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    return tensor


def _expected(values, first, dyna, sequence_id):
    """What Triton's examples expect of simple_sequence (READY * (INPUT + START)) and
    simple_dyna_sequence (+ END * CORRID) for the values [first] + values."""
    out = []
    for i, value in enumerate([first] + values):
        expected = value + (1 if i == 0 else 0)
        if dyna and i == len(values):
            expected += sequence_id
        out.append(expected)
    return out


def _run_sync(module, client, model, sequence_id, values):
    results = []
    for count, value in enumerate(values, start=1):
        result = client.infer(
            model,
            [_int32(module, [1, 1], value)],
            outputs=[module.InferRequestedOutput("OUTPUT")],
            sequence_id=sequence_id,
            sequence_start=count == 1,
            sequence_end=count == len(values),
        )
        results.append(int(result.as_numpy("OUTPUT")[0][0]))
    return results


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
def test_the_sync_sequence_examples_steps(examples, protocol, dyna):
    """simple_{grpc,http}_sequence_sync_infer_client.py's steps: two integer sequences one after
    the other, then a string-ID one, each checked against the examples' expectations."""
    module = grpcclient if protocol == "grpc" else httpclient
    client = examples.client() if protocol == "grpc" else examples.http_client()
    model = "simple_dyna_sequence" if dyna else "simple_sequence"
    assert _run_sync(module, client, model, 1000, [0] + VALUES) == _expected(VALUES, 0, dyna, 1000)
    assert _run_sync(module, client, model, 1001, [100] + [-v for v in VALUES]) == _expected(
        [-v for v in VALUES], 100, dyna, 1001
    )
    string_id = "1002" if dyna else str(uuid.uuid4())
    string_model = "simple_string_dyna_sequence" if dyna else "simple_sequence"
    got = _run_sync(module, client, string_model, string_id, [20] + [-v for v in VALUES])
    if dyna:  # an accumulator; END adds the ID
        expected = list(np.cumsum([20] + [-v for v in VALUES]))
        expected[-1] += 1002
    else:
        expected = [21] + [-v for v in VALUES]
    assert got == expected


def test_the_stream_sequence_example_steps(examples):
    """simple_grpc_sequence_stream_infer_client.py's steps: three sequences sent on one stream
    without waiting, the responses matched to them by request id."""
    client = examples.client()
    got: dict[str, list] = {}
    done = threading.Event()
    expected_count = 3 * (len(VALUES) + 1)

    def callback(result, error):
        assert error is None, error
        sequence, index = result.get_response().id.rsplit("_", 1)
        got.setdefault(sequence, []).append((int(index), int(result.as_numpy("OUTPUT")[0][0])))
        if sum(len(v) for v in got.values()) == expected_count:
            done.set()

    string_id = str(uuid.uuid4())
    client.start_stream(callback=callback)
    try:
        for sequence_id, first, values in (
            (1000, 0, VALUES),
            (1001, 100, [-v for v in VALUES]),
            (string_id, 20, [-v for v in VALUES]),
        ):
            sent = [first] + values
            for count, value in enumerate(sent, start=1):
                client.async_stream_infer(
                    "simple_sequence",
                    [_int32(grpcclient, [1, 1], value)],
                    request_id=f"{sequence_id}_{count}",
                    sequence_id=sequence_id,
                    sequence_start=count == 1,
                    sequence_end=count == len(sent),
                )
        assert done.wait(60)
    finally:
        client.stop_stream()
    for key, first, values in (
        ("1000", 0, VALUES),
        ("1001", 100, [-v for v in VALUES]),
        (string_id, 20, [-v for v in VALUES]),
    ):
        assert [v for _, v in sorted(got[key])] == _expected(values, first, False, 0)
        # a sequence's responses come back in its requests' order
        assert [i for i, _ in got[key]] == sorted(i for i, _ in got[key])


def _send(client, model, sequence_id, value, *, outputs, shape=(1, 1), **flags):
    result = client.infer(
        model,
        [_int32(grpcclient, shape, value)],
        outputs=[grpcclient.InferRequestedOutput(n) for n in outputs],
        sequence_id=sequence_id,
        **flags,
    )
    return {name: result.as_numpy(name).tolist() for name in outputs}


DIRECT_OUTPUTS = ["OUTPUT", "START_OUT", "END_OUT", "READY_OUT", "CORRID_OUT", "BATCH", "IDS"]


def _stats(client, model):
    stats = client.get_inference_statistics(model).model_stats[0]
    return (
        stats.inference_count,
        stats.execution_count,
        stats.inference_stats.success.count,
        stats.inference_stats.fail.count,
        {b.batch_size: b.compute_infer.count for b in stats.batch_stats},
    )


def test_direct_slots_controls_and_the_null_request(server):
    """seq_direct: START fp32 [0.5, 2.5], END int32 [7, 9], READY bool, CORRID uint64; two
    slots. tritonserver 2.51 answered exactly these outputs and statistics."""
    client = server.client()
    before = _stats(client, "seq_direct")
    first = _send(client, "seq_direct", 11, 5, outputs=DIRECT_OUTPUTS, sequence_start=True)
    assert first == {
        "OUTPUT": [[5]],
        "START_OUT": [[2.5]],
        "END_OUT": [[7]],
        "READY_OUT": [[True]],
        "CORRID_OUT": [[11]],
        "BATCH": [[0, 1]],
        "IDS": [[b"11|1"]],
    }
    middle = _send(client, "seq_direct", 11, 6, outputs=DIRECT_OUTPUTS)
    assert (middle["START_OUT"], middle["END_OUT"], middle["IDS"]) == ([[0.5]], [[7]], [[b"11|0"]])
    # A second sequence takes slot 1; alone, its request is row 1 of a batch of two, row 0
    # being a not-ready null request for sequence 11.
    second = _send(client, "seq_direct", 12, 7, outputs=DIRECT_OUTPUTS, sequence_start=True)
    assert (second["BATCH"], second["CORRID_OUT"], second["START_OUT"]) == (
        [[1, 2]],
        [[12]],
        [[2.5]],
    )
    assert _send(client, "seq_direct", 12, 8, outputs=DIRECT_OUTPUTS)["BATCH"] == [[1, 2]]
    last = _send(client, "seq_direct", 11, 9, outputs=DIRECT_OUTPUTS, sequence_end=True)
    assert (last["END_OUT"], last["IDS"], last["BATCH"]) == ([[9]], [[b"11|2"]], [[0, 1]])
    # Slot 0 is free again: a one-request sequence (START and END) takes it.
    both = _send(
        client, "seq_direct", 13, 1, outputs=DIRECT_OUTPUTS, sequence_start=True, sequence_end=True
    )
    assert (both["START_OUT"], both["END_OUT"], both["IDS"], both["BATCH"]) == (
        [[2.5]],
        [[9]],
        [[b"13|3"]],
        [[0, 1]],
    )
    assert _send(client, "seq_direct", 12, 2, outputs=DIRECT_OUTPUTS, sequence_end=True)[
        "BATCH"
    ] == [[1, 2]]
    after = _stats(client, "seq_direct")
    # 7 inferences in 7 executions; the null request is no inference, but its row counts in
    # the executed batch's size (batch_stats 1: 4, 2: 3), as in tritonserver.
    assert (
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2],
        after[3] - before[3],
    ) == (7, 7, 7, 0)
    assert {k: v - before[4].get(k, 0) for k, v in after[4].items()} == {1: 4, 2: 3}


def test_a_third_sequence_waits_in_the_backlog_for_a_free_slot(server):
    client = server.client()
    _send(client, "seq_direct", 21, 1, outputs=["OUTPUT"], sequence_start=True)
    _send(client, "seq_direct", 22, 1, outputs=["OUTPUT"], sequence_start=True)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            _send, client, "seq_direct", 23, 3, outputs=["OUTPUT", "BATCH"], sequence_start=True
        )
        time.sleep(0.5)
        assert not waiting.done()  # both slots are held: sequence 23 is backlogged
        _send(client, "seq_direct", 22, 2, outputs=["OUTPUT"], sequence_end=True)
        got = waiting.result(30)
    assert got["OUTPUT"] == [[3]] and got["BATCH"] == [[1, 2]]  # slot 1, 22's old slot
    _send(client, "seq_direct", 21, 1, outputs=["OUTPUT"], sequence_end=True)
    _send(client, "seq_direct", 23, 1, outputs=["OUTPUT"], sequence_end=True)


def test_implicit_state_zeros_file_and_restart(server):
    """seq_state: ACC from zeros, BASE from initial_state/base ([100, 200] INT64); each
    request sees the state the last one left; a START restarts it; ACC_NEXT (not listed) never
    reaches the client, BASE_NEXT (listed) does."""
    client = server.client()
    outputs = ["OUTPUT", "ACC_OUT", "BASE_NEXT", "IDS"]
    first = _send(client, "seq_state", 77, 5, outputs=outputs, sequence_start=True)
    assert first == {
        "OUTPUT": [[5]],
        "ACC_OUT": [[0]],
        "BASE_NEXT": [[101, 201]],
        "IDS": [[b"77|1"]],
    }
    second = _send(client, "seq_state", 77, 6, outputs=outputs)
    assert (second["OUTPUT"], second["ACC_OUT"], second["BASE_NEXT"]) == (
        [[11]],
        [[5]],
        [[102, 202]],
    )
    restarted = _send(client, "seq_state", 77, 1, outputs=outputs, sequence_start=True)
    assert (restarted["OUTPUT"], restarted["BASE_NEXT"]) == ([[1]], [[101, 201]])
    assert _send(client, "seq_state", 77, 2, outputs=["OUTPUT"]) == {"OUTPUT": [[3]]}
    everything = client.infer(
        "seq_state", [_int32(grpcclient, [1, 1], 3)], sequence_id=77, sequence_end=True
    )
    assert everything.as_numpy("OUTPUT").tolist() == [[6]]
    assert everything.as_numpy("ACC_NEXT") is None  # a state output not listed
    assert everything.as_numpy("BASE_NEXT").tolist() == [[103, 203]]


def test_implicit_state_stays_per_sequence_in_batched_execution(server):
    """Twelve sequences at once over two instances (oldest strategy, up to 4 per batch): every
    sequence sums its own values, and requests of different sequences did execute together."""
    client = server.client()
    before = _stats(client, "seq_state")

    def run(sequence_id):
        values = [int(v) for v in np.random.default_rng(sequence_id).integers(-50, 50, 6)]
        got = [
            _send(
                client,
                "seq_state",
                sequence_id,
                v,
                outputs=["OUTPUT"],
                sequence_start=i == 0,
                sequence_end=i == 5,
            )["OUTPUT"][0][0]
            for i, v in enumerate(values)
        ]
        return got, list(np.cumsum(values))

    with ThreadPoolExecutor(12) as pool:
        for got, expected in pool.map(run, range(300, 312)):
            assert got == expected
    after = _stats(client, "seq_state")
    assert after[0] - before[0] == 72
    batched = {k: v - before[4].get(k, 0) for k, v in after[4].items() if k > 1}
    assert any(batched.values()), after


ERRORS = [
    (
        {},
        "INVALID_ARG",
        "inference request to model 'seq_direct' must specify a non-zero or "
        "non-empty correlation ID",
    ),
    ({"sequence_id": 0, "sequence_start": True}, "INVALID_ARG", "non-zero or non-empty"),
    ({"sequence_id": "", "sequence_start": True}, "INVALID_ARG", "non-zero or non-empty"),
    (
        {"sequence_id": 4242},
        "INVALID_ARG",
        "inference request for sequence 4242 to model 'seq_direct' must specify the START flag on "
        "the first request of the sequence",
    ),
    ({"sequence_id": 4242, "sequence_end": True}, "INVALID_ARG", "must specify the START flag"),
    (
        {"sequence_id": "abc", "sequence_start": True},
        "INVALID_ARG",
        "sequence batching control 'CORRID' data-type is 'BYTES', but model 'seq_direct' expects "
        "'UINT64'",
    ),
]


@pytest.mark.parametrize(
    "kwargs, code, message",
    ERRORS,
    ids=["no id", "id 0", "empty id", "unknown", "unknown end", "type"],
)
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_triton_errors(server, protocol, kwargs, code, message):
    client = server.client() if protocol == "grpc" else server.http_client()
    module = grpcclient if protocol == "grpc" else httpclient
    before = _stats(server.client(), "seq_direct")
    with pytest.raises(InferenceServerException) as caught:
        client.infer("seq_direct", [_int32(module, [1, 1], 1)], **kwargs)
    status = {
        "grpc": {"INVALID_ARG": "StatusCode.INVALID_ARGUMENT"},
        "http": {"INVALID_ARG": "400"},
    }[protocol][code]
    assert caught.value.status() == status
    assert message in caught.value.message()
    # refused as the scheduler enqueues it: not counted, as in tritonserver
    assert _stats(server.client(), "seq_direct")[3] == before[3]


def test_batch_of_two_an_ended_sequence_and_a_conflicting_start(server):
    client = server.client()
    with pytest.raises(
        InferenceServerException,
        match="must specify batch-size 1 due to requirements of sequence batcher",
    ):
        client.infer(
            "seq_direct", [_int32(grpcclient, [2, 1], 1)], sequence_id=31, sequence_start=True
        )
    _send(client, "seq_direct", 32, 1, outputs=["OUTPUT"], sequence_start=True)
    _send(client, "seq_direct", 32, 1, outputs=["OUTPUT"], sequence_start=True)  # restarts it
    _send(client, "seq_direct", 32, 1, outputs=["OUTPUT"], sequence_end=True)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        _send(client, "seq_direct", 32, 1, outputs=["OUTPUT"], sequence_end=True)  # END twice
    assert server.client().is_server_live()


def test_sequence_ids_as_uint64_from_http_and_int64_from_grpc(server):
    """HTTP carries the uint64 itself; gRPC's int64_param -1 is 2**64 - 1 (tritonserver casts
    it); a negative number over HTTP is refused. CORRID INT32 gets the ID's low 32 bits."""
    http = server.http_client()
    top = 2**64 - 1
    result = http.infer(
        "seq_direct",
        [_int32(httpclient, [1, 1], 1)],
        sequence_id=top,
        sequence_start=True,
        sequence_end=True,
    )
    assert result.as_numpy("CORRID_OUT").tolist() == [[top]]
    result = server.client().infer(
        "seq_direct",
        [_int32(grpcclient, [1, 1], 1)],
        sequence_id=-1,
        sequence_start=True,
        sequence_end=True,
    )
    assert result.as_numpy("CORRID_OUT").tolist() == [[top]]
    with pytest.raises(InferenceServerException, match="Unable to parse 'sequence_id'"):
        http.infer(
            "seq_direct", [_int32(httpclient, [1, 1], 1)], sequence_id=-3, sequence_start=True
        )
    result = server.client().infer(
        "seq_idle",
        [_int32(grpcclient, [1], 1)],
        sequence_id=2**32 + 5,
        sequence_start=True,
        sequence_end=True,
    )
    assert result.as_numpy("CORRID_OUT").tolist() == [5]


def test_an_idle_sequence_loses_its_slot_and_a_backlogged_one_takes_it(server):
    """seq_idle: one slot, max_sequence_idle_microseconds 1 s. A sequence that sends nothing
    for longer is released: its next request is unknown; the sequence waiting in the backlog
    meanwhile gets the slot. Its own idle time runs from its last request, backlog included:
    unless it sends the next one at once it is released too (tritonserver 2.51 does both the
    same, to the tenth of a second)."""
    client = server.client()
    _send(client, "seq_idle", 41, 1, outputs=["OUTPUT"], shape=(1,), sequence_start=True)
    started = time.monotonic()
    got = _send(
        client, "seq_idle", 42, 2, outputs=["OUTPUT", "CORRID_OUT"], shape=(1,), sequence_start=True
    )
    waited = time.monotonic() - started
    assert got == {"OUTPUT": [2], "CORRID_OUT": [42]}
    assert 0.5 < waited < 10, waited
    with pytest.raises(
        InferenceServerException,
        match="inference request for sequence 41 to model 'seq_idle' must specify the START flag",
    ):
        _send(client, "seq_idle", 41, 1, outputs=["OUTPUT"], shape=(1,))
    time.sleep(0.3)
    with pytest.raises(
        InferenceServerException,
        match="sequence 42 to model 'seq_idle' must specify the START flag",
    ):
        _send(client, "seq_idle", 42, 1, outputs=["OUTPUT"], shape=(1,), sequence_end=True)


def test_a_backlogged_request_whose_timeout_expires_fails(server):
    client = server.client()
    _send(client, "seq_idle", 51, 1, outputs=["OUTPUT"], shape=(1,), sequence_start=True)
    before = _stats(client, "seq_idle")
    with pytest.raises(InferenceServerException) as caught:
        client.infer(
            "seq_idle",
            [_int32(grpcclient, [1], 1)],
            sequence_id=52,
            sequence_start=True,
            timeout=200_000,
        )
    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    assert caught.value.message() == "timeout of the corresponding sequence has been expired"
    assert _stats(client, "seq_idle")[3] == before[3] + 1  # counted, as in tritonserver
    _send(client, "seq_idle", 51, 1, outputs=["OUTPUT"], shape=(1,), sequence_end=True)


def test_a_reload_ends_the_sequences_of_the_old_version(start_server, tmp_path):
    """A model reloaded mid-sequence (a changed configuration): its sequences were the old
    version's; the next request of one without START is refused, and a new sequence runs on the
    new version. A load that changes nothing reloads nothing. (tritonserver 2.51 the same.)"""
    repo = write_sequence_repository(tmp_path / "models", ["seq_state"])
    server = start_server(
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "seq_state",
        timeout=120,
    )
    client = server.client()
    assert _send(client, "seq_state", 9, 4, outputs=["OUTPUT"], sequence_start=True)["OUTPUT"] == [
        [4]
    ]
    client.load_model("seq_state")  # unchanged: nothing reloads, the sequence goes on
    assert _send(client, "seq_state", 9, 1, outputs=["OUTPUT"])["OUTPUT"] == [[5]]
    config = client.get_model_config("seq_state", as_json=True)["config"]
    config.setdefault("parameters", {})["revision"] = {"string_value": "2"}
    client.load_model("seq_state", config=json.dumps(config))
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        _send(client, "seq_state", 9, 1, outputs=["OUTPUT"])
    assert _send(client, "seq_state", 9, 2, outputs=["OUTPUT"], sequence_start=True)["OUTPUT"] == [
        [2]
    ]
    wait_until(lambda: client.is_model_ready("seq_state"), what="the reloaded model")


# ---------------------------------------------------------------------------------------------
# In the core: implicit state through a batching backend (ONNX Runtime concatenates the batch)
# ---------------------------------------------------------------------------------------------


def _onnx_accumulator(path, growing: bool):
    """OUTPUT = sum(ACC) + INPUT (INT32 [N, 1]); ACC_NEXT = that sum ([N, 1]), or, ``growing``,
    ACC and INPUT side by side ([N, k + 1]: the state grows by a column per request)."""
    i32 = TensorProto.INT32
    nodes = [
        helper.make_node("ReduceSum", ["ACC", "axis"], ["total"], keepdims=1),
        helper.make_node("Add", ["total", "INPUT"], ["OUTPUT"]),
    ]
    if growing:
        nodes.append(helper.make_node("Concat", ["ACC", "INPUT"], ["ACC_NEXT"], axis=1))
    else:
        nodes.append(helper.make_node("Identity", ["OUTPUT"], ["ACC_NEXT"]))
    graph = helper.make_graph(
        nodes,
        "accumulator",
        [
            helper.make_tensor_value_info("INPUT", i32, ["N", 1]),
            helper.make_tensor_value_info("ACC", i32, ["N", "K"]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", i32, ["N", 1]),
            helper.make_tensor_value_info("ACC_NEXT", i32, ["N", "K2"]),
        ],
        [helper.make_tensor("axis", TensorProto.INT64, [1], [1])],
    )
    save(graph, path)


def _accumulator_model(repo, name, *, strategy, growing=False):
    _onnx_accumulator(repo / name / "1" / "model.onnx", growing)
    (repo / name / "config.pbtxt").write_text(f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
sequence_batching {{
  {strategy}
  state [ {{ input_name: "ACC" output_name: "ACC_NEXT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
}}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""")


def _core_send(core, model, sequence_id, value, **flags):
    from triton_ros.core.infer_request import InferRequest

    request = InferRequest(
        model, {"INPUT": np.full([1, 1], value, np.int32)}, sequence_id=sequence_id, **flags
    )
    response = core.infer_sync(request, timeout=60)
    assert set(response.outputs) == {"OUTPUT"}  # the state output is the server's
    return int(response.outputs["OUTPUT"][0][0])


def _sequences(core, model, count, length, *, concurrent: bool):
    values = {
        k: [int(v) for v in np.random.default_rng(k).integers(-1000, 1000, length)]
        for k in range(1, count + 1)
    }

    def run(sequence_id):
        return [
            _core_send(
                core, model, sequence_id, v, sequence_start=i == 0, sequence_end=i == length - 1
            )
            for i, v in enumerate(values[sequence_id])
        ]

    if not concurrent:
        return {k: run(k) for k in values}, values
    with ThreadPoolExecutor(count) as pool:
        return dict(zip(values, pool.map(run, values))), values


@pytest.mark.parametrize(
    "strategy, growing",
    [
        ("oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 5000 }", False),
        ("direct { }", False),
        ("direct { }", True),
    ],
    ids=["oldest", "direct", "direct-growing-state"],
)
def test_state_in_batched_execution_equals_one_sequence_at_a_time(explicit_core, strategy, growing):
    """Sequences run together, their requests batched by ONNX Runtime with each row's own
    state, give bit for bit what they give run one after another. A growing state (one more
    column per request) makes rows of different shapes: those never share a batch (a null
    request holds the row instead) and still answer the same."""
    _accumulator_model(explicit_core.repo_path, "acc", strategy=strategy, growing=growing)
    explicit_core.load_model("acc")
    alone, values = _sequences(explicit_core, "acc", 8, 12, concurrent=False)
    together, _ = _sequences(explicit_core, "acc", 8, 12, concurrent=True)
    assert together == alone
    for sequence_id, sent in values.items():
        if growing:  # sum of the state (every input so far) + this input: doubles the last
            expected = [int(np.sum(sent[:i]) + sent[i]) for i in range(len(sent))]
        else:
            expected = [int(v) for v in np.cumsum(sent)]
        assert alone[sequence_id] == expected
    stats = explicit_core.model_statistics("acc")[0]
    assert stats.inference_count == 2 * 8 * 12
    assert any(b.batch_size > 1 for b in stats.batch_stats)


def test_the_backlog_is_bounded_and_a_huge_string_id_is_only_a_key(explicit_core, monkeypatch):
    """Beyond Triton (whose backlog is unbounded): past MAX_BACKLOG_REQUESTS a new sequence is
    refused with UNAVAILABLE; the sequences holding slots go on. A 1 MB string ID is a key like
    any other (its message is cut, not the reply)."""
    from triton_ros.core import sequence_batch_scheduler
    from triton_ros.core.errors import StatusCode, TritonRosError
    from triton_ros.core.infer_request import InferRequest

    monkeypatch.setattr(sequence_batch_scheduler, "MAX_BACKLOG_REQUESTS", 3)
    _accumulator_model(explicit_core.repo_path, "acc", strategy="direct { }")
    (explicit_core.repo_path / "acc" / "config.pbtxt").write_text(
        (explicit_core.repo_path / "acc" / "config.pbtxt")
        .read_text()
        .replace("max_batch_size: 8", "max_batch_size: 1")
    )
    explicit_core.load_model("acc")
    huge = "x" * (1 << 20)
    assert _core_send(explicit_core, "acc", huge, 5, sequence_start=True) == 5  # holds the slot
    waiting = [
        explicit_core.infer(
            InferRequest(
                "acc", {"INPUT": np.ones([1, 1], np.int32)}, sequence_id=k, sequence_start=True
            )
        )
        for k in (1, 2, 3)
    ]
    refused = explicit_core.infer(
        InferRequest(
            "acc", {"INPUT": np.ones([1, 1], np.int32)}, sequence_id=4, sequence_start=True
        )
    )
    error = refused.exception(10)
    assert isinstance(error, TritonRosError) and error.code == StatusCode.UNAVAILABLE
    assert "backlog" in error.message and len(error.message) < 5000
    assert not any(f.done() for f in waiting)
    assert _core_send(explicit_core, "acc", huge, 1, sequence_end=True) == 6
    assert waiting[0].result(30).outputs["OUTPUT"].tolist() == [[1]]  # the slot's next owner
    with pytest.raises(TritonRosError, match="must specify the START flag") as caught:
        _core_send(explicit_core, "acc", huge, 1)
    assert len(caught.value.message) < 5000


@pytest.mark.parametrize(
    "model, protocol, extra",
    [
        ("simple_sequence", "grpc", []),
        ("simple_sequence", "http", []),
        ("simple_dyna_sequence", "grpc", ["--streaming"]),
    ],
)
def test_perf_analyzer_sequence_mode(examples, model, protocol, extra):
    """perf_analyzer, unchanged, in its sequence mode (it reads sequence_batching from the model
    configuration: correlation IDs, START and END): every request answered, none failed."""
    import subprocess

    from server_process import perf_analyzer

    url = examples.url if protocol == "grpc" else examples.http_url
    client = examples.client()
    before = client.get_inference_statistics(model).model_stats[0]
    result = subprocess.run(
        [
            str(perf_analyzer()),
            "-m",
            model,
            "-i",
            protocol,
            "-u",
            url,
            "--concurrency-range",
            "4",
            "--sequence-length",
            "5",
            "--measurement-interval",
            "1500",
            "--max-trials",
            "3",
            "-s",
            "1000000",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    after = client.get_inference_statistics(model).model_stats[0]
    assert after.inference_stats.success.count > before.inference_stats.success.count
    assert after.inference_stats.fail.count == before.inference_stats.fail.count


def test_direct_waits_for_slot_utilization_up_to_its_queue_delay(explicit_core):
    """direct { max_queue_delay_microseconds, minimum_slot_utilization }: a batch waits for
    enough ready slots, at most the delay; a full one goes at once."""
    _accumulator_model(
        explicit_core.repo_path,
        "acc",
        strategy=(
            "max_sequence_idle_microseconds: 60000000 "
            "direct { max_queue_delay_microseconds: 1000000 minimum_slot_utilization: 1.0 }"
        ),
    )
    (explicit_core.repo_path / "acc" / "config.pbtxt").write_text(
        (explicit_core.repo_path / "acc" / "config.pbtxt")
        .read_text()
        .replace("max_batch_size: 8", "max_batch_size: 2")
    )
    explicit_core.load_model("acc")
    started = time.monotonic()
    assert _core_send(explicit_core, "acc", 1, 3, sequence_start=True) == 3
    assert time.monotonic() - started >= 0.9  # one ready slot of two: waited
    with ThreadPoolExecutor(2) as pool:  # both slots ready: one batch of two
        both = list(
            pool.map(
                lambda k: _core_send(explicit_core, "acc", k, 4, sequence_start=k == 2), (1, 2)
            )
        )
    assert both == [7, 4]
    stats = explicit_core.model_statistics("acc")[0]
    assert {b.batch_size: b.compute_infer.count for b in stats.batch_stats} == {1: 1, 2: 1}
