#!/usr/bin/env python3
"""Opens a batchwise HTML report in real headless Chromium and checks that it renders.

The report is written by `batchwise report REPORT.json`, then loaded from a file:// URL in Debian's
Chromium (never a downloaded browser), driven over the DevTools protocol through a pipe
(--remote-debugging-pipe: no extra Python packages, no open port). It checks:
  - no console error, no uncaught exception, no failed load;
  - Chart.js drew every chart, and each dataset has as many drawn points, inside its canvas, as the
    report's trials say it should (independent of the page's own chart configuration);
  - the sections the report's data calls for are present;
and saves a full-page PNG screenshot.

Exit 0: all good; 1: a check failed; 77: Chromium cannot run here (not installed, or it would not
start), with the reason. `bash scripts/bootstrap.sh test` installs Debian's chromium.
"""
import argparse
import base64
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77


def skip(reason):
    print(f"SKIP: headless Chromium cannot run here: {reason}")
    sys.exit(SKIP)


def fail(reason):
    print(f"FAIL: {reason}")
    sys.exit(1)


class Chromium:
    """Chromium with the DevTools protocol on fds 3 (commands in) and 4 (replies and events out)."""

    def __init__(self, binary, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def on_fds_3_and_4():  # in the child, before exec: high copies first, so nothing collides
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        args = [binary, "--headless", "--remote-debugging-pipe", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage",
                "--hide-scrollbars", f"--user-data-dir={profile}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(profile, "stderr.log"), "wb"),
                                     pass_fds=(3, 4), preexec_fn=on_fds_3_and_4)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.profile = profile
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def stderr_tail(self):
        try:
            with open(os.path.join(self.profile, "stderr.log"), "rb") as f:
                return f.read().decode(errors="replace")[-800:]
        except OSError:
            return ""

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from Chromium")
            ready, _, _ = select.select([self.from_chrome], [], [], left)
            if ready:
                chunk = os.read(self.from_chrome, 1 << 20)
                if not chunk:
                    raise EOFError("Chromium closed the DevTools pipe")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method, timeout=30):
        deadline = time.monotonic() + timeout
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def expected_points(report):
    """What each chart must draw, from the report's trials (not from the page's chart configuration)."""
    fit = report.get("fit") or {}
    sweep = report.get("sweep") or {}
    fit_trials = fit.get("trials") or []
    points = sweep.get("points") or []
    ok_points = [p for p in points if p.get("outcome") == "ok"]
    expected = {}
    rec = (report.get("recommendation") or {}).get("batch")
    if ok_points:
        expected["chart-throughput"] = {"samples/s (median step)": len(ok_points)}
        if sweep.get("knee_batch") is not None:
            expected["chart-throughput"]["knee"] = 1
        if rec in [p["batch"] for p in ok_points]:
            expected["chart-throughput"]["recommended: batch"] = 1
        banded = [p for p in ok_points if p.get("step_times_s")]
        if banded:
            expected["chart-throughput"]["spread: slower"] = len(banded)
            expected["chart-throughput"]["spread: middle half"] = len(banded)
    memory = {}
    ok_fit = [t for t in fit_trials if t.get("outcome") == "ok" and (t.get("peak_bytes") or 0) > 0]
    if ok_fit:
        memory["fit trials (peak)"] = len(ok_fit)
    ok_sweep_peaks = [p for p in ok_points if (p.get("peak_bytes") or 0) > 0]
    if ok_sweep_peaks:
        memory["sweep (peak)"] = len(ok_sweep_peaks)
    oom_batches = {t["batch"] for t in fit_trials + points if t.get("outcome") == "oom"}
    if oom_batches and memory:
        memory["out of memory"] = len(oom_batches)
    if memory:
        if report.get("budget_bytes"):
            memory["budget"] = 2
            memory["target"] = 2
        expected["chart-memory"] = memory
    if fit.get("breakdown"):
        expected["chart-breakdown"] = {"MiB": 5}
    goodput = (report.get("goodput") or {}).get("points") or []
    if goodput:
        expected["chart-goodput"] = {"goodput": len(goodput), "samples/s": len(goodput)}
        if (report.get("goodput") or {}).get("best_batch") is not None:
            expected["chart-goodput"]["best goodput"] = 1
    timeline = (report.get("noise_scale") or {}).get("timeline") or []
    smoothed = [s for s in timeline if s.get("b_simple_smoothed") is not None]
    if smoothed:
        expected["chart-noise"] = {"B_simple": len(smoothed)}
    precisions = report.get("precision_comparison") or []
    if precisions:
        expected["chart-precision"] = {"samples/s at batch": len(precisions)}
    # Utilisation: every sample of the sweep's monitored trials (else the fit's), when there are 5 or more.
    def monitored(trials):
        return [t for t in trials if t.get("outcome") == "ok" and ((t.get("utilisation") or {}).get("timeline"))]
    watched = monitored(points) or monitored(fit_trials)
    samples = sum(len(t["utilisation"]["timeline"]) for t in watched)
    if samples >= 5:
        expected["chart-utilisation"] = {"CPU busy % (each sample)": samples, "CPU busy % (trial mean)": len(watched)}
    profiles = report.get("step_profile") or []
    if profiles:
        expected["chart-profile"] = {phase: len(profiles) for phase in ("data", "to device", "forward", "backward",
                                                                         "optimizer")}
    raced = [e for e in (report.get("race") or {}).get("entries") or [] if e.get("curve")]
    if raced:
        expected["chart-race"] = {f"batch {e['batch']} (": len(e["curve"]) for e in raced}
    runs = (report.get("validation") or {}).get("runs") or []
    if runs:
        expected["chart-validation"] = {f"batch {run['batch']} ": len(run.get("curve") or []) for run in runs}
    return expected


