"""The run race's benchmark table from bench/run_advice.sh's reports: per cell, the grid's good set
(mean final accuracy, or loss, within max(0.005, 2 standard errors of the best mean) of it), the picks,
and whether each passes (in the good set, mean time within 1.10x of the good set's fastest), beside
what the same race would have picked with a perfect prediction (every raced candidate's gap the one
its full runs end at: bench/run_race_replay.py's oracle), which separates a prediction that missed
from a bar that exact gaps fail with, and in the closing line how many races any rule could pass on
their candidates and times (the replay's ceiling). Each verdict comes with its chance against the
grid's own noise (bench/advice_grid.py's pass_chances: firm, or one the grid cannot resolve), and the
closing line with what the best pick in each cell could expect. The
transformer's cells are judged on final loss (issue #30), the others on final accuracy. Then each
batch-size schedule tune proposed: its predicted saving against the one measured.

    python3 bench/run_advice_summary.py bench-results/run-advice [--grids bench/grids] [--save-grids bench/grids]

The grids' full runs take hours here, and bench-results/ is not kept: --save-grids writes each cell's
final qualities and times (bench/grids/CELL.csv, committed) from the reports (runs already kept
and not in the reports stay) and each cell's first tune's run race (CELL.race.json, for
bench/run_race_replay.py), and --grids judges the tunes in the folder against those where a cell's
grid reports are not there. Runs trained again for their times (`RETIME=N bash bench/run_advice.sh`:
NAME.retime.SEED.K.json) are kept in bench/grids/NAME.times.csv and averaged into each seed's time
(bench/advice_grid.py). With --timed-on DATE, each seed's time is that of its runs of that day
alone where it has any (the tunes' day: the machine's CPU and speed change from day to day), and the
closing line names the batches so timed."""
import argparse
import csv
import glob
import json
import os
import statistics

from advice_grid import (FIRM, GRID_FIELDS, LEAST_TOLERANCE, TIMING_FIELDS, at_least, firmness, good_set,
                         measure_of, needed, pass_chances, quality, read_kept_grid, read_timings, seed_runs, stats_of,
                         timed_on, timing_key, verdict)
from run_race_replay import replay, unjudged

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--grids", help="a folder of CELL.csv grids, for cells without grid reports in OUT")
parser.add_argument("--save-grids", help="write each cell's grid reports in OUT to this folder as CELL.csv")
parser.add_argument("--timed-on", metavar="DATE",
                    help="judge the picks on the runs of that day alone (a date or its prefix, 2026-12-02: the grid's, "
                         "OUT's RETIME runs and those kept in --grids), where a seed and batch has any; the others keep "
                         "the grid's and the kept timings' mean")
parser.add_argument("--paired", action="store_true",
                    help="draw the chances with the seeds and the timing sittings paired across batches "
                         "(advice_grid.paired_noise_model), not apart")
args = parser.parse_args()
out = args.out


def grid_rows(name):
    """The cell's full runs (fixed batches), from its grid reports in OUT, else from --grids' CSV."""
    rows = []
    for path in sorted(glob.glob(os.path.join(out, f"{name}.grid.*.json"))):
        report = json.load(open(path))
        v = report["validation"]
        context = report.get("context", {})
        for r in v["runs"]:
            if not r.get("schedule"):
                rows.append({"seed": path.rsplit(".", 2)[1], "batch": r["batch"], "epochs": v.get("epochs"),
                             "lr": r.get("lr"), "lr_capped": r.get("lr_capped"), "warmup_steps": r.get("warmup_steps"),
                             "steps": r.get("steps"),
                             "final_accuracy": r.get("final_accuracy"), "final_loss": r.get("final_loss"),
                             "train_s": r["train_s"], "commit": context.get("build_commit", ""),
                             "date": context.get("date", "")})
    if rows or not args.grids or not os.path.exists(os.path.join(args.grids, f"{name}.csv")):
        return rows
    return read_kept_grid(os.path.join(args.grids, f"{name}.csv"))


def timing_rows(name):
    """The cell's runs trained again for their times (NAME.retime.SEED.K.json in OUT), with those kept in
    --grids' NAME.times.csv that OUT does not have (the same date and seed and batch)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(out, f"{name}.retime.*.json"))):
        report = json.load(open(path))
        context = report.get("context", {})
        seed = os.path.basename(path).split(".")[2]
        for r in report["validation"]["runs"]:
            rows.append({"seed": seed, "batch": r["batch"], "final_accuracy": r.get("final_accuracy"),
                         "final_loss": r.get("final_loss"), "train_s": r["train_s"],
                         "commit": context.get("build_commit", ""), "date": context.get("date", "")})
    if args.grids:
        have = {timing_key(r) for r in rows}
        rows += [r for r in read_timings(os.path.join(args.grids, f"{name}.times.csv")) if timing_key(r) not in have]
    return rows


def first_tune(name):
    """The cell's tune report with the lowest seed in OUT, or None."""
    paths = sorted(glob.glob(os.path.join(out, f"{name}.tune.*.json")), key=lambda p: int(p.rsplit(".", 2)[1]))
    return paths[0] if paths else None


