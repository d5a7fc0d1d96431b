"""pflcore.spec: one validation vocabulary (issue 31). Every user-facing field (the run
config, each partition kind's and shift's parameters, each method's) is a ``Field``; its check,
its refusal sentence and its row in docs/config.md all come from that one declaration."""
from __future__ import annotations

import dataclasses
import inspect
import math
from pathlib import Path

import numpy as np
import pytest

from pflcore.algorithms import ALGORITHMS
from pflcore.algorithms.hyperparams import Param
from pflcore.config import FIELDS, REFERENCE_PAGE, ExperimentConfig, reference_page
from pflcore.data import shifts
from pflcore.data.partition import KINDS, PartitionError, make_partition
from pflcore.data.shifts import PARAMETERS, ShiftError, check_shift
from pflcore.spec import REQUIRED, Field, Refusal, first_refusal

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------- the vocabulary
@pytest.mark.parametrize("spec, good, bad, words", [
    (Field(1, low=0, high=10), [0, 10, 3], [1.5, True, -1, 11, "3", None, 10**400], "a whole number in [0, 10]"),
    (Field(0.5, low=0, high=1, low_open=True, high_open=True), [0.5, 1e-9, 0.999],
     [0, 1, 1.0, math.nan, math.inf, False], "a finite number in (0, 1)"),
    (Field(1.0, low=0, low_open=True), [1e-300, 10**300], [0, -1.0, 10**400], "a finite number > 0"),
    (Field(True), [True, False], [1, 0, "true", None], "true or false"),
    (Field("a", choices=("a", "b")), ["a", "b"], ["c", 1, None, ["a"]], "choose one of ['a', 'b']"),
    (Field(None, choices=("a", "b")), ["a", None], ["c"], "choose one of ['a', 'b'], or null"),
    (Field("auto", type=int, low=0, high=4, also=("auto",)), ["auto", 0, 4], ["x", 5, -1, 1.0],
     "a whole number in [0, 4], or one of ['auto']"),
    (Field(None, type=list, items=Field(type=int, low=1), min_length=1, distinct=True), [None, [1], (2, 3)],
     [[], [0], [1, 1], "1", [1.5]], "a non-empty list of distinct whole numbers >= 1, or null"),
    (Field(REQUIRED, type=(int, list), low=1, items=Field(type=int, low=1), min_length=1), [2, [1, 2]],
     [0, [0], [], None], "a whole number >= 1 or a non-empty list of whole numbers >= 1"),
    (Field(None, type=list, items=Field(type=float), min_length=2, max_length=2), [[0, 1.5], None],
     [[1], [1, 2, 3], [1, math.nan]], "a list of 2 finite numbers, or null"),
])
def test_a_field_accepts_exactly_what_its_words_say(spec, good, bad, words):
    assert [v for v in good if not spec.accepts(v)] == []
    assert [v for v in bad if spec.accepts(v)] == []
    assert words in spec.allowed()


def test_a_list_refusal_names_the_item_at_fault_and_a_rule_has_the_last_word():
    spec = Field(None, type=list, items=Field(type=str, choices=("fog", "frost")), distinct=True)
    assert spec.problem(["fog", "snow"]).endswith("its item 'snow' is not")
    assert spec.problem(["fog", "fog"]).endswith("it repeats 'fog'")
    ordered = Field(None, type=list, items=Field(type=float), rule=lambda v: None if v == sorted(v) else "sorted")
    assert ordered.problem([2, 1]) == "sorted" and ordered.problem([1, 2]) is None
    assert ordered.problem(["x"]) != "sorted"  # the rule sees only values of the right shape


def test_a_refusal_is_one_sentence_naming_field_value_and_what_is_allowed():
    refusal = first_refusal({"a": Field(1, low=0), "b": Field(2, low=0)}, {"b": -1, "a": 3})
    assert refusal == Refusal("b", -1, "it must be a whole number >= 0")
    assert refusal.within("method_params").sentence(context=" for method 'x'") == \
        "config field 'method_params.b' = -1 is not allowed for method 'x': it must be a whole number >= 0."
    assert len(Refusal("lr", "x" * 10**6, "it must be a number").sentence()) < 200  # the value is shortened


def test_method_parameters_are_the_same_spec():
    assert Param is Field


# --------------------------------------------------------------- every field is declared
def _all_fields():
    yield from (("config", name, spec) for name, spec in FIELDS.items())
    for kind, declared in KINDS.items():
        yield from ((f"partition {kind}", name, spec) for name, spec in declared.params.items())
    for kind, declared in PARAMETERS.items():
        yield from ((f"shift {kind}", name, spec) for name, spec in declared.items())
    for method, cls in ALGORITHMS.items():
        yield from ((f"method {method}", name, spec) for name, spec in cls.hyperparams.items())


def test_every_field_is_documented_and_its_default_passes_its_own_check():
    undocumented = [f"{owner}: {name}" for owner, name, spec in _all_fields() if not spec.doc.strip()]
    assert undocumented == []
    refused = [f"{owner}: {name}" for owner, name, spec in _all_fields()
               if not spec.required and not spec.accepts(spec.default)]
    assert refused == []


