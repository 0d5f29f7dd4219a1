"""RemoteModel against real triton-ros-server processes on 127.0.0.1 (no ROS here).

Failover when a remote is killed, reuse after its restart, all down then all up, a slow remote,
a hung one (SIGSTOP), TLS (grpcs and https; right and wrong CA and client certificates),
Triton's restricted-protocol header, a misconfigured replica, shared memory, and that no secret
reaches an error message or the endpoints' figures. The node-level tests are in
test/ros/test_ros_remote.py.
"""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from remote_helpers import GrpcProxy, TcpProxy, have_openssl, make_certs
from processes import wait_until
from server_process import MODEL_REPOSITORY, ServerProcess, copy_models
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.ros.targets.remote.config import (
    PROBE_BACKOFF_MAX_S,
    PROBE_BACKOFF_MIN_S,
    RemoteConfig,
    parse_url,
)
from triton_ros.ros.targets.remote.errors import NO_ENDPOINT, TIMEOUT, RemoteError
from triton_ros.ros.targets.remote.model import RemoteModel


pytestmark = pytest.mark.integration

SECRET = "s3cr3t-value-never-logged"
X = np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)


SERVER_ARGS = (
    "--model-repository",
    str(MODEL_REPOSITORY),
    "--model-control-mode",
    "explicit",
    "--load-model",
    "detector",
    "--allow-client-shm",
    "true",
    "--allow-metrics",
    "false",
)


def server(*extra: str, grpc_port: int | None = None, http_port: int | None = None):
    """A server of the detector for a test that stops, kills or restarts it."""
    s = ServerProcess(*SERVER_ARGS, *extra, grpc_port=grpc_port, http_port=http_port)
    s.wait_live()
    return s


class Logs:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, level: str, text: str) -> None:
        self.lines.append((level, text))

    def text(self) -> str:
        return "\n".join(t for _, t in self.lines)


def remote(urls, **settings) -> tuple[RemoteModel, Logs]:
    logs = Logs()
    model = RemoteModel("detector", -1, RemoteConfig(urls=tuple(urls), **settings), log=logs)
    model.start()
    return model, logs


def states(model: RemoteModel) -> dict[str, str]:
    return {url: state for url, state, _ in model.describe_endpoints()}


def infer(model: RemoteModel, timeout: float = 10.0):
    return model.infer({"images": X}, ("boxes", "scores")).result(timeout)


@pytest.fixture(scope="module")
def detector(start_module_server):
    """One server of the detector for the tests that only read from it (each through a
    RemoteModel of its own); the tests that stop or restart a server start their own."""
    return start_module_server(*SERVER_ARGS)


@pytest.fixture(scope="module")
def expected(detector):
    """The detector's outputs for X, from a plain tritonclient call."""
    import tritonclient.grpc as grpcclient

    x = grpcclient.InferInput("images", list(X.shape), "FP32")
    x.set_data_from_numpy(X)
    result = detector.client().infer("detector", [x])
    return {n: result.as_numpy(n) for n in ("boxes", "scores")}


def test_urls_are_checked():
    assert parse_url("grpc://127.0.0.1:8001").protocol == "grpc"
    assert parse_url("https://edge:443").tls
    for bad in (
        "127.0.0.1:8001",
        "tcp://a:1",
        "grpc://host",
        "http://a:1/v2",
        "grpc://user:pw@a:1",
    ):
        with pytest.raises(TritonRosError) as info:
            parse_url(bad)
        assert info.value.code == StatusCode.INVALID_ARG
        assert "pw" not in info.value.message
    with pytest.raises(TritonRosError):
        RemoteModel("m", -1, RemoteConfig(urls=("grpc://a:1",), header_key="k"))
    with pytest.raises(TritonRosError):
        RemoteModel("m", -1, RemoteConfig(urls=("grpc://a:1",), tls_ca_file="/nonexistent"))


