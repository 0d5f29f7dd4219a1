"""Every params file and flag that worked keeps working: the node's parameters (names, declared
defaults, descriptors as ``ros2 param describe`` shows them) and ``triton-ros-server``'s flags
(names, defaults, what each makes of sample values) equal the recording in
settings_snapshot.json (how to record it anew: settings_snapshot.py)."""

from __future__ import annotations

import json

import pytest

from settings_snapshot import SNAPSHOT, node_parameters, server_flags

pytestmark = pytest.mark.integration  # an rclpy node (DDS sockets)

RECORDED = json.loads(SNAPSHOT.read_text())
# Differences made on purpose, each with its reason.
CHOICES_NOW_DESCRIBED = "the choices the flag always had, now in the parameter's descriptor too"
MEANT = dict(
    [
        (
            "--kafka-sasl-mechanism choices: ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512'] -> None",
            "a bad mechanism is refused with the security protocol it goes with (INVALID_ARG "
            "naming the flag, exit 1) instead of by argparse (exit 2)",
        ),
        (
            "kafka.auto_offset_reset additional_constraints: '' -> 'one of: earliest, latest'",
            CHOICES_NOW_DESCRIBED,
        ),
        (
            "kafka.security_protocol additional_constraints: '' -> "
            "'one of: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL'",
            CHOICES_NOW_DESCRIBED,
        ),
    ]
)


def _differences(recorded: dict, now: dict) -> list[str]:
    """What differs, one line each. A flag's sample value that argparse refused before may be
    taken now (the flag's range check then refuses it, naming the flag): only what worked must
    work the same."""
    out = [f"gone: {name}" for name in sorted(set(recorded) - set(now))]
    out += [f"new: {name}" for name in sorted(set(now) - set(recorded))]
    for name in sorted(set(recorded) & set(now)):
        for key in sorted(set(recorded[name]) | set(now[name])):
            before, after = recorded[name].get(key), now[name].get(key)
            if key == "samples" and before and after:
                out += [
                    f"{name} {sample!r}: {was!r} -> {after.get(sample)!r}"
                    for sample, was in before.items()
                    if was != "refused" and after.get(sample) != was
                ]
            elif before != after:
                out.append(f"{name} {key}: {before!r} -> {after!r}")
    return out


def test_the_node_declares_the_recorded_parameters():
    differences = [
        d for d in _differences(RECORDED["node_parameters"], node_parameters()) if d not in MEANT
    ]
    assert not differences, "\n".join(differences)


def test_the_server_takes_the_recorded_flags():
    differences = [
        d for d in _differences(RECORDED["server_flags"], server_flags()) if d not in MEANT
    ]
    assert not differences, "\n".join(differences)


def test_the_comparison_sees_a_change():
    recorded = RECORDED["node_parameters"]
    name = "<binding>.score_threshold"
    changed = {**recorded, name: {**recorded[name], "default": {"float": 0.5}}}
    del changed["grpc.port"]
    assert _differences(recorded, changed) == [
        "gone: grpc.port",
        f"{name} default: {{'float': 0.25}} -> {{'float': 0.5}}",
    ]
    flags = RECORDED["server_flags"]
    port = flags["--grpc-port"]
    taken = {
        **flags,
        "--grpc-port": {
            **port,
            "samples": {**port["samples"], "8001": "refused", "x": {"str": "x"}},
        },
    }
    assert _differences(flags, taken) == ["--grpc-port '8001': {'int': 8001} -> 'refused'"]