names = {os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(out, "*.grid.*.json"))}
if args.save_grids:
    os.makedirs(args.save_grids, exist_ok=True)
    # Timing runs add to the cell's kept ones (bench/grids/NAME.times.csv).
    for name in sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(out, "*.retime.*.json"))}):
        path = os.path.join(args.save_grids, f"{name}.times.csv")
        kept = read_timings(path)
        have = {timing_key(r) for r in kept}
        new = [r for r in timing_rows(name) if timing_key(r) not in have]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=TIMING_FIELDS)
            w.writeheader()
            for r in sorted(kept + new, key=lambda r: (int(r["seed"]), int(r["batch"]), r["date"])):
                w.writerow({k: r.get(k) for k in TIMING_FIELDS})
        print(f"{path}: {len(new)} timing runs from {out}, {len(kept)} kept")
    for name in sorted(names):
        path = os.path.join(args.save_grids, f"{name}.csv")
        rows = grid_rows(name)
        # A folder with some of a cell's runs adds to its kept grid: the (seed, batch) runs it has
        # replace the kept ones, and the rest stay (one seed, or one batch, run again must not drop
        # the others).
        runs = {(str(r["seed"]), int(r["batch"])) for r in rows}
        kept = []
        if os.path.exists(path):
            with open(path, newline="") as f:
                kept = list(csv.DictReader(f))
        stay = [r for r in kept if (r["seed"], int(r["batch"])) not in runs]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=GRID_FIELDS)
            w.writeheader()
            for r in sorted(stay + rows, key=lambda r: (int(r["seed"]), int(r["batch"]))):
                w.writerow({k: r.get(k) for k in GRID_FIELDS})
        if stay:
            print(f"{path}: {len(rows)} runs from {out}, {len(stay)} kept")
    # The run race's measurements beside each grid (CELL.race.json: the first tune's run_race record,
    # its pick and build), so bench/run_race_replay.py can weigh another way of carrying the gaps
    # against the grid without tuning again.
    for name in sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(out, "*.tune.*.json"))}):
        tune_path = first_tune(name)
        report = json.load(open(tune_path))
        if not report.get("run_race"):
            continue
        context = report.get("context", {})
        record = {"cell": name, "pick": report["recommendation"]["batch"], "tune_seed": int(tune_path.rsplit(".", 2)[1]),
                  "commit": context.get("build_commit", ""), "date": context.get("date", ""),
                  "run_race": report["run_race"]}
        with open(os.path.join(args.save_grids, f"{name}.race.json"), "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
if args.grids:  # cells whose grids are kept, judged where this folder has their tunes
    names |= {os.path.basename(p)[:-4] for p in glob.glob(os.path.join(args.grids, "*.csv"))
              if not p.endswith(".times.csv")
              and glob.glob(os.path.join(out, os.path.basename(p)[:-4] + ".tune.*.json"))}
names = sorted(names)
print("| cell | epochs | measure | good set (mean final quality) | fastest good | pick (tune seed) | in good set | "
      "time / fastest good | pass | against the grid's noise | a perfect prediction's pick |")
print("|---|---:|---|---|---:|---|---|---:|---|---|---|")
passed = total = 0
perfect_passed = perfect_total = 0
benchmark_bar_passed = 0  # the perfect prediction held to the good set's least bar instead of the race's
reachable_passed = 0  # the races some rule could pass (the replay's ceiling)
worst = 0.0
schedules = []
day_batches = []  # --timed-on: per cell, the batches with a run of that day
chances = []  # each pick's pass chance against the grid's own noise (advice_grid.pass_chances); None: not in the grid
best_chances = []  # per cell with a pick, the best chance any batch has
for name in names:
    measure = measure_of(name)
    rows, timings = grid_rows(name), timing_rows(name)
    runs, epochs = seed_runs(rows, measure, timings, args.timed_on)
    stats = stats_of(runs)
    if not stats:
        continue
    if args.timed_on:
        day_batches.append(f"{name} {', '.join(map(str, timed_on(rows, timings, args.timed_on))) or 'none'}")
    best, tol, behind, good = good_set(stats, measure)
    fastest = min(good, key=lambda b: stats[b][2])
    cell_chances = pass_chances(runs, measure, paired=args.paired)
    tuned = False
    for path in sorted(glob.glob(os.path.join(out, f"{name}.tune.*.json")), key=lambda p: int(p.rsplit(".", 2)[1])):
        seed = path.rsplit(".", 2)[1]
        report = json.load(open(path))
        pick = report["recommendation"]["batch"]
        # A sweep beside other work reads the larger batches slower and moves the candidates down.
        shared = ", its sweep shared the CPU" if (report.get("sweep") or {}).get("shared_cpu_warning") else ""
        inside, ratio, ok = verdict(stats, good, pick)
        chance = cell_chances.get(pick)
        chances.append(chance)
        tuned = True
        total += 1
        passed += ok
        if pick in stats:
            worst = max(worst, ratio)
        race = report.get("run_race")
        perfect = "- (no run race pick)"
        if race and race.get("best_batch") is not None and race.get("entries"):
            why = unjudged(race, stats, measure)
            if why:
                perfect = f"- ({why})"
            else:
                oracle = replay(race, "oracle", stats=stats, measure=measure)
                o_inside, o_ratio, o_ok = verdict(stats, good, oracle)
                perfect_total += 1
                perfect_passed += o_ok
                benchmark_bar_passed += verdict(stats, good, replay(race, "oracle", LEAST_TOLERANCE, stats=stats,
                                                                    measure=measure))[2]
                reachable_passed += verdict(stats, good, replay(race, "ceiling", stats=stats, measure=measure,
                                                                good=good))[2]
                perfect = f"{oracle}: {'pass' if o_ok else 'FAIL'} ({o_ratio:.2f}{'' if o_inside else ', worse model'})"
        print(f"| {name} | {epochs:g} | {measure} | {', '.join(f'{b} ({stats[b][0]:.4f})' for b in good)} | {fastest} "
              f"({stats[fastest][2]:.1f} s) | {pick} ({seed}{shared}) | {'yes' if inside else 'no'} | {ratio:.2f} | "
              f"{'pass' if ok else 'FAIL'} | {firmness(chance)} | {perfect} |")
        schedule = (report.get("run_race") or {}).get("schedule")
        if schedule:
            schedules.append((name, seed, pick, schedule, measure, best, tol, behind, stats))
    if tuned:
        best_chances.append(max(cell_chances.values()))
print()
print(f"{passed} of {total} picks pass; the worst time ratio {worst:.2f}. Of the {perfect_total} races the grids can "
      f"judge (the reference in the grid, one measure), exact gaps pass {perfect_passed} at the race's own bar and "
      f"{benchmark_bar_passed} at the good set's least ({LEAST_TOLERANCE * 100:g} accuracy points, {LEAST_TOLERANCE:.1%} "
      f"of the loss); some rule could pass {reachable_passed} on their candidates and times.")
if chances:
    judged = [c for c in chances if c is not None]
    firm = sum(c >= FIRM for c in judged), sum(c <= 1 - FIRM for c in judged)
    need = needed(len(best_chances))
    print(f"Against the grids' own noise (each batch's mean quality and time drawn within its standard errors"
          f"{', the seeds and sittings paired' if args.paired else ''}, advice_grid.pass_chances): {firm[0]} firm "
          f"passes, {firm[1]} firm fails, {len(judged) - sum(firm)} the grids "
          f"cannot resolve{f', {len(chances) - len(judged)} not in the grids' if len(judged) < len(chances) else ''}; the "
          f"picks pass an expected {sum(judged):.1f} of {len(chances)}. The best pick any rule could make in each of "
          f"the {len(best_chances)} cells passes an expected {sum(best_chances):.1f}, and at least {need} (90 %) with a "
          f"chance of {at_least(best_chances, need):.0%}.")
if args.timed_on:
    print(f"Times: the runs of {args.timed_on} alone, where a seed and batch has any ({'; '.join(day_batches)}); the "
          f"other batches, the mean of the grid's run and the kept timings, of other days.")

# Batch-size schedules: what tune predicted against what the seeds' runs measured (issue #30: within
# 10 points of each other), and whether the schedule's final quality is in the grid's good set. The
# schedule runs (NAME.schedule.SEED.json) are those of the schedule text the tune proposed.
rows = []
for name, seed, pick, schedule, measure, best, tol, behind, stats in schedules:
    qs, ts, pick_ts = [], [], []
    for path in sorted(glob.glob(os.path.join(out, f"{name}.schedule.*.json"))):
        for r in json.load(open(path))["validation"]["runs"]:
            q = quality(r, measure)
            if r.get("schedule") == schedule["text"] and q is not None:
                qs.append(q)
                ts.append(r["train_s"])
            elif not r.get("schedule") and r["batch"] == pick and q is not None:
                pick_ts.append(r["train_s"])
    predicted = schedule["saving"]
    if not qs or not pick_ts:
        rows.append(f"| {name} ({seed}) | {schedule['text']} (pick {pick}) | {100 * predicted:.0f} % | not run | - | - |")
        continue
    q = statistics.mean(qs)
    good = behind(q) <= tol
    measured = 1 - statistics.mean(ts) / statistics.mean(pick_ts)
    close = abs(measured - predicted) <= 0.10
    rows.append(f"| {name} ({seed}) | {schedule['text']} (pick {pick}) | {100 * predicted:.0f} % | {100 * measured:.0f} % | "
                f"{q:.4f} ({'good' if good else 'worse'}) | {'yes' if close and good else 'no'} |")
if rows:
    print()
    print("| cell (tune seed) | schedule | predicted saving | measured saving (vs the pick, same seeds) | mean final quality | within 10 points, good |")
    print("|---|---|---:|---:|---|---|")
    print("\n".join(rows))
else:
    print()
    print("No tune proposed a batch-size schedule (each report's run_race.schedule_reason says why).")
