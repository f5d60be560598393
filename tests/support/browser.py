"""Headless Chromium for browser tests: Debian's ``chromium`` + ``chromium-driver`` via Selenium.

Both paths are given explicitly and Selenium Manager is told to stay offline
(``SE_OFFLINE=1``), so no test ever downloads a browser or a driver. ``.ci/run`` installs the
two packages when they are missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = os.environ.get("VOLTRO_TEST_CHROMIUM", "/usr/bin/chromium")
WRITE_DOCS_SCREENSHOT = "VOLTRO_TEST_WRITE_DOCS_SCREENSHOT"
"""Set to 1: the example app's screenshot test also writes ``docs/dashboard.png`` (the README's)."""
CHROMEDRIVER = os.environ.get("VOLTRO_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (Path(path).is_file() or shutil.which(path)):
            return f"{path} is missing — apt-get install -y {package} (.ci/run does)"
    return None


def require_browser() -> None:
    """Skip the test when the browser cannot run here — a failure under
    ``VOLTRO_TEST_REQUIRE_SERVICES=1`` (CI), where a skip would count as coverage."""
    import pytest

    why = missing()
    if why is not None:
        if os.environ.get("VOLTRO_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail(why)
        pytest.skip(why)


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[object]:
    """A headless Chromium WebDriver at ``width``×``height``; quit after."""
    os.environ["SE_OFFLINE"] = "1"  # Selenium Manager: never fetch anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--force-prefers-reduced-motion",
        "--lang=en-GB",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
