"""Bindings served by remote triton-ros-server processes (``server_urls``), across processes.

One inference node (its own process) and, in other processes, two triton-ros-server remotes A
and B on 127.0.0.1, plus a third behind a proxy that delays every answer (a slow remote) and a
TLS proxy with Triton's restricted-protocol header in front of A. The tests run in order:
list_models and /diagnostics per endpoint, the same detections remote and local, TLS right and
wrong, a slow remote, then (last, as it kills remotes) failover under load, restart, a hung
remote (SIGSTOP), all down and all up. Cameras are published from this process; results are checked
for headers, for frames published twice and against the camera frames actually sent.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from remote_helpers import GrpcProxy, TcpProxy, have_openssl, make_certs
from ros_env import TOKEN
from ros_models import make_repository
from ros_probe import NodeProcess, Probe, stamp_ns, wait_until
from server_process import ServerProcess
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.synthetic_cameras import parse_camera

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(not have_openssl(), reason="needs the openssl command to make certificates"),
]

NS = f"/r{TOKEN}"
SECRET = "hdr-secret-never-logged"
KEY_ENV = f"TRITON_ROS_TEST_INFER_KEY_{TOKEN}"
CAMERAS = [
    parse_camera(c)
    for c in (
        "robot1/camera_front:640x480:rgb8",
        "robot1/camera_rear:320x240:bgr8",
        "robot2/camera_front:424x240:rgb8",
        "robot2/camera_rear:256x256:mono8",
    )
]
SAME = parse_camera("same/camera:640x360:rgb8")
SLOW = parse_camera("slow/camera:320x240:rgb8")
TLS_OK = parse_camera("tls/ok:320x240:rgb8")
TLS_BAD = parse_camera("tls/bad:320x240:rgb8")
WRONG = parse_camera("wrong/model:320x240:rgb8")


def remote_server(repo, **ports) -> ServerProcess:
    s = ServerProcess(
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "detector",
        "--allow-client-shm",
        "true",
        "--allow-metrics",
        "false",
        **ports,
    )
    s.wait_live()
    return s


class Env:
    def __init__(self, tmp, repo, probe) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from triton_ros_interfaces.msg import InferenceStatus

        self.repo = repo
        self.probe = probe
        self.a = remote_server(repo)
        self.b = remote_server(repo)
        self.c = remote_server(repo)
        self.slow_proxy = TcpProxy(self.c.port, delay_s=1.5)
        self.certs = make_certs(tmp / "certs")
        self.tls = GrpcProxy(
            self.a.url, certs=self.certs, require_client_cert=True, header=("infer-key", SECRET)
        )
        tls_common = {
            "tls_ca_file": str(self.certs["ca.pem"]),
            "tls_cert_file": str(self.certs["client.pem"]),
            "tls_key_file": str(self.certs["client.key"]),
            "server_header_key": "infer-key",
            "server_header_value": SECRET,
        }
        common = {"score_threshold": 0.0, "top_k": 5, "max_age_ms": 0}
        self.params = {
            "model_repository": str(repo),
            "startup_models": ["detector"],
            "diagnostics_period_s": 0.5,
            "bindings": [
                "fleet",
                "same_local",
                "same_remote",
                "slow",
                "tls_ok",
                "tls_bad",
                "wrong",
            ],
            # a hung remote is found out by the timeout of the frame caught in it: 800 ms
            # leaves room within the 2 s target on a loaded machine
            "fleet": {
                "model": "detector",
                "server_urls": [f"grpc://{self.a.url}", f"grpc://{self.b.url}"],
                "server_timeout_ms": 800,
                "topics": [c.topic(NS) for c in CAMERAS],
                **common,
            },
            "same_local": {
                "model": "detector",
                "topics": [SAME.topic(NS)],
                "output_topic_template": "{namespace}/local",
                **common,
            },
            "same_remote": {
                "model": "detector",
                "server_urls": [f"http://{self.b.http_url}"],
                "topics": [SAME.topic(NS)],
                "output_topic_template": "{namespace}/remote",
                **common,
            },
            "slow": {
                "model": "detector",
                "topics": [SLOW.topic(NS)],
                "server_timeout_ms": 800,
                "server_urls": [f"grpc://127.0.0.1:{self.slow_proxy.port}", f"grpc://{self.b.url}"],
                **common,
            },
            # the header's value from the node's environment, not a parameter
            "tls_ok": {
                "model": "detector",
                "topics": [TLS_OK.topic(NS)],
                "server_urls": [f"grpcs://127.0.0.1:{self.tls.port}"],
                **{**tls_common, "server_header_value": "", "server_header_value_env": KEY_ENV},
                **common,
            },
            "tls_bad": {
                "model": "detector",
                "topics": [TLS_BAD.topic(NS)],
                "server_urls": [f"grpcs://127.0.0.1:{self.tls.port}"],
                **{**tls_common, "tls_ca_file": str(self.certs["other_ca.pem"])},
                **common,
            },
            # a model the remote does not serve (it is in its repository, not loaded)
            "wrong": {
                "model": "detector_b",
                "topics": [WRONG.topic(NS)],
                "server_urls": [f"grpc://{self.b.url}"],
                **common,
            },
        }
        os.environ[KEY_ENV] = SECRET  # inherited by the node's process
        self.node = NodeProcess(self.params, tmp, name=f"remote_node_{TOKEN}")
        self.diagnostics = probe.subscribe(DiagnosticArray, "/diagnostics", qos=100)
        self.status = probe.subscribe(InferenceStatus, f"/{self.node.name}/status")
        self.node.wait_ready(probe)

    def close(self) -> None:
        for server in (self.a, self.b, self.c):
            server.stop()
        self.slow_proxy.close()
        self.tls.close()

    def endpoint_status(self, url: str, after_ns: int = 0, binding: str = "fleet"):
        """The latest /diagnostics status of ``binding``'s endpoint ``url`` (received after
        ``after_ns``)."""
        name = f"/{self.node.name}: binding {binding} remote detector {url}"
        for msg, received in reversed(self.diagnostics.items):
            if received < after_ns:
                break
            for status in msg.status:
                if status.name == name:
                    return status, {kv.key: kv.value for kv in status.values}
        return None

    def binding_status(self, name: str, after_ns: int = 0):
        for msg, received in reversed(self.diagnostics.items):
            if received < after_ns:
                break
            for status in msg.status:
                if status.name == f"/{self.node.name}: binding {name}":
                    return status, {kv.key: kv.value for kv in status.values}
        return None

    def list_models(self):
        from triton_ros_interfaces.srv import ListModels

        response = self.probe.call(ListModels, self.node.service("list_models"))
        assert response.success, response.message
        return response.models


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ros_remote")
    repo = make_repository(tmp / "models")
    probe = Probe(f"probe_{TOKEN}_remote")
    env = None
    try:
        env = Env(tmp, repo, probe)
        yield env
    finally:
        probe.close()
        if env is not None:
            try:
                env.node.stop_and_check(signal.SIGINT)
                log = env.node.log_path.read_text(errors="replace")
                assert SECRET not in log, "the header value was logged"
            finally:
                env.close()


def out_topic(spec, name: str = "detections") -> str:
    return f"{NS}/{spec.robot}/{spec.camera}/{name}"


def test_list_models_and_diagnostics_show_every_endpoint(env):
    rows = env.list_models()
    remote = {(m.name, m.endpoint): m for m in rows if m.endpoint}
    for url in (f"grpc://{env.a.url}", f"grpc://{env.b.url}", f"http://{env.b.http_url}"):
        assert remote[("detector", url)].state == "READY", rows
        assert remote[("detector", url)].version == "1"
    tls = [m for m in rows if m.endpoint == f"grpcs://127.0.0.1:{env.tls.port}"]
    # tls_ok's model is up there, tls_bad's (wrong CA) is down, with the reason
    assert sorted(m.state for m in tls) == ["READY", "UNAVAILABLE"], rows
    assert all(m.name == "detector" for m in tls)
    local = [m for m in rows if not m.endpoint and m.name == "detector"]
    assert local and local[0].state == "READY"

    rig = env.probe.cameras(CAMERAS, prefix=NS, rate=10.0)
    try:
        recs = [env.probe.subscribe(DETECTIONS_TYPE, out_topic(c)) for c in CAMERAS]
        for rec in recs:
            rec.wait_for(10, what="remote detections on every camera")
        since = env.probe.now_ns()

        def both_used():
            found = [env.endpoint_status(f"grpc://{u}", since) for u in (env.a.url, env.b.url)]
            return all(f is not None and float(f[1]["requests_per_s"]) > 0 for f in found) and found

        found = wait_until(both_used, 30, "requests/s on both endpoints in /diagnostics")
    finally:
        rig.stop()
    # The local 'detector' (bound by same_local, whose camera is idle now) served none of the
    # fleet's frames: its status has no latency of theirs.
    for msg, received in env.diagnostics.items:
        for st in msg.status:
            if received > since and st.name == f"/{env.node.name}: model detector":
                vals = {kv.key: kv.value for kv in st.values}
                assert float(vals["latency_p50_ms"]) == 0.0, vals
                assert float(vals["input_rate"]) == 0.0, vals
    for status, values in found:
        assert status.level == b"\x00" and status.message == "up"
        assert values["binding"] == "fleet"
        assert float(values["rtt_p50_ms"]) > 0 and float(values["rtt_p99_ms"]) >= float(
            values["rtt_p50_ms"]
        )
        for kind in ("timeout", "unreachable", "rejected", "model_error"):
            assert f"errors_{kind}" in values
        assert values["shared_memory"] == "True"  # same host: inputs through /dev/shm
    for rec, spec in zip(recs, CAMERAS):
        sent = rig.stamps(spec.topic(NS))
        stamps = [stamp_ns(m.header.stamp) for m in rec.messages()]
        assert len(stamps) == len(set(stamps)), "a frame was published twice"
        for msg in rec.messages():
            assert sent.get(stamp_ns(msg.header.stamp)) == spec.frame_id
            assert msg.header.frame_id == spec.frame_id
            assert len(msg.detections) == 5
            assert msg.detections[0].results[0].hypothesis.class_id in (
                "person",
                "bicycle",
                "car",
                "motorcycle",
                "bus",
                "truck",
                "robot",
                "pallet",
            )


def test_every_status_name_is_unique_in_every_diagnostic_array(env):
    """tls_ok and tls_bad use the same URL, fleet and slow share B's: one status per binding's
    endpoint, named apart (tools key statuses by name)."""
    arrays = [
        m
        for m, _ in env.diagnostics.items
        if any(s.name.startswith(f"/{env.node.name}:") for s in m.status)
    ]
    assert arrays
    for array in arrays:
        names = [s.name for s in array.status]
        assert len(names) == len(set(names)), sorted(names)
    names = {s.name for s in arrays[-1].status}
    tls = f"grpcs://127.0.0.1:{env.tls.port}"
    for binding in ("tls_ok", "tls_bad"):
        assert f"/{env.node.name}: binding {binding} remote detector {tls}" in names, names
    for binding in ("fleet", "slow"):
        assert f"/{env.node.name}: binding {binding} remote detector grpc://{env.b.url}" in names


def test_the_same_image_gives_the_same_detections_remote_and_local(env):
    local = env.probe.subscribe(DETECTIONS_TYPE, out_topic(SAME, "local"))
    remote = env.probe.subscribe(DETECTIONS_TYPE, out_topic(SAME, "remote"))
    rig = env.probe.cameras([SAME], prefix=NS, rate=5.0)
    try:

        def pairs():
            r = {stamp_ns(m.header.stamp): m for m in remote.messages()}
            return [
                (m, r[stamp_ns(m.header.stamp)])
                for m in local.messages()
                if stamp_ns(m.header.stamp) in r
            ]

        matched = wait_until(lambda: len(pairs()) >= 5 and pairs(), 60, "5 frames both ways")
    finally:
        rig.stop()
    for a, b in matched:
        assert a.header.frame_id == b.header.frame_id == SAME.frame_id
        assert len(a.detections) == len(b.detections) == 5

        def key(d):  # near-equal scores may swap order
            return (
                d.results[0].hypothesis.class_id,
                round(d.bbox.center.position.x, 1),
                round(d.bbox.center.position.y, 1),
            )

        for da, db in zip(sorted(a.detections, key=key), sorted(b.detections, key=key)):
            assert da.results[0].hypothesis.class_id == db.results[0].hypothesis.class_id
            assert da.results[0].hypothesis.score == pytest.approx(
                db.results[0].hypothesis.score, abs=1e-5
            )
            for f in ("x", "y"):
                assert getattr(da.bbox.center.position, f) == pytest.approx(
                    getattr(db.bbox.center.position, f), abs=1e-3
                )
            assert da.bbox.size_x == pytest.approx(db.bbox.size_x, abs=1e-3)
            assert da.bbox.size_y == pytest.approx(db.bbox.size_y, abs=1e-3)


def test_tls_right_and_wrong_certificates(env):
    ok = env.probe.subscribe(DETECTIONS_TYPE, out_topic(TLS_OK))
    bad = env.probe.subscribe(DETECTIONS_TYPE, out_topic(TLS_BAD))
    rig = env.probe.cameras([TLS_OK, TLS_BAD], prefix=NS, rate=5.0)
    try:
        ok.wait_for(5, what="detections through grpcs with the right certificates")
        since = env.probe.now_ns()
        found = wait_until(
            lambda: env.binding_status("tls_bad", since), 20, "tls_bad's diagnostics"
        )
    finally:
        rig.stop()
    assert bad.count() == 0
    status, values = found
    assert status.level == b"\x02", status  # ERROR: no endpoint
    assert "no endpoint of model 'detector' is up" in status.message
    assert int(values["dropped_unavailable"]) > 0
    log = env.node.log()
    assert f"grpcs://127.0.0.1:{env.tls.port}" in log
    assert SECRET not in log
    for msg, _ in env.diagnostics.items:
        for st in msg.status:
            assert SECRET not in st.message and all(SECRET not in kv.value for kv in st.values)


def test_a_remote_without_the_model(env):
    rows = [m for m in env.list_models() if m.name == "detector_b" and m.endpoint]
    assert len(rows) == 1 and rows[0].state == "UNAVAILABLE", rows
    assert rows[0].endpoint == f"grpc://{env.b.url}"
    assert "'detector_b' is not ready there" in rows[0].reason
    rec = env.probe.subscribe(DETECTIONS_TYPE, out_topic(WRONG))
    rig = env.probe.cameras([WRONG], prefix=NS, rate=5.0)
    try:
        since = env.probe.now_ns()
        status, values = wait_until(
            lambda: (
                (s := env.binding_status("wrong", since))
                and int(s[1]["dropped_unavailable"]) > 0
                and s
            ),
            20,
            "wrong's frames dropped",
        )
    finally:
        rig.stop()
    assert status.level == b"\x02" and "not ready there" in status.message
    assert rec.count() == 0
    log = env.node.log()
    assert "binding 'wrong'" in log and "not ready there" in log


def test_a_slow_remote_does_not_hold_frames_back(env):
    rec = env.probe.subscribe(DETECTIONS_TYPE, out_topic(SLOW))
    rig = env.probe.cameras([SLOW], prefix=NS, rate=10.0)
    try:
        rec.wait_for(3, what="first detections")
        n0, t0 = rec.count(), time.monotonic()
        # The slow endpoint comes up once its (slow) probes pass; then requests sent to it time
        # out (800 ms), mark it down and back off, while the other endpoint carries the camera.
        found = wait_until(
            lambda: (
                (
                    s := env.endpoint_status(
                        f"grpc://127.0.0.1:{env.slow_proxy.port}", binding="slow"
                    )
                )
                and int(s[1]["errors_timeout"]) >= 1
                and s
            ),
            60,
            "a timeout on the slow endpoint",
        )
        time.sleep(2.0)
        rate = (rec.count() - n0) / (time.monotonic() - t0)
    finally:
        rig.stop()
    status, values = found
    assert rate > 3.0, rate  # of 10 Hz offered, on a busy 2-core box
    stamps = [stamp_ns(m.header.stamp) for m in rec.messages()]
    assert len(stamps) == len(set(stamps))


def test_failover_restart_all_down_all_up(env):
    recs = {c: env.probe.subscribe(DETECTIONS_TYPE, out_topic(c)) for c in CAMERAS}
    rig = env.probe.cameras(CAMERAS, prefix=NS, rate=10.0)
    a_url, b_url = f"grpc://{env.a.url}", f"grpc://{env.b.url}"
    try:
        for rec in recs.values():
            rec.wait_for(5, what="detections before the kill")

        # kill A under load: frames stamped after the kill are published within 2 s of it
        env.a.proc.kill()
        env.a.proc.wait()
        killed = env.probe.now_ns()
        for spec, rec in recs.items():

            def after_kill(rec=rec):
                return next(
                    (t for m, t in list(rec.items) if stamp_ns(m.header.stamp) > killed), None
                )

            first = wait_until(after_kill, 10, f"{spec.topic(NS)} after the kill")
            print(
                f"{spec.topic(NS)}: first result of a frame stamped after the kill "
                f"{(first - killed) / 1e9:.3f} s after it"
            )
            assert (first - killed) / 1e9 < 2.0, ("kill", spec, (first - killed) / 1e9)
        status, _ = wait_until(
            lambda: (s := env.endpoint_status(a_url)) and s[1]["state"] == "down" and s,
            10,
            "A down in /diagnostics",
        )
        assert status.level == b"\x01", status  # WARN: B still serves
        _, fleet = env.binding_status("fleet")
        assert fleet["model_state"] == "READY"

        # restart A on the same port: it is used again
        env.a = remote_server(env.repo, grpc_port=env.a.port, http_port=env.a.http_port)
        restarted = env.probe.now_ns()

        def a_used():
            s = env.endpoint_status(a_url, restarted)
            return s and s[1]["state"] == "up" and float(s[1]["requests_per_s"]) > 0

        wait_until(a_used, 30, "A used again after its restart")

        # A hangs (SIGSTOP): its requests time out (server_timeout_ms 800), it is marked down,
        # and frames stamped after the hang are published by B within 2 s of it
        env.a.proc.send_signal(signal.SIGSTOP)
        hung = env.probe.now_ns()
        try:
            for spec, rec in recs.items():

                def after_hang(rec=rec):
                    return next(
                        (t for m, t in list(rec.items) if stamp_ns(m.header.stamp) > hung), None
                    )

                first = wait_until(after_hang, 10, f"{spec.topic(NS)} after the hang")
                print(
                    f"{spec.topic(NS)}: first result of a frame stamped after the hang "
                    f"{(first - hung) / 1e9:.3f} s after it"
                )
                assert (first - hung) / 1e9 < 2.0, (
                    "hang",
                    spec,
                    (first - hung) / 1e9,
                    env.node.log()[-3000:],
                )
            status, values = wait_until(
                lambda: (s := env.endpoint_status(a_url)) and int(s[1]["errors_timeout"]) > 0 and s,
                10,
                "A's timeouts in /diagnostics",
            )
        finally:
            env.a.proc.send_signal(signal.SIGCONT)
        resumed = env.probe.now_ns()
        try:
            wait_until(
                lambda: (
                    (s := env.endpoint_status(a_url, resumed))
                    and s[1]["state"] == "up"
                    and float(s[1]["requests_per_s"]) > 0
                ),
                30,
                "A used again after it resumed",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {env.endpoint_status(a_url)}") from None

        # all down: frames dropped and counted, ERROR, a log line naming both endpoints
        env.a.proc.kill()
        env.b.proc.kill()
        env.a.proc.wait()
        env.b.proc.wait()
        down = env.probe.now_ns()

        def all_down():
            s = env.binding_status("fleet", down + 1_000_000_000)
            return s and s[0].level == b"\x02" and s

        status, values = wait_until(all_down, 20, "fleet ERROR with all endpoints down")
        assert a_url in status.message and b_url in status.message
        for url in (a_url, b_url):
            st, vals = env.endpoint_status(url)
            assert st.level == b"\x02" and vals["state"] == "down"
        dropped = int(values["dropped_unavailable"])
        time.sleep(2.0)
        _, later = env.binding_status("fleet")
        assert int(later["dropped_unavailable"]) > dropped  # still counted while down
        log = env.node.log()
        lines = [
            ln
            for ln in log.splitlines()
            if "no endpoint of model 'detector' is up" in ln and "binding 'fleet'" in ln
        ]
        assert lines and a_url in lines[-1] and b_url in lines[-1]
        assert len(lines) <= 3, lines  # throttled
        rows = {m.endpoint: m for m in env.list_models() if m.endpoint in (a_url, b_url)}
        assert {m.state for m in rows.values()} == {"UNAVAILABLE"}

        # all up again: automatic recovery
        env.a = remote_server(env.repo, grpc_port=env.a.port, http_port=env.a.http_port)
        env.b = remote_server(env.repo, grpc_port=env.b.port, http_port=env.b.http_port)
        up = env.probe.now_ns()
        for spec, rec in recs.items():
            try:
                wait_until(
                    lambda rec=rec: any(stamp_ns(m.header.stamp) > up for m in rec.messages()),
                    30,
                    f"{spec.topic(NS)} after all came back",
                )
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}; fleet: {env.binding_status('fleet')}; endpoints "
                    f"{env.endpoint_status(a_url)} {env.endpoint_status(b_url)}"
                ) from None
    finally:
        rig.stop()
    assert env.node.proc.poll() is None, "the node died"
    for spec, rec in recs.items():
        sent = rig.stamps(spec.topic(NS))
        stamps = [stamp_ns(m.header.stamp) for m in rec.messages()]
        assert len(stamps) == len(set(stamps)), "a frame was published twice"
        assert all(sent.get(s) == spec.frame_id for s in stamps)
