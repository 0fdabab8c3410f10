#!/usr/bin/env python3
"""Bad input, as a property: the CLI over generated malformed inputs.

Every numeric option of every subcommand (read from the subcommands' own --help, so a new option is
covered without editing this file) gets values that are out of range, non-numeric, huge, negative
or empty; every supported file format gets a wrong and a truncated file; report, compare and
history get wrong JSON. For each: a non-zero exit, a message on stderr naming the input (the flag,
or the file), no crash text, and no hang.

Then random command lines (issue #31): for each subcommand, options drawn from all it accepts (its
--help again), with values good and bad for their kind, now and then an unknown flag, a stray word or
a flag given twice, beside a tiny workload. Whatever the line, batchwise answers in time, without
crash text or a signal, and never exits 0 after printing an error.

  python3 tests/property/malformed_inputs.py --batchwise build/batchwise [--seed N] [--jobs N] [--random N]
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
# An error, as main.cpp prints one: "batchwise SUB: what was wrong" (a warning says "warning:").
ERROR_LINE = re.compile(r"^batchwise(?: [a-z]+)?(?: \(rank \d+(?: of \d+)?\))?: (?!warning:)(?!done, as agreed)")


def subcommands(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    section = out.split("Subcommands:")[1].split("\n\n")[0]
    # strip("\n"), not strip(): the first subcommand's line keeps its indent (fit was left out before).
    return [line.split()[0] for line in section.strip("\n").splitlines() if line.startswith("  ") and line.split()]


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
    "--global-batch": ["0", "-64"], "--max-epochs": ["0", "-1"], "--epochs": ["0", "-1"], "--target-accuracy": ["0", "1.5", "-0.1"],
    "--target-loss": ["0", "-1"], "--noise-steps": ["0", "-1"], "--advice-budget": ["0", "-5"],
    "--held-out-samples": ["0", "-1"], "--eval-every": ["0", "-1"], "--max-seconds": ["-1", "-0.5"],
    "--held-out-split": ["0", "-0.1", "0.95", "1"],
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


def all_options(binary, sub):
    """(flag, kind) for every option `sub --help` lists: kind is None for a flag that takes no value, a
    list of its choices, or the value's type (INT, UINT, FLOAT, TEXT, ...)."""
    out = subprocess.run([binary, sub, "--help"], capture_output=True, text=True, check=True).stdout
    found = []
    for m in re.finditer(r"^ {2,}(?:-\w,)?(--[\w-]+)(?: ([A-Z]\S*))?", out, re.M):
        flag, kind = m.group(1), m.group(2)
        if flag in ("--help", "--version"):
            continue
        choices = re.search(r"\{([^}]*)\}", kind or "")
        found.append((flag, choices.group(1).split(",") if choices else (re.split("[:=]", kind)[0] if kind else None)))
    return found


# Values for the random lines: good ones (small, so that a line that is accepted trains briefly) and
# bad ones of every kind.
GOOD = {"INT": ["1", "2", "3", "8"], "UINT": ["1", "2", "4"], "FLOAT": ["0.5", "1", "0.01", "2"],
        "TEXT": ["16", "8,16", "1-4", "64MiB", "mlp", "sgd", "cpu", "cosine"]}
ANY_BAD = ["", "abc", "-1", "0", "1e999", "nan", "--", "x" * 300, "\u00fc\u00f1\u00ee", "1,,2", " 4 ", "/no/such/file.json"]


# Beside BASE, what keeps an accepted random line short (each is left out of the draws).
RANDOM_BASE = {"fit": [("--nproc", "1")], "sweep": [("--repetitions", "1"), ("--nproc", "1")],
               "tune": [("--nproc", "1"), ("--advice-budget", "2"), ("--noise-steps", "4"), ("--repetitions", "1"),
                        ("--max-seconds", "5")],
               "validate": [("--max-seconds", "5")], "noise": [("--noise-steps", "4")]}
RANDOM_TIMEOUT_S = 90


def random_cases(binary, rng, per_subcommand):
    cases = []
    for sub in subcommands(binary):
        base = BASE.get(sub, []) + RANDOM_BASE.get(sub, [])
        options = [o for o in all_options(binary, sub) if o[0] not in dict(base)]
        for i in range(per_subcommand):
            args = [sub]
            for flag, kind in rng.sample(options, min(len(options), rng.randint(1, 4))):
                if kind is None:
                    args.append(flag)
                    continue
                if isinstance(kind, list):
                    value = rng.choice(kind + ["no-such-choice"])
                else:
                    value = rng.choice(GOOD.get(kind, GOOD["TEXT"]) if rng.random() < 0.6 else ANY_BAD + BAD.get(kind, []))
                args += [flag, value] if rng.random() < 0.5 else [f"{flag}={value}"]
            twist = rng.random()
            if twist < 0.1:
                args.append("--no-such-flag")
            elif twist < 0.2:
                args.append("stray")
            elif twist < 0.3 and len(args) > 2:
                args += args[1:3]  # a flag given twice
            args += [a for opt, val in base for a in (opt, val) if a]
            cases.append((f"random {i}: {' '.join(args)!r}", args, None))
    return cases


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

    base = ["fit", "--model", "mlp", "--no-history", "-q", "--max", "4", "--fit-steps", "1"]
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
    timeout = TIMEOUT_S if names is not None else RANDOM_TIMEOUT_S
    try:
        # In the scratch folder: a random line may name any word as the file to write (--json cpu).
        r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL, errors="replace", cwd=env["XDG_DATA_HOME"])
    except subprocess.TimeoutExpired:
        return f"{name}: no answer within {timeout} s (a hang, or the bad value was taken and training began)"
    problems = []
    err = r.stderr.strip()
    if names is None:  # a random line: any answer in time, but no crash, and no exit 0 beside an error
        if r.returncode < 0:
            problems.append(f"killed by signal {-r.returncode}")
        problems += [f"crash text {c!r}" for c in CRASH if c in r.stderr]
        errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
        if r.returncode == 0 and errors:
            problems.append(f"exit 0 after an error: {errors[0]!r}")
        return f"{name}: {'; '.join(problems)} (exit {r.returncode}); stderr: {err[-400:]!r}" if problems else None
    if r.returncode == 0:
        problems.append("exit 0")
    elif r.returncode < 0:
        problems.append(f"killed by signal {-r.returncode}")
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
    ap.add_argument("--random", type=int, default=5, help="random command lines per subcommand")
    a = ap.parse_args()
    a.batchwise = os.path.abspath(a.batchwise)  # the lines run in a scratch folder
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="batchwise-property-")
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(work, "xdg"), OMP_NUM_THREADS="1")
    os.makedirs(env["XDG_DATA_HOME"])
    try:
        cases = flag_cases(a.batchwise, rng) + file_cases(work) + random_cases(a.batchwise, rng, a.random)
        cases = [c for c in cases if a.only in c[0]]
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            failures = [f for f in pool.map(lambda c: check(a.batchwise, c, env), cases) if f]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(cases)} malformed inputs and random command lines (seed {a.seed}), {len(failures)} not answered "
          "cleanly")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
