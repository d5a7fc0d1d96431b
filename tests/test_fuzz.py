"""A property-based fuzz of everything a user can type (issue 33): generated configs, method
parameters, partition and shift specs, command lines and YAML documents.

The property, for every input: it is either refused with one of pflcore's one-sentence errors
(:class:`~pflcore.errors.ConfigError`, or a partition/shift error at data-building time) whose
sentence names a field, leaving no file behind, or it runs at a tiny scale to the end. No other
exception, no traceback on the command line, and each example within the profile's deadline
(tests/conftest.py: profile "ci" by default, ``HYPOTHESIS_PROFILE=local`` for many examples).

Every failure the fuzz has found is kept below as an explicit ``@example``.
"""
from __future__ import annotations

import dataclasses
import math
import re
import shutil
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import event, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pflcore  # noqa: E402
from pflcore.algorithms import ALGORITHMS  # noqa: E402
from pflcore.cli import main  # noqa: E402
from pflcore.config import ExperimentConfig, read_config_file  # noqa: E402
from pflcore.data.partition import KINDS, PartitionError  # noqa: E402
from pflcore.data.shifts import PARAMETERS as SHIFT_PARAMETERS  # noqa: E402
from pflcore.data.shifts import ShiftError  # noqa: E402
from pflcore.engine.simulation import DivergenceError  # noqa: E402
from pflcore.errors import ConfigError  # noqa: E402

# The tiny federation every run-to-the-end example starts from (about a second per run here).
TINY = {"method": "fedavg", "dataset": "digits", "model": "mlp", "num_clients": 2, "rounds": 1, "local_epochs": 1,
        "batch_size": 16, "partition": {"kind": "iid"}, "workers": 0, "quiet": True, "checkpoint_every": 1}
FIELDS = [f.name for f in dataclasses.fields(ExperimentConfig)]


def _names() -> set[str]:
    """Every name a refusal may cite: config fields, method, partition and shift parameters."""
    names = set(FIELDS) | {"kind", "subsample", "config", "YAML", "key"}
    for algorithm in ALGORITHMS.values():
        names |= set(getattr(algorithm, "hyperparams", {}) or {})
    for kind in KINDS.values():
        names |= set(kind.params)
    for params in SHIFT_PARAMETERS.values():
        names |= set(params)
    return names


NAMES = _names()
REFUSALS = (ConfigError, PartitionError, ShiftError)
# Examples that train get a quarter of the profile's count (CI: about a minute in all, here).
RUNS = settings(max_examples=max(10, settings().max_examples // 4))


def assert_one_sentence_naming_a_field(exc: BaseException) -> None:
    """A refusal is one short line that names what is wrong."""
    text = str(exc)
    assert "\n" not in text and len(text) < 2000, text[:300]
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    assert words & NAMES, f"the refusal names no field: {text}"


# ------------------------------------------------------------------------------------ values
huge_ints = st.sampled_from([10**6, 10**9, 2**63, 2**64, 10**30, -(10**9), 10**5000])
_hostile_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5), huge_ints,
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 1.5, -0.1, 1e-300, 1e300]),
    st.text(max_size=8), st.sampled_from(["", "auto", "cpu", "cuda", "a\nb", "x" * 100_000, "fedavg", "iid", "\x00"]),
    st.lists(st.integers(-2, 5), max_size=4), st.just([0.1] * 100_000),
    st.dictionaries(st.text(max_size=4), st.integers(-2, 5), max_size=3),
)
# a leaf, or a mapping with a hostile 'kind' (partition, shift) and hostile parameters
hostile = st.one_of(_hostile_leaf, st.builds(lambda kind, rest: {"kind": kind, **rest}, _hostile_leaf,
                                             st.dictionaries(st.sampled_from(["s", "groups", "alpha", "angles"]),
                                                             _hostile_leaf, max_size=2)))


def _fresh_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pflcore-fuzz-"))


