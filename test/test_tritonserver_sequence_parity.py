"""Stateful and decoupled models as tritonserver serves them: the same requests to both servers.

The method of test/test_tritonserver_parity.py, for sequences and decoupled models. NVIDIA's
tritonserver 2.51 (test/tritonserver_process.py) and triton-ros-server serve one repository of
Python-backend models written from Triton's docs: the models of Triton's client examples
(examples/client_examples_repository: ``simple_sequence``, ``simple_dyna_sequence``,
``simple_string_dyna_sequence``, ``repeat_int32``, ``square_int32``), the sequence batcher's test
models (test/sequence_repository.py: every control kind and type, direct and oldest strategies,
implicit state from zeros and from a data file, a STRING correlation ID, one slot with a short
idle time, one candidate sequence) and a decoupled stateful one (test/decoupled_models/
sequence_square).

A case is a short scenario run by tritonclient (gRPC ``infer``, gRPC streams, HTTP ``infer``) or
raw HTTP (``generate``, ``generate_stream``), the same on both servers, at the same time (each
server has its own sequences). Its outcome is each step's status (the gRPC code name, the HTTP
status, "error" for an error on a stream, whose code tritonclient does not carry) and answer
(every output's values, each request's stream responses in order with their
``triton_final_response``
flags, concurrent requests' answers as a set); the case's status is its first failing
step's, else the last step's. Error messages are shown, not compared.

Every case must come out the same, or be listed in docs/stateful.md ("Checked against
tritonserver 2.51"), with both statuses and the reason; a listed difference that no longer
differs fails too.
"""

from __future__ import annotations

import http.client
import json
import queue
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from processes import ROOT
from sequence_repository import write_sequence_repository
from tritonserver_process import TritonServerProcess, assert_answers_as_tritonserver

pytestmark = pytest.mark.integration

TEST_DIR = Path(__file__).resolve().parent
EXAMPLES = ROOT / "examples" / "client_examples_repository"
DOCS = ROOT / "docs" / "stateful.md"
DOCS_SECTION = "## Checked against tritonserver 2.51"

#: Triton's sequence examples' values (simple_grpc_sequence_sync_infer_client.py)
VALUES = [11, 7, 5, 3, 2, 0, 1]


# ------------------------------------------------------------------------------------ outcomes
@dataclass(frozen=True)
class Outcome:
    """``status`` and ``answer`` are compared; ``message`` (errors' texts) is only shown."""

    status: str
    answer: Any = None
    message: str = ""

    def same_as(self, other: "Outcome") -> bool:
        return self.status == other.status and self.answer == other.answer

    def __str__(self) -> str:
        return (
            self.status
            + f" {self.answer!r}"[:1500]
            + (f" ({self.message[:400]})" if self.message else "")
        )


@dataclass
class Run:
    """One case's run on one server: its steps, in order, become the outcome."""

    server: Any
    steps: list = field(default_factory=list)
    messages: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self, status: str, answer: Any = None, message: str = "") -> tuple:
        with self.lock:
            self.steps.append((status, answer))
            if message:
                self.messages.append(message)
        return status, answer

    def outcome(self) -> Outcome:
        failed = [status for status, _ in self.steps if status not in ("OK", "200")]
        status = failed[0] if failed else (self.steps[-1][0] if self.steps else "OK")
        return Outcome(status, self.steps, " | ".join(self.messages))

    # --- tritonclient
    def grpc(self):
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.server.url)

    def http(self):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.server.http_url)

    def infer(self, client, model: str, inputs: dict, outputs: tuple = (), **kwargs) -> tuple:
        """One ``client.infer`` (gRPC or HTTP client): the step's status and outputs."""
        from tritonclient.utils import InferenceServerException

        module = _module(client)
        tensors = []
        for name, value in inputs.items():
            value = np.asarray(value)
            tensor = module.InferInput(name, list(value.shape), _datatype(value))
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)
        try:
            result = client.infer(model, tensors, **kwargs)
        except InferenceServerException as exc:
            return self.step(_status(exc), message=exc.message())
        return self.step(
            "OK" if module.__name__.endswith("grpc") else "200", _outputs(result, outputs)
        )


def _module(client):
    if type(client).__module__.startswith("tritonclient.grpc"):
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    return module


