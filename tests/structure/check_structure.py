#!/usr/bin/env python3
"""The tree's shape, checked: layers that only look down, the format, and the size of files and functions.

  check_structure.py layers   # each folder of src/ includes only its own and the layers below it
  check_structure.py format   # clang-format --dry-run reports nothing on src/, include/, tools/, ...
  check_structure.py sizes    # no .cpp in src/ or tools/ over 800 lines, no function anywhere over 120
  check_structure.py selftest # each check finds what it is for, in a small tree made for it

Each prints one line per finding, naming the file, and exits 1 when there is any; 77 (skipped) when
the tool it needs is missing. docs/architecture.md describes the layers.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(os.environ.get("BATCHWISE_STRUCTURE_ROOT") or pathlib.Path(__file__).resolve().parents[2])

# The layers of src/, lowest first: a folder includes its own headers and those of lower layers.
# Folders of one layer (other ways to run the same trials) do not include each other.
LAYERS = {
    "engine": 0,
    "search": 1,
    "external": 1,
    "distributed": 1,
    "advice": 2,
    "tune": 3,
    "report": 4,
}
# The reports read the records and train nothing: no header that builds or steps a model.
TRAINS = {"batchwise/workload.h", "batchwise/models.h", "batchwise/tune.h", "batchwise/distributed.h",
          "batchwise/command_runner.h"}
# The same rule, enforced on what matters: these calls do not appear in src/report/.
TRAINING_CALLS = re.compile(r"\b(train_step|next_batch|run_trial|make_workload|tune\(|fit\()")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".cpp", ".h", ".cu")
FORMATTED = ["src", "include", "tools", "python/src", "tests", "bench", "fuzz", "examples"]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120


def sources(folders, suffixes=SOURCE_SUFFIXES):
    for folder in folders:
        base = ROOT / folder
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*") if p.suffix in suffixes and p.is_file())


def includes(path):
    return INCLUDE.findall(path.read_text(errors="replace"))


def header_homes():
    """A public header's folder: where the .cpp that includes it first lives ("X.cpp includes X.h first")."""
    homes = {}
    for cpp in sources(["src"], (".cpp",)):
        folder = cpp.relative_to(ROOT / "src").parts[0]
        if folder not in LAYERS:
            continue
        first = re.search(r'^\s*#\s*include\s+["<]([^">]+)[">]', cpp.read_text(errors="replace"), re.M)
        if first and first.group(1).startswith("batchwise/"):
            homes.setdefault(first.group(1), set()).add(folder)
    return homes


def layer_of(header, including, homes, seen=()):
    """The layer of an included header, or None for the shared private headers of src/ (layer 0)."""
    if header.startswith("batchwise/"):
        folders = homes.get(header)
        if folders:
            return max(LAYERS[f] for f in folders)
        public = ROOT / "include" / header
        if not public.exists() or header in seen:
            return 0
        # A header without a .cpp of its own (records, fields): the highest layer it includes.
        return max([0] + [layer_of(h, public, homes, seen + (header,)) or 0 for h in includes(public)])
    if "/" in header:  # "advice/target.h": a private header of that folder
        return LAYERS.get(header.split("/")[0], 0)
    beside = including.parent / header
    if beside.exists() and beside.parent != ROOT / "src":
        return LAYERS.get(beside.parent.name, 0)
    return 0  # src/check.h and the other shared private headers


def folder_of(header, including, homes):
    """The folder of src/ an included header belongs to, or None for the shared headers of src/."""
    if header.startswith("batchwise/"):
        folders = homes.get(header)
        return sorted(folders)[0] if folders else None
    if "/" in header:  # "advice/target.h"
        return header.split("/")[0]
    beside = including.parent / header
    if beside.exists() and beside.parent != ROOT / "src" and beside.parent.parent == ROOT / "src":
        return beside.parent.name
    return None


