"""The report page in a real headless Chromium (Debian's package): what a person's browser shows."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
# run in the page once it has loaded: the main table's extent, the page's width and every image
MEASURE = """<script>window.addEventListener("load", () => {
  const table = document.querySelector("table.key"), images = [...document.images];
  document.body.setAttribute("data-measured", JSON.stringify({
    table_right: table.getBoundingClientRect().right, table_width: table.scrollWidth,
    page_width: document.documentElement.scrollWidth, images: images.length,
    loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
    rows: table.tBodies[0].rows.length}));
});</script>"""


def need_chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        raise AssertionError("chromium is not installed: .ci/run installs Debian's chromium package")
    pytest.skip("needs Debian's chromium (apt-get install chromium)")


def measure(page: Path, tmp: Path, width: int = 1280) -> dict:
    """Open a copy of page (with the measuring script) at width px; what the script measured."""
    probe = tmp / f"measured-{page.name}"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = subprocess.run([need_chromium(), *FLAGS, f"--window-size={width},900", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found, "the page's script did not run"
    return json.loads(found.group(1).replace("&quot;", '"'))


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 1600) -> Path:
    subprocess.run([need_chromium(), *FLAGS, f"--window-size={width},{height}", f"--screenshot={png}",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    return png