# ------------------------------------------------------------------- 1. config mappings (validation only)
@given(changes=st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=6)), hostile, max_size=4))
@example(changes={"lr": "x" * 10**7})  # the sentence quoted the whole value (issue 33)
@example(changes={"num_clients": 10**9})  # no upper bound: the partition asked for 10^9 clients
@example(changes={"seed": 10**5000})  # the repr of a 5000-digit int raises in Python >= 3.11
@example(changes={"name": "a\nb"})  # a folder name with a newline
@example(changes={"partition": {"kind": "iid", 1: 2}})  # a non-text key reached **kwargs (TypeError)
@example(changes={"shift": {"kind": "rotation", "groups": 10**9}})  # 10^9 angles
@example(changes={"shift": {"kind": [1]}})  # found by the CLI fuzz: TypeError, unhashable list
@example(changes={"shift": 1})  # found by the local profile: TypeError (the key check iterated an int)
@example(changes={"new_clients": 10**400})  # found by the local profile: OverflowError in math.isfinite
def test_any_config_mapping_is_valid_or_refused_in_one_sentence(changes):
    out = _fresh_dir()
    try:
        values = {**TINY, "output_dir": str(out / "results"), **changes}
        try:
            ExperimentConfig.from_dict(values)
            event("valid")
        except ConfigError as exc:
            event("refused")
            assert_one_sentence_naming_a_field(exc)
        assert not (out / "results").exists()  # validation never writes
    finally:
        shutil.rmtree(out, ignore_errors=True)


# --------------------------------------------------------- 2. methods, their parameters, partitions, shifts: run
def _param_value(spec, careful: bool) -> st.SearchStrategy:
    """In-range values of a declared hyperparameter (small ones, so runs stay tiny), or, when
    not ``careful``, sometimes a hostile one."""
    kind = spec.kind
    if kind is bool:
        good = st.booleans()
    elif spec.choices is not None:
        good = st.sampled_from(spec.choice_list() or [spec.default])
    elif kind is int:
        low = 0 if spec.low is None else int(math.ceil(spec.low)) + (1 if spec.low_open else 0)
        high = low + 2 if spec.high is None else min(int(spec.high) - (1 if spec.high_open else 0), low + 2)
        good = st.integers(low, high)
    elif kind is float:
        low = 0.0 if spec.low is None else float(spec.low)
        high = low + 1.0 if spec.high is None else min(float(spec.high), low + 1.0)
        good = st.floats(low, high, exclude_min=spec.low_open, exclude_max=spec.high_open and high == spec.high)
    else:
        good = st.just(spec.default)
    return good if careful else st.one_of(good, hostile)


@st.composite
def method_and_params(draw, careful=st.booleans()):
    careful = draw(careful) if not isinstance(careful, bool) else careful
    method = draw(st.sampled_from(sorted(ALGORITHMS)))
    spec = getattr(ALGORITHMS[method], "hyperparams", {}) or {}
    chosen = draw(st.lists(st.sampled_from(sorted(spec)), unique=True, max_size=3)) if spec else []
    params = {name: draw(_param_value(spec[name], careful)) for name in chosen}
    if not careful and draw(st.integers(0, 4)) == 0:
        params[draw(st.text(max_size=5))] = draw(hostile)  # an unknown parameter
    return method, params


partition_value = st.one_of(st.integers(-1, 40), st.floats(-0.5, 2.0), st.sampled_from(
    [None, True, "train", "test", "all", "random", [1, 2], [[0, 1], [2, 3]], [20, 40], 10**9]), hostile)
# kinds that split digits without extra data (natural, given and domains need ids or several domains)
PLAIN_KINDS = ["iid", "dominant", "pathological", "dirichlet", "quantity", "fedfa_shards", "fedfa_dirichlet",
               "pfllib_dirichlet", "pfllib_pathological"]


@st.composite
def partitions(draw, careful=st.booleans()):
    careful = draw(careful) if not isinstance(careful, bool) else careful
    kind = draw(st.sampled_from(PLAIN_KINDS if careful else sorted(KINDS) + ["nosuch"]))
    names = [] if kind == "nosuch" else list(KINDS[kind].params)
    spec = {"kind": kind}
    if not careful:
        for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=3)) if names else []:
            spec[name] = draw(partition_value)
    if kind in ("iid", "dominant", "pathological"):
        spec.setdefault("samples_per_client", draw(st.integers(8, 40)))
    if kind == "dominant":
        spec.setdefault("s", draw(st.floats(0, 1)))
    if kind in ("dirichlet", "fedfa_dirichlet", "pfllib_dirichlet"):
        spec.setdefault("alpha", draw(st.floats(0.05, 10)))
        spec.setdefault("max_retries", 20)
    if kind in ("pathological", "pfllib_pathological"):
        spec.setdefault("classes_per_client", draw(st.integers(1, 4)))
    if kind == "quantity":
        spec.setdefault("size_choices", draw(st.lists(st.integers(8, 40), min_size=1, max_size=3)))
    if draw(st.integers(0, 4)) == 0:
        spec["subsample"] = draw(st.floats(0.3, 1.0)) if careful else draw(st.one_of(st.floats(-1, 2), hostile))
    return spec