def check_layers():
    homes = header_homes()
    problems = []
    for header, folders in sorted(homes.items()):
        if len(folders) > 1:
            problems.append(f"include/{header}: implemented in {len(folders)} folders ({', '.join(sorted(folders))}); "
                            "one header, one folder")
    for path in sources(["src", "include"]):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "src":
            folder = rel.parts[1] if len(rel.parts) > 2 else None
            if folder is None:
                own = 0  # the private headers of src/ itself: layer 0, below every folder
            elif folder not in LAYERS:
                problems.append(f"{rel}: src/{folder}/ is not a known layer; add it to LAYERS in {__file__} "
                                "and to docs/architecture.md")
                continue
            else:
                own = LAYERS[folder]
        else:
            header = "batchwise/" + path.name
            folders = homes.get(header)
            if not folders:
                continue
            folder, own = sorted(folders)[0], max(LAYERS[f] for f in folders)
        where = f"{folder}/" if folder else "src/"
        for header in includes(path):
            layer = layer_of(header, path, homes)
            target = folder_of(header, path, homes)
            if layer > own:
                problems.append(f"{rel}: includes {header} (layer {layer}, {target or 'batchwise'}/) from {where} "
                                f"(layer {own}); a folder only looks down (docs/architecture.md)")
            elif target in LAYERS and folder and target != folder and LAYERS[target] == own:
                problems.append(f"{rel}: includes {header} from {target}/, a folder beside {folder}/; "
                                "move what both need below them")
    for path in sources(["src/report"]):
        rel = path.relative_to(ROOT)
        for header in includes(path):
            if header in TRAINS:
                problems.append(f"{rel}: includes {header}; the reports read records and train nothing")
        for n, line in enumerate(strip_code(path.read_text(errors="replace")).splitlines(), 1):
            call = TRAINING_CALLS.search(line)
            if call:
                problems.append(f"{rel}:{n}: calls {call.group(1)}; the reports read records and train nothing")
    return problems


def clang_format():
    """Debian 12's clang-format 14, which the tree is formatted with; another version formats otherwise."""
    for name in ("clang-format-14", "clang-format"):
        tool = shutil.which(name)
        if tool:
            version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
            if re.search(r"version 14\.", version):
                return tool
    return None


def check_format():
    tool = clang_format()
    if tool is None:
        print("skipped: clang-format 14 is not installed (Debian 12: apt-get install clang-format; the README's "
              "test set-up installs it)")
        sys.exit(77)
    files = [str(p) for p in sources(FORMATTED)]
    out = subprocess.run([tool, "--dry-run", "--Werror", *files], cwd=ROOT, capture_output=True, text=True)
    problems = sorted({line.split(":")[0] for line in out.stderr.splitlines() if ": error:" in line})
    if out.returncode != 0 and not problems:
        problems = [out.stderr.strip() or f"{tool} exited {out.returncode}"]
    return [f"{pathlib.Path(p).resolve().relative_to(ROOT)}: not formatted; run {pathlib.Path(tool).name} -i on it"
            if p.startswith("/") or (ROOT / p).exists() else p for p in problems]


def strip_code(text):
    """The text with comments, strings and character literals blanked (newlines kept)."""
    out = re.sub(r'R"(\w*)\((.|\n)*?\)\1"', lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    pattern = re.compile(r'//[^\n]*|/\*(.|\n)*?\*/|"(\\.|[^"\\\n])*"|\'(\\.|[^\'\\\n])*\'')
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), out)


