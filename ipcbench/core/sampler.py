"""The one sampling loop every suite uses: warm up, calibrate, take samples until the stopping rule says
the answer is known, and account for verification. Pure logic: the caller passes in how to run transfers
(`timed`) and one sample (`sample`), so this module needs no GPU or MPI and is tested on the CPU.

Stopping rule (after nvbench's stdrel criterion, which stops on the spread of the samples themselves, not
on a standard error): at least `min_samples` (5 by default); stop as soon as `median_noise` -- the relative
half-width of a distribution-free confidence interval of the median, built from the samples' order
statistics (`median_interval`) -- is at most `noise`, or the timed samples have used `max_time_s`, or
`max_samples` were taken. With five samples the interval is [min, max], so a row stops only when every
sample agrees to within twice the target: a row with two modes stops in one of them only when all of its
first samples fell into it (a 50/50 mixture: 2 x 0.5^5 = 6%, where three samples and a standard error gave
25%; tests/test_sampler.py simulates it). The same interval is the row's `noise`: an error of the final
median that does not assume normal samples, so a second mode in the samples shows in it.
`--samples N` fixes the count (min = max = N, no noise test). Every input to a decision is a number that
both ranks of a pair hold alike (times they exchanged), never a local clock, so the two ranks of a pair
always take the same number of samples. docs/architecture.md, "Sampling".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from ipcbench.catalogue.costs import CONTEXT_MAKE_S, CONTEXT_MIB
from ipcbench.catalogue.row_kind import LARGE_FROM

SHORT_BELOW = LARGE_FROM  # rows under the large size band take shorter samples (SamplingRule.short_factor)
CALIBRATION_ROUNDS = 6  # at most this many calibration runs per measurement
# The confidence of the median's interval (median_interval): the narrowest order-statistic interval that
# covers the true median with at least this probability where the sample count allows one (n >= 5);
# [min, max] below that (75% at 3 samples, 87.5% at 4).
INTERVAL_CONFIDENCE = 0.90


@dataclass(frozen=True)
class SamplingRule:
    """How long one sample lasts and when to stop sampling (all times in seconds)."""

    min_time_s: float = 0.005  # one sample lasts at least this long (transfers per sample are calibrated)
    min_samples: int = 5
    max_samples: int = 15
    noise: float = 0.005  # target relative half-width of the median's interval (median_noise)
    max_time_s: float = 0.25  # cap on the timed samples of one measurement
    warmup: int = 1  # runs at the calibrated count before the first sample
    max_count: int = 200_000  # transfers per sample, at most
    placements: int = 1  # places of its buffers a row's samples rotate over (core/placement.py)
    # CUDA contexts (green contexts: core/lanes.py) each sample of a row under 64 MiB spreads its transfers over, so
    # that the row's noise is measured between contexts; 1: the primary context alone, and the between-runs floors
    contexts: int = 1
    # Stop as soon as the within-run noise is this share of the row's between-runs floor (catalogue/noise.py), if
    # that is looser than `noise`: the row's stated noise, sqrt(within^2 + floor^2), then exceeds the floor by
    # 5.4% at most, and further samples could not make it smaller (Ctx.enough_noise). 0: `noise` alone.
    floor_share: float = 1 / 3
    # Samples of rows under SHORT_BELOW bytes last this share of min_time_s: their between-runs floors are 2-8%
    # (catalogue/noise.py), which a sample of 1 ms resolves many times over (the events' 0.5 µs is 0.05% of it);
    # only the large rows' 0.2-0.5% floors need the full length. 1: every row min_time_s (an explicit --min-time).
    short_factor: float = 0.5

    @classmethod
    def fixed(cls, samples: int, min_time_s: float, **kw) -> "SamplingRule":
        """Exactly `samples` samples (`--samples N`): no noise test, no time cap."""
        return cls(min_time_s=min_time_s, min_samples=samples, max_samples=samples, noise=0.0,
                   max_time_s=math.inf, floor_share=0.0, short_factor=1.0, **kw)

    @property
    def is_fixed(self) -> bool:
        return self.min_samples == self.max_samples

    def describe(self) -> str:
        if self.is_fixed:
            return f"{self.min_samples} samples of >= {self.min_time_s * 1e3:g} ms{self.spread_words()}"
        floor = f" (or to {self.floor_share:.2g} of the row's between-runs floor)" if self.floor_share else ""
        short = (f" ({self.min_time_s * self.short_factor * 1e3:g} ms under {SHORT_BELOW >> 20} MiB)"
                 if self.short_factor != 1.0 else "")
        return (f"{self.min_samples}-{self.max_samples} samples of >= {self.min_time_s * 1e3:g} ms{short} until the "
                f"median is known to ±{self.noise:.2%}{floor} or {self.max_time_s:g} s{self.spread_words()}")

    def spread_words(self) -> str:
        """", each spread over 16 contexts under 64 MiB (...)" (core/lanes.py), with what the contexts cost a rank to
        make (catalogue/costs.py); "" for one context."""
        if self.contexts <= 1:
            return ""
        k = self.contexts
        return (f", each spread over {k} green contexts under {SHORT_BELOW >> 20} MiB (a rank makes them in about "
                f"{k * CONTEXT_MAKE_S * 1e3:.0f} ms, {k * CONTEXT_MIB} MiB of device memory)")

    def as_dict(self) -> dict:
        return {"min_time_ms": self.min_time_s * 1e3, "min_samples": self.min_samples,
                "max_samples": self.max_samples, "noise": self.noise,
                "max_time_s": None if math.isinf(self.max_time_s) else self.max_time_s,
                "placements": self.placements, "contexts": self.contexts, "floor_share": round(self.floor_share, 4),
                "short_factor": self.short_factor}

    def sample_s(self, nbytes: int) -> float:
        """How long one sample of a row of `nbytes` lasts at least: min_time_s, or its short_factor share below
        SHORT_BELOW (the large size band: catalogue/row_kind.py)."""
        return self.min_time_s * (self.short_factor if nbytes < SHORT_BELOW else 1.0)


def _half_binomial_pmf(n: int, i: int) -> float:
    """P(Binomial(n, 1/2) = i), through log-gamma: no integer of n bits and no 2.0 ** n, which overflows a
    float from n = 1024 (a pipeline latency row's chunks under MPS are thousands of samples)."""
    return math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2))