DRAWN = """JSON.stringify(Object.values(Chart.instances).map(function (c) {
  return {id: c.canvas.id, width: c.width, height: c.height,
          datasets: c.data.datasets.map(function (d, i) {
            var meta = c.getDatasetMeta(i);
            return {label: d.label, points: meta.data.length,
                    inside: meta.data.filter(function (e) {
                      return isFinite(e.x) && isFinite(e.y) && e.x >= 0 && e.x <= c.width && e.y >= 0 && e.y <= c.height;
                    }).length};
          })};
}))"""


def png_size(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the screenshot is not a PNG")
    return struct.unpack(">II", data[16:24])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batchwise", required=True, help="the batchwise binary")
    ap.add_argument("--report", required=True, help="a JSON report")
    ap.add_argument("--out", required=True, help="folder for the HTML and the screenshot")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    html = os.path.abspath(os.path.join(args.out, "report.html"))
    made = subprocess.run([args.batchwise, "report", args.report, "-o", html], capture_output=True, text=True)
    if made.returncode != 0:
        fail(f"batchwise report exited {made.returncode}: {made.stderr.strip()}")
    with open(args.report) as f:
        report = json.load(f)

    if not (os.path.isfile(args.chromium) and os.access(args.chromium, os.X_OK)) and not shutil.which(args.chromium):
        skip(f"{args.chromium} is not installed (Debian: apt-get install chromium; `bash scripts/bootstrap.sh test` "
             "installs it)")
    with tempfile.TemporaryDirectory(prefix="batchwise-chromium-") as profile:
        browser = Chromium(args.chromium, profile)
        try:
            try:
                target = browser.send("Target.createTarget", {"url": "about:blank"}, timeout=60)["targetId"]
            except (TimeoutError, EOFError, OSError) as e:
                skip(f"{args.chromium} did not start ({e}): {browser.stderr_tail()}")
            session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                browser.send(f"{domain}.enable", session=session)
            browser.send("Emulation.setDeviceMetricsOverride",
                         {"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=session)
            nav = browser.send("Page.navigate", {"url": "file://" + html}, session=session)
            if nav.get("errorText"):
                fail(f"loading {html}: {nav['errorText']}")
            browser.wait_for("Page.loadEventFired", timeout=60)

            def evaluate(expression):
                result = browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                      session=session)
                if "exceptionDetails" in result:
                    fail(f"evaluating in the page: {result['exceptionDetails']}")
                return result["result"].get("value")

            errors = []
            for event in browser.events:
                method, params = event.get("method"), event.get("params", {})
                if method == "Runtime.exceptionThrown":
                    errors.append(params["exceptionDetails"].get("exception", {}).get("description")
                                  or params["exceptionDetails"].get("text"))
                elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                    errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
                elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                    errors.append(params["entry"].get("text"))
            if errors:
                fail("console errors: " + "; ".join(map(str, errors)))
            if evaluate("typeof Chart") != "function":
                fail("Chart.js did not load (typeof Chart is not a function)")

            drawn = {c["id"]: c for c in json.loads(evaluate(DRAWN))}
            expected = expected_points(report)
            for chart_id, datasets in expected.items():
                if chart_id not in drawn:
                    fail(f"{chart_id} was not drawn (drawn: {sorted(drawn)})")
                chart = drawn[chart_id]
                if chart["width"] <= 0 or chart["height"] <= 0:
                    fail(f"{chart_id} has no size")
                for label_start, count in datasets.items():
                    found = [d for d in chart["datasets"] if d["label"].startswith(label_start)]
                    if len(found) != 1:
                        fail(f"{chart_id}: {len(found)} datasets labelled '{label_start}...' (have "
                             f"{[d['label'] for d in chart['datasets']]})")
                    d = found[0]
                    if d["points"] != count or d["inside"] != count:
                        fail(f"{chart_id} '{d['label']}': drew {d['points']} points ({d['inside']} inside the canvas), "
                             f"the report's trials call for {count}")
                print(f"ok: {chart_id}: " + ", ".join(f"{d['label']} {d['points']}" for d in chart["datasets"]))
            extra = sorted(set(drawn) - set(expected) - {"chart-memory"})
            if extra:
                fail(f"charts drawn without data for them: {extra}")

            sections = evaluate("Array.from(document.querySelectorAll('section')).map(function (s) { return s.id; })")
            for needed in ["recommendation", "context"] + (["fit-trials"] if report.get("fit") else []) + (
                    ["sweep-points"] if report.get("sweep") else []):
                if needed not in sections:
                    fail(f"section #{needed} missing (have {sections})")

            height = evaluate("Math.ceil(document.documentElement.scrollHeight)")
            browser.send("Emulation.setDeviceMetricsOverride",
                         {"width": 1200, "height": int(height), "deviceScaleFactor": 1, "mobile": False},
                         session=session)
            shot = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"])
            width, shot_height = png_size(shot)
            path = os.path.join(args.out, "report.png")
            with open(path, "wb") as f:
                f.write(shot)
            print(f"ok: no console errors; sections {sections}; screenshot {path} ({width}x{shot_height})")
        finally:
            browser.close()


if __name__ == "__main__":
    main()
