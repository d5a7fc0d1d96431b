"""`pflcore report` never deletes what it did not write (issue 74): it builds beside its target
and swaps the new site in only when the build succeeds; a folder that is not a report it built
is refused in one sentence; a failed, interrupted, killed or concurrent build leaves the previous
report whole; ``commit_figures`` copies only figures the build drew into its own folder."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pflcore import records, report
from pflcore.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / records.RECORDS_FOLDER


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project with two shipped records of FedPAC's Table 1, the working directory."""
    root = tmp_path / "project"
    for folder in ("notebooks", "params"):
        (root / folder).mkdir(parents=True)
    for path in sorted((SHIPPED / "fedpac" / "t1_main").glob("fedavg-*.json"))[:2]:
        dest = root / records.RECORDS_FOLDER / path.relative_to(SHIPPED)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    monkeypatch.chdir(root)
    return root


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def quiet(*_args, **_kwargs) -> None:
    pass


def build(target: Path, project: Path) -> Path:
    return report.build(target, root=project, execute=False, log=quiet)


def beside(target: Path) -> list[str]:
    """What a build leaves beside its target, besides the target and its lock file."""
    return sorted(p.name for p in target.parent.iterdir()
                  if p.name.startswith(f".{target.name}.") and p.name != f".{target.name}.lock")


@pytest.mark.parametrize("out", ["reproductions", "reproductions/fedpac", "figures", ".", ".git"])
def test_the_records_the_figures_and_the_project_are_refused_as_targets(project, capsys, out):
    (project / "figures").mkdir()
    (project / "figures" / "kept.png").write_bytes(b"png")
    (project / ".git").mkdir()
    before = tree(project)
    assert main(["report", "--no-notebooks", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pflcore report: pflcore report does not write into") and "\n" not in err
    assert tree(project) == before


def test_a_user_folder_is_refused_and_left_as_it_is(project, tmp_path, capsys):
    mine = tmp_path / "results"
    (mine / "run").mkdir(parents=True)
    (mine / "run" / "checkpoint.pt").write_bytes(b"weights")
    assert main(["report", "--no-notebooks", "--out", str(mine)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a report pflcore built" in err and str(mine) in err and err.count("\n") == 0
    assert tree(mine) == {"run/checkpoint.pt": b"weights"}
    (mine / "notes.txt").write_text("a report-looking folder with a file of mine")
    for name in ("index.html", "records.html", report.DRAWN):
        (mine / name).write_text("x")
    with pytest.raises(report.ReportRefused, match="not a report pflcore built"):
        build(mine, project)
    assert (mine / "notes.txt").exists()
    file = tmp_path / "file.txt"
    file.write_text("mine")
    with pytest.raises(report.ReportRefused, match="it is a file"):
        build(file, project)
    assert file.read_text() == "mine"


def test_a_new_or_empty_folder_is_built_and_a_report_is_rebuilt_in_place(project, tmp_path):
    (tmp_path / "empty").mkdir()
    index = build(tmp_path / "empty", project)
    assert index == tmp_path / "empty" / "index.html" and (index.parent / report.MARKER).is_file()
    target = tmp_path / "site"
    build(target, project)
    (target / "index.html").write_text("an earlier build")
    build(target, project)
    assert (target / "index.html").read_text() != "an earlier build" and report.is_report(target)
    assert beside(target) == []


def test_a_report_built_before_the_marker_is_replaced(project, tmp_path):
    target = tmp_path / "site"
    build(target, project)
    (target / report.MARKER).unlink()  # as a build by an earlier pflcore left it
    assert report.is_report(target)
    build(target, project)
    assert (target / report.MARKER).is_file()


def test_a_build_refused_for_a_bad_record_leaves_the_previous_report_whole(project, tmp_path, capsys):
    target = tmp_path / "site"
    build(target, project)
    before = tree(target)
    path = next((project / records.RECORDS_FOLDER).rglob("*.json"))
    damaged = json.loads(path.read_text())
    damaged["summary"]["acc_mean"] = 99.51
    path.write_text(json.dumps(damaged))
    assert main(["report", "--no-notebooks", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert path.name in err and "summary.acc_mean" in err and err.count("\n") == 0
    assert tree(target) == before and beside(target) == []


def test_an_interrupted_build_leaves_the_previous_report_whole(project, tmp_path, monkeypatch):
    from pflcore.report import pages

    target = tmp_path / "site"
    build(target, project)
    before = tree(target)

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pages, "render_records", interrupted)  # Ctrl-C in the middle of writing the pages
    with pytest.raises(KeyboardInterrupt):
        build(target, project)
    assert tree(target) == before and beside(target) == []


KILLED = """
import sys, time
from pathlib import Path
from pflcore import report
from pflcore.report import pages
real = pages.render_records
def slow(*args, **kwargs):
    Path(sys.argv[2]).write_text("inside")  # the build has written part of its site
    time.sleep(600)
pages.render_records = slow
report.build(Path(sys.argv[1]), root=Path.cwd(), execute=False, log=lambda *a, **k: None)
"""


def test_a_killed_build_leaves_the_previous_report_whole_and_the_next_build_tidies_up(project, tmp_path):
    target = tmp_path / "site"
    build(target, project)
    before = tree(target)
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", KILLED, str(target), str(ready)], cwd=project)
    try:
        for _ in range(3000):  # until the child is inside its build (it imports pflcore first)
            if ready.exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        assert child.poll() is None, "the build ended before it was killed"
        with pytest.raises(report.ReportRefused, match="another pflcore process is writing the report"):
            build(target, project)  # a second build while the first one runs
        assert tree(target) == before
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert tree(target) == before and beside(target)  # the killed build's folder is left beside it
    build(target, project)
    assert beside(target) == [] and (target / "index.html").exists()


def test_two_builds_at_once_one_is_refused_and_neither_harms_the_other(project, tmp_path):
    target = tmp_path / "site"
    build(target, project)
    with report.building(target, project) as new:  # a build under way
        (new / "index.html").write_text("the first build's")
        with pytest.raises(report.ReportRefused, match="another pflcore process is writing") as info:
            build(target, project)
        assert "\n" not in str(info.value)
    assert (target / "index.html").read_text() == "the first build's"


def test_commit_figures_copies_only_figures_the_build_drew_into_its_own_folder(project, tmp_path):
    (project / "figures").mkdir()
    (project / "figures" / "README.md").write_text("kept")
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not a figure of the build")
    out = tmp_path / "site"
    build(out, project)
    before = tree(project / "figures")
    for entry in ({"figure": "../secret.png", "as": "p/x.png", "records": []},
                  {"figure": str(secret), "as": "p/x.png", "records": []},
                  {"figure": "index.html", "as": "../outside.png", "records": []},
                  {"figure": "index.html", "as": "smoke/x.png", "records": []},
                  "figures/a.png"):
        (out / report.DRAWN).write_text(json.dumps([entry]))
        with pytest.raises(report.ReportRefused, match="lists a figure that is not one the build drew") as info:
            report.commit_figures(out, root=project)
        assert "\n" not in str(info.value)
        assert tree(project / "figures") == before and not (tmp_path / "outside.png").exists()
    (out / report.DRAWN).write_text("[{")
    with pytest.raises(report.ReportRefused, match="cannot be read"):
        report.commit_figures(out, root=project)
    assert not [p for p in project.iterdir() if p.name.startswith(".figures")]