def interval_coverage(k: int, n: int) -> float:
    """P(x_(k) <= true median <= x_(n-k+1)) for n independent samples of any continuous distribution:
    1 - 2 * P(Binomial(n, 1/2) <= k - 1)."""
    return 1.0 - 2.0 * sum(_half_binomial_pmf(n, i) for i in range(k))


def median_interval(times: list[float]) -> tuple[float, float]:
    """The distribution-free interval of the median: [x_(k), x_(n-k+1)] of the sorted samples, with the
    largest k whose coverage is still >= INTERVAL_CONFIDENCE (k = 1, [min, max], where none is). The
    binomial tail is summed once, term by term (interval_coverage's sum, O(k) for any n)."""
    v = sorted(times)
    n = len(v)
    if n == 0:
        raise ValueError("no samples")
    k, tail = 1, _half_binomial_pmf(n, 0)  # tail: P(Binomial(n, 1/2) <= k - 1)
    while k + 1 <= (n + 1) // 2:
        tail += _half_binomial_pmf(n, k)
        if 1.0 - 2.0 * tail < INTERVAL_CONFIDENCE:  # interval_coverage(k + 1, n)
            break
        k += 1
    return v[k - 1], v[n - k]


def median_noise(times: list[float]) -> float:
    """Relative half-width of the median's interval (median_interval); inf for fewer than two samples or a
    median that is not positive."""
    if len(times) < 2:
        return math.inf
    med = statistics.median(times)
    if med <= 0:
        return math.inf
    lo, hi = median_interval(times)
    return (hi - lo) / 2 / med


def should_stop(rule: SamplingRule, per_transfer: list[float], per_sample_count: int, enough: float = 0.0) -> bool:
    """Whether the samples so far answer the question (`per_transfer`: time per transfer of each sample;
    `enough`: the within-run noise past which more samples cannot make the row's stated noise smaller, a share
    of its between-runs floor: Ctx.enough_noise)."""
    n = len(per_transfer)
    if n >= rule.max_samples:
        return True
    if n < rule.min_samples:
        return False
    target = max(rule.noise, enough) if rule.noise > 0 else 0.0
    if target > 0 and median_noise(per_transfer) <= target:
        return True
    spent_s = sum(per_transfer) * per_sample_count * 1e-6  # per_transfer in µs
    return spent_s >= rule.max_time_s


