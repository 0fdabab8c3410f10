"""The run race's last step again, on kept measurements: each cell's compressed runs (bench/grids/
CELL.race.json, written by run_advice_summary.py --save-grids from a tune's report) are carried to the
run's end by a rule, the batches predicted within the tolerance are good, the fastest of them at the
sweep's samples/s is the pick, and the pick is judged against the cell's kept grid of full runs
(bench/grids/CELL.csv) by issue #30's rule (bench/advice_grid.py). A way of carrying the gaps is then
weighed on every kept cell in seconds, without tuning again. Every rule reads the gaps after 2f as
the race does: against the reference's middle run, or, where that run bent its learning curve upward
within the noise of three runs, against the line through the other two (run_race_gaps.cpp,
line_through_middle).

Rules (--rule):
  tree       what src/advice/run_race_gaps.cpp does (carry_gaps): each candidate's gap after 4f shrinks per
             doubling of the run as it did from 2f to 4f, the ratio bounded to [0.5, 1]; a gap within
             twice the held-out noise at 2f takes the nearest larger batch's trend; a larger batch is
             never predicted nearer the reference than a smaller one. Its pick must be the tune's
             (the replay says so where it is not).
  pooled     one trend per cell: the sum of the candidates' gaps after 4f over their sum after 2f
             (those beyond twice the noise at 2f whose gap did not grow), bounded as above; a gap
             that grew is carried as it stands.
  pooled-all as pooled, with the gaps that grew in the sum too, and every gap carried at the one
             trend (gap_by_length.py measured one rate per cell over the run, every batch alike).
  grown      as tree, but a gap that grew from 2f to 4f has no trend of its own, as one near the
             noise has none: it takes the nearest larger batch's (lenet SGD's gaps grow at 0.2-0.4
             epochs before they close).
  shrink:S   every gap shrinks by S per doubling (S a number, 0.3 to 1).
  oracle     no rule: every raced candidate's gap is the one its full runs end at (the kept grid's mean
             final quality behind the reference's), so the pick is the race's contract with exact
             gaps: the fastest by the sweep's samples/s within the bar of the reference. Not a bound:
             a wrong gap can pass where the exact one does not (a bar wider than the good set's).
  ceiling    the most any rule could do on the race's candidates and times: a rule that never calls a
             larger batch nearer than a smaller one can only pick the fastest of the reference and
             the first k raced candidates, for some k; a pass where any such pick passes, else the
             oracle's pick.
The oracle and the ceiling need the reference's full runs in the kept grid, and the race and the grid
in one measure (the transformer's race reads token accuracy, its grid the loss); where they are not,
the race is not judged.
--tolerance T (accuracy points / 100, or a share of the loss) replaces the race's held-out noise as
the bar for "good", in every cell alike (the transformer's race reads token accuracy, whose noise is
larger than a tolerance meant for images).

    python3 bench/run_race_replay.py [--grids bench/grids] [--rule tree|pooled|pooled-all|grown|shrink:0.6|oracle|ceiling ...] [--tolerance 0.005]
        [--tunes DIR ...] [--middle line|measured]

Beside each rule's passes, its expected passes: the sum of its picks' chances against the grids' own
noise (bench/advice_grid.py's pass_chances), which a verdict on a line does not flip.

A replay holds the compressed runs fixed: what a rule would pick from the same measurements, not what
another tune would measure (the sweep's candidates move between tunes; benchmarks.md says how far).
"""
import argparse
import glob
import json
import math
import os

from advice_grid import good_set, measure_of, pass_chances, read_kept_grid, read_timings, seed_runs, stats_of, verdict

LEAST_TREND, TREND_NOISE = 0.5, 2.0  # run_race.h: kLeastGapTrend; run_race_internal.h: kTrendNoise
BEND_NOISE = 2.449  # run_race_gaps.cpp: kBendNoise
RULES = ("tree", "pooled", "pooled-all", "grown", "oracle", "ceiling")  # and shrink:S


def compressed_gaps(race, middle="line"):
    """Per candidate after the reference: (batch, gap after 2f, gap after 4f, full run's seconds), in
    the race's measure (accuracy points, or a share of the reference's loss); the gaps None where the
    candidate's runs failed."""
    accuracy = race["measure"] == "accuracy"
    error = (lambda r: 1 - r["accuracy"]) if accuracy else (lambda r: r["loss"])
    refs = [error(r) for r in race["runs"]]
    if middle == "line" and len(refs) == 3:  # line_through_middle: a middle run bent upward within the noise is read on the line
        bend = (refs[1] - refs[2]) - (refs[0] - refs[1])
        if 0 < bend <= BEND_NOISE * race["tolerance"] * (1 if accuracy else refs[2]):
            refs[1] = 0.5 * (refs[0] + refs[2])
    entries = [e for e in race["entries"] if not e.get("earlier_round")]  # a longer round's own
    if len(entries) >= 3:  # without_slower_larger: none larger than the fastest and no faster races (the
        # budget falls by their share, so the others train the same runs)
        rates = [e["samples_per_s"] for e in entries]
        fastest = rates.index(max(rates))
        entries = entries if fastest == 0 else entries[: fastest + 1]  # the smallest fastest: all race
    out = []
    for e in entries[1:]:
        if e.get("message") or not e.get("run") or not e.get("shorter_run"):
            out.append((e["batch"], None, None, e["full_run_s"]))
            continue
        g2, g4 = error(e["shorter_run"]) - refs[1], error(e["run"]) - refs[2]
        if not accuracy:
            g2, g4 = g2 / refs[1], g4 / refs[2]
        out.append((e["batch"], g2, g4, e["full_run_s"]))
    return out