def _datatype(value: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(value.dtype)


def _status(exc) -> str:
    status = exc.status()
    return "error" if status is None else str(status).replace("StatusCode.", "")


def _outputs(result, names: tuple = ()) -> dict:
    """Each output's values (``names``, or all but those that differ by nature)."""
    response = result.get_response()
    if isinstance(response, dict):
        found = [o["name"] for o in response.get("outputs", [])]
    else:
        found = [o.name for o in response.outputs]
    return {
        name: _plain(result.as_numpy(name)) for name in sorted(found) if not names or name in names
    }


def _plain(value: np.ndarray | None):
    if value is None:
        return None
    return [
        v.decode(errors="replace") if isinstance(v, bytes) else v
        for v in value.reshape(-1).tolist()
    ]


def i32(*values) -> np.ndarray:
    """A request's INPUT ([1, 1] for a batching model, the examples' shape)."""
    return np.array([list(values)], np.int32)


def stream(
    run: Run,
    requests: list[tuple[str, dict, dict]],
    outputs: tuple = (),
    enable_empty_final_response: bool = False,
) -> None:
    """``requests`` (model, inputs, keyword arguments of async_stream_infer) on one gRPC stream
    in order; then the stream is closed (after every response), and each response, in the order
    it came, is a step: its request id, outputs (all but BATCH, the rows of a batch, which
    depend on when the stream's requests arrive) and final flag."""
    import tritonclient.grpc as grpcclient

    client = run.grpc()
    replies: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        for index, (model, inputs, kwargs) in enumerate(requests):
            tensors = []
            for name, value in inputs.items():
                value = np.asarray(value)
                tensor = grpcclient.InferInput(name, list(value.shape), _datatype(value))
                tensor.set_data_from_numpy(value)
                tensors.append(tensor)
            client.async_stream_infer(
                model,
                tensors,
                request_id=str(index),
                enable_empty_final_response=enable_empty_final_response,
                **kwargs,
            )
    finally:
        client.stop_stream()
        client.close()
    first = len(run.steps)
    while not replies.empty():
        result, error = replies.get()
        if error is not None:
            run.step(_status(error), message=error.message())
            continue
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        values = {k: v for k, v in _outputs(result, outputs).items() if k != "BATCH"}
        run.step("OK", {"id": response.id, "final": final, **values})
    # each request's responses in the order they came; different requests' responses may
    # interleave either way in both servers (seen: request 1's empty final before and after
    # request 0's), so they are grouped by request id
    with run.lock:
        run.steps[first:] = sorted(
            run.steps[first:],
            key=lambda step: step[1].get("id", "") if isinstance(step[1], dict) else "",
        )


def concurrently(run: Run, calls: list[tuple[float, Callable[[], tuple]]]) -> None:
    """``calls`` (a delay before it starts, the call) at once. Their steps are compared as a
    set, sorted: the order in which concurrent requests finish is not fixed by tritonserver
    itself (in two runs of the same backlog case it answered B before A's END, then after)."""
    first = len(run.steps)

    def call(delay: float, fn):
        time.sleep(delay)
        fn()

    threads = [threading.Thread(target=call, args=(d, fn)) for d, fn in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with run.lock:
        run.steps[first:] = sorted(run.steps[first:], key=repr)
    run.step("OK", {"answered": len(run.steps) - first})


def http_post(run: Run, path: str, body: dict) -> tuple:
    """A raw HTTP POST (infer, generate, generate_stream): status, the JSON body (without the
    model version), or the SSE events; "error" for Triton's ``{"error": ...}``."""
    host, port = run.server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        reply = conn.getresponse()
        data = reply.read().decode(errors="replace")
    finally:
        conn.close()
    if path.endswith("generate_stream") and data.startswith("data:"):
        events = [
            json.loads(line[len("data:") :])
            for line in data.splitlines()
            if line.startswith("data:")
        ]
        errors = [e["error"] for e in events if "error" in e]
        return run.step(
            str(reply.status),
            [reply.getheader("Content-Type")]
            + ["error" if "error" in e else _generated(e) for e in events],
            message=" | ".join(errors) if errors else "",
        )
    try:
        doc = json.loads(data)
    except ValueError:
        return run.step(str(reply.status), "not JSON", message=data)
    if reply.status != 200 or "error" in doc:
        return run.step(
            str(reply.status), "error" if "error" in doc else doc, message=str(doc.get("error", ""))
        )
    return run.step("200", _generated(doc))


def _generated(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "model_version"}


# ------------------------------------------------------------------------------------ the cases
@dataclass(frozen=True)
class Case:
    id: str
    scenario: Callable[[Run], None]


def sequence_steps(
    run: Run, client, model: str, ids: list, values=VALUES, outputs: tuple = ("OUTPUT",)
) -> None:
    """Triton's example: the sequences ``ids`` interleaved, one request each in turn, START on
    the first value, END on the last."""
    for i, value in enumerate(values):
        for sid in ids:
            run.infer(
                client,
                model,
                {"INPUT": i32(value)},
                outputs,
                sequence_id=sid,
                sequence_start=i == 0,
                sequence_end=i == len(values) - 1,
            )


def with_client(kind: str, body: Callable[[Run, Any], None]) -> Callable[[Run], None]:
    def scenario(run: Run) -> None:
        client = run.grpc() if kind == "grpc" else run.http()
        try:
            body(run, client)
        finally:
            client.close()

    return scenario


def scalar(*values) -> np.ndarray:
    """INPUT of a model without batching ([1])."""
    return np.array(values, np.int32)


def cases() -> list[Case]:
    c: list[Case] = []

    def add(case_id: str, scenario: Callable[[Run], None]) -> None:
        c.append(Case(case_id, scenario))

    # --- Triton's examples' sequences: two interleaved, uint64 and string IDs
    for kind in ("grpc", "http"):
        add(
            f"{kind}-simple-sequence-uint64",
            with_client(
                kind,
                lambda run, client: sequence_steps(run, client, "simple_sequence", [1000, 1001]),
            ),
        )
        add(
            f"{kind}-dyna-sequence-uint64",
            with_client(
                kind,
                lambda run, client: sequence_steps(
                    run, client, "simple_dyna_sequence", [1002, 1003]
                ),
            ),
        )
        add(
            f"{kind}-string-dyna-sequence",
            with_client(
                kind,
                lambda run, client: sequence_steps(
                    run, client, "simple_string_dyna_sequence", ["1004", "1005"]
                ),
            ),
        )
        add(
            f"{kind}-string-sequence",
            with_client(
                kind,
                lambda run, client: [
                    run.infer(
                        client,
                        "seq_string_id",
                        {"INPUT": i32(v)},
                        sequence_id=sid,
                        sequence_start=i == 0,
                        sequence_end=i == 2,
                    )
                    for i, v in enumerate((3, 4, 5))
                    for sid in ("alpha", "beta-7")
                ],
            ),
        )
        add(
            f"{kind}-string-corrid",
            with_client(
                kind,
                lambda run, client: [
                    run.infer(
                        client,
                        "seq_string",
                        {"INPUT": scalar(v)},
                        sequence_id="corr",
                        sequence_start=i == 0,
                        sequence_end=i == 1,
                    )
                    for i, v in enumerate((3, 4))
                ],
            ),
        )
    add(
        "grpc-stream-simple-sequence-uint64",
        lambda run: stream(
            run,
            [
                (
                    "simple_sequence",
                    {"INPUT": i32(v)},
                    dict(sequence_id=sid, sequence_start=i == 0, sequence_end=i == len(VALUES) - 1),
                )
                for i, v in enumerate(VALUES)
                for sid in (2000, 2001)
            ],
        ),
    )
    add(
        "grpc-stream-dyna-sequence-uint64",
        lambda run: stream(
            run,
            [
                (
                    "simple_dyna_sequence",
                    {"INPUT": i32(v)},
                    dict(sequence_id=sid, sequence_start=i == 0, sequence_end=i == len(VALUES) - 1),
                )
                for i, v in enumerate(VALUES)
                for sid in (2002, 2003)
            ],
        ),
    )
    add(
        "grpc-stream-string-dyna-sequence",
        lambda run: stream(
            run,
            [
                (
                    "simple_string_dyna_sequence",
                    {"INPUT": i32(v)},
                    dict(sequence_id=sid, sequence_start=i == 0, sequence_end=i == len(VALUES) - 1),
                )
                for i, v in enumerate(VALUES)
                for sid in ("2004", "2005")
            ],
        ),
    )
    add(
        "grpc-stream-string-sequence",
        lambda run: stream(
            run,
            [
                (
                    "seq_string_id",
                    {"INPUT": i32(v)},
                    dict(sequence_id=sid, sequence_start=i == 0, sequence_end=i == 2),
                )
                for i, v in enumerate((3, 4, 5))
                for sid in ("gamma", "delta")
            ],
        ),
    )
    # --- every control kind and type, the direct strategy's slots and null requests
    add(
        "grpc-direct-controls",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_direct",
                    {"INPUT": i32(v)},
                    sequence_id=sid,
                    sequence_start=i == 0,
                    sequence_end=i == 2,
                )
                for i, v in enumerate((1, 2, 3))
                for sid in (3000, 2**63 - 1)
            ],
        ),
    )
    add(
        "http-direct-controls",
        with_client(
            "http",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_direct",
                    {"INPUT": i32(v)},
                    sequence_id=sid,
                    sequence_start=i == 0,
                    sequence_end=i == 2,
                )
                for i, v in enumerate((1, 2, 3))
                for sid in (3001, 2**64 - 1)
            ],
        ),
    )
    # only the two cases above have reached seq_direct so far: its rows and null requests
    add("grpc-statistics-seq-direct", lambda run: statistics(run, "seq_direct"))
    add(
        "grpc-stream-direct-controls",
        lambda run: stream(
            run,
            [
                (
                    "seq_direct",
                    {"INPUT": i32(v)},
                    dict(sequence_id=sid, sequence_start=i == 0, sequence_end=i == 2),
                )
                for i, v in enumerate((1, 2, 3))
                for sid in (3003, 3004)
            ],
        ),
    )
    add(
        "grpc-int32-corrid",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_idle",
                    {"INPUT": scalar(v)},
                    sequence_id=2**33 + 5,
                    sequence_start=i == 0,
                    sequence_end=i == 1,
                )
                for i, v in enumerate((1, 2))
            ],
        ),
    )
    # --- implicit state: ACC from zero_data, BASE from initial_state/base
    add(
        "grpc-implicit-state",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_state",
                    {"INPUT": i32(v)},
                    ("OUTPUT", "ACC_OUT", "BASE_NEXT"),
                    sequence_id=4000,
                    sequence_start=i == 0,
                    sequence_end=i == 2,
                )
                for i, v in enumerate((5, 6, 7))
            ],
        ),
    )
    add(
        "grpc-implicit-state-initial",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_state",
                    {"INPUT": i32(5)},
                    ("ACC_OUT", "BASE_NEXT"),
                    sequence_id=4001,
                    sequence_start=True,
                    sequence_end=True,
                )
            ],
        ),
    )
    # --- errors
    add(
        "grpc-no-sequence-id",
        with_client(
            "grpc", lambda run, client: run.infer(client, "simple_sequence", {"INPUT": i32(1)})
        ),
    )
    add(
        "http-no-sequence-id",
        with_client(
            "http", lambda run, client: run.infer(client, "simple_sequence", {"INPUT": i32(1)})
        ),
    )
    add(
        "grpc-stream-no-sequence-id",
        lambda run: stream(run, [("simple_sequence", {"INPUT": i32(1)}, {})]),
    )
    add(
        "grpc-unknown-sequence",
        with_client(
            "grpc",
            lambda run, client: run.infer(
                client, "simple_sequence", {"INPUT": i32(1)}, sequence_id=5000
            ),
        ),
    )
    add(
        "http-unknown-sequence",
        with_client(
            "http",
            lambda run, client: run.infer(
                client, "simple_sequence", {"INPUT": i32(1)}, sequence_id=5001
            ),
        ),
    )
    add(
        "grpc-unknown-string-sequence",
        with_client(
            "grpc",
            lambda run, client: run.infer(
                client, "seq_string_id", {"INPUT": i32(1)}, sequence_id="never-started"
            ),
        ),
    )
    add(
        "grpc-end-twice",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "simple_dyna_sequence",
                    {"INPUT": i32(1)},
                    sequence_id=5002,
                    sequence_start=i == 0,
                    sequence_end=True,
                )
                for i in range(2)
            ],
        ),
    )
    add(
        "grpc-after-end",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "simple_sequence",
                    {"INPUT": i32(1)},
                    sequence_id=5003,
                    sequence_start=True,
                    sequence_end=True,
                ),
                run.infer(client, "simple_sequence", {"INPUT": i32(2)}, sequence_id=5003),
            ],
        ),
    )
    add(
        "grpc-start-twice",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "simple_dyna_sequence",
                    {"INPUT": i32(v)},
                    sequence_id=5004,
                    sequence_start=v < 3,
                    sequence_end=v == 3,
                )
                for v in (1, 2, 3)
            ],
        ),
    )
    add(
        "grpc-batch-of-two",
        with_client(
            "grpc",
            lambda run, client: run.infer(
                client,
                "simple_sequence",
                {"INPUT": np.array([[1], [2]], np.int32)},
                sequence_id=5005,
                sequence_start=True,
            ),
        ),
    )
    add(
        "grpc-string-id-numeric-corrid",
        with_client(
            "grpc",
            lambda run, client: run.infer(
                client,
                "seq_direct",
                {"INPUT": i32(1)},
                ("CORRID_OUT",),
                sequence_id="5006",
                sequence_start=True,
                sequence_end=True,
            ),
        ),
    )
    add(
        "grpc-number-id-string-corrid",
        with_client(
            "grpc",
            lambda run, client: run.infer(
                client,
                "seq_string",
                {"INPUT": scalar(1)},
                ("CORRID_OUT",),
                sequence_id=5007,
                sequence_start=True,
                sequence_end=True,
            ),
        ),
    )
    add(
        "http-negative-sequence-id",
        lambda run: http_post(
            run,
            "/v2/models/simple_sequence/infer",
            {**INFER_JSON, "parameters": {"sequence_id": -5, "sequence_start": True}},
        ),
    )
    add(
        "http-sequence-start-not-bool",
        lambda run: http_post(
            run,
            "/v2/models/simple_sequence/infer",
            {**INFER_JSON, "parameters": {"sequence_id": 5, "sequence_start": "yes"}},
        ),
    )
    add(
        "http-json-sequence",
        lambda run: [
            http_post(
                run,
                "/v2/models/simple_dyna_sequence/infer",
                {
                    **INFER_JSON,
                    "parameters": {
                        "sequence_id": 5008,
                        "sequence_start": i == 0,
                        "sequence_end": i == 1,
                    },
                },
            )
            for i in range(2)
        ],
    )
    add(
        "grpc-string-id-128",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_string_id",
                    {"INPUT": i32(1)},
                    ("OUTPUT", "IDS"),
                    sequence_id="x" * 128,
                    sequence_start=True,
                    sequence_end=True,
                )
            ],
        ),
    )
    add(
        "grpc-string-id-129",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_string_id",
                    {"INPUT": i32(1)},
                    sequence_id="x" * 129,
                    sequence_start=True,
                    sequence_end=True,
                )
            ],
        ),
    )
    add(
        "grpc-string-id-130-bytes",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_string_id",
                    {"INPUT": i32(1)},
                    ("OUTPUT", "IDS"),
                    sequence_id="\u00e9" * n,
                    sequence_start=True,
                    sequence_end=True,
                )
                for n in (64, 65)
            ],
        ),
    )
    add(
        "grpc-huge-string-id",
        with_client(
            "grpc",
            lambda run, client: [
                run.infer(
                    client,
                    "seq_string_id",
                    {"INPUT": i32(1)},
                    ("OUTPUT",),
                    sequence_id="x" * 100_000,
                    sequence_start=True,
                    sequence_end=True,
                ),
                run.infer(client, "seq_string_id", {"INPUT": i32(1)}, sequence_id="y" * 100_000),
            ],
        ),
    )
    add(
        "http-huge-string-id",
        with_client(
            "http",
            lambda run, client: run.infer(
                client,
                "seq_string_id",
                {"INPUT": i32(1)},
                sequence_id="z" * 100_000,
                sequence_start=True,
            ),
        ),
    )
    add(
        "grpc-stream-long-string-id-stateless",
        lambda run: stream(run, [("square_int32", {"IN": scalar(1)}, dict(sequence_id="s" * 129))]),
    )
    # --- slots: the backlog, idle release, a request's timeout in the backlog
    add("grpc-direct-backlog", lambda run: backlog(run, "seq_idle", scalar))
    add("grpc-oldest-backlog", lambda run: backlog(run, "seq_oldest_one", i32))
    add("grpc-backlog-timeout", backlog_timeout)
    add("grpc-idle-release", idle_release)
    # --- decoupled models
    add(
        "grpc-stream-square",
        lambda run: stream(run, [("square_int32", {"IN": scalar(v)}, {}) for v in (3, 0, 2)]),
    )
    add(
        "grpc-stream-square-empty-final",
        lambda run: stream(
            run,
            [("square_int32", {"IN": scalar(v)}, {}) for v in (2, 0, 1)],
            enable_empty_final_response=True,
        ),
    )
    add(
        "grpc-stream-repeat-order",
        lambda run: stream(
            run,
            [
                (
                    "repeat_int32",
                    {
                        "IN": np.array([4, 2, 0, 1], np.int32),
                        "DELAY": np.array([10, 20, 30, 40], np.uint32),
                        "WAIT": np.array([5], np.uint32),
                    },
                    {},
                )
            ],
            enable_empty_final_response=True,
        ),
    )
    add(
        "grpc-stream-repeat-empty",
        lambda run: stream(
            run,
            [
                (
                    "repeat_int32",
                    {
                        "IN": np.zeros([0], np.int32),
                        "DELAY": np.zeros([0], np.uint32),
                        "WAIT": np.array([0], np.uint32),
                    },
                    {},
                )
            ],
            enable_empty_final_response=True,
        ),
    )
    add(
        "grpc-stream-repeat-mismatch",
        lambda run: stream(
            run,
            [
                (
                    "repeat_int32",
                    {
                        "IN": np.array([1, 2], np.int32),
                        "DELAY": np.array([1], np.uint32),
                        "WAIT": np.array([0], np.uint32),
                    },
                    {},
                )
            ],
        ),
    )
    add(
        "grpc-stream-decoupled-sequence",
        lambda run: stream(
            run,
            [
                (
                    "sequence_square",
                    {"IN": scalar(v)},
                    dict(sequence_id=6000, sequence_start=i == 0, sequence_end=i == 2),
                )
                for i, v in enumerate((2, 0, 1))
            ],
            enable_empty_final_response=True,
        ),
    )
    add(
        "grpc-decoupled-unary",
        with_client(
            "grpc", lambda run, client: run.infer(client, "square_int32", {"IN": scalar(2)})
        ),
    )
    add(
        "http-decoupled-infer",
        with_client(
            "http", lambda run, client: run.infer(client, "square_int32", {"IN": scalar(2)})
        ),
    )
    add(
        "http-generate-one-response",
        lambda run: http_post(run, "/v2/models/square_int32/generate", {"IN": 1, "id": "g1"}),
    )
    add(
        "http-generate-two-responses",
        lambda run: http_post(run, "/v2/models/square_int32/generate", {"IN": 2}),
    )
    add(
        "http-generate-stream",
        lambda run: http_post(
            run, "/v2/models/square_int32/generate_stream", {"IN": 3, "id": "g2"}
        ),
    )
    add(
        "http-generate-stream-zero",
        lambda run: http_post(run, "/v2/models/square_int32/generate_stream", {"IN": 0}),
    )
    add(
        "http-generate-sequence",
        lambda run: [
            http_post(
                run,
                "/v2/models/seq_string_id/generate",
                {
                    "INPUT": v,
                    "sequence_id": "gen",
                    "sequence_start": i == 0,
                    "sequence_end": i == 1,
                },
            )
            for i, v in enumerate((4, 5))
        ],
    )
    add(
        "http-generate-sequence-parameters",
        lambda run: [
            http_post(
                run,
                "/v2/models/seq_string_id/generate",
                {
                    "INPUT": v,
                    "parameters": {
                        "sequence_id": 77,
                        "sequence_start": i == 0,
                        "sequence_end": i == 1,
                    },
                },
            )
            for i, v in enumerate((4, 5))
        ],
    )
    add(
        "http-generate-stream-model-error",
        lambda run: http_post(
            run, "/v2/models/repeat_int32/generate_stream", {"IN": [1, 2], "DELAY": [1], "WAIT": 0}
        ),
    )
    add(
        "http-generate-model-error",
        lambda run: http_post(
            run, "/v2/models/repeat_int32/generate", {"IN": [1, 2], "DELAY": [1], "WAIT": 0}
        ),
    )
    add(
        "http-generate-stream-unknown-model",
        lambda run: http_post(run, "/v2/models/nope/generate_stream", {"IN": 1}),
    )
    add(
        "http-generate-stream-bad-input",
        lambda run: http_post(run, "/v2/models/square_int32/generate_stream", {"IN": "x"}),
    )
    # --- statistics of the models whose requests above never share a batch (run last)
    for model in ("seq_idle", "seq_oldest_one", "square_int32"):
        add(
            f"grpc-statistics-{model.replace('_', '-')}",
            lambda run, model=model: statistics(run, model),
        )
    return c