@pytest.mark.parametrize(
    "scheme,shm", [("grpc", "auto"), ("grpc", "off"), ("http", "auto"), ("http", "off")]
)
def test_same_outputs_as_a_direct_call(detector, expected, scheme, shm):
    s = detector
    url = f"{scheme}://{s.url if scheme == 'grpc' else s.http_url}"
    model, logs = remote([url], shared_memory=shm)
    try:
        wait_until(model.ready, what="the endpoint up")
        assert model.config.max_batch_size == 16
        assert [t.name for t in model.config.inputs] == ["images"]
        assert model.version == 1
        result = infer(model)
        for name in ("boxes", "scores"):
            np.testing.assert_allclose(result.outputs[name], expected[name], rtol=1e-5, atol=1e-6)
        assert result.model_version == 1
        (health,) = model.endpoints()
        assert health.shared_memory == (shm == "auto")
        assert health.requests == 1 and health.state == "up"
    finally:
        model.stop()


def test_shared_memory_refused_falls_back_to_the_wire(expected):
    s = ServerProcess(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "detector",
        "--allow-metrics",
        "false",
    )
    s.wait_live()
    try:
        model, logs = remote([f"grpc://{s.url}"])
        try:
            wait_until(model.ready, what="the endpoint up")
            np.testing.assert_allclose(
                infer(model).outputs["boxes"], expected["boxes"], rtol=1e-5, atol=1e-6
            )
            assert not model.endpoints()[0].shared_memory
            assert "refused shared memory" in logs.text()
        finally:
            model.stop()
    finally:
        s.stop()


def test_failover_restart_and_all_down_then_up():
    a, b = server(), server()
    model, logs = remote([f"grpc://{a.url}", f"grpc://{b.url}"], timeout_ms=1000)
    try:
        wait_until(lambda: set(states(model).values()) == {"up"}, what="both endpoints up")
        for _ in range(20):
            infer(model)
        health = {h.url: h for h in model.endpoints()}
        assert all(h.requests > 0 for h in health.values()), health  # both are used

        # kill one under load: requests keep being answered by the other within 2 s
        a.proc.kill()
        a.proc.wait()
        killed = time.monotonic()
        ok_after = None
        failures = 0
        while time.monotonic() - killed < 4.0:
            try:
                infer(model)
                if ok_after is None:
                    ok_after = time.monotonic() - killed
            except RemoteError:
                failures += 1
        assert ok_after is not None and ok_after < 2.0, (ok_after, failures, logs.text())
        assert states(model)[f"grpc://{a.url}"] == "down"
        assert "is down" in logs.text()

        # restart it on the same port: it is used again
        a2 = server(grpc_port=a.port)
        try:
            wait_until(
                lambda: states(model)[f"grpc://{a.url}"] == "up", 20, "the restarted endpoint up"
            )
            before = {h.url: h.requests for h in model.endpoints()}
            for _ in range(20):
                infer(model)
            after = {h.url: h.requests for h in model.endpoints()}
            assert after[f"grpc://{a.url}"] > before[f"grpc://{a.url}"]

            # all down: requests fail at once, typed, naming both endpoints
            a2.proc.kill()
            b.proc.kill()
            a2.proc.wait()
            b.proc.wait()
            wait_until(lambda: set(states(model).values()) == {"down"}, 10, "both endpoints down")
            t0 = time.monotonic()
            with pytest.raises(RemoteError) as info:
                infer(model)
            assert time.monotonic() - t0 < 0.5
            assert info.value.kind == NO_ENDPOINT and info.value.code == StatusCode.UNAVAILABLE
            assert a.url in info.value.message and b.url in info.value.message
            assert not model.ready()

            # all up again: recovery without any action
            a3, b3 = server(grpc_port=a.port), server(grpc_port=b.port)
            try:
                wait_until(lambda: set(states(model).values()) == {"up"}, 30, "recovery")
                infer(model)
            finally:
                a3.stop()
                b3.stop()
        finally:
            a2.stop()
    finally:
        model.stop()
        a.stop()
        b.stop()