def transfers_for(rule: SamplingRule, per_transfer_ms: float) -> int:
    """Transfers per sample so that a sample lasts min_time_s (at least one, at most max_count)."""
    target_ms = rule.min_time_s * 1e3
    return int(max(1, min(rule.max_count, math.ceil(target_ms / max(per_transfer_ms, 1e-6)))))


HINT_PROBE_FRACTION = 4  # with a hint, probe with a quarter of a sample's transfers
HINT_AGREES = (0.5, 2.0)  # the probe confirms the hint when its count lands within these factors


def calibrate(rule: SamplingRule, timed: Callable[[int], tuple[float, int]],
              hint_ms: float | None = None) -> tuple[int, float]:
    """Transfers per sample, and the time per transfer (ms) it was based on.

    `timed(count)` runs about `count` transfers and returns (ms, transfers done); every call is also a
    warm-up. Without a hint, counts grow from one transfer (at most 64x a round) until a run lasts between
    half and four times a sample; then `rule.warmup` more runs at that count follow only if none of the
    runs so far was at that count. With a hint (the time per transfer of the previous size of the same
    pair and method, scaled), one probe of a quarter of the hinted count checks it: if the count it
    implies is within a factor of two of the hint's, that count is the answer (the probe was the warm-up,
    at a quarter of a sample's cost); otherwise calibration goes on from there as without a hint.
    """
    target_ms = rule.min_time_s * 1e3
    count, per_ms = 1, hint_ms or 0.0
    if hint_ms is not None:
        hinted = transfers_for(rule, hint_ms)
        probe = max(1, hinted // HINT_PROBE_FRACTION)
        ms, done = timed(probe)
        per_ms = ms / max(done, 1)
        want = transfers_for(rule, per_ms)
        if HINT_AGREES[0] * hinted <= want <= HINT_AGREES[1] * hinted and rule.warmup <= 1:
            return want, per_ms
        count = want
    warmed = 0
    for _ in range(CALIBRATION_ROUNDS):
        ms, done = timed(count)
        per_ms = ms / max(done, 1)
        want = transfers_for(rule, per_ms)
        close = target_ms / 2 <= ms <= 4 * target_ms or want == count or done >= rule.max_count
        if close:
            warmed += 1
            if warmed >= rule.warmup:
                return count, per_ms
            continue
        # Far off: a one-transfer run says little about queued transfers, so grow at most 64x a round.
        count = min(want, max(1, count) * 64) if ms < target_ms / 2 else want
    return transfers_for(rule, per_ms), per_ms


def scale_hint(per_transfer_ms: float, from_bytes: int, to_bytes: int) -> float:
    """Time per transfer at `to_bytes` guessed from `from_bytes` (bandwidth-bound: proportional)."""
    return per_transfer_ms * max(to_bytes, 1) / max(from_bytes, 1)


@dataclass
class SampleSet:
    """What sampling one measurement produced: per-transfer times (µs) and the verification tally."""

    per_transfer_us: list[float]
    count: int  # transfers per sample
    checks: int  # samples whose destination was verified
    mismatches: int  # mismatched words over all checks

    @property
    def noise(self) -> float:
        return median_noise(self.per_transfer_us)


def take_samples(rule: SamplingRule, count: int, sample: Callable[[int], tuple[float, int, int]],
                 enough: float = 0.0) -> SampleSet:
    """Run `sample(i)` until the rule stops (should_stop, with `enough`: both ranks of a pair must pass the same
    value); it returns (per-transfer µs agreed by the pair, checks run, mismatched words found) for sample i."""
    times: list[float] = []
    checks = mismatches = 0
    while True:
        t, c, bad = sample(len(times))
        times.append(t)
        checks += c
        mismatches += bad
        if should_stop(rule, times, count, enough):
            return SampleSet(times, count, checks, mismatches)
