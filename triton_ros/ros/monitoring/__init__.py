"""Monitoring of the node: latency windows, frame counters by reason, the throttled failure log,
and the reporter that turns their figures into /diagnostics and ~/status once a period.

The parts of a frame's path (bindings, model targets) record into these; nothing here imports
them: the reporter reads the figures they hand it (``Binding.figures()``).
"""