def test_slow_and_hung_remotes_time_out_and_the_other_serves():
    fast, slow = server(), server()
    proxy = TcpProxy(slow.port, delay_s=1.0)  # every answer of this one is 1 s late
    model, logs = remote(
        [f"grpc://{fast.url}", f"grpc://127.0.0.1:{proxy.port}"],
        timeout_ms=600,
        shared_memory="off",
    )
    try:
        wait_until(lambda: model.ready(), what="an endpoint up")
        t0 = time.monotonic()
        answered = lost = 0
        while time.monotonic() - t0 < 6.0:
            try:
                infer(model)
                answered += 1
            except RemoteError as exc:  # a request the slow one held too long
                assert exc.kind == TIMEOUT, exc
                lost += 1
        health = {h.url: h for h in model.endpoints()}
        slow_health = health[f"grpc://127.0.0.1:{proxy.port}"]
        # every lost request is a counted timeout (on a loaded machine the fast one may have one)
        assert sum(h.errors.get(TIMEOUT, 0) for h in health.values()) == lost, health
        assert slow_health.errors.get(TIMEOUT, 0) >= 1, health
        # probed again with backoff (0.25 s, 0.5 s, 1 s...): a few losses, not one per request
        assert answered > 5 * lost, (answered, lost)

        # a hung server (SIGSTOP): its requests time out, the other one serves
        proxy.delay_s = 0.0
        fast.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            wait_until(lambda: states(model)[f"grpc://{fast.url}"] == "down" or _try(model), 10)
            for _ in range(5):
                try:
                    infer(model)
                except RemoteError as exc:
                    assert exc.kind in (TIMEOUT, NO_ENDPOINT), exc
            assert states(model)[f"grpc://{fast.url}"] == "down"
        finally:
            fast.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: states(model)[f"grpc://{fast.url}"] == "up", 30, "the resumed server up")
    finally:
        model.stop()
        proxy.close()
        fast.stop()
        slow.stop()


def _try(model: RemoteModel) -> bool:
    try:
        infer(model, timeout=5)
    except RemoteError:
        pass
    return False


def test_a_replica_with_another_model_configuration_is_not_used(tmp_path):
    repo = copy_models(tmp_path / "repo", "detector")
    config = repo / "detector" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 16", "max_batch_size: 8"))
    good = server()
    wrong = ServerProcess("--model-repository", str(repo), "--allow-metrics", "false")
    wrong.wait_live()
    try:
        model, logs = remote([f"grpc://{good.url}", f"grpc://{wrong.url}"])
        try:
            wait_until(
                lambda: (
                    states(model)[f"grpc://{wrong.url}"] == "mismatch"
                    and states(model)[f"grpc://{good.url}"] == "up"
                ),
                20,
                "mismatch detected",
            )
            for _ in range(10):
                infer(model)
            assert model.endpoints()[1].requests == 0
            # the field that differs, with both values (inputs and outputs are the same)
            assert (
                f"different configuration than the reference grpc://{good.url}: "
                f"max_batch_size: 16 at grpc://{good.url}, 8 at grpc://{wrong.url}; it is "
                f"not used"
            ) in logs.text(), logs.text()
            ((_, state, reason),) = [
                e for e in model.describe_endpoints() if e[0].endswith(wrong.url)
            ]
            assert state == "mismatch" and "max_batch_size: 16 at" in reason
            # at start, the disagreement is told with which one is the reference
            assert (
                f"the replicas disagree about the model's configuration: grpc://{good.url} "
                f"(the reference) serves every frame, grpc://{wrong.url} is not used"
            ) in logs.text()
        finally:
            model.stop()
        # the wrong replica listed first is the reference: the right one is "mismatch", and the
        # warning says the reference may be the misconfigured one
        model, logs = remote([f"grpc://{wrong.url}", f"grpc://{good.url}"])
        try:
            wait_until(
                lambda: states(model)[f"grpc://{good.url}"] == "mismatch",
                20,
                "the right replica marked mismatch",
            )
            assert model.config.max_batch_size == 8
            warning = [t for level, t in logs.lines if level == "warn" and "disagree" in t]
            assert (
                warning
                and f"grpc://{wrong.url} (the reference) serves every frame" in warning[0]
                and f"if grpc://{wrong.url} is the misconfigured replica" in warning[0]
            )
        finally:
            model.stop()
        # a replica without the model at all is down, with the reason
        model, logs = remote([f"grpc://{good.url}"])
        try:
            wait_until(model.ready)
        finally:
            model.stop()
        other = RemoteModel("no_such_model", -1, RemoteConfig(urls=(f"grpc://{good.url}",)))
        other.start()
        try:
            time.sleep(1.0)
            ((url, state, reason),) = other.describe_endpoints()
            assert state == "down" and "no_such_model" in reason
            with pytest.raises(RemoteError):
                _ = other.config
        finally:
            other.stop()
    finally:
        good.stop()
        wrong.stop()


