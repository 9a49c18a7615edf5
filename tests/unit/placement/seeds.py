"""Random tests print their seed; RAFTSINK_TEST_SEED=N replays one."""

from __future__ import annotations

import os
import random


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("RAFTSINK_TEST_SEED") or random.randrange(1 << 30))
    print(f"{name}: seed={seed} (replay: RAFTSINK_TEST_SEED={seed})")
    return random.Random(seed)


def uniform_hosts(rng: random.Random, max_hosts: int = 7) -> tuple[dict[int, str], int]:
    """1..max_hosts hosts of K (1..3) nodes each, nodes numbered from 1 in host order:
    nodes 1..K on h1, K+1..2K on h2, ... (raftsink local --processes-per-host K)."""
    k = rng.choice([1, 1, 2, 3])
    n_hosts = rng.randint(1, max_hosts)
    return {n: f"h{(n - 1) // k + 1}" for n in range(1, n_hosts * k + 1)}, n_hosts
