"""Takes the screenshots of the HTML page and the SVG flame graph that docs/views.md shows
(docs/img/), in headless Chromium (chromium.py), and fails on any console problem or
network request:

    python3 tests/report/screenshots.py [BUILD_DIR] [OUT_DIR]   (defaults: build, docs/img)

It needs `make demo` to have run (BUILD_DIR/demo/tiny_gpt.html) and bench/make_trace to be
built (the 10 M-event trace is written to a temporary directory)."""
import subprocess
import sys
import tempfile
from pathlib import Path

import chromium

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / "docs" / "img").resolve()
REPORT = BUILD / "bin" / "memtrace-report"


def shoot(page, png, width=1300, height=900, actions=(), clip_selector=None):
    with chromium.Browser(width=width, height=height) as browser:
        browser.open(page)
        browser.wait_until("document.documentElement.getAttribute('data-ready') === '1' || "
                           "(document.body && document.body.getAttribute('data-ready') === '1')")
        for action in actions:
            action(browser)
        clip = None
        if clip_selector:
            x, y, w, h = browser.evaluate(f"""(() => {{ const r = document.querySelector('{clip_selector}')
                .getBoundingClientRect(); return [r.x, r.y + window.scrollY, r.width, r.height]; }})()""")
            clip = {"x": x, "y": y, "width": w, "height": h}
        browser.screenshot(png, clip=clip)
        problems, requests = browser.problems(), browser.requests()
        assert problems == [], problems
        assert requests == [f"file://{page}"], requests
    size = png.stat().st_size
    assert size < 300_000, f"{png}: {size} bytes"
    print(f"{png}: {size // 1024} KiB")


def type_into(selector, text):
    def act(browser):
        browser.evaluate(f"document.querySelector('{selector}').focus()")
        browser.type_text(text)
    return act


def click(selector):
    return lambda browser: browser.evaluate(f"document.querySelector('{selector}').click()")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    demo = BUILD / "demo"
    shoot(demo / "tiny_gpt.html", OUT / "page-demo.png")
    svg = demo / "tiny_gpt.svg"
    subprocess.run([REPORT, "flamegraph", demo / "tiny_gpt.bin", "-o", svg], check=True)
    shoot(svg, OUT / "flame-svg-demo.png", width=1200, height=400,
          actions=[click("#hide-library"), type_into("#search", "forward")])
    with tempfile.TemporaryDirectory() as work:
        trace, html = Path(work) / "10m.bin", Path(work) / "10m.html"
        subprocess.run([BUILD / "bench" / "make_trace", trace, "10000000"], check=True)
        subprocess.run([REPORT, "html", trace, "-o", html], check=True)
        shoot(html, OUT / "page-10m.png")


if __name__ == "__main__":
    main()
