"""Confirmation: is a change really faster than the model's own configuration?

The sweep measures each configuration once per concurrency, minutes apart, on a host whose
other work comes and goes: its ranking of configurations within 10-30 % of each other is noise.
So a recommendation is a measured claim, made here:

- the model's own configuration is always measured again, with the sweep's best candidates
  (``--confirm-candidates``), each on its own fresh server;
- they are measured in alternating rounds (``--confirm-rounds``): in each round every
  configuration at every concurrency of the set (the concurrencies the sweep chose for any of
  them, and half the smallest, where a host busier than during the sweep still meets the
  budget), the order reversed every other round so that a drift of the host's load favours no
  one;
- per round, a candidate's throughput is divided by the model's own at the same concurrency, and
  its best under the constraints by the model's own best under the constraints in that round;
- a change is recommended only when it met the constraints in most rounds at its concurrency
  (a p99 of a few seconds is decided by a few requests: on a shared host one round in several
  misses a budget the others meet with room), its ratio at the same concurrency is at least
  ``1 + min_gain`` (model_analyzer's minimum gain, 5 %) in every round, and its ratio to the
  model's own best exceeds 1 in every round: the whole interval min..max of the per-round
  ratios lies above 1.05, so it beats the model's own by more than the spread the rounds show.
  Otherwise the answer is "keep your configuration", with the same figures.

The ratio printed is the median of the per-round ratios at the recommended concurrency, with
their min..max: the figures of these rounds, not the sweep's.

The statistics are a few lines (median, min, max of at most ten numbers) written here: a
library would add nothing to them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from .measurement import Constraints, Measurement, RunConfigResult

#: Rounds of the confirmation (``--confirm-rounds``): with --quick, and without.
QUICK_ROUNDS = 4
ROUNDS = 5


@dataclass
class Rounds:
    """What the confirmation measured of one configuration: per round, concurrency ->
    measurement."""

    result: RunConfigResult
    rounds: list[dict[int, Measurement]] = field(default_factory=list)

    @property
    def variant(self) -> str:
        return self.result.variant

    def concurrencies(self) -> list[int]:
        """Concurrencies measured in every round."""
        if not self.rounds:
            return []
        common = set(self.rounds[0])
        for r in self.rounds[1:]:
            common &= set(r)
        return sorted(common)

    def met_in_most(self, concurrency: int, constraints: Constraints) -> bool:
        """The constraints were met in more than half of the rounds at ``concurrency``. A p99
        over a few seconds' requests is decided by its few slowest ones: on a shared host one
        round in several misses a budget that the others meet with room."""
        met = sum(constraints.meets(r[concurrency]) for r in self.rounds)
        return met * 2 > len(self.rounds)

    def median(self, concurrency: int) -> Measurement:
        """The measurement of the median round at ``concurrency`` (by throughput; the lower
        middle of an even count)."""
        ms = sorted((r[concurrency] for r in self.rounds), key=lambda m: m.throughput)
        return ms[(len(ms) - 1) // 2]

    def best_concurrency(self, constraints: Constraints) -> int | None:
        """The concurrency with the highest median throughput among those that met the
        constraints in most rounds; None where none did."""
        ok = [c for c in self.concurrencies() if self.met_in_most(c, constraints)]
        if not ok:
            return None
        return max(ok, key=lambda c: (statistics.median(r[c].throughput for r in self.rounds), -c))

    def best_in_round(self, k: int, constraints: Constraints) -> float:
        """The highest throughput of round ``k`` that met the constraints (0: none did)."""
        return max(
            (m.throughput for m in self.rounds[k].values() if constraints.meets(m)), default=0.0
        )


@dataclass(frozen=True)
class Ratio:
    """Per-round ratios of a candidate's throughput over the model's own."""

    per_round: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.per_round)

    @property
    def low(self) -> float:
        return min(self.per_round)

    @property
    def high(self) -> float:
        return max(self.per_round)

    def text(self) -> str:
        if math.isinf(self.low):
            return "the model's own configuration met the constraints in no round"
        return (
            f"{_x(self.median)} (per round {_x(self.low, '')}-{_x(self.high)}, "
            f"{len(self.per_round)} rounds)"
        )

    def as_json(self) -> dict:
        return {
            "median": _finite(self.median),
            "low": _finite(self.low),
            "high": _finite(self.high),
            "per_round": [_finite(v) for v in self.per_round],
        }


def _x(value: float, suffix: str = "x") -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}{suffix}"


def _finite(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return math.inf if a > 0 else 0.0


@dataclass(frozen=True)
class Comparison:
    """A candidate against the model's own configuration over the same rounds."""

    candidate: Rounds
    concurrency: int | None  # its best under the constraints in most rounds (None: none)
    same_concurrency: Ratio | None  # its throughput / the model's own at that concurrency
    best_vs_best: Ratio | None  # there / the model's own best under the constraints
    min_gain: float
    default_met: bool = True  # the model's own met the constraints in most rounds

    @property
    def variant(self) -> str:
        return self.candidate.variant

    @property
    def beats(self) -> bool:
        return not self.why_not()

    def why_not(self) -> str:
        """Why this is not recommended; empty when it is."""
        if self.concurrency is None:
            return "it missed the constraints in half the rounds or more at every concurrency"
        same, best = self.same_concurrency, self.best_vs_best
        if not self.default_met:  # the model's own misses the constraints: meeting them wins
            return (
                ""
                if best.low > 1.0
                else (
                    f"against the model's own best under the constraints its per-round ratio went "
                    f"down to {best.low:.2f}x"
                )
            )
        if same.low <= 1.0:
            return (
                f"its per-round ratio at concurrency {self.concurrency} went down to "
                f"{same.low:.2f}x: within the rounds' spread"
            )
        if same.low <= 1.0 + self.min_gain:
            return (
                f"its per-round ratio at concurrency {self.concurrency} went down to "
                f"{same.low:.2f}x: under the minimum gain of {self.min_gain:.0%} in some "
                f"round"
            )
        if best.low <= 1.0:
            return (
                f"against the model's own best concurrency its per-round ratio went down to "
                f"{best.low:.2f}x"
            )
        return ""


