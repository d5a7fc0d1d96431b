"""Kind ``fedfa_dirichlet``: the capped "hetero-Dirichlet" label skew of FedFA (Zhou et al.,
ICLR 2023, section 5 and appendix E: Dir(0.1) and Dir(0.5), after Yurochkin et al.; the
authors made it with FedLab's hetero-Dirichlet partitioner, minimum client size 10)."""

from __future__ import annotations

from .common import MAX_RETRIES, RECYCLE, Context, PartitionKind, Result
from .fedfa_shards import PROPORTIONAL_TEST, proportional_test
from .pfllib_dirichlet import capped_dirichlet
from ...spec import REQUIRED, Field


def partition(
    ctx: Context,
    *,
    alpha: float,
    min_size: int = 10,
    max_retries: int = 1000,
    test_fraction: float | None = None,
    recycle: bool = True,
) -> Result:
    """FedFA's Dirichlet label skew (section 5, ``alpha`` 0.1 or 0.5) over the train split.

    For each class ``k`` in turn: its train samples are shuffled, ``q ~ Dir_N(alpha)`` is
    drawn, clients already holding at least ``n_train / N`` samples get ``q_i = 0`` (the
    cap), ``q`` is renormalised and client ``i`` takes the slice
    ``[floor(Q_{<i} n_k), floor(Q_{<=i} n_k))`` (the last client the rest). The whole
    allocation is redrawn, up to ``max_retries`` times (upstream loops without end), until
    every client holds at least ``min_size`` samples.

    This is the allocation of kind ``pfllib_dirichlet`` (the same rule and the same draws
    for the same seed) applied to the train split alone; unlike kind ``dirichlet`` the cap
    shapes the draw. Test sets: see
    :func:`pflcore.data.partition.fedfa_shards.proportional_test`.
    """
    n = ctx.num_clients
    assert n is not None
    train, attempt = capped_dirichlet(ctx.train_labels, ctx.num_classes, n, alpha, min_size, max_retries, ctx.rng,
                                      kind="fedfa_dirichlet", size_param="min_size")
    test, info = proportional_test(ctx, train, test_fraction, recycle)
    info["attempts"] = attempt
    return train, test, info


PARAMS = {
    "alpha": Field(REQUIRED, type=float, low=0, low_open=True, doc="the Dirichlet concentration (FedFA: 0.1, 0.5)"),
    "min_size": Field(10, low=0, doc="redraw until every client holds at least this many train samples"),
    "max_retries": Field(1000, low=1, high=MAX_RETRIES, doc="the most redraws"),
    "test_fraction": PROPORTIONAL_TEST,
    "recycle": RECYCLE,
}

KIND = PartitionKind("fedfa_dirichlet", partition=partition, params=PARAMS,
                     doc="FedFA's capped hetero-Dirichlet label skew over the train split (FedFA section 5)")