@st.composite
def shifts(draw, careful=st.booleans()):
    careful = draw(careful) if not isinstance(careful, bool) else careful
    kind = draw(st.sampled_from([None, None, "rotation", "label_permutation", "corruption"]
                                + ([] if careful else ["nosuch"])))
    if kind is None:
        return None
    if careful:
        if kind == "corruption":
            return {"kind": kind, "corruptions": [draw(st.sampled_from(["gaussian_noise", "fog", "contrast"]))],
                    "severity": draw(st.integers(1, 5)), "fraction": draw(st.sampled_from([0.0, 0.5, 1.0]))}
        return {"kind": kind, "groups": draw(st.integers(1, 3))}
    spec = {"kind": kind}
    for name in draw(st.lists(st.sampled_from(sorted(SHIFT_PARAMETERS.get(kind, {"groups"}))), unique=True,
                              max_size=2)):
        spec[name] = draw(st.one_of(st.integers(-1, 6), st.floats(-0.5, 1.5), st.sampled_from(
            [["gaussian_noise"], ["fog", "fog"], ["nosuch"], [0, 90], "unique", "upstream"]), hostile))
    return spec


@st.composite
def run_settings(draw):
    """A whole tiny run: three in four examples careful (they train to the end), the rest hostile."""
    careful = draw(st.integers(0, 3)) > 0
    return (draw(method_and_params(careful)), draw(partitions(careful)), draw(shifts(careful)))


@RUNS
@given(drawn=run_settings(), num_clients=st.integers(1, 4), local_epochs=st.integers(0, 1),
       participation=st.sampled_from([1.0, 0.5]))
@example(drawn=(("moon", {"projection_dim": 10**9}), {"kind": "iid"}, None), num_clients=2, local_epochs=1,
         participation=1.0)  # asked torch for 512 GB, then "unexpected RuntimeError" (issue 33)
@example(drawn=(("fedem", {"M": 10**6}), {"kind": "iid"}, None), num_clients=2, local_epochs=1,
         participation=1.0)  # hung silently (issue 33)
@example(drawn=(("fedavg", {}), {"kind": "dirichlet", "alpha": 0.1, "min_size": 10**6, "max_retries": 10**12}, None),
         num_clients=2, local_epochs=1, participation=1.0)  # a retry count without bound
@example(drawn=(("fedavg", {}), {"kind": "iid", "samples_per_client": 10**9}, None), num_clients=2, local_epochs=1,
         participation=1.0)  # needs far more memory than any machine has
def test_any_method_partition_and_shift_runs_or_is_refused(drawn, num_clients, local_epochs, participation):
    method, partition, shift = drawn
    out = _fresh_dir()
    try:
        name, params = method
        values = {**TINY, "method": name, "method_params": params, "partition": partition, "shift": shift,
                  "num_clients": num_clients, "local_epochs": local_epochs, "participation": participation,
                  "output_dir": str(out / "results")}
        try:
            result = pflcore.run(values)
        except REFUSALS as exc:
            event(f"refused: {type(exc).__name__}")
            assert_one_sentence_naming_a_field(exc)
            assert not (out / "results").exists() or not any((out / "results").iterdir()), "a refusal left files"
            return
        except DivergenceError as exc:  # a known condition of a valid config (a huge lr or step size)
            event("diverged")
            assert "\n" not in str(exc)
            return
        event("ran to the end")
        assert result.summary["rounds"] == 1 and (Path(result.path) / "summary.json").is_file()
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ------------------------------------------------------------------------------------ 3. command lines
flag_values = st.sampled_from(["0", "1", "2", "-1", "x", "", "auto", "1e3", "nan", "10000000000", "a\nb", "fedavg",
                               "digits", "nosuch", "[1]", "{a: 1}", "\t"])
