"""Token-bucket rate limits (docs/devices.md, "Rate limits"): each key (a device id, an
address) holds up to ``burst`` tokens, refilled at ``rate`` per second; a request takes one
or is refused. The table of buckets is bounded: beyond ``max_keys`` the oldest buckets are
dropped (a dropped key starts again with a full bucket, which costs an attacker who cycles
keys as much as the per-address limit allows)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

#: ``Retry-After`` of a refusal: the limits' rates are at least 1 per second, so the next
#: token is never more than a second away.
RETRY_AFTER_SECONDS = 1


class TokenBuckets:
    """One bucket per key; ``rate == 0`` turns the limit off.

    Args:
        rate: tokens per second.
        burst: the bucket's size (>= 1).
        max_keys: most buckets kept.
        clock: the time source (monotonic seconds).
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst, self.max_keys, self.clock = rate, float(burst), max_keys, clock
        # key -> [tokens, time of the last take], in the order the keys came
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()

    def take(self, key: str) -> float:
        """Take a token of ``key``'s bucket: 0.0 when there was one, else the seconds until
        there will be (the request is refused, nothing taken)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                self._buckets.popitem(last=False)
            bucket = self._buckets[key] = [self.burst, now]
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return 0.0
        bucket[0] = tokens
        return (1.0 - tokens) / self.rate