def statistics(run: Run, model: str) -> None:
    """What ModelStatistics counts for ``model``: requests, executions, successes, failures,
    and the executed batches' sizes."""
    from tritonclient.utils import InferenceServerException

    client = run.grpc()
    try:
        stats = client.get_inference_statistics(model).model_stats[0]
    except InferenceServerException as exc:
        run.step(_status(exc), message=exc.message())
        return
    finally:
        client.close()
    run.step(
        "OK",
        {
            "inference_count": stats.inference_count,
            "execution_count": stats.execution_count,
            "success": stats.inference_stats.success.count,
            "fail": stats.inference_stats.fail.count,
            "batches": sorted((b.batch_size, b.compute_infer.count) for b in stats.batch_stats),
        },
    )


INFER_JSON = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [3]}]}


def backlog(run: Run, model: str, shape: Callable) -> None:
    """A one-slot model: sequence A holds the slot; B starts and waits in the backlog while A
    goes on; A ends, then B is served (B ends after A's end)."""
    client_a, client_b = run.grpc(), run.grpc()
    try:
        run.infer(client_a, model, {"INPUT": shape(1)}, sequence_id=7000, sequence_start=True)

        def a_goes_on():
            run.infer(client_a, model, {"INPUT": shape(2)}, sequence_id=7000)
            time.sleep(0.3)
            run.infer(client_a, model, {"INPUT": shape(3)}, sequence_id=7000, sequence_end=True)

        concurrently(
            run,
            [
                (
                    0.1,
                    lambda: run.infer(
                        client_b,
                        model,
                        {"INPUT": shape(9)},
                        sequence_id=7001,
                        sequence_start=True,
                        sequence_end=True,
                    ),
                ),
                (0.2, a_goes_on),
            ],
        )
    finally:
        client_a.close()
        client_b.close()


