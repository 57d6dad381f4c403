"""The HTML report opens in headless Chromium and its plots are visible in a screenshot.

The screenshot is decoded here (a minimal PNG reader on zlib, no Pillow needed) and the pixels
of each plot's line colour and of the optimum markers are counted and located: three plots side
by side show as blue (ETS), green (T) and red (EDP) pixels, in that order from left to right.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from energy_factories import make_doc
from pytest_gpuenergy.reports.html import COLOURS, EDP_OPT_COLOUR, ETS_OPT_COLOUR, html_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
WIDTH, HEIGHT = 1200, 1600
TOP_ROWS = 900          # the first workload's plots lie above this on the page

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="headless Chromium is not installed (apt-get install chromium) to screenshot the HTML report"
)


def decode_png(data: bytes, max_rows: int | None = None) -> np.ndarray:
    """The pixels (rows x columns x RGB) of an 8-bit, non-interlaced PNG, as Chromium writes it.

    Only the first ``max_rows`` rows are decoded when given (rows depend on the ones above).
    """
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    assert header is not None, "PNG without IHDR"
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unsupported PNG: depth {depth}, colour type {colour}"
    bpp = 4 if colour == 6 else 3
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8).reshape(height, width * bpp + 1)
    rows = height if max_rows is None else min(height, max_rows)
    image = np.zeros((rows, width * bpp), dtype=np.uint8)
    previous = np.zeros(width * bpp, dtype=np.uint8)
    for y in range(rows):
        image[y] = previous = _unfilter(int(raw[y, 0]), raw[y, 1:], previous, bpp)
    return image.reshape(rows, width, bpp)[:, :, :3]


def _unfilter(kind: int, line: np.ndarray, up: np.ndarray, bpp: int) -> np.ndarray:
    """Undo one row's PNG filter (None, Sub, Up, Average, Paeth; PNG spec section 9)."""
    if kind == 0:
        return line.copy()
    if kind == 2:
        return line + up                                      # uint8 arithmetic wraps modulo 256
    if kind == 1:
        return (np.cumsum(line.reshape(-1, bpp).astype(np.int64), axis=0) & 0xFF).astype(np.uint8).reshape(-1)
    out, above = line.astype(np.int64).tolist(), up.astype(np.int64).tolist()
    for i in range(len(out)):
        left = out[i - bpp] if i >= bpp else 0
        if kind == 3:
            out[i] = (out[i] + (left + above[i]) // 2) & 0xFF
            continue
        up_left = above[i - bpp] if i >= bpp else 0
        p = left + above[i] - up_left
        pa, pb, pc = abs(p - left), abs(p - above[i]), abs(p - up_left)
        out[i] = (out[i] + (left if pa <= pb and pa <= pc else above[i] if pb <= pc else up_left)) & 0xFF
    return np.array(out, dtype=np.uint8)


def pixels_near(image: np.ndarray, colour: str, tolerance: int = 28) -> np.ndarray:
    """The (x, y) of every pixel within ``tolerance`` of ``colour`` in each channel."""
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    close = np.all(np.abs(image.astype(np.int16) - target) <= tolerance, axis=2)
    ys, xs = np.nonzero(close)
    return np.stack([xs, ys], axis=1)


@pytest.fixture(scope="module")
def screenshot(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("screenshot")
    page = folder / "report.html"
    page.write_text(html_report([make_doc(seed=4, workloads=("alexnet-train",))]), encoding="utf-8")
    png = folder / "report.png"
    command = [
        BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={folder / 'profile'}", f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}",
        page.as_uri(),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert png.is_file(), f"Chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    return png


def test_the_plots_are_visible_in_the_screenshot(screenshot):
    image = decode_png(screenshot.read_bytes(), max_rows=TOP_ROWS)
    assert image.shape == (TOP_ROWS, WIDTH, 3)
    found = {metric: pixels_near(image, colour) for metric, colour in COLOURS.items()}
    for metric, points in found.items():
        assert len(points) > 300, f"the {metric} plot's line is not visible ({len(points)} pixels of its colour)"
    centres = {metric: float(points[:, 0].mean()) for metric, points in found.items()}
    assert centres["ets"] < centres["time"] < centres["edp"], f"the plots are not side by side: {centres}"
    for colour, name in ((ETS_OPT_COLOUR, "energy-optimal"), (EDP_OPT_COLOUR, "EDP-optimal")):
        assert len(pixels_near(image, colour)) > 40, f"the {name} cap marker is not visible"
    rgb = image.reshape(-1, 3).astype(np.int32)
    distinct = len(np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2]))
    assert distinct > 50, f"the page looks blank: {distinct} distinct colours"
