"""JupyterLab as a new user meets it, in a real headless Chromium driven by Selenium.

JupyterLab is started as users start it, ``pflcore lab`` (``--allow-root`` as root, the
no-news default and the git filter of ``pflcore.lab``), on 127.0.0.1 with a token, over a git
clone of the notebooks and presets (a copy committed with the project's ``.gitattributes`` and
``.gitignore``). The test opens the quickstart, checks that no news pop-up asks anything, saves
it unedited (the file must not change: notebooks are committed in the form Lab writes), runs
all cells at the scale an unedited notebook has (the smoke preset), waits for Lab's autosave
to write the outputs and checks that ``git status --porcelain`` is empty (running a notebook
never dirties the clone), then adds a cell and checks: git sees that edit, the kernel is this
environment's Python, no cell failed, the results table and every figure rendered.
Screenshots go to ``outputs/jupyterlab/`` for a failing run to be inspected. Every process
it started (Lab, its kernel, chromedriver, Chromium) is stopped by PID.

Needs Debian's ``chromium`` and ``chromium-driver`` and pip's ``selenium`` (``.ci/setup``
installs them); without them it is skipped, except under CI, where it fails.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from browser import chrome, require_browser

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "outputs" / "jupyterlab"
NOTEBOOK = "notebooks/00_quickstart.ipynb"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc), deepest last."""
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path("/proc").glob("[0-9]*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                found.append(int(task.name))
                frontier.append(int(task.name))
    return found


def _stop(pids: list[int]) -> list[int]:
    """SIGTERM, then SIGKILL after 10 s, each PID; returns those still alive."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    alive = list(pids)
    while alive and time.time() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
        time.sleep(0.2)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.5)
    return [p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]


def _state(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


#: Lab's autosave interval in the test (its default is 120 s; the mechanism is the same).
AUTOSAVE_SECONDS = 10


def _git(copy: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(copy), "-c", "user.name=test", "-c", "user.email=test@example.invalid",
                           *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def lab(tmp_path):
    """``pflcore lab`` over a git clone of notebooks/ and params/; yields (base url, token,
    copy); stops Lab, its kernels and everything they started."""
    require_browser()
    copy = tmp_path / "project"
    for folder in ("notebooks", "params"):
        shutil.copytree(ROOT / folder, copy / folder)
    for name in (".gitignore", ".gitattributes"):
        shutil.copy(ROOT / name, copy / name)
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "commit", "-qm", "the project's notebooks")
    # every cell in the page, so every output can be checked; autosave sooner than Lab's 120 s.
    # The news setting is left alone: `pflcore lab` writes its default into the environment.
    settings = tmp_path / "settings"
    for name, values in (("notebook-extension/tracker", {"windowingMode": "none"}),
                         ("docmanager-extension/plugin", {"autosaveInterval": AUTOSAVE_SECONDS})):
        path = settings / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = _free_port(), os.urandom(12).hex()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    command = [str(Path(sys.executable).with_name("pflcore")), "lab", "--no-browser", "--ip=127.0.0.1",
               f"--port={port}", f"--IdentityProvider.token={token}"]  # as root, pflcore lab adds --allow-root
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=copy)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"JupyterLab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer within 60 s")
        yield base, token, copy
    finally:
        pids = [server.pid, *_children(server.pid)]
        left = _stop(list(reversed(pids)))
        log.close()
        assert not left, f"processes still running after the test: {left}"


def _driver():
    return chrome(1400, 1000)

def _wait(condition, seconds: float, what: str, driver=None, shot: str = "timeout"):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1)
    if driver is not None:
        driver.save_screenshot(str(SHOTS / f"{shot}.png"))
    pytest.fail(f"timed out after {seconds:.0f} s waiting for {what} (screenshot in {SHOTS})")


def _kernel_idle(driver) -> bool:
    text = driver.execute_script("return document.body.innerText")
    return "| Idle" in text


def _run_menu(driver, item: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.XPATH, "//li[contains(@class,'lm-MenuBar-item')][.//div[text()='Run']]").click()
    time.sleep(0.5)
    driver.find_element(By.XPATH, f"//li[contains(@class,'lm-Menu-item')][.//div[text()='{item}']]").click()


def _save(driver) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel-notebook").click()
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE, Keys.CONTROL, "s")
    time.sleep(3)


def _has_outputs(path: Path) -> bool:
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError):  # mid-write
        return False
    return any(c.get("outputs") for c in cells if c["cell_type"] == "code")


def test_quickstart_in_jupyterlab_runs_all_at_smoke_scale_and_leaves_the_file_unchanged(lab):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    base, token, copy = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    committed = (ROOT / NOTEBOOK).read_bytes()  # recording Python 3.11.2, whatever Python the kernel runs
    driver, service = _driver()
    browser_pids = [service.process.pid, *_children(service.process.pid)]
    try:
        driver.get(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
        _wait(lambda: _kernel_idle(driver), 120, "the kernel to start", driver, "open")
        time.sleep(3)
        driver.save_screenshot(str(SHOTS / "1-opened.png"))
        assert _git(copy, "config", "--get", "filter.nbstripout.clean").strip(), "pflcore lab installed no git filter"

        _save(driver)  # opening and saving an unedited notebook must change nothing
        assert (copy / NOTEBOOK).read_bytes() == committed, \
            "JupyterLab rewrote the unedited notebook on save: commit it with `pflcore notebooks --tidy`"

        _run_menu(driver, "Run All Cells")
        started = time.time()
        _wait(lambda: "[*]" in driver.execute_script("return document.body.innerText"), 30, "the run to start",
              driver, "run-start")
        _wait(lambda: "[*]" not in driver.execute_script("return document.body.innerText")
              and _kernel_idle(driver), 900, "Run All to finish", driver, "run-all")
        seconds = time.time() - started
        driver.save_screenshot(str(SHOTS / "2-ran.png"))
        # without pflcore lab's default (fetchNews "false" in .venv), Lab asks by now whether to fetch its news
        assert "Jupyter news" not in driver.execute_script("return document.body.innerText"), \
            "JupyterLab asks about its news feed: pflcore lab's default in the environment was not read"

        # Lab's autosave writes the outputs; git must see nothing (nbstripout filter + post-save hook)
        _wait(lambda: _has_outputs(copy / NOTEBOOK) and not driver.find_elements(By.CSS_SELECTOR, ".jp-mod-dirty"),
              3 * AUTOSAVE_SECONDS + 60, "Lab's autosave of every output", driver, "autosave")
        assert (copy / NOTEBOOK).read_bytes() != committed
        deadline = time.time() + 30  # the post-save hook refreshes git's index in a thread
        while (status := _git(copy, "status", "--porcelain")) and time.time() < deadline:
            time.sleep(1)
        assert status == "", f"running the notebook dirtied the clone:\n{status}{_git(copy, 'diff', '--stat')}"

        # one more cell, in the copy: which Python runs the kernel
        footer = driver.find_element(By.CSS_SELECTOR, ".jp-Notebook-footer")  # "Click to add a cell."
        driver.execute_script("arguments[0].scrollIntoView()", footer)
        footer.click()
        time.sleep(1)
        editor = driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")[-1].find_element(
            By.CSS_SELECTOR, ".cm-content")
        editor.click()
        editor.send_keys("import sys; print('KERNEL', sys.prefix)")
        editor.send_keys(Keys.CONTROL, Keys.ENTER)
        _wait(lambda: "KERNEL " in driver.execute_script("return document.body.innerText"), 60,
              "the kernel check cell", driver, "kernel")
        _wait(lambda: _kernel_idle(driver), 60, "the kernel", driver, "kernel")
        rendered_images = driver.execute_script(
            "return Array.from(document.querySelectorAll('.jp-OutputArea-output img'))"
            ".filter(i => i.complete && i.naturalWidth > 0).length")
        tables = len(driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output table"))
        driver.save_screenshot(str(SHOTS / "3-end.png"))
        _save(driver)
        assert _git(copy, "status", "--porcelain").strip() == f"M {NOTEBOOK}", "git did not see the added cell"
    finally:
        driver.quit()
        browser_pids += [p for p in _children(service.process.pid) if p not in browser_pids]
        left = _stop(browser_pids)
    assert not left, f"browser processes still running: {left}"

    saved = json.loads((copy / NOTEBOOK).read_text())
    outputs = [o for c in saved["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    errors = [f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error"]
    assert not errors, f"cells failed in JupyterLab: {errors}"
    kernel_line = next(line for o in outputs for line in "".join(o.get("text", "")).splitlines()
                       if line.startswith("KERNEL "))
    assert kernel_line.split(" ", 1)[1] == sys.prefix, f"the kernel is not this environment's Python: {kernel_line}"
    figures = sum("image/png" in o.get("data", {}) for o in outputs)
    assert figures >= 2 and rendered_images == figures, f"{rendered_images} of {figures} figures rendered"
    assert tables >= 1, "the results table did not render"
    print(f"Run All at the smoke scale took {seconds:.0f} s in JupyterLab")