def backlog_timeout(run: Run) -> None:
    """B waits in the backlog of a one-slot model with a request timeout of 0.3 s."""
    client = run.grpc()
    try:
        run.infer(
            client, "seq_oldest_one", {"INPUT": i32(1)}, sequence_id=7100, sequence_start=True
        )
        run.infer(
            client,
            "seq_oldest_one",
            {"INPUT": i32(2)},
            sequence_id=7101,
            sequence_start=True,
            sequence_end=True,
            timeout=300_000,
        )
        run.infer(client, "seq_oldest_one", {"INPUT": i32(3)}, sequence_id=7100, sequence_end=True)
    finally:
        client.close()


def idle_release(run: Run) -> None:
    """seq_idle (one slot, 1 s idle): A starts and idles; B, waiting in the backlog, gets the
    slot once A is released; A's next request is then unknown."""
    client = run.grpc()
    try:
        run.infer(client, "seq_idle", {"INPUT": scalar(1)}, sequence_id=7200, sequence_start=True)
        run.infer(
            client,
            "seq_idle",
            {"INPUT": scalar(2)},
            sequence_id=7201,
            sequence_start=True,
            sequence_end=True,
        )
        run.infer(client, "seq_idle", {"INPUT": scalar(3)}, sequence_id=7200)
        time.sleep(1.5)
        run.infer(client, "seq_idle", {"INPUT": scalar(4)}, sequence_id=7202, sequence_start=True)
        time.sleep(1.5)
        run.infer(client, "seq_idle", {"INPUT": scalar(5)}, sequence_id=7202, sequence_end=True)
    finally:
        client.close()