def functions(text):
    """(first line, last line, name) of each function body at namespace or class level."""
    code = strip_code(text)
    stack = []  # per open brace: ("scope" | "function" | "other", line, name)
    found = []
    line = 1
    start = 0
    for i, ch in enumerate(code):
        if ch == "\n":
            line += 1
        elif ch == "{":
            head = code[start:i]
            head_flat = " ".join(head.split())
            in_function = any(kind == "function" for kind, _, _ in stack)
            if in_function:
                kind = "other"
            elif re.search(r"\b(namespace|class|struct|union|enum)\b[^()]*$", head_flat) or \
                    head_flat.endswith('extern "C"') or head_flat.endswith("="):
                kind = "scope"
            elif ")" in head_flat:
                kind = "function"
            else:
                kind = "scope"
            name = ""
            if kind == "function":
                m = re.search(r"([\w:~<>]+)\s*\([^()]*(\([^()]*\)[^()]*)*\)[^()]*$", head_flat)
                name = m.group(1) if m else head_flat[-60:]
            stack.append((kind, line, name))
            start = i + 1
        elif ch == "}":
            if stack:
                kind, first, name = stack.pop()
                if kind == "function":
                    found.append((first, line, name))
            start = i + 1
        elif ch == ";":
            start = i + 1
    return found


def check_sizes():
    problems = []
    for path in sources(["src", "tools", "python/src", "tests", "bench", "fuzz", "examples"]):
        rel = path.relative_to(ROOT)
        text = path.read_text(errors="replace")
        lines = text.count("\n")
        if (rel.parts[0] in ("src", "tools") or rel.parts[:2] == ("python", "src")) and path.suffix in (".cpp", ".cu") \
                and lines > MAX_FILE_LINES:
            problems.append(f"{rel}: {lines} lines, over {MAX_FILE_LINES}; split it by idea")
        for first, last, name in functions(text):
            if last - first + 1 > MAX_FUNCTION_LINES:
                problems.append(f"{rel}:{first}: {name} is {last - first + 1} lines, over {MAX_FUNCTION_LINES}")
    return problems


def selftest():
    """The checks run on a small tree with one fault of each kind; each must name its fault."""
    import tempfile
    global ROOT
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        ROOT = pathlib.Path(tmp)
        files = {
            "include/batchwise/tune.h": "#pragma once\n",
            "include/batchwise/workload.h": "#pragma once\n",
            "src/tune/tune.cpp": '#include "batchwise/tune.h"\n',
            "src/engine/workload.cpp": '#include "batchwise/workload.h"\n#include "batchwise/tune.h"\n',
            "src/report/trace.cpp": '#include <vector>\n#include "batchwise/workload.h"\nvoid f(W& w) { w.train_step(b); }\n',
            "src/engine/long.cpp": "namespace n {\nint f() {\n" + "  g();\n" * 130 + "}\n}  // namespace n\n",
            "src/external/child.h": "#pragma once\n",
            "src/distributed/ranks.cpp": '#include "external/child.h"\n',
            "src/shared.h": '#pragma once\n#include "batchwise/tune.h"\n',
            "src/report/html.cpp": 'const char* kText = "call train_step() to train";\n',
        }
        for name, text in files.items():
            (ROOT / name).parent.mkdir(parents=True, exist_ok=True)
            (ROOT / name).write_text(text)
        layers = check_layers()
        sizes = check_sizes()
    expected = [
        (layers, "src/engine/workload.cpp: includes batchwise/tune.h (layer 3, tune/)"),
        (layers, "src/report/trace.cpp: includes batchwise/workload.h; the reports read records"),
        (layers, "src/report/trace.cpp:3: calls train_step"),
        (sizes, "src/engine/long.cpp:2: f is 132 lines, over 120"),
        (layers, "src/distributed/ranks.cpp: includes external/child.h from external/, a folder beside distributed/"),
        (layers, "src/shared.h: includes batchwise/tune.h (layer 3, tune/) from src/ (layer 0)"),
    ]
    for found, text in expected:
        if not any(p.startswith(text) for p in found):
            problems.append(f"selftest: expected a finding starting {text!r}; found {found}")
    if len(layers) != 5 or len(sizes) != 1:  # a string that names train_step is no call
        problems.append(f"selftest: expected 5 layer findings and 1 size finding; found {layers + sizes}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["layers", "format", "sizes", "selftest"])
    args = parser.parse_args()
    problems = {"layers": check_layers, "format": check_format, "sizes": check_sizes, "selftest": selftest}[args.check]()
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} finding(s)", file=sys.stderr)
        return 1
    print(f"{args.check}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
