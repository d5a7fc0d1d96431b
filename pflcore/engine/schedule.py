"""Which clients take part in each round, fixed by the seed alone.

The schedule depends on (num_clients, participation, sampling, full_last_round, dropout,
the held-out new clients, seed)
and on nothing a method does, so every method sees the same clients in the same round.
Each round draws from its own generator, so the first k rounds of a long run equal
those of a short one (except a forced full last round).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..streams import NEW_CLIENTS_KEY, SCHEDULE_KEY
from ..training import derive_seed



def participants(round_index: int, *, num_clients: int, rounds: int, participation: float = 1.0,
                 full_last_round: bool = False, dropout: tuple[float, float] | None = None,
                 seed: int = 0, sampling: str = "uniform", pool: Sequence[int] | None = None) -> np.ndarray:
    """Sorted ids of the clients active in ``round_index`` (0-based), drawn from ``pool``
    (default: every client; with new clients held out, the training clients).

    ``sampling`` ``uniform``: ``participation`` C samples max(1, round(C*N)) clients without
    replacement (FedPAC's 100-client setting, C=0.3). ``bernoulli``: each client joins
    independently with probability C (pFedFDA appendix C.2; a round may have no client).
    ``full_last_round`` makes the last round take every client of the pool. ``dropout``
    = (rho_min, rho_max) then keeps a random fraction rho ~ U[rho_min, rho_max] of them
    (FedCP Table 7's random drop-out), at least one.
    """
    everyone = np.arange(num_clients) if pool is None else np.sort(np.asarray(pool, dtype=np.int64))
    if full_last_round and round_index == rounds - 1:
        return everyone
    rng = np.random.default_rng(derive_seed(seed, SCHEDULE_KEY, round_index))
    chosen = everyone
    if sampling == "bernoulli":
        chosen = everyone[rng.random(len(everyone)) < participation]
    elif participation < 1.0:
        m = max(1, int(round(participation * len(everyone))))
        chosen = everyone[rng.choice(len(everyone), size=m, replace=False)]
    if dropout is not None and len(chosen):
        rho = rng.uniform(dropout[0], dropout[1])
        keep = max(1, int(round(rho * len(chosen))))
        chosen = rng.choice(chosen, size=keep, replace=False)
    return np.sort(chosen)


def held_out_clients(num_clients: int, fraction: float, seed: int = 0) -> np.ndarray:
    """Sorted ids of the round(fraction * N) clients kept out of training to be scored as
    new clients (pFedFDA section 5, Table 4), drawn from the seed alone."""
    count = int(round(fraction * num_clients))
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(derive_seed(seed, NEW_CLIENTS_KEY))
    return np.sort(rng.choice(num_clients, size=count, replace=False))
