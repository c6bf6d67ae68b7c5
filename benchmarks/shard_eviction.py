"""How many denied identities push a victim's record out of the offender index.

Each shard's index keeps ``ceil(OFFENDER_INDEX_MAX / SHARDS)`` entries and drops
the oldest past that, so the victim goes once that many later denials land in
its shard. With unkeyed placement an attacker picks exactly that many
addresses offline; with the keyed placement of ``get_engine()`` the attacker
cannot tell which addresses land there and must have about the whole index
denied. Placement only: ``tests/engine/test_shard_secret.py`` shows the trimming on
Redis. ::

    .venv/bin/python -m benchmarks.shard_eviction 640 200
    .venv/bin/python -m benchmarks.shard_eviction 1000000 3
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics

from django_ratelimits.engine import Identity, KeySpace

SHARDS = 64
VICTIM = Identity("ip", "203.0.113.7")


def address(n: int) -> Identity:
    return Identity("ip", f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")


def identities_to_evict(space: KeySpace, cap: int) -> int:
    """Addresses 10.0.0.0, 10.0.0.1... denied in turn until ``cap`` of them share
    the victim's shard: how many that takes."""
    shard = space.of(VICTIM).index
    hits = (n for n in range(1 << 24) if space.of(address(n)).index == shard)
    return next(itertools.islice(hits, cap - 1, None)) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("index_max", type=int, help="OFFENDER_INDEX_MAX")
    parser.add_argument("runs", type=int, help="random secrets to try")
    args = parser.parse_args()
    cap = -(-args.index_max // SHARDS)
    chosen = identities_to_evict(KeySpace(shards=SHARDS), cap)
    print(f"OFFENDER_INDEX_MAX={args.index_max}: {cap} entries per shard")
    print(
        f"  unkeyed: {cap} chosen identities evict the victim "
        f"(found offline among the first {chosen:,} addresses)"
    )
    needed = [
        identities_to_evict(KeySpace(shards=SHARDS, secret=os.urandom(32)), cap)
        for _ in range(args.runs)
    ]
    print(
        f"  keyed:   median {statistics.median(needed):,.0f} identities denied to evict it, "
        f"min {min(needed):,} ({args.runs} random secrets)"
    )


if __name__ == "__main__":
    main()