def pooled_trend(pairs):
    """One trend from (gap after 2f, gap after 4f) pairs: the sum after 4f over the sum after 2f, bounded
    as a candidate's own; 1 without pairs."""
    return min(1.0, max(LEAST_TREND, sum(g4 for _, g4 in pairs) / sum(g2 for g2, _ in pairs))) if pairs else 1.0


def trends(gaps, rule, noise):
    """Each candidate's shrink per doubling under the rule (1 where it has none)."""
    own = [None if g2 is None or not (g4 > 0) or not (g2 > TREND_NOISE * noise)
           else min(1.0, max(LEAST_TREND, g4 / g2)) for _, g2, g4, _ in gaps]
    if rule == "grown":  # a gap that grew has no trend of its own
        own = [None if g2 is not None and g4 > g2 else t for (_, g2, g4, _), t in zip(gaps, own)]
    if rule in ("tree", "grown"):
        for i in range(len(gaps) - 2, -1, -1):
            own[i] = own[i] if own[i] is not None else own[i + 1]
        return [t if t is not None else 1.0 for t in own]
    if rule == "pooled":
        pooled = pooled_trend([(g2, g4) for _, g2, g4, _ in gaps
                               if g2 is not None and g2 > TREND_NOISE * noise and 0 < g4 <= g2])
        return [pooled if g2 is not None and g4 <= g2 else 1.0 for _, g2, g4, _ in gaps]
    if rule == "pooled-all":
        return [pooled_trend([(g2, g4) for _, g2, g4, _ in gaps
                              if g2 is not None and g2 > TREND_NOISE * noise and g4 > 0])] * len(gaps)
    shrink = float(rule.split(":", 1)[1])
    return [shrink] * len(gaps)


def unjudged(race, stats, measure):
    """Why the oracle and the ceiling cannot judge a race against the cell's grid; None where they can."""
    if race["measure"] != measure:
        return f"the race reads {race['measure']}, the grid {measure}"
    if race["entries"][0]["batch"] not in stats:
        return f"the grid lacks the reference, {race['entries'][0]['batch']}"
    return None


FAILED = "its compressed runs failed"  # why oracle_gaps has no gap for a candidate the race could not judge


def oracle_gaps(race, stats, measure):
    """Per raced candidate (as compressed_gaps lists them): (batch, its full run's seconds by the sweep,
    its gap behind the reference by its full runs: the grid's mean final quality, accuracy points or
    a share of the reference's loss; None with why: FAILED, or the grid lacks it)."""
    ref = stats[race["entries"][0]["batch"]][0]
    out = []
    for batch, _, g4, full_run_s in compressed_gaps(race):
        if g4 is None:
            out.append((batch, full_run_s, None, FAILED))
        elif batch not in stats:
            out.append((batch, full_run_s, None, "not in the grid"))
        else:
            gap = (stats[batch][0] - ref) / ref if measure == "loss" else ref - stats[batch][0]
            out.append((batch, full_run_s, gap, None))
    return out


def ceiling(race, stats, measure, good):
    """A passing pick some rule could make on the race's candidates (see the module's doc), else None."""
    ref = race["entries"][0]
    pick, pick_s = ref["batch"], ref["full_run_s"]
    reachable = [pick]
    for batch, full_run_s, gap, why in oracle_gaps(race, stats, measure):
        if why == FAILED:
            continue  # never good, and no bound on the larger ones (as the race skips it)
        if gap is None:
            break  # not judged: what a rule does from here on cannot be told
        if full_run_s < pick_s:
            pick, pick_s = batch, full_run_s
        reachable.append(pick)
    return next((b for b in reachable if verdict(stats, good, b)[2]), None)


