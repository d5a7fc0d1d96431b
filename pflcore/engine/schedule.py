"""Which clients take part in each round, fixed by the seed alone.

The schedule depends on (num_clients, participation, full_last_round, dropout, seed)
and on nothing a method does, so every method sees the same clients in the same round.
Each round draws from its own generator, so the first k rounds of a long run equal
those of a short one (except a forced full last round).
"""
from __future__ import annotations

import numpy as np

from ..training import derive_seed

SCHEDULE_KEY = 101


def participants(round_index: int, *, num_clients: int, rounds: int, participation: float = 1.0,
                 full_last_round: bool = False, dropout: tuple[float, float] | None = None,
                 seed: int = 0) -> np.ndarray:
    """Sorted ids of the clients active in ``round_index`` (0-based).

    ``participation`` C samples max(1, round(C*N)) clients without replacement (FedPAC's
    100-client setting, C=0.3, optionally all clients in the last round). ``dropout``
    = (rho_min, rho_max) then keeps a random fraction rho ~ U[rho_min, rho_max] of them
    (FedCP Table 7's random drop-out), at least one.
    """
    if full_last_round and round_index == rounds - 1:
        return np.arange(num_clients)
    rng = np.random.default_rng(derive_seed(seed, SCHEDULE_KEY, round_index))
    chosen = np.arange(num_clients)
    if participation < 1.0:
        m = max(1, int(round(participation * num_clients)))
        chosen = rng.choice(num_clients, size=m, replace=False)
    if dropout is not None:
        rho = rng.uniform(dropout[0], dropout[1])
        keep = max(1, int(round(rho * len(chosen))))
        chosen = rng.choice(chosen, size=keep, replace=False)
    return np.sort(chosen)