def compare(
    candidate: Rounds, default: Rounds, constraints: Constraints, min_gain: float
) -> Comparison:
    c = candidate.best_concurrency(constraints)
    if c is None or c not in default.concurrencies():
        return Comparison(candidate, None, None, None, min_gain)
    n = min(len(candidate.rounds), len(default.rounds))
    same = Ratio(
        tuple(
            _ratio(candidate.rounds[k][c].throughput, default.rounds[k][c].throughput)
            for k in range(n)
        )
    )
    best = Ratio(
        tuple(
            _ratio(candidate.rounds[k][c].throughput, default.best_in_round(k, constraints))
            for k in range(n)
        )
    )
    return Comparison(
        candidate,
        c,
        same,
        best,
        min_gain,
        default_met=default.best_concurrency(constraints) is not None,
    )


@dataclass(frozen=True)
class Verdict:
    """The answer of the confirmation: the change to make, or keep the model's own."""

    default: Rounds
    default_concurrency: int | None  # the model's own best under the constraints, every round
    comparisons: tuple[Comparison, ...]
    winner: Comparison | None

    @property
    def keep(self) -> bool:
        return self.winner is None

    @property
    def rounds(self) -> int:
        return len(self.default.rounds)

    def closest(self) -> Comparison | None:
        """The candidate that came nearest to beating the model's own (for the "keep" text)."""
        measured = [c for c in self.comparisons if c.same_concurrency is not None]
        return max(measured, key=lambda c: c.same_concurrency.median, default=None)


def decide(
    default: Rounds, candidates: list[Rounds], constraints: Constraints, min_gain: float
) -> Verdict:
    """Compare each candidate with the model's own configuration over the same rounds; the
    winner is the one with the highest median ratio among those that beat it (see the module
    docstring)."""
    comparisons = tuple(compare(c, default, constraints, min_gain) for c in candidates)
    winners = [c for c in comparisons if c.beats]
    winner = max(winners, key=lambda c: c.best_vs_best.median, default=None)
    return Verdict(default, default.best_concurrency(constraints), comparisons, winner)


def confirmation_concurrencies(chosen: list[int | None], least: int = 1) -> list[int]:
    """The concurrencies every configuration is measured at: the sweep's choice for each, and
    half the smallest of them (not below ``least``) as a fallback for a host busier than during
    the sweep, where the chosen ones miss the latency budget; each once, ascending."""
    picked = {c for c in chosen if c is not None}
    if picked and min(picked) // 2 >= least:
        picked.add(min(picked) // 2)
    return sorted(picked)


def round_order(items: list, k: int) -> list:
    """Round ``k``'s order: as given in even rounds, reversed in odd ones (ABBA)."""
    return list(items) if k % 2 == 0 else list(reversed(items))
