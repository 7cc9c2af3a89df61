"""Make the Model Explorer picture of docs/viewing.md from tests/data/explorer's TensorFlow graph.

    pip install ".[explorer]" tornado && apt install chromium
    python docs/make_explorer_example.py [--out DIR]       # default: docs/images

1. ``gradreg explorer`` writes the graph of tests/data/explorer/model.pb (a two-layer network,
   a branch behind tf.stop_gradient, a ReLU that is never active) and the gradient overlays of
   its loss into DIR/work/.
2. ``model-explorer`` serves them (the log10 L2 norm and the status overlays), headless Chromium
   opens the page, driven over the DevTools protocol (tornado's websocket client): every layer
   expanded, the status overlay shown, a screenshot to DIR/explorer-status.png; then the log10
   overlay to DIR/explorer-log10.png. The server and the browser are stopped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from tornado.websocket import websocket_connect

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "data" / "explorer"
OVERLAYS = ["gradient_log10_l2.json", "gradient_status.json"]
CLICK_ICON = """(() => {{
  const icons = Array.from(document.querySelectorAll('mat-icon')).filter(e => e.textContent.trim() === '{0}');
  const icon = icons[{1}];
  if (!icon) return false;
  (icon.closest('button') || icon.parentElement).click();
  return true;
}})()"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


class Page:
    """One browser tab over the DevTools protocol: evaluate, screenshot."""

    def __init__(self, ws) -> None:
        self.ws, self.counter = ws, 0

    async def call(self, method: str, **params):
        self.counter += 1
        await self.ws.write_message(json.dumps({"id": self.counter, "method": method, "params": params}))
        while True:
            message = json.loads(await self.ws.read_message())
            if message.get("id") == self.counter:
                return message.get("result", {})

    async def evaluate(self, expression: str):
        return (await self.call("Runtime.evaluate", expression=expression, returnByValue=True)).get("result", {}).get(
            "value")

    async def until(self, expression: str, seconds: float = 120) -> None:
        end = time.monotonic() + seconds
        while not await self.evaluate(expression):
            if time.monotonic() > end:
                raise SystemExit(f"the page did not show the graph within {seconds:.0f} s")
            await asyncio.sleep(1)

    async def screenshot(self, path: pathlib.Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        print(f"wrote {path}")


async def drive(debug_port: int, url: str, out: pathlib.Path) -> None:
    targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{debug_port}/json"))
    tab = next(t for t in targets if t["type"] == "page")
    page = Page(await websocket_connect(tab["webSocketDebuggerUrl"], max_message_size=100_000_000))
    await page.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1, mobile=False)
    await page.call("Page.navigate", url=url)
    await page.until("document.body.innerText.includes('op node count')")
    await page.evaluate(CLICK_ICON.format("unfold_more_double", 0))     # expand every layer
    await asyncio.sleep(3)
    await page.evaluate(CLICK_ICON.format("fit_screen", 0))             # the whole graph in view
    await page.evaluate("document.activeElement && document.activeElement.blur()")   # no tooltip left
    await page.evaluate("document.querySelectorAll('.mat-mdc-tooltip-panel, .cdk-overlay-pane')"
                        ".forEach(e => e.remove())")
    await asyncio.sleep(3)
    await page.screenshot(out / "explorer-status.png")
    await page.evaluate(CLICK_ICON.format("visibility_off", 0))         # show the log10 overlay instead
    await asyncio.sleep(3)
    await page.screenshot(out / "explorer-log10.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "images"))
    out = pathlib.Path(parser.parse_args().out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "gradreg", "explorer", str(DATA / "model.pb"), "-o", str(work),
                    "--ys", "loss/total", "--feed", str(DATA / "inputs.npz")], check=True)
    server_port, debug_port = free_port(), free_port()
    data = {"models": [{"url": str((work / "graph.json").resolve())}],
            "nodeData": [str((work / name).resolve()) for name in OVERLAYS], "nodeDataTargets": ["", ""]}
    url = f"http://127.0.0.1:{server_port}/?data=" + urllib.parse.quote(json.dumps(data))
    profile = tempfile.mkdtemp(prefix="explorer-chromium-")
    server = subprocess.Popen([shutil.which("model-explorer") or "model-explorer", "--no_open_in_browser",
                               "--skip_health_check", "--host", "127.0.0.1", "--port", str(server_port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = subprocess.Popen([shutil.which("chromium") or "chromium", "--headless", "--no-sandbox",
                                "--no-first-run", f"--user-data-dir={profile}", "--use-angle=swiftshader",
                                "--enable-unsafe-swiftshader", f"--remote-debugging-port={debug_port}",
                                "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{server_port}/check_health")
        wait_for(f"http://127.0.0.1:{debug_port}/json")
        asyncio.run(drive(debug_port, url, out))
    finally:
        for process in (browser, server):
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
