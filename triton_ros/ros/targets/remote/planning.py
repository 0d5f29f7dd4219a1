"""What the node plans a remote model from: the configuration its endpoints serve.

Each endpoint's model configuration (Triton's configuration extension, or, from a KServe v2
server without it, the standard metadata: :func:`config_from_metadata`), versions and labels are
fetched when it is probed into service (:meth:`Reference.fetch`). The *reference* is that of
the first listed endpoint that answered at start; an endpoint whose configuration differs from
it in anything the binding plans from (:func:`differences`: ``max_batch_size``, each input's
data type, dims, format and whether it is optional, each output's data type and dims, the
labels) is marked *mismatch* and not used, and re-checked every ``PROBE_BACKOFF_MAX_S``
(:meth:`Reference.adopt`). The log names each field that differs, with both values. The
reference may be the misconfigured replica (it was listed first): replicas that disagree are
warned about, naming the reference and saying so (:meth:`Reference.warn_disagreement`).
When the reference endpoint's own configuration changes, the reference changes with it and its
``generation`` grows, so that the model's spec (and the bindings' plans) are rebuilt.

Labels: KServe v2 has no label files, so an output's labels (``label_filename`` in the remote's
configuration) are read once per check through Triton's classification extension
(:meth:`Reference.fetch_labels`); the binding's ``class_names`` still win.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

import numpy as np
from google.protobuf import json_format
from tritonclient.utils import triton_to_np_dtype

from ....core.datatypes import protocol_to_config
from ....core.model_config import WILDCARD_DIM as WILDCARD, ModelConfig, to_typed
from ....core.protos import model_config_pb2 as mc
from .config import PROBE_TIMEOUT_S
from .errors import MODEL_ERROR
from .pool import DOWN, MISMATCH, Endpoint


class Reference:
    """The configuration, version and labels one remote model is planned from."""

    def __init__(
        self, model: str, requested_version: int, *, log: Callable[[str, str], None], who: str
    ) -> None:
        self.model = model
        self.requested_version = requested_version
        self.config: ModelConfig | None = None
        self.version = requested_version  # the version served (from the reference)
        self.labels: dict[str, list[str]] = {}
        self._unknown_labels: frozenset[str] = frozenset()  # outputs whose labels were not read
        self.source = ""  # the URL of the endpoint it came from
        self.generation = 0  # grows when the reference changes
        self._signature: tuple | None = None
        self._log = log
        self._who = who

    async def fetch(
        self, ep: Endpoint, version: str
    ) -> tuple[ModelConfig, list[int], dict[str, list[str]]]:
        """An endpoint's configuration, versions and labels."""
        meta = await asyncio.wait_for(ep.client.metadata(self.model, version), PROBE_TIMEOUT_S)
        try:
            raw = await asyncio.wait_for(ep.client.config(self.model, version), PROBE_TIMEOUT_S)
            proto = json_format.ParseDict(raw, mc.ModelConfig(), ignore_unknown_fields=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = ep.client.classify(exc, probe=True)
            if error.kind != MODEL_ERROR:
                raise error from None
            # A KServe v2 server without Triton's model configuration extension (e.g. another
            # KServe runtime): the standard metadata gives names, data types and shapes.
            proto = config_from_metadata(self.model, meta)
            if not ep.metadata_only:
                ep.metadata_only = True
                self._log(
                    "info",
                    f"{self._who}: {ep.address.url} has no model configuration "
                    f"({error.message}); planning from its metadata",
                )
        config = to_typed(proto)
        versions = [int(v) for v in meta.get("versions", []) if str(v).isdigit()]
        return config, versions, await self.fetch_labels(ep, config, version)

    async def fetch_labels(
        self, ep: Endpoint, config: ModelConfig, version: str
    ) -> dict[str, list[str]]:
        """Labels of outputs with a label_filename, through Triton's classification extension.

        KServe v2 does not serve label files, but a request for an output with ``class_count``
        equal to its element count answers every element as "value:index:label", the label
        present for each index that has one. One request of zeros, at each (re)check.
        """
        wanted = [t for t in config.outputs if t.label_filename]
        inputs = [t for t in config.inputs if not t.optional]
        if not wanted or any(WILDCARD in t.dims for t in inputs):
            return {}
        batch = [1] if config.max_batch_size > 0 else []
        zeros = {}
        for t in inputs:
            dtype = triton_to_np_dtype(t.datatype)
            if dtype is None or t.datatype == "BYTES":
                return {}
            zeros[t.name] = np.zeros(batch + list(t.dims), dtype)
        labels: dict[str, list[str]] = {}
        for t in wanted:
            count = int(np.prod(t.dims)) if t.dims and WILDCARD not in t.dims else 0
            if not 0 < count <= 1_000_000:
                continue
            try:
                answer = await asyncio.wait_for(
                    ep.client.infer(
                        self.model, zeros, outputs=[t.name], class_count=count, version=version
                    ),
                    PROBE_TIMEOUT_S,
                )
                found: dict[int, str] = {}
                for item in np.asarray(answer.outputs.get(t.name)).reshape(-1):
                    parts = (item.decode() if isinstance(item, bytes) else str(item)).split(":", 2)
                    if len(parts) == 3:
                        found[int(parts[1])] = parts[2]
                labels[t.name] = (
                    [found[i] for i in range(len(found))]
                    if set(found) == set(range(len(found)))
                    else []
                )
            except Exception as exc:  # labels are a nicety: class indices then
                labels[t.name] = None  # unknown here: not compared with other replicas
                self._log(
                    "warn",
                    f"{self._who}: could not read the labels of output "
                    f"'{t.name}' from {ep.address.url} "
                    f"({ep.client.classify(exc, probe=True).message}); class indices are "
                    f"published unless the binding sets class_names",
                )
        return {k: v for k, v in labels.items() if v is None or v}

    def adopt(
        self,
        ep: Endpoint,
        config: ModelConfig,
        versions: list[int],
        labels: dict[str, list[str] | None],
    ) -> None:
        """Take an endpoint's configuration: as the reference (the first, or the reference's own
        endpoint again), or checked against it (the endpoint is *mismatch* if it differs).
        Labels that could not be read (None) are not compared."""
        unknown = frozenset(k for k, v in labels.items() if v is None)
        labels = {k: v for k, v in labels.items() if v is not None}
        sig = signature(config, labels)
        if self._signature is None or self.source == ep.address.url:
            changed = self._signature is not None and (
                sig != self._signature or labels != self.labels
            )
            self.config, self._signature, self.labels = config, sig, labels
            self._unknown_labels = unknown
            self.source = ep.address.url
            self.version = (
                self.requested_version if self.requested_version >= 0 else max(versions, default=1)
            )
            if changed or self.generation == 0:
                self.generation += 1
            return
        diff = "; ".join(
            differences(
                self.config,
                self.labels,
                config,
                labels,
                reference=self.source,
                here=ep.address.url,
                unknown_labels=self._unknown_labels | unknown,
            )
        )
        if not diff:
            if ep.state == MISMATCH:  # fixed on the remote: may be used again
                self._log(
                    "info",
                    f"{self._who}: endpoint {ep.address.url} now serves "
                    f"the same configuration as {self.source}",
                )
                ep.state = DOWN
            return
        ep.failures = max(ep.failures, 6)  # re-checked every PROBE_BACKOFF_MAX_S
        if ep.state == MISMATCH and ep.reason.endswith(f"({diff}); not used"):
            return
        ep.state = MISMATCH
        ep.reason = f"its model '{self.model}' differs from {self.source}'s ({diff}); not used"
        self._log(
            "error",
            f"{self._who}: endpoint {ep.address.url} serves a different "
            f"configuration than the reference {self.source}: {diff}; it is not used. "
            f"{self._which_is_right()}",
        )

    def _which_is_right(self) -> str:
        return (
            f"The reference is the first endpoint of server_urls that answered at start; if "
            f"{self.source} is the misconfigured replica, fix it or list a right one first."
        )

    def warn_disagreement(self, endpoints: list[Endpoint]) -> None:
        """After the first round: if replicas disagree, say which one is the reference and that
        it may be the wrong one (it serves everything, the others are not used)."""
        odd = [ep.address.url for ep in endpoints if ep.state == MISMATCH]
        if not odd:
            return
        self._log(
            "warn",
            f"{self._who}: the replicas disagree about the model's configuration: "
            f"{self.source} (the reference) serves every frame, {', '.join(odd)} "
            f"{'is' if len(odd) == 1 else 'are'} not used. {self._which_is_right()}",
        )


def config_from_metadata(name: str, meta: Mapping[str, Any]) -> mc.ModelConfig:
    """A ModelConfig from standard KServe v2 model metadata (no Triton config extension).

    Shapes whose first dimension is -1 on every input and output are read as a batch
    dimension (max_batch_size 1: the node sends one frame per request); the data formats
    (NCHW/NHWC) are then unknown, so the binding's ``layout`` decides, or the dims.
    """

    def tensors(key: str) -> list[dict]:
        return [dict(t) for t in meta.get(key, [])]

    inputs, outputs = tensors("inputs"), tensors("outputs")
    shapes = [[int(d) for d in t.get("shape", [])] for t in inputs + outputs]
    batched = bool(shapes) and all(s and s[0] == -1 for s in shapes)
    proto = mc.ModelConfig(name=name, max_batch_size=1 if batched else 0)
    for key, target in (("inputs", proto.input), ("outputs", proto.output)):
        for t in tensors(key):
            dims = [int(d) for d in t.get("shape", [])]
            entry = target.add()
            entry.name = t["name"]
            entry.data_type = mc.DataType.Value(protocol_to_config(t["datatype"]))
            entry.dims.extend(dims[1:] if batched else dims)
    return proto


# What of a tensor the binding plans from (ros/targets/spec.py: spec_from_config), by kind.
_INPUT_FIELDS = ("datatype", "dims", "format", "optional")
_OUTPUT_FIELDS = ("datatype", "dims")


def signature(config: ModelConfig, labels: dict[str, list[str]] | None = None) -> tuple:
    """What two endpoints' configurations must share to serve one binding alike."""
    return (
        config.max_batch_size,
        tuple((t.name, *(_value(t, f) for f in _INPUT_FIELDS)) for t in config.inputs),
        tuple((t.name, *(_value(t, f) for f in _OUTPUT_FIELDS)) for t in config.outputs),
        tuple(sorted((k, tuple(v)) for k, v in (labels or {}).items())),
    )


def differences(
    config: ModelConfig,
    labels: dict[str, list[str]],
    other: ModelConfig,
    other_labels: dict[str, list[str]],
    *,
    reference: str = "",
    here: str = "",
    unknown_labels: frozenset[str] = frozenset(),
) -> list[str]:
    """Each field of :func:`signature` that differs between the reference's ``config`` and
    ``labels`` and another endpoint's, as 'field: X at <reference>, Y at <here>'; the labels of
    ``unknown_labels`` (not read from one of them) are not compared."""
    ref_at = f" at {reference}" if reference else " (reference)"
    here_at = f" at {here}" if here else ""
    out = []

    def differ(field: str, a, b) -> None:
        if a != b:
            out.append(f"{field}: {a}{ref_at}, {b}{here_at}")

    differ("max_batch_size", config.max_batch_size, other.max_batch_size)
    for kind, fields, ours, theirs in (
        ("input", _INPUT_FIELDS, config.inputs, other.inputs),
        ("output", _OUTPUT_FIELDS, config.outputs, other.outputs),
    ):
        a = {t.name: t for t in ours}
        b = {t.name: t for t in theirs}
        for name in list(a) + [n for n in b if n not in a]:
            if name not in b:
                out.append(f"{kind} '{name}': only{ref_at}")
            elif name not in a:
                out.append(f"{kind} '{name}': only{here_at or ' here'}")
            else:
                for field in fields:
                    differ(
                        f"{kind} '{name}' {field}", _value(a[name], field), _value(b[name], field)
                    )
    for name in sorted((set(labels) | set(other_labels)) - unknown_labels):
        if labels.get(name) != other_labels.get(name):
            count = (len(labels.get(name, [])), len(other_labels.get(name, [])))
            out.append(
                f"labels of output '{name}': {count[0]}{ref_at}, {count[1]}{here_at}"
                if count[0] != count[1]
                else f"labels of output '{name}': other names{here_at}"
            )
    return out


def _value(tensor, field: str):
    value = getattr(tensor, field)
    return list(value) if field == "dims" else value
