"""The walkthroughs' exercise checker: unanswered, right, wrong, and malformed answers."""
from __future__ import annotations

import pytest

from pflcore.teaching import answer_key, check


def test_written_answers_are_compared_by_their_normalised_hash():
    assert answer_key("FedAvg") == answer_key(" fed-avg ") == answer_key("fedavg")
    assert answer_key("w CC") != answer_key("w FA")
    lines = []
    assert check(1, "Fed Avg", {answer_key("fedavg")}, "hint", log=lines.append) is True
    assert check(2, "local", {answer_key("fedavg")}, "think again", log=lines.append) is False
    assert lines == ["exercise 1: correct", "exercise 2: not quite ('local'). Hint: think again"]


@pytest.mark.parametrize("answer", [None, "", "   "])
def test_an_unanswered_exercise_says_so(answer):
    lines = []
    assert check("exercise 3", answer, lambda a: True, "hint", log=lines.append) is None
    assert lines == ["exercise 3: not answered yet"]


def test_a_predicate_that_fails_on_a_malformed_answer_counts_as_wrong():
    lines = []
    assert check(1, "a number", lambda a: abs(float(a) - 0.5) < 1e-9, "a float", log=lines.append) is False
    assert check(1, 0.5, lambda a: abs(float(a) - 0.5) < 1e-9, "a float", log=lines.append) is True
    assert lines[0].startswith("exercise 1: not quite")
