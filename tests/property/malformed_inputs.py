#!/usr/bin/env python3
"""Bad input, as a property: the CLI over generated malformed inputs.

Every numeric option of every subcommand (read from the subcommands' own --help, so a new option is
covered without editing this file) gets values that are out of range, non-numeric, huge, negative
or empty; every supported file format gets a wrong and a truncated file; report, compare and
history get wrong JSON. For each: a non-zero exit, a message on stderr naming the input (the flag,
or the file), no crash text, and no hang.

  python3 tests/property/malformed_inputs.py --batchwise build/batchwise [--seed N] [--jobs N]
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

CRASH = ("terminate called", "Exception raised from", "frame #", "what():", "Traceback", "Segmentation fault",
         "Assertion", "core dumped", "std::bad_alloc", "internal error")
TIMEOUT_S = 30


def subcommands(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    section = out.split("Subcommands:")[1].split("\n\n")[0]
    return [line.split()[0] for line in section.strip().splitlines() if line.startswith("  ") and line.split()]


def numeric_options(binary, sub):
    """(flag, kind) for every option of `sub` that takes a number: INT, UINT, FLOAT, or a size/range TEXT."""
    out = subprocess.run([binary, sub, "--help"], capture_output=True, text=True, check=True).stdout
    found = []
    for m in re.finditer(r"^\s+(?:-\w,)?(--[\w-]+) (INT|UINT|FLOAT)\b", out, re.M):
        found.append((m.group(1), m.group(2)))
    for flag in ("--memory-budget", "--batch-sizes", "--seq-len"):
        if re.search(rf"^\s+{flag} TEXT", out, re.M):
            found.append((flag, "TEXT"))
    return found


# Values no numeric option accepts; `kind` picks those that are wrong for it.
BAD = {
    "INT": ["abc", "", "1.5", "99999999999999999999", "-99999999999999999999", "0x", "1e999", "nan", "3 4"],
    "UINT": ["abc", "", "-1", "99999999999999999999", "1.5", "nan"],
    "FLOAT": ["abc", "", "nan", "inf", "-inf", "1e999", "-1e999", "1..2", "0x1p"],
    "TEXT": ["abc", "", "-1", "99999999999999999999", "1-999999999999+1", "0", "1e999", "GiB", "4-2"],
}
# Values of the right type that are out of range for these options (counts, fractions, sizes).
OUT_OF_RANGE = {
    "--target": ["0", "-0.5", "1.5"], "--steps": ["0", "-3"], "--min": ["0", "-1"], "--max": ["0", "-8"],
    "--multiple-of": ["0", "-2"], "--nproc": ["0", "-1", "100000"], "--workers": ["-1", "100000"],
    "--prefetch": ["0", "-1"], "--num-classes": ["0", "-1", "1"], "--synthetic-size": ["0", "-5"],
    "--threads": ["0", "-1", "100000"], "--repeats": ["0", "-1"], "--warmup": ["-1"], "--lr": ["0", "-0.1"],
    "--trial-timeout": ["-1"], "--dist-timeout": ["0", "-1"], "--io-latency-us": ["-1"], "--memory-budget": ["0", "-1GiB"],
    "--global-batch": ["0", "-64"], "--max-epochs": ["0", "-1"], "--target-accuracy": ["0", "1.5", "-0.1"],
    "--target-loss": ["0", "-1"], "--noise-steps": ["0", "-1"], "--advice-budget": ["0", "-5"],
    "--held-out-samples": ["0", "-1"], "--eval-every": ["0", "-1"], "--max-seconds": ["-1", "-0.5"],
}


def flag_cases(binary, rng):
    cases, seen = [], {}
    for sub in subcommands(binary):
        for flag, kind in numeric_options(binary, sub):
            seen.setdefault((flag, kind), []).append(sub)
    for (flag, kind), subs in sorted(seen.items()):
        values = [rng.choice(BAD[kind])] + rng.sample(OUT_OF_RANGE.get(flag, []), min(1, len(OUT_OF_RANGE.get(flag, []))))
        for value in values:
            sub = rng.choice(subs)
            # What the subcommand needs besides (a small synthetic set, so a value wrongly taken ends soon).
            base = [a for opt, val in BASE.get(sub, []) if opt != flag for a in (opt, val) if a]
            cases.append((f"{sub} {flag}={value!r}", [sub, f"{flag}={value}"] + base, [flag]))
    return cases


WORKLOAD = [("--dataset", "synthetic"), ("--synthetic-size", "256"), ("--model", "mlp"), ("--no-history", ""),
            ("--quiet", "")]
BASE = {"fit": WORKLOAD, "sweep": WORKLOAD + [("--batch-sizes", "16")], "tune": WORKLOAD + [("--max", "64")],
        "validate": WORKLOAD + [("--batch-sizes", "16")], "loader": WORKLOAD, "noise": WORKLOAD,
        "plan": WORKLOAD + [("--global-batch", "64"), ("--max-micro-batch", "32")]}


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def file_cases(work):
    """Wrong and truncated files of each supported format, each named in the message it gets."""
    idx_images = struct.pack(">IIII", 0x803, 100, 28, 28) + bytes(100 * 28 * 28)
    idx_labels = struct.pack(">II", 0x801, 100) + bytes(100)
    npy_header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (100, 4), }"
    npy_header += b" " * (118 - len(npy_header)) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(npy_header)) + npy_header + bytes(100 * 4 * 4)
    npy_labels_header = b"{'descr': '<i8', 'fortran_order': False, 'shape': (100,), }"
    npy_labels_header += b" " * (118 - len(npy_labels_header)) + b"\n"
    npy_labels = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(npy_labels_header)) + npy_labels_header + bytes(800)
    good_csv = "a,b,label\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(50))
    fashion = os.path.join(work, "fashion")
    cases = []

    def fashion_dir(name, images, labels):
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        write(os.path.join(d, "train-images-idx3-ubyte.gz"), gz(images))
        write(os.path.join(d, "train-labels-idx1-ubyte.gz"), gz(labels))
        write(os.path.join(d, "t10k-images-idx3-ubyte.gz"), gz(images))
        write(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), gz(labels))
        return d

    base = ["fit", "--model", "mlp", "--no-history", "-q", "--max", "4", "--steps", "1"]
    d = fashion_dir("fashion-truncated", idx_images[:5000], idx_labels)
    cases.append(("fashion-mnist: truncated images", base + ["--data-dir", d], [d]))
    d = fashion_dir("fashion-text", b"hello, not an idx file\n" * 10, idx_labels)
    cases.append(("fashion-mnist: text for images", base + ["--data-dir", d], [d]))
    d = fashion_dir("fashion-mismatch", idx_images, idx_labels[:-40])
    cases.append(("fashion-mnist: fewer labels than images", base + ["--data-dir", d], [d]))
    d = os.path.join(work, "fashion-gz-cut")
    os.makedirs(d, exist_ok=True)
    noisy = idx_images[:16] + random.Random(3).randbytes(100 * 28 * 28)
    for n in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        write(os.path.join(d, n), gz(noisy)[:3000])
    for n in ("train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        write(os.path.join(d, n), gz(idx_labels))
    cases.append(("fashion-mnist: gzip cut short", base + ["--data-dir", d], [d]))
    d = os.path.join(work, "cifar-empty")
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "data_batch_1.bin"), bytes(3073 * 3 + 100))
    cases.append(("cifar10: a batch file of the wrong size", base + ["--dataset", "cifar10", "--data-dir", d], [d]))

    for name, images, labels in [("truncated", idx_images[:2000], idx_labels), ("wrong-magic", b"\0\0\x09\x03" + idx_images[4:], idx_labels),
                                 ("empty", b"", idx_labels)]:
        f = write(os.path.join(work, f"idx-{name}.idx"), images)
        l = write(os.path.join(work, f"idx-{name}-labels.idx"), labels)
        cases.append((f"idx: {name} images", base + ["--dataset", "idx", "--data-file", f, "--labels-file", l], [f]))
    for name, data in [("truncated", npy[:-37]), ("wrong-magic", b"NUMPY" + npy[6:]), ("empty", b""),
                       ("bad-header", npy[:10] + b"{'descr': '<c16', 'fortran_order': True, 'shape': (100, 4), }"[:len(npy_header)].ljust(len(npy_header), b" ") + npy[10 + len(npy_header):]),
                       ("huge-shape", npy.replace(b"(100, 4)", b"(9999999999999, 4)"[:8]))]:
        f = write(os.path.join(work, f"npy-{name}.npy"), data)
        l = write(os.path.join(work, "labels-ok.npy"), npy_labels)
        cases.append((f"npy: {name} features", base + ["--dataset", "npy", "--data-file", f, "--labels-file", l], [f]))
    for name, text in [("ragged", good_csv + "1,2\n"), ("non-numeric", good_csv.replace("3,6", "3,x", 1)),
                       ("empty", ""), ("header-only", "a,b,label\n"), ("open-quote", good_csv + '"1,2,0\n'),
                       ("binary", "\0\1\2\3" * 50)]:
        f = write(os.path.join(work, f"csv-{name}.csv"), text.encode())
        cases.append((f"csv: {name}", base + ["--dataset", "csv", "--data-file", f], [f]))

    for name, data in [("empty", b""), ("text", b"not a model\n"), ("zip-cut", zip_like()[:200]),
                       ("random", random.Random(7).randbytes(4096))]:
        f = write(os.path.join(work, f"model-{name}.pt"), data)
        cases.append((f"model: {name}", ["fit", "--model", f, "--no-history", "-q", "--max", "4"], [f]))
    missing = os.path.join(work, "no-such-model.pt")
    cases.append(("model: missing", ["fit", "--model", missing, "--no-history", "-q"], [missing]))

    for name, text in [("empty", ""), ("not-json", "{batch: 1"), ("array", "[1, 2, 3]"), ("wrong-types", json.dumps(
            {"schema_version": "x", "sweep": {"points": "none"}, "fit": 3})), ("future-schema", json.dumps({"schema_version": 999})),
                       ("truncated", '{"schema_version": 1, "fit": {"batch": 64, "trials": [{"batch": ')]:
        f = write(os.path.join(work, f"report-{name}.json"), text.encode())
        out = os.path.join(work, f"report-{name}.html")
        cases.append((f"report: {name}", ["report", f, "-o", out], [f]))
        cases.append((f"compare: {name}", ["compare", f, f], [f]))
    hist = write(os.path.join(work, "history-text.sqlite"), b"this is not a database\n" * 40)
    cases.append(("history: not a database", ["history", "--history", hist], [hist]))
    hist = write(os.path.join(work, "history-cut.sqlite"), b"SQLite format 3\0" + bytes(50))
    cases.append(("history: cut database", ["history", "--history", hist], [hist]))
    return cases


def gz(data):
    import gzip
    return gzip.compress(data)


def zip_like():
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def check(binary, case, env):
    name, args, names = case
    try:
        r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
                           stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        return f"{name}: no answer within {TIMEOUT_S} s (a hang, or the bad value was taken and training began)"
    problems = []
    if r.returncode == 0:
        problems.append("exit 0")
    elif r.returncode < 0:
        problems.append(f"killed by signal {-r.returncode}")
    err = r.stderr.strip()
    if not err:
        problems.append("nothing on stderr")
    elif not any(n in err for n in names):
        problems.append(f"the message does not name {names[0]}")
    for c in CRASH:
        if c in r.stderr:
            problems.append(f"crash text {c!r}")
    if len(err.splitlines()) > 1:
        problems.append(f"{len(err.splitlines())} lines on stderr, not one message")
    if problems:
        return f"{name}: {'; '.join(problems)} (exit {r.returncode}); stderr: {err[:400]!r}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batchwise", required=True)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("BATCHWISE_PROPERTY_SEED", "0")))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="batchwise-property-")
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(work, "xdg"), OMP_NUM_THREADS="1")
    try:
        cases = flag_cases(a.batchwise, rng) + file_cases(work)
        cases = [c for c in cases if a.only in c[0]]
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            failures = [f for f in pool.map(lambda c: check(a.batchwise, c, env), cases) if f]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(cases)} malformed inputs (seed {a.seed}), {len(failures)} not refused cleanly")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
