"""The HTML report opens in headless Chromium: the regression is on the first screen, nothing overflows.

The screenshot is decoded with Pillow and its pixels are located: the regressed row's red
background sits in the first screen at 1400 px and at a phone's 420 px, no horizontal scroll bar
appears (Chromium draws one, a grey band along the bottom, when the page is wider than the window;
a control page proves the check can see it), and the plots' line colours are there.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pytest_gpuenergy.gate.compare import compare_documents
from pytest_gpuenergy.reports.html import html_report
from pytest_gpuenergy.reports.plots import COLOURS

from helpers import make_doc

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="headless Chromium is not installed (apt-get install chromium) to screenshot the HTML report"
)


def decode_png(data: bytes) -> np.ndarray:
    """The pixels (rows x columns x RGB) of a PNG, decoded by Pillow (which matplotlib, one of the
    plugin's dependencies, requires: it is there wherever the report can be drawn)."""
    with Image.open(io.BytesIO(data)) as picture:
        return np.asarray(picture.convert("RGB"))


def pixels_near(image: np.ndarray, colour: str, tolerance: int = 28) -> np.ndarray:
    """The (x, y) of every pixel within ``tolerance`` of ``colour`` in each channel."""
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    close = np.all(np.abs(image.astype(np.int16) - target) <= tolerance, axis=2)
    ys, xs = np.nonzero(close)
    return np.stack([xs, ys], axis=1)


WORKLOADS = tuple(f"{n}-{m}" for n in ("alexnet", "autoenc", "deepq", "memnet", "residual", "seq2seq", "speech",
                                         "transformer", "vgg") for m in ("train", "infer"))
REGRESSION_RED = "#fde2e1"      # the regressed row's background


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """The 126-case report: 18 workloads at 7 caps, one workload with 25 % more work."""
    common = dict(workloads=WORKLOADS, caps_w=(280.0, 350.0, 420.0, 490.0, 560.0, 630.0, 700.0), percent=True,
                  test="reference_workloads/test_energy_suite.py::test_energy")
    old = make_doc(seed=1, **common)
    new = make_doc(seed=2, minutes=30, scale={"vgg-infer": 1.25}, **common)
    folder = tmp_path_factory.mktemp("screenshot")
    path = folder / "report.html"
    path.write_text(html_report([new], compare_documents(old, new, {"ets": 5.0}), baselines=[old]), encoding="utf-8")
    return path


def shoot(page: Path, width: int, height: int) -> np.ndarray:
    """A screenshot of the window, scroll bars drawn (a horizontal one means the page overflows)."""
    png = page.with_name(f"{page.stem}-{width}x{height}.png")
    command = [
        BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={page.parent / f'profile-{page.stem}-{width}-{height}'}", f"--screenshot={png}",
        f"--window-size={width},{height}", page.as_uri(),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert png.is_file(), f"Chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    return decode_png(png.read_bytes())


def has_horizontal_scrollbar(image: np.ndarray) -> bool:
    """Chromium draws a horizontal scroll bar along the bottom when the page is wider than the window:
    a light track (#fcfcfc) holding a grey thumb, across the bottom rows left of the vertical bar."""
    band = image[-13:-4, :-16, :].astype(int)
    grey = (np.ptp(band, axis=2) < 6) & (band[:, :, 0] >= 110) & (band[:, :, 0] <= 253)   # the page's white is 255
    return bool(grey.all() and (band[:, :, 0] <= 170).any())


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 420])
def test_the_regression_is_on_the_first_screen_and_nothing_overflows(page, width):
    height = 900
    image = shoot(page, width, height)
    assert image.shape[:2] == (height, width)
    red = pixels_near(image, REGRESSION_RED, tolerance=6)
    assert len(red) > 200, f"no regressed row visible on the first screen ({height} px) at {width} px"
    assert red[:, 1].min() < 0.8 * height
    assert not has_horizontal_scrollbar(image), f"the page overflows a {width} px window"


def test_the_overflow_check_can_fail(page):
    """The same page with one element wider than the window: the check sees the scroll bar."""
    wide = page.with_name("wide.html")
    wide.write_text(page.read_text(encoding="utf-8").replace("<body>", '<body><div style="width:900px;height:4px"></div>'),
                    encoding="utf-8")
    assert has_horizontal_scrollbar(shoot(wide, 420, 900))


@pytest.mark.slow
def test_the_plots_are_drawn(page):
    image = shoot(page, 1400, 4000)
    for metric, colour in COLOURS.items():
        assert len(pixels_near(image, colour, tolerance=20)) > 300, f"the {metric} lines are not visible"
    rgb = image.reshape(-1, 3).astype(np.int32)
    distinct = len(np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2]))
    assert distinct > 50, f"the page looks blank: {distinct} distinct colours"
