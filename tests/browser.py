"""The real browser the tests drive: Debian's chromium and chromedriver through Selenium
(`.ci/setup` installs them). Without them a test is skipped, except under CI, where it fails."""
from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def require_browser(what: str = "the real-browser test") -> None:
    missing = [name for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not found]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        message = f"{what} needs {', '.join(missing)} (bash .ci/setup installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def chrome(width: int = 1400, height: int = 1000):
    """A headless Chromium (and its chromedriver service): stop both with ``driver.quit()``
    and ``service.stop()``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                 "--disable-gpu"):
        options.add_argument(flag)
    service = Service(CHROMEDRIVER)
    return webdriver.Chrome(service=service, options=options), service