CASES = cases()


# ------------------------------------------------------------------------------------ the docs
def documented_differences(text: str | None = None) -> dict[str, tuple[str, str, str]]:
    """docs/stateful.md's table of differences: case id -> (tritonserver's status, ours, why).
    A row names its case ids in backquotes in its first cell and both statuses in backquotes
    in the next two."""
    text = DOCS.read_text() if text is None else text
    start = text.index(DOCS_SECTION)
    end = text.find("\n## ", start + len(DOCS_SECTION))
    section = text[start : end if end >= 0 else len(text)]
    table: dict[str, tuple[str, str, str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 4:
            continue
        statuses = [re.findall(r"`([^`]+)`", cell) for cell in cells[1:3]]
        for case_id in re.findall(r"`([a-z][a-z0-9]*(?:-[a-z0-9]+)+)`", cells[0]):
            table[case_id] = (
                statuses[0][0] if statuses[0] else "",
                statuses[1][0] if statuses[1] else "",
                cells[3],
            )
    return table


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("sequence_parity") / "models"
    for name in (
        "simple_sequence",
        "simple_dyna_sequence",
        "simple_string_dyna_sequence",
        "repeat_int32",
        "square_int32",
    ):
        shutil.copytree(EXAMPLES / name, repo / name)
    shutil.copytree(TEST_DIR / "decoupled_models" / "sequence_square", repo / "sequence_square")
    write_sequence_repository(
        repo,
        ["seq_direct", "seq_state", "seq_idle", "seq_string", "seq_string_id", "seq_oldest_one"],
    )
    return repo


def run_case(case: Case, server) -> Outcome:
    run = Run(server)
    try:
        case.scenario(run)
    except Exception as exc:  # a client that cannot read the answer
        return Outcome("client error", run.steps, f"{type(exc).__name__}: {exc}")
    return run.outcome()


@pytest.fixture(scope="module")
def outcomes(repository, start_module_server) -> dict[str, tuple[Outcome, Outcome]]:
    """case id -> (tritonserver's outcome, ours); each case runs on both servers at once."""
    began = time.monotonic()
    theirs = TritonServerProcess(repository)  # starts while ours does
    try:
        ours = start_module_server("--model-repository", str(repository), quiet=True, timeout=180)
        theirs.wait_ready(180)
        started = time.monotonic()
        found, took = {}, {}
        with ThreadPoolExecutor(2) as pool:
            for case in CASES:
                t0 = time.monotonic()
                pair = pool.submit(run_case, case, theirs), pool.submit(run_case, case, ours)
                found[case.id] = (pair[0].result(), pair[1].result())
                took[case.id] = time.monotonic() - t0
    finally:
        theirs.stop_and_check()
    print(f"servers started in {started - began:.1f} s, cases ran in {sum(took.values()):.1f} s")
    print(
        "\n".join(
            f"{case.id} ({took[case.id]:.2f} s): tritonserver {found[case.id][0]}\n"
            f"    ours {found[case.id][1]}"
            for case in CASES
        )
    )
    return found


# ------------------------------------------------------------------------------------ tests
def test_case_ids_are_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert len(ids) >= 40


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_answers_as_tritonserver(case_id, outcomes):
    """The same statuses and answers, or a difference that docs/stateful.md lists with its
    reason and with the statuses both servers give now."""
    theirs, ours = outcomes[case_id]
    assert_answers_as_tritonserver(
        case_id, theirs, ours, documented_differences(), "docs/stateful.md", DOCS_SECTION
    )


def test_documented_differences_are_cases():
    """Every row of the docs' table names a case of this module, and the docs count them."""
    ids = {case.id for case in CASES}
    assert set(documented_differences()) <= ids, set(documented_differences()) - ids
    counted = re.search(r"the same (\d+) scenarios", " ".join(DOCS.read_text().split()))
    assert counted and int(counted.group(1)) == len(CASES), (
        f"docs/stateful.md should say 'the same {len(CASES)} scenarios'"
    )


def test_documented_table_is_read():
    """The parser reads rows with several case ids and skips the header."""
    text = (
        f"{DOCS_SECTION}\n\n| case | tritonserver 2.51 | triton_ros | why |\n"
        f"|---|---|---|---|\n"
        f"| the `-d` `x_y` thing: `a-b`, `c-2` | `OK`: x | `INVALID_ARGUMENT` | r |\n"
        f"| not a case | unbounded | 65536 | r |\n"
        f"\n## Next\n| `d-e` | `1` | `2` | x |"
    )
    assert documented_differences(text) == {
        "a-b": ("OK", "INVALID_ARGUMENT", "r"),
        "c-2": ("OK", "INVALID_ARGUMENT", "r"),
    }