set_keys = st.sampled_from(["lr", "rounds", "partition.s", "partition.kind", "method_params.mu", "seed", "name",
                            "shift.kind", "lr.x", "", "nosuch", "num_clients", "workers", "dropout"])
argument = st.one_of(
    st.tuples(st.sampled_from(["--method", "--dataset", "--seed", "--name", "--workers", "--num-clients",
                               "--rounds"]), flag_values),
    st.tuples(st.just("--set"), st.builds(lambda k, v: f"{k}={v}", set_keys, flag_values)),
    st.tuples(st.sampled_from(["--quiet", "--overwrite", "--nosuch", "-x"])),
)


@RUNS
@given(args=st.lists(argument, max_size=4), with_file=st.booleans())
@example(args=[("--name", "a\nb")], with_file=True)  # made a folder with a newline in its name (issue 33)
@example(args=[("--set", "lr.x=1")], with_file=True)
@example(args=[("--set", "shift.kind=[1]")], with_file=False)  # found here: TypeError (a list as shift kind)
def test_any_command_line_ends_in_one_line(args, with_file, capsys):
    out = _fresh_dir()
    try:
        config = out / "exp.yaml"
        config.write_text("method: fedavg\ndataset: digits\nmodel: mlp\nnum_clients: 2\nrounds: 1\nlocal_epochs: 1\n"
                          "batch_size: 16\npartition: {kind: iid}\nworkers: 0\n")
        argv = ["run", *([str(config)] if with_file else ["--method", "fedavg", "--dataset", "digits"]),
                "--output-dir", str(out / "results"), "--quiet", "--set", "model=mlp", "--set", "workers=0"]
        for item in args:
            if item[0] in ("--rounds", "--num-clients") and item[1] in ("10000000000", "1e3"):
                item = (item[0], "2")  # a long but valid run is not a refusal: keep it tiny
            argv += list(item)
        argv += ["--set", "rounds=1"] if not any(a[0] == "--rounds" for a in args) else []
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse: a usage line and one error line, exit 2
            code = stop.code
        err = capsys.readouterr().err
        event("ran to the end" if code == 0 else "refused")
        assert "Traceback" not in err and "unexpected" not in err, err
        assert code in (0, 2), (code, err)
        if code == 2 and (out / "results").exists():
            assert not any((out / "results").iterdir()), "a refused command left files"
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ------------------------------------------------------------------------------------ 4. YAML documents
yaml_scalars = st.sampled_from(["1", "5e-4", "x", "null", "[1, 2]", "{a: 1}", "&a [1]", "*a", "*nosuch", "'q",
                                '"\\x00"', "!!python/object:os.system", ".nan", "-.inf", "0x10", "1_000", "~", "\t1"])
yaml_keys = st.sampled_from(FIELDS + ["<<", "? [a]", "nosuch", "lr", "lr", "partition"])


# nine levels of ten aliases each: a few hundred bytes that expand to 10^9 values
ALIAS_BOMB = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))


@st.composite
def yaml_documents(draw):
    if draw(st.integers(0, 3)) == 0:
        return draw(st.text(max_size=60))
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        indent = draw(st.sampled_from(["", "", "  ", "\t"]))
        lines.append(f"{indent}{draw(yaml_keys)}: {draw(yaml_scalars)}")
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n---\nlr: 1\n"]))


@given(text=yaml_documents())
@example(text="lr: 0.1\nrounds: 3\nlr: 0.2\n")  # a repeated key silently kept the last value (issue 33)
@example(text=ALIAS_BOMB)  # aliases expanding to 10^9 values
@example(text="shift: 1")  # found by the local profile: TypeError
def test_any_yaml_document_is_read_or_refused_in_one_sentence(text):
    out = _fresh_dir()
    try:
        path = out / "exp.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            values = read_config_file(path)
            ExperimentConfig.from_dict({**TINY, "output_dir": str(out / "results"), **values})
            event("valid")
        except ConfigError as exc:
            event("refused")
            assert_one_sentence_naming_a_field(exc)
    finally:
        shutil.rmtree(out, ignore_errors=True)
