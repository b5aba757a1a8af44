"""Check that oxtree's HTML views render in a real browser (`make docs-check`).

Writes pages with `oxtree.view(...)` and `oxtree.pretty.treespec_html(...)` output for a few
trees, has headless Chromium screenshot them and dump their DOM, and checks that:

- each screenshot has the window's size and is not blank: enough distinct colours, ink on a
  sensible share of the pixels, spread over many rows;
- the expanded page shows more rows of ink than the same trees collapsed, so the
  ``<details>`` elements really open and close;
- hostile text in the trees (``<script>``, a closing ``</details>``) stays text: the browser's
  DOM holds no script element and no more ``<details>`` than the views made.

Needs the `chromium` binary (Debian: `apt-get install -y chromium`); without one it prints a
line saying the check was skipped and exits 0, so CI can run it on machines without a
browser. `make test` never runs this. Output goes to target/docs-check/ (pages, screenshots,
DOM dumps), to look at by eye. Exits non-zero with a message naming the failed check.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections import OrderedDict, namedtuple
from pathlib import Path
from typing import Any

import numpy as np
import oxtree
from oxtree.pretty import treespec_html

WINDOW = (1000, 1100)
Point = namedtuple("Point", "x y")


@oxtree.dataclasses.dataclass(namespace="")
class Linear:
    """A small registered dataclass standing in for a model layer."""

    weight: Any
    bias: Any
    activation: str = oxtree.dataclasses.field(default="relu", pytree_node=False)


def sample_trees() -> dict[str, Any]:
    shared = Linear(np.zeros((784, 256), np.float32), np.zeros(256, np.float32))
    model = {
        "encoder": [shared, Linear(np.zeros((256, 10), np.float32), None, "identity")],
        "tied": shared,
        "optimizer": {"step": 1200, "mu": [np.zeros(3, np.float64), np.zeros((2, 2), np.int32)]},
    }
    loop: dict[str, Any] = {"name": "loop"}
    loop["self"] = loop
    return {
        "model": model,
        "builtins": (OrderedDict(z=1, a=[2.5, None]), Point(x=1j, y=b"bytes"), list(range(150))),
        "hostile": {
            "<script>document.title='pwned'</script>": "</details></div><b>not bold</b>",
            "&amp;": [1, 2],
        },
        "cycle": loop,
    }


def write_page(path: Path, open_depth: int) -> int:
    """Write the HTML page; return how many ``<details>`` elements the views made."""
    trees = sample_trees()
    parts = []
    for name, tree in trees.items():
        parts.append(f"<h3>{name}</h3>")
        parts.append(oxtree.view(tree, open_depth=open_depth, max_items=6)._repr_html_())
    parts.append("<h3>treespec</h3>")
    parts.append(treespec_html(oxtree.tree_structure(trees["model"]), open_depth=open_depth))
    body = "\n".join(parts)
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>oxtree docs check</title>"
        f"</head><body style='margin: 12px; background: #ffffff;'>{body}</body></html>",
        encoding="utf-8",
    )
    return body.count("<details")


# --------------------------------------------------------------------------------------------------
# Reading PNG files (8-bit RGB or RGBA, not interlaced: what Chromium writes) with zlib alone.


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """``(width, height, rows)``: each row the RGB(A) bytes of one line of pixels."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    pos, idat, header = 8, bytearray(), None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        chunk = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
    if header is None:
        raise ValueError(f"{path} has no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour {colour})")
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                upper_left = previous[i - channels] if i >= channels else 0
                estimate = left + up - upper_left
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - upper_left)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else upper_left
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        previous = line
    if channels == 4:  # drop alpha
        rows = [bytes(b for i, b in enumerate(row) if i % 4 != 3) for row in rows]
    return width, height, rows


def ink_stats(rows: list[bytes]) -> tuple[int, float, int]:
    """``(distinct colours, share of non-white pixels, rows with any non-white pixel)``."""
    colours: set[bytes] = set()
    ink = ink_rows = 0
    for row in rows:
        row_ink = 0
        for i in range(0, len(row), 3):
            pixel = row[i : i + 3]
            colours.add(pixel)
            if min(pixel) < 235:
                row_ink += 1
        ink += row_ink
        ink_rows += row_ink > 0
    pixels = len(rows) * (len(rows[0]) // 3)
    return len(colours), ink / pixels, ink_rows


# --------------------------------------------------------------------------------------------------


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def run_browser(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        browser,
        "--headless",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def check(condition: bool, message: str) -> None:
    if not condition:
        sys.exit(f"docs-check FAILED: {message}")
    print(f"ok: {message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("target/docs-check"))
    out = parser.parse_args().out
    browser = chromium()
    if browser is None:
        print("docs-check: skipped, no chromium on PATH (Debian: apt-get install -y chromium)")
        return
    out.mkdir(parents=True, exist_ok=True)
    ink_rows = {}
    with tempfile.TemporaryDirectory(prefix="oxtree-docs-check-") as profile_dir:
        profile = Path(profile_dir)
        for label, open_depth in (("expanded", 8), ("collapsed", 0)):
            page, shot = out / f"{label}.html", out / f"{label}.png"
            details = write_page(page, open_depth)
            shot.unlink(missing_ok=True)
            done = run_browser(browser, profile, f"--screenshot={shot}", page.resolve().as_uri())
            check(shot.exists(), f"{label}: chromium wrote {shot} ({done.returncode=})")
            width, height, rows = read_png(shot)
            check((width, height) == WINDOW, f"{label}: screenshot is {width}x{height}")
            colours, share, ink_rows[label] = ink_stats(rows)
            check(colours >= 16, f"{label}: {colours} distinct colours (not a blank page)")
            check(0.003 < share < 0.5, f"{label}: {share:.1%} of pixels carry ink")
            dom = run_browser(browser, profile, "--dump-dom", page.resolve().as_uri()).stdout
            (out / f"{label}.dom.html").write_text(dom, encoding="utf-8")
            check("pwned" not in dom.split("</title>")[0], f"{label}: no injected script ran")
            check("<script" not in dom, f"{label}: the DOM holds no script element")
            check(
                dom.count("<details") == details,
                f"{label}: the DOM has the {details} <details> the views made",
            )
            check("&lt;b&gt;not bold&lt;/b&gt;" in dom, f"{label}: hostile markup shows as text")
    check(
        ink_rows["expanded"] > ink_rows["collapsed"] + 100,
        f"expanding shows more: {ink_rows['expanded']} rows of ink, "
        f"{ink_rows['collapsed']} collapsed",
    )
    print(f"docs-check passed; pages and screenshots in {out}/")


if __name__ == "__main__":
    main()
