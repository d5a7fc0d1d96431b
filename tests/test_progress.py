"""Round progress: the line an executed notebook keeps, and the plain iteration elsewhere."""
from pflcore.engine.progress import RoundProgress, in_notebook_kernel, progress_line


def test_progress_line_reads_as_finished_or_interrupted_work():
    assert progress_line("fedavg fmnist", 200, 200, 95.4, {"acc": "88.20"}) == \
        "fedavg fmnist: 200/200 rounds in 95 s, acc 88.20"
    assert progress_line("fedfa fmnist", 7, 200, 12, {}, "interrupted") == \
        "fedfa fmnist: 7/200 rounds in 12 s (interrupted)"


def test_round_progress_yields_every_remaining_round_outside_a_kernel():
    assert not in_notebook_kernel()
    progress = RoundProgress(range(3, 6), total=6, initial=3, desc="x")
    seen = []
    for r in progress:
        progress.set_postfix(acc="1.00")
        seen.append(r)
    assert seen == [3, 4, 5] and progress.done == 6
    assert list(RoundProgress(range(2), total=2, initial=0, desc="x", disable=True)) == [0, 1]