def replay(race, rule, tolerance=None, middle="line", stats=None, measure="accuracy", good=None):
    """The pick under the rule; the oracle and the ceiling need the cell's grid stats, measure and good
    set, and give None where the grid cannot judge the race (`unjudged`)."""
    noise = race["tolerance"]  # the held-out noise, in the gaps' units
    bar = tolerance if tolerance is not None else noise
    if rule in ("oracle", "ceiling"):
        if stats is None or (rule == "ceiling" and good is None):
            raise ValueError(f"the {rule} needs the cell's grid stats" + (" and good set" if rule == "ceiling" else ""))
        if unjudged(race, stats, measure):
            return None
        ref = race["entries"][0]
        pick, pick_s = ref["batch"], ref["full_run_s"]
        for batch, full_run_s, gap, _ in oracle_gaps(race, stats, measure):
            if gap is not None and gap <= bar and full_run_s < pick_s:
                pick, pick_s = batch, full_run_s
        if rule == "ceiling":
            return ceiling(race, stats, measure, good) or pick  # where no reachable pick passes, the oracle's
        return pick
    doublings = max(0.0, math.log2(race["epochs"] / race["lengths_epochs"][-1]))
    gaps = compressed_gaps(race, middle)
    ref = race["entries"][0]
    pick, pick_s, widest = ref["batch"], ref["full_run_s"], 0.0
    for (batch, _, g4, full_run_s), trend in zip(gaps, trends(gaps, rule, noise)):
        if g4 is None:
            continue
        widest = max(widest, max(0.0, g4) * trend ** doublings)  # a larger batch ends no nearer
        if widest <= bar and full_run_s < pick_s:
            pick, pick_s = batch, full_run_s
    return pick


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grids", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "grids"))
    ap.add_argument("--rule", action="append",
                    help=f"{', '.join(RULES)} or shrink:S; several allowed (default: tree)")
    ap.add_argument("--tolerance", type=float, help="the bar for a good batch, instead of the race's noise")
    ap.add_argument("--tunes", action="append", default=[],
                    help="a folder of tune reports (CELL.tune.SEED.json, as bench/run_advice.sh writes them) to "
                         "replay instead of the kept races; several allowed")
    ap.add_argument("--middle", choices=["line", "measured"], default="line",
                    help="read the gaps after 2f against the reference's middle run on its line where it bent "
                         "upward within the noise (what the race does), or as measured")
    args = ap.parse_args()
    rules = args.rule or ["tree"]
    for rule in rules:
        shrink = rule.split(":", 1)[1] if rule.startswith("shrink:") else None
        try:
            ok = rule in RULES or (shrink is not None and 0 < float(shrink) <= 1)
        except ValueError:
            ok = False
        if not ok:
            ap.error(f"--rule {rule}: not a rule; give {', '.join(RULES)} or shrink:S (S in (0, 1])")
    records = []  # (cell, its label, the race)
    if args.tunes:
        for folder in args.tunes:
            for path in sorted(glob.glob(os.path.join(folder, "*.tune.*.json"))):
                cell, seed = os.path.basename(path)[: -len(".json")].split(".tune.")
                report = json.load(open(path))
                if report.get("run_race"):
                    records.append((cell, f"{folder}, seed {seed}", report["run_race"]))
    else:
        for path in sorted(glob.glob(os.path.join(args.grids, "*.race.json"))):
            record = json.load(open(path))
            records.append((record["cell"], record["commit"], record["run_race"]))
    print(f"| cell (race's tune) | carried over | {' | '.join(rules)} |")
    print(f"|---|---:|{'---|' * len(rules)}")
    passed = {r: 0 for r in rules}
    judged = {r: 0 for r in rules}  # the races each rule could judge (the oracle needs the reference's runs)
    expected = {r: 0.0 for r in rules}  # the picks' pass chances against the grids' own noise (pass_chances)
    cells = {}  # per cell: its grid's stats, good set and every batch's pass chance, read once
    for name, label, race in records:
        grid = os.path.join(args.grids, f"{name}.csv")
        if not os.path.exists(grid) or race.get("best_batch") is None:
            why = "no kept grid" if not os.path.exists(grid) else "the run race picked nothing"
            print(f"| {name} ({label}) | - | {why} |")
            continue
        measure = measure_of(name)
        if name not in cells:
            runs, _ = seed_runs(read_kept_grid(grid), measure,
                                read_timings(os.path.join(args.grids, f"{name}.times.csv")))
            stats = stats_of(runs)
            cells[name] = stats, good_set(stats, measure)[3], pass_chances(runs, measure)
        stats, good, chances = cells[name]
        doublings = math.log2(race["epochs"] / race["lengths_epochs"][-1])
        row = []
        for rule in rules:
            pick = replay(race, rule, args.tolerance, args.middle, stats, measure, good)
            if pick is None:
                row.append(unjudged(race, stats, measure))
                continue
            inside, ratio, ok = verdict(stats, good, pick)
            passed[rule] += ok
            judged[rule] += 1
            expected[rule] += chances.get(pick, 0.0)
            text = f"{pick}: " + ("not in the grid" if pick not in stats else
                                  f"{'pass' if ok else 'FAIL'} ({ratio:.2f}{'' if inside else ', worse model'})")
            if rule == "tree" and args.middle == "line" and pick != race["best_batch"]:
                text += f" (the tune picked {race['best_batch']}: the replay differs)"
            if rule in ("oracle", "ceiling"):
                lacking = [f"{b} {why}" for b, _, _, why in oracle_gaps(race, stats, measure) if why]
                if lacking:
                    text += f" (not good: {'; '.join(lacking)})"
            row.append(text)
        print(f"| {name} ({label}) | {doublings:.1f} doublings | {' | '.join(row)} |")
    print()
    print(" ".join(f"{rule}: {passed[rule]} of {judged[rule]} pass (an expected {expected[rule]:.1f} against the "
                   f"grids' own noise)." for rule in rules))


if __name__ == "__main__":
    main()