@pytest.mark.skipif(not have_openssl(), reason="needs the openssl command to make certificates")
def test_tls_and_restricted_protocol_header(tmp_path, detector, expected, caplog):
    certs = make_certs(tmp_path / "certs")
    s = detector
    mutual = GrpcProxy(s.url, certs=certs, require_client_cert=True, header=("infer-key", SECRET))
    https = TcpProxy(s.http_port, certs=certs)
    try:

        def check(urls, expect_up: bool, **settings):
            model, logs = remote(urls, shared_memory="off", **settings)
            try:
                if expect_up:
                    wait_until(model.ready, 20, f"{urls} up")
                    np.testing.assert_allclose(
                        infer(model).outputs["boxes"], expected["boxes"], rtol=1e-5, atol=1e-6
                    )
                else:
                    time.sleep(1.5)
                    assert not model.ready()
                    with pytest.raises(RemoteError) as info:
                        infer(model)
                    assert info.value.kind == NO_ENDPOINT
                    ((_, state, reason),) = model.describe_endpoints()
                    assert state == "down"
                    return reason
                everything = logs.text() + repr(model.endpoints()) + repr(model.settings)
                assert SECRET not in everything
            finally:
                model.stop()

        grpcs = [f"grpcs://127.0.0.1:{mutual.port}"]
        right = dict(
            tls_ca_file=str(certs["ca.pem"]),
            tls_cert_file=str(certs["client.pem"]),
            tls_key_file=str(certs["client.key"]),
            header_key="infer-key",
            header_value=SECRET,
        )
        check(grpcs, True, **right)
        # wrong CA: the server's certificate is not trusted
        check(grpcs, False, **{**right, "tls_ca_file": str(certs["other_ca.pem"])})
        # a client certificate the server does not trust
        check(
            grpcs,
            False,
            **{
                **right,
                "tls_cert_file": str(certs["rogue.pem"]),
                "tls_key_file": str(certs["rogue.key"]),
            },
        )
        # the right certificates, the wrong header value: refused, and the value is not shown
        rejected = mutual.rejected
        reason = check(grpcs, False, **{**right, "header_value": "wrong"})
        assert mutual.rejected > rejected and "restricted" in reason
        # plain grpc:// to a TLS port fails too
        check([f"grpc://127.0.0.1:{mutual.port}"], False)
        # https
        check([f"https://127.0.0.1:{https.port}"], True, tls_ca_file=str(certs["ca.pem"]))
        check([f"https://127.0.0.1:{https.port}"], False, tls_ca_file=str(certs["other_ca.pem"]))
        assert SECRET not in caplog.text
    finally:
        mutual.close()
        https.close()


def test_the_grpc_channel_backs_off_no_longer_than_the_probes(monkeypatch):
    """By default a gRPC channel backs its reconnects off up to 2 minutes (1 s x 1.6^n); the
    remote client's channel is bounded like the pool's probes, so that they decide when a
    restarted server is used again."""
    import tritonclient.grpc.aio as grpc_aio

    from triton_ros.ros.targets.remote.clients import client_for

    made = {}
    monkeypatch.setattr(
        grpc_aio,
        "InferenceServerClient",
        lambda target, **kwargs: made.update(kwargs, target=target),
    )
    url = "grpc://127.0.0.1:1"
    client_for(parse_url(url), RemoteConfig(urls=(url,)))._connect()
    args = dict(made["channel_args"])
    assert args["grpc.initial_reconnect_backoff_ms"] == int(PROBE_BACKOFF_MIN_S * 1000)
    assert args["grpc.max_reconnect_backoff_ms"] == int(PROBE_BACKOFF_MAX_S * 1000)


def test_recovery_after_a_long_outage_is_quick():
    """A server back after an outage long enough for every backoff to reach its bound is used
    again within seconds."""
    s = server()
    model, logs = remote([f"grpc://{s.url}"], timeout_ms=500)
    try:
        wait_until(model.ready, what="up")
        infer(model)
        s.proc.kill()
        s.proc.wait()
        wait_until(lambda: not model.ready(), 10, "down")
        # the outage lasts until the probes (and the channel, bounded alike) wait their longest
        wait_until(
            lambda: all(ep.backoff_s() >= PROBE_BACKOFF_MAX_S for ep in model._pool),
            30,
            "the probes backed off to their bound",
            interval=0.1,
        )
        s2 = server(grpc_port=s.port)
        try:
            back = time.monotonic()
            wait_until(model.ready, 15, "up again after the outage")
            infer(model)
            assert time.monotonic() - back < 10.0  # probes back off to 4 s at most
        finally:
            s2.stop()
    finally:
        model.stop()
        s.stop()


