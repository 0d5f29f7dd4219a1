"""How the space is searched: model_analyzer's ``brute`` and ``quick`` modes, and the client
concurrency sweep of each configuration.

- ``brute`` crosses instance kind, instance count and max batch size (model_analyzer's automatic
  brute search, dynamic batching on where the model batches), the other dimensions at the
  model's values.
- ``quick`` climbs from the model's own configuration, one dimension at a time in
  :data:`~.search_space.QUICK_ORDER` (coordinate hill climbing; model_analyzer's quick mode
  climbs over a neighbourhood of all dimensions at once): along a dimension it moves to the next
  value while that scores better by at least ``min_gain`` (model_analyzer's
  THROUGHPUT_MINIMUM_GAIN, 5 %), tries the other direction when the first step did not, then
  goes on to the next dimension; ``passes`` rounds over all dimensions, fewer when a round
  changed nothing. Every point it visits is a neighbour of the best so far, so it measures
  about 1 + sum(values - 1) configurations a round instead of the product of all values.

Each configuration is measured at client concurrencies 1, 2, 4, ... (:func:`sweep_concurrency`)
until throughput stops growing (``tries`` consecutive steps, 3, none of which gains
``min_gain`` over the best before it: model_analyzer's early exit, made robust to a noisy step)
or a measurement exceeds the constraints (more load only queues longer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .measurement import Constraints, Measurement, better
from .search_space import BRUTE_DIMENSIONS, QUICK_ORDER, Point, SearchSpace

QUICK = "quick"
BRUTE = "brute"
SEARCH_MODES = (QUICK, BRUTE)


class SearchStopped(Exception):
    """Raised by an evaluation when the sweep's time budget is spent."""


@dataclass(frozen=True)
class ConcurrencySweepSettings:
    min_concurrency: int = 1
    max_concurrency: int = 1024  # model_analyzer's default range
    min_gain: float = 0.05
    tries: int = 3

    def concurrencies(self) -> list[int]:
        out, c = [], 1
        while c <= self.max_concurrency:
            if c >= self.min_concurrency:
                out.append(c)
            c *= 2
        return out or [self.min_concurrency]


def sweep_concurrency(
    measure: Callable[[int], Measurement],
    settings: ConcurrencySweepSettings,
    constraints: Constraints,
) -> list[Measurement]:
    """Measurements at increasing concurrency, stopping early (see the module docstring): after
    ``tries`` consecutive steps none of which beat the best before it by ``min_gain`` (one or
    two noisy steps do not end a sweep whose next step would still have grown), or at a
    measurement outside the constraints."""
    out: list[Measurement] = []
    flat = 0
    for concurrency in settings.concurrencies():
        m = measure(concurrency)
        best_before = max((x.throughput for x in out), default=0.0)
        out.append(m)
        if not constraints.meets(m):
            break
        if out[:-1] and m.throughput <= best_before * (1.0 + settings.min_gain):
            flat += 1
            if flat >= settings.tries:
                break
        else:
            flat = 0
    return out


Evaluate = Callable[[Point], tuple]


def brute_plan(space: SearchSpace) -> list[Point]:
    """The model's own configuration first, then the grid (without repeating it)."""
    points = [space.default]
    points += [p for p in space.grid(BRUTE_DIMENSIONS) if p != space.default]
    return points


def brute_search(space: SearchSpace, evaluate: Evaluate) -> None:
    for point in brute_plan(space):
        evaluate(point)


def quick_plan_size(space: SearchSpace, passes: int = 1) -> int:
    """At most how many configurations :func:`quick_search` measures."""
    return 1 + passes * sum(len(d) - 1 for d in space.dimensions)


def quick_search(
    space: SearchSpace, evaluate: Evaluate, *, min_gain: float = 0.05, passes: int = 1
) -> Point:
    """Hill climbing from the model's configuration; returns the best point found."""
    order = [space.index(name) for name in QUICK_ORDER if space.index(name) is not None]
    current = space.default
    best = evaluate(current)
    for _ in range(passes):
        moved_in_pass = False
        for dim in order:
            for delta in (+1, -1):
                moved = False
                while True:
                    candidate = space.step(current, dim, delta)
                    if candidate is None:
                        break
                    score = evaluate(candidate)
                    if not better(score, best, min_gain):
                        break
                    current, best, moved = candidate, score, True
                if moved:
                    moved_in_pass = True
                    break  # this direction paid: the other one is not tried
        if not moved_in_pass:
            break
    return current