def test_config_fields_are_the_dataclass_fields_with_the_same_defaults():
    fresh = ExperimentConfig()
    assert list(FIELDS) == [f.name for f in dataclasses.fields(ExperimentConfig)]
    assert {name: getattr(fresh, name) for name in FIELDS} == {name: spec.default for name, spec in FIELDS.items()}
    fresh.partition["s"] = 0.5  # a mapping default is each config's own
    assert ExperimentConfig().partition["s"] == 0.2 and FIELDS["partition"].default["s"] == 0.2


def test_shift_functions_take_the_declared_defaults():
    for name, function in (("label_permutation", shifts.label_permutation), ("rotation", shifts.rotation)):
        signature = inspect.signature(function).parameters
        assert {k: spec.default for k, spec in PARAMETERS[name].items()} == \
            {k: signature[k].default for k in PARAMETERS[name]}
    assert check_shift({"kind": "corruption"}) == {k: spec.default for k, spec in PARAMETERS["corruption"].items()}


# ----------------------------------------------------------------------- refusals
@pytest.mark.parametrize("shift, words", [
    ({"kind": "rotation", "groups": 0}, "shift parameter 'groups' = 0 is not allowed for shift 'rotation': it must "
                                        "be a whole number in [1, 100000]"),
    ({"kind": "rotation", "groups": 2, "angles": [0]}, "'angles' = [0] is not allowed for shift 'rotation': give "
                                                       "one angle in degrees per group (2)"),
    ({"kind": "rotation", "angles": [math.nan] * 5}, "its item nan is not"),
    ({"kind": "corruption", "severity": 6}, "'severity' = 6 is not allowed for shift 'corruption': it must be a "
                                            "whole number in [1, 5], or null"),
    ({"kind": "label_permutation", "angles": [0]}, "shift 'label_permutation' has no parameter 'angles'"),
])
def test_a_bad_shift_parameter_is_refused_by_its_field(shift, words):
    with pytest.raises(ShiftError) as info:
        check_shift(shift)
    assert words in str(info.value) and str(info.value).endswith(".")


def test_partition_refusals_are_generated_and_the_config_names_the_nested_field():
    with pytest.raises(PartitionError) as info:
        make_partition("iid", np.arange(20) % 2, np.arange(10) % 2, 2, seed=0, test_fraction=0)
    assert str(info.value) == ("partition parameter 'test_fraction' = 0 is not allowed for kind 'iid': it must be a "
                               "finite number in (0, 1], or null.")
    assert info.value.param == "test_fraction" and info.value.refusal.value == 0
    with pytest.raises(PartitionError, match="partition kind 'quantity' needs the parameter 'size_choices', a "
                                             r"non-empty list of whole numbers >= 1\."):
        make_partition("quantity", np.arange(20) % 2, np.arange(10) % 2, 2, seed=0)
    with pytest.raises(Exception, match=r"config field 'partition.alpha' = 0 is not allowed for partition kind "
                                        r"'dirichlet': it must be a finite number > 0\."):
        ExperimentConfig.from_dict({"partition": {"kind": "dirichlet", "alpha": 0}})


def test_numpy_numbers_count_as_the_python_numbers_they_hold_in_a_partition():
    train, test = np.arange(400) % 4, np.arange(100) % 4
    plain = make_partition("pathological", train, test, 4, seed=3, classes_per_client=[2, 3], samples_per_client=20)
    numpy = make_partition("pathological", train, test, np.int64(4), seed=np.int64(3),
                           classes_per_client=np.array([2, 3]), samples_per_client=np.int64(20))
    assert numpy == plain


# --------------------------------------------------------------------- the fingerprint
def test_only_fields_that_change_the_numbers_enter_the_fingerprint(tmp_path):
    base = ExperimentConfig(dataset="digits", model="mlp", partition={"kind": "iid"})
    outside = {"name": "x", "output_dir": str(tmp_path), "quiet": True, "checkpoint_every": 3, "device": "cpu",
               "workers": 0, "data_root": str(tmp_path)}
    assert {n for n, spec in FIELDS.items() if not spec.fingerprint} == set(outside)
    assert dataclasses.replace(base, **outside).fingerprint() == base.fingerprint()
    assert dataclasses.replace(base, lr_decay=1, feature_probe=0, sampling="uniform", new_clients=0).fingerprint() \
        == base.fingerprint()  # a feature left off keeps the fingerprint of runs from before the field
    for change in ({"lr_decay": 0.99}, {"feature_probe": 2}, {"sampling": "bernoulli"}, {"new_clients": 0.25},
                   {"seed": 1}, {"eval_every": 2}, {"method_params": {"mu": 0.1}, "method": "fedprox"}):
        assert dataclasses.replace(base, **change).fingerprint() != base.fingerprint(), change


# ------------------------------------------------------------------------ the docs page
def test_the_committed_reference_page_is_the_generated_one():
    committed = (ROOT / REFERENCE_PAGE).read_text(encoding="utf-8")
    assert committed == reference_page(), (
        f"{REFERENCE_PAGE} is out of date: run python -c 'from pflcore.config import write_reference; "
        "write_reference()' and commit it")


def test_the_reference_page_has_a_row_for_every_field():
    page = reference_page()
    for owner, name, spec in _all_fields():
        assert f"| `{name}` | {spec.describe()}" in page.replace("\\|", "|"), (owner, name)
    for kind in (*KINDS, *PARAMETERS, *ALGORITHMS):
        assert f"### `{kind}`" in page