def test_a_kserve_server_without_the_model_configuration_extension(detector, expected):
    """Planned from the standard metadata when ModelConfig is not implemented."""
    s = detector
    proxy = GrpcProxy(s.url, unimplemented=("ModelConfig",))
    model, logs = remote([f"grpc://127.0.0.1:{proxy.port}"], shared_memory="off")
    try:
        wait_until(model.ready, 20, "up from metadata")
        config = model.config
        assert config.max_batch_size == 1
        assert [(t.name, t.datatype, t.dims) for t in config.inputs] == [
            ("images", "FP32", (3, 256, 256))
        ]
        assert {t.name for t in config.outputs} == {"boxes", "scores"}
        assert "planning from its metadata" in logs.text()
        np.testing.assert_allclose(
            infer(model).outputs["scores"], expected["scores"], rtol=1e-5, atol=1e-6
        )
    finally:
        model.stop()
        proxy.close()


def test_an_endpoint_failing_every_request_is_marked_down(detector):
    """Errors answer fast, so a failing endpoint would win "fewest outstanding" every time. The
    failing endpoint is a server of its own behind a proxy that refuses ModelInfer."""
    good, bad_backend = detector, server()
    bad = GrpcProxy(bad_backend.url, unimplemented=("ModelInfer",))
    model, logs = remote(
        [f"grpc://127.0.0.1:{bad.port}", f"grpc://{good.url}"], shared_memory="off"
    )
    try:
        wait_until(
            lambda: set(states(model).values()) == {"up"},
            20,
            f"both up: {model.describe_endpoints()}",
        )
        errors = 0
        for _ in range(30):
            try:
                infer(model)
            except RemoteError as exc:
                assert exc.kind == "model_error" and exc.code == StatusCode.UNSUPPORTED
                errors += 1
        # 3 in a row mark it down, the good one serves; probes (ModelReady still answers) let
        # it back after a backoff that doubles, so a slow machine may see another round or two
        assert 3 <= errors <= 9, errors
        assert "3 requests in a row failed" in logs.text()
    finally:
        model.stop()
        bad.close()
        bad_backend.stop()


@pytest.mark.parametrize("scheme", ["grpc", "http"])
def test_a_stateful_models_sequence_reaches_the_remote_server(scheme):
    """A binding's sequence (sequence.py: ID, START, END) goes to the remote server as
    tritonclient sends it: the remote tracker keeps one camera's tracks across requests, a
    request of an unknown sequence is refused there with Triton's status, and the spec says the
    model is stateful."""
    s = ServerProcess(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "tracker",
        "--allow-metrics",
        "false",
    )
    s.wait_live()
    logs = Logs()
    url = f"{scheme}://{s.url if scheme == 'grpc' else s.http_url}"
    model = RemoteModel("tracker", -1, RemoteConfig(urls=(url,)), log=logs)
    model.start()
    try:
        wait_until(model.ready, what="the endpoint up")
        spec = model.describe()
        assert (
            spec.stateful and spec.sequence_idle_us == 10_000_000 and not spec.string_sequence_ids
        )
        ids = []
        for f in range(3):  # one object moving right, one camera
            rows = np.zeros((1, 6, 6), np.float32)
            rows[0, 0] = (10 + 4 * f, 10, 40 + 4 * f, 40, 1.0, 0)
            result = model.infer(
                {"detections": rows}, ("track_ids",), sequence=(4242, f == 0, f == 2)
            ).result(10)
            ids.append(int(result.outputs["track_ids"][0, 0]))
        assert ids == [1, 1, 1], ids
        with pytest.raises(TritonRosError) as info:  # ended: unknown without START
            model.infer({"detections": rows}, ("track_ids",), sequence=(4242, False, False)).result(
                10
            )
        assert info.value.code == StatusCode.INVALID_ARG
        assert "must specify the START flag" in info.value.message
    finally:
        model.stop()
        s.stop()
