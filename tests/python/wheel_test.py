#!/usr/bin/env python3
"""`pip wheel --no-build-isolation ./python` packages the engine (python/setup.py), and the wheel's
batchwise fits a model in process with nothing else on the path. The engine is the one the build
made (BATCHWISE_ENGINE, which setup.py packages instead of building one); the package is copied to
--work first, so the source tree gets no build/ or egg-info.

    BATCHWISE_ENGINE=build/python/batchwise/_engine*.so python tests/python/wheel_test.py --work /tmp/wheel
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    a = p.parse_args()
    if not os.environ.get("BATCHWISE_ENGINE"):
        print("skipped: BATCHWISE_ENGINE does not name the built engine")
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    source = os.path.join(a.work, "python")
    shutil.copytree(os.path.join(ROOT, "python"), source, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                                        "__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w",
                            os.path.join(a.work, "dist"), source], capture_output=True, text=True)
    if built.returncode != 0:
        print(f"FAIL pip wheel: {built.stderr[-2000:]}")
        return 1
    wheels = glob.glob(os.path.join(a.work, "dist", "batchwise-*.whl"))
    names = zipfile.ZipFile(wheels[0]).namelist() if wheels else []
    engine = [n for n in names if n.startswith("batchwise/_engine") and n.endswith(".so")]
    print(f"{'ok  ' if engine else 'FAIL'} the wheel {os.path.basename(wheels[0]) if wheels else '(none)'} carries "
          f"the engine: {engine}")
    if not engine:
        return 1
    site = os.path.join(a.work, "site")
    zipfile.ZipFile(wheels[0]).extractall(site)
    code = ("import torch, batchwise\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))\n"
            "x = torch.randn(512, 8); y = (x[:, 0] > 0).long()\n"
            "r = batchwise.fit(m, torch.optim.SGD(m.parameters(), lr=0.1), (x, y), memory_budget='1MiB', "
            "max=256, progress=False)\n"
            "print(r.fit.outcome, r.fit.batch, batchwise._engine.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("BATCHWISE_ENGINE", "PYTHONPATH")}
    env["PYTHONPATH"] = site
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=a.work)
    ok = ran.returncode == 0 and ran.stdout.startswith("fits 256") and site in ran.stdout
    print(f"{'ok  ' if ok else 'FAIL'} the installed package fits a model with its own engine: "
          f"{ran.stdout.strip()} {ran.stderr[-1000:] if not ok else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
