"""pflcore.streams: every random stream is registered once, and no two that can meet in one
run draw the same numbers."""
from __future__ import annotations

import ast
from pathlib import Path

from pflcore import streams
from pflcore.training import derive_seed

PACKAGE = Path(__file__).resolve().parents[1] / "pflcore"


def test_no_two_streams_that_meet_in_a_run_share_keys():
    assert set(streams.clashes()) == streams.KNOWN_CLASHES


def test_a_trailing_zero_key_is_no_key():
    """What the clash check models: SeedSequence pads the seed and keys with zeros to 4 words."""
    assert derive_seed(3, 101, 0) == derive_seed(3, 101)
    assert derive_seed(3, 1, 2, 3, 0) != derive_seed(3, 1, 2, 3)


def test_the_clash_check_sees_a_clash():
    saved = dict(streams.STREAMS)
    try:
        streams._key("test.clash", 11, varying=("round", "client"), scope="fedavg")  # TRAIN_KEY's keys and arity
        assert ("train", "test.clash") in streams.clashes()
    finally:
        streams.STREAMS.clear()
        streams.STREAMS.update(saved)


def test_every_stream_key_constant_lives_in_the_registry():
    """No module but pflcore.streams assigns an integer to a ``*_KEY`` name: a new stream is
    registered (and checked) there, not numbered where it is used."""
    stray = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "streams.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, int) and not isinstance(node.value.value, bool):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                stray += [f"{path.relative_to(PACKAGE)}: {n}" for n in names if n.endswith("_KEY")]
    assert stray == []


def test_streams_keep_the_values_recorded_runs_were_drawn_with():
    """The keys are part of every recorded run's numbers (the pinned numbers check the draws)."""
    keys = {name: s.keys for name, s in streams.STREAMS.items()}
    assert keys["train"] == (11,) and keys["init"] == (13,) and keys["schedule"] == (101,)
    assert keys["fedcp.contexts"] == (101,) and keys["fedcp.cpn"] == (13, 101)
    assert keys["new_clients"] == keys["corruption"] == (104,)  # apart: a corruption's digest is never 0
