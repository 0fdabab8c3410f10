"""Issue #30's benchmark rule, shared by bench/run_advice_summary.py and bench/run_race_replay.py: a
cell's grid of full runs (per batch, the mean final quality over the training seeds, its standard
error, the mean training time), its good set (the batches within max(0.005, 2 standard errors of the
best mean) of the best), and the verdict on a pick (in the good set, and its mean time within 1.10x
of the good set's fastest). The transformer's cells are judged on final loss, the others on final
accuracy.

A full run's training time moves by up to a third here from one run to the next (the machine's speed moves
over tens of seconds: docs/benchmarks.md, "The grid's times, timed again"), and the verdict's 1.10x
needs better: `timing` rows (bench/grids/CELL.times.csv, from `RETIME=N bash bench/run_advice.sh`)
are the same seed's run of the same batch trained again, the same final quality to the digit, whose
times are averaged with the grid's before the seeds are; or, judged on one day's times (`on`), those of
that day alone where a seed and batch has any.

How firm a verdict is: `pass_chances` draws the grid again within its own noise and counts each
batch's passes; `resolution` prints every batch's chance in each cell, and what the best pick in every
cell could expect; `time-check` compares the model's time noise with the days' (docs/benchmarks.md,
"What the grids resolve"). `--paired` draws a grid measured again as one is: every batch from the
same seeds, each sitting's runs slowing together (paired_noise_model).

    python3 bench/advice_grid.py retime-batches bench/grids/CELL.csv   # the batches worth timing again
    python3 bench/advice_grid.py resolution bench/grids/CELL.csv ...   # [--paired] [--seeds-scale K] [--time-noise F]
    python3 bench/advice_grid.py time-check bench/grids/CELL.csv 1024 2048"""
import csv
import math
import random
import statistics
import sys

GRID_FIELDS = ["seed", "batch", "epochs", "lr", "lr_capped", "warmup_steps", "steps", "final_accuracy", "final_loss",
               "train_s", "commit", "date"]
TIME_RATIO = 1.10
# The good set's least tolerance: half an accuracy point, or 0.5 % of the best mean loss.
LEAST_TOLERANCE = 0.005
TIMING_FIELDS = ["seed", "batch", "final_accuracy", "final_loss", "train_s", "commit", "date"]
# The good set's members timed again: those whose mean time is within this of the fastest's, where
# a run's own noise can move a verdict across TIME_RATIO.
RETIME_RATIO = 1.25
# A verdict is firm where it holds in at least this share of draws of the grid's noise (pass_chances).
FIRM = 0.9
# The share of cells whose picks must pass (issue #30).
PASS_SHARE = 0.9
DRAWS = 4000


def measure_of(name):
    return "loss" if name.startswith("transformer") else "accuracy"


def quality(run, measure):
    """A full run's final quality in the cell's measure; None where the run failed."""
    return run.get("final_loss") if measure == "loss" else run.get("final_accuracy")


def parsed(row, optional=()):
    """A kept CSV row with its batch, train_s and the optional numeric fields parsed (None where empty)."""
    number = lambda k: float(row[k]) if row[k] not in ("", "None") else None
    return {**row, "batch": int(row["batch"]), "train_s": float(row["train_s"]), **{k: number(k) for k in optional}}


def read_kept_grid(path):
    """The rows of a kept grid (bench/grids/CELL.csv), numbers parsed."""
    with open(path, newline="") as f:
        return [parsed(r, ("epochs", "final_accuracy", "final_loss")) for r in csv.DictReader(f)]


def read_timings(path):
    """A cell's timing rows (bench/grids/CELL.times.csv), numbers parsed; none where there is no file."""
    try:
        with open(path, newline="") as f:
            return [parsed(r, ("final_accuracy", "final_loss")) for r in csv.DictReader(f)]
    except FileNotFoundError:
        return []


def timing_key(row):
    """What tells one timing run from another: its seed, batch and date."""
    return str(row["seed"]), int(row["batch"]), row["date"]


def same_run(a, b):
    """Two runs of one seed and batch that ended the same: the same final accuracy (4 digits) and loss."""
    close = lambda x, y: (x is None and y is None) or (x is not None and y is not None and abs(x - y) <= 1e-6 * max(1, abs(x)))
    return close(a.get("final_accuracy"), b.get("final_accuracy")) and close(a.get("final_loss"), b.get("final_loss"))


def run_times(row, timings, on=None):
    """A grid run's (date, time) pairs: its own, with those of the timing rows of the same seed and
    batch that ended the same. A row that did not is another run (the grid's run was replaced since,
    or the build changed the numbers): it is left out, and stderr says so. With `on` (a date's prefix,
    2026-12-02), only the runs of that day count, where there are any: the machine's CPU and speed
    change from day to day, and the tunes judged ran on that day."""
    runs = [row]
    for t in timings:
        if str(t["seed"]) == str(row["seed"]) and int(t["batch"]) == int(row["batch"]):
            if not same_run(t, row):
                print(f"seed {row['seed']} batch {row['batch']}: a timing run ({t.get('date')}) ended at "
                      f"{t.get('final_accuracy')}/{t.get('final_loss')}, the grid's at "
                      f"{row.get('final_accuracy')}/{row.get('final_loss')}: not the same run, left out",
                      file=sys.stderr)
                continue
            runs.append(t)
    if on:
        runs = [r for r in runs if str(r.get("date", "")).startswith(on)] or runs
    return [(str(r.get("date", "")), r["train_s"]) for r in runs]


def seed_runs(rows, measure, timings=(), on=None):
    """Per batch, each finished seed's (final quality, time, timed runs, seed, each run's (date, time)),
    its time the mean of its run and its timing rows (`on`: of those of that day alone, where it has
    any; run_times); and the run's epochs."""
    runs = {}
    epochs = None
    for r in rows:
        epochs = r["epochs"]
        q = quality(r, measure)
        if q is not None:
            timed = run_times(r, timings, on)
            runs.setdefault(r["batch"], []).append(
                (q, statistics.mean(t for _, t in timed), len(timed), str(r["seed"]), timed))
    return runs, epochs


def stats_of(runs):
    """Per batch of seed_runs' values: (mean quality, its standard error, mean train_s, seeds)."""
    stats = {}
    for b, xs in runs.items():
        qs = [x[0] for x in xs]
        se = statistics.stdev(qs) / math.sqrt(len(qs)) if len(qs) > 1 else 0.0
        stats[b] = (statistics.mean(qs), se, statistics.mean(x[1] for x in xs), len(qs))
    return stats


def grid_stats(rows, measure, timings=(), on=None):
    """stats_of the grid's seed_runs, and the run's epochs."""
    runs, epochs = seed_runs(rows, measure, timings, on)
    return stats_of(runs), epochs


def read_cell(path):
    """A kept grid's cell name, its rows and its timing rows (CELL.times.csv beside it, where there is one)."""
    return (path.rsplit("/", 1)[-1].split(".")[0], read_kept_grid(path),
            read_timings(path[:-len(".csv")] + ".times.csv"))


def good_set(stats, measure, slack=0.0):
    """The best batch, the tolerance, how far a mean quality is behind the best, and the batches within
    the tolerance of the best mean (plus `slack`, pass_chances')."""
    loss = measure == "loss"
    best = (min if loss else max)(stats, key=lambda b: stats[b][0])
    # The best mean's own standard error: a batch whose seeds scatter widely (one diverges) must
    # not join the set by its own spread.
    tol = max(LEAST_TOLERANCE * (stats[best][0] if loss else 1), 2 * stats[best][1]) + slack
    behind = (lambda m: m - stats[best][0]) if loss else (lambda m: stats[best][0] - m)
    return best, tol, behind, [b for b in sorted(stats) if behind(stats[b][0]) <= tol]


def verdict(stats, good, pick):
    """(in the good set, time / the good set's fastest, passes); the ratio is nan where the grid lacks
    the pick."""
    fastest = min(good, key=lambda b: stats[b][2])
    ratio = stats[pick][2] / stats[fastest][2] if pick in stats else float("nan")
    inside = pick in good
    return inside, ratio, inside and ratio <= TIME_RATIO


def noise_model(runs, seeds_scale=1.0, time_noise=1.0):
    """Per batch of seed_runs' values: (mean quality, its own standard error, the error its mean is drawn
    with, mean time, the error its time is drawn with, seeds). Three seeds that agree to the digit do
    not make a mean exact, so the drawn errors are at least the cell's typical ones: the quality's the
    median seed variance over the cell's batches (and its standard deviation at most three times that
    one's: a seed that diverged is no normal spread), the time's the median relative variance of one
    timed run (a seed's time averages its runs). `seeds_scale` K: as if each batch had K times its
    seeds, each timed as often, so every error over root K; `time_noise` scales the time's (0: exact)."""
    median_var = lambda xs: statistics.median(xs) if xs else 0.0
    q_var = median_var([statistics.variance([x[0] for x in xs]) for xs in runs.values() if len(xs) > 1])
    # A seed's time is the mean of its runs: one run's relative variance is about k times that of such means.
    t_rel_var = median_var([statistics.variance([x[1] / statistics.mean(y[1] for y in xs) for x in xs])
                            * statistics.mean(x[2] for x in xs) for xs in runs.values() if len(xs) > 1])
    model = {}
    for b, xs in runs.items():
        qs, ts, n = [x[0] for x in xs], [x[1] for x in xs], len(xs)
        q_sd = statistics.stdev(qs) if n > 1 else 0.0
        t_sd = statistics.stdev(ts) if n > 1 else 0.0
        t_floor = statistics.mean(ts) * math.sqrt(t_rel_var / statistics.mean(x[2] for x in xs))
        root_n = math.sqrt(n * seeds_scale)
        model[b] = (statistics.mean(qs), q_sd / root_n, min(max(q_sd, math.sqrt(q_var)), 3 * math.sqrt(q_var)) / root_n,
                    statistics.mean(ts), time_noise * max(t_sd, t_floor) / root_n, n)
    return model


def seed_effects(values):
    """The additive fit y = batch's + seed's + residual to {batch: {seed: y}} by median polish (the two
    medians in turn until they settle: a seed that diverged at one batch stays that batch's residual
    rather than moving the seed's effect at every batch): each batch's level, each seed's effect
    (centred; 0 for a seed that only one batch has, whose run then stays that batch's residual, as
    unpaired as it is), and each batch's residual variance, the degrees of freedom the fit used shared
    out over the cell's runs; None where the fit leaves none (one seed). Median polish leaves more
    residual than least squares (by how much was not measured here), so the errors drawn from it run
    somewhat high, and the chances lean towards unresolved."""
    seeds = sorted({s for ys in values.values() for s in ys})
    shared = [s for s in seeds if sum(s in ys for ys in values.values()) > 1]
    n = sum(len(ys) for ys in values.values())
    dof = n - len(values) - len(shared) + (1 if shared else 0)
    if dof <= 0:
        return None
    effect = dict.fromkeys(seeds, 0.0)
    for _ in range(50 if shared else 0):
        level = {b: statistics.median(y - effect[s] for s, y in ys.items()) for b, ys in values.items()}
        for s in shared:
            effect[s] = statistics.median(ys[s] - level[b] for b, ys in values.items() if s in ys)
        centre = statistics.median(effect[s] for s in shared)
        effect = {s: (e - centre if s in shared else 0.0) for s, e in effect.items()}
    level = {b: statistics.median(y - effect[s] for s, y in ys.items()) for b, ys in values.items()}
    residual = {b: n / dof * statistics.mean((y - level[b] - effect[s]) ** 2 for s, y in ys.items())
                for b, ys in values.items()}
    return level, {s: effect[s] for s in shared}, residual


def paired_noise_model(runs, seeds_scale=1.0, time_noise=1.0):
    """noise_model's errors, paired as a grid measured again is: its batches train from the same seeds,
    and a seed that moves every batch's quality together (the transformer AdamW cell's seed 0 ends
    lowest in loss at every batch) does so again, which a verdict between batches does not see; and
    the runs of one sitting (a `validate` that trains every batch of a seed, minutes apart, as the
    timing rows are) slow or speed up together. The quality is fitted as a batch's level plus a seed's
    effect, the log time of each run as a batch's level plus its sitting's (seed_effects; a run without
    a date is its seed's own sitting). A draw moves every batch's mean by the mean of fresh seed effects over its own seeds, and
    its time by its runs' share of fresh sittings' effects, each plus a residual error (its variance
    floored at the cell's median and at most nine times it, as in noise_model). `seeds_scale` and
    `time_noise` as in noise_model, on both parts. Per batch: (mean quality, its own standard error, the
    residual error of its mean, mean time, the residual error of its log mean time, seeds, the seeds,
    each run's (sitting, weight in the mean)); the seed effects' and the sittings' spreads, so scaled;
    and the seeds and the sittings that more than one batch shares (the others' effects are 0). None
    where a fit leaves no degrees of freedom (a cell of one seed): pass_chances draws apart then."""
    q = {b: {x[3]: x[0] for x in xs} for b, xs in runs.items()}
    sitting = lambda x, day: day or f"seed {x[3]}"
    sittings = {}
    for b, xs in runs.items():
        for x in xs:
            for day, t in x[4]:
                sittings.setdefault(b, {}).setdefault(sitting(x, day), []).append(math.log(t))
    log_t = {b: {day: statistics.mean(ts) for day, ts in days.items()} for b, days in sittings.items()}
    fits = [seed_effects(values) for values in (q, log_t)]
    if None in fits:
        return None
    root_k = math.sqrt(seeds_scale)
    spreads = [(statistics.stdev(effect.values()) if len(effect) > 1 else 0.0) / root_k * scale
               for (_, effect, _), scale in zip(fits, (1.0, time_noise))]
    floors = [statistics.median(residual.values()) for _, _, residual in fits]
    bounded = lambda v, floor: math.sqrt(min(max(v, floor), 9 * floor) if floor > 0 else v)
    model = {}
    for b, xs in runs.items():
        qs, n = [x[0] for x in xs], len(xs)
        weights = [(sitting(x, day), 1 / (n * len(x[4]))) for x in xs for day, _ in x[4]]
        own_se = statistics.stdev(qs) / math.sqrt(n) if n > 1 else 0.0
        t_se = bounded(fits[1][2][b], floors[1]) * math.sqrt(sum(w * w for _, w in weights))
        model[b] = (statistics.mean(qs), own_se, bounded(fits[0][2][b], floors[0]) / math.sqrt(n) / root_k,
                    statistics.mean(x[1] for x in xs), time_noise * t_se / root_k, n, [x[3] for x in xs], weights)
    return model, spreads, [set(effect) for _, effect, _ in fits]


def pass_chances(runs, measure, draws=DRAWS, seed=0, seeds_scale=1.0, time_noise=1.0, paired=False):
    """How firm each batch's verdict is against the grid's own noise: per batch of seed_runs' values, the
    share of `draws` in which it passes when every batch's mean quality and mean time are drawn from
    normals at the grid's means and noise_model's errors, independently (runs of one day slow
    together: `time_noise` 0 bounds that; a seed that moves every batch's loss together, as the
    transformer's do, is drawn as noise between them, so such cells' chances run low), and the good
    set's tolerance takes the grid's own standard error of the best.

    The grid's best mean is the best of several noisy means, so it lies beyond its batch's truth, by
    about as far as a best drawn at the grid's own errors lies beyond it. A grid measured again has
    such a best too, and that one is the verdict's to bear; the first is taken back: each draw's good
    set reaches that much further behind its best. The fastest good time is the least of several
    noisy times, and is not corrected: a pick that is not the fastest reads slow by a little. The
    chances are a model's, with the grid's means for the truth. `paired`: the draws of
    paired_noise_model, a seed's effect and a sitting's shared by the batches that have them."""
    rng = random.Random(seed)
    grid = paired_noise_model(runs) if paired else None
    paired = grid is not None  # a cell of one seed has nothing to pair
    if paired:
        model = paired_noise_model(runs, seeds_scale, time_noise)

        def draw(fitted):
            model, (q_spread, t_spread), (q_shared, t_shared) = fitted
            q_u = {s: rng.gauss(0, q_spread) for s in sorted(q_shared)}
            t_u = {day: rng.gauss(0, t_spread) for day in sorted(t_shared)}
            return {b: (rng.gauss(m, q_se) + math.fsum(q_u.get(s, 0.0) for s in own) / len(own), own_se,
                        t * math.exp(rng.gauss(0, t_se) + sum(w * t_u.get(day, 0.0) for day, w in weights)), n)
                    for b, (m, own_se, q_se, t, t_se, n, own, weights) in model.items()}
    else:
        draw = lambda model: {b: (rng.gauss(m, q_se), own_se, max(1e-9, rng.gauss(t, t_se)), n)
                              for b, (m, own_se, q_se, t, t_se, n) in model.items()}
        grid = noise_model(runs)
        model = noise_model(runs, seeds_scale, time_noise)
    sign = -1 if measure == "loss" else 1
    best_of = lambda stats: max(sign * v[0] for v in stats.values())
    grid_best = best_of(grid[0] if paired else grid)
    rise = max(0.0, statistics.mean(best_of(draw(grid)) for _ in range(draws // 4)) - grid_best)
    passes = dict.fromkeys(runs, 0)
    for _ in range(draws):
        stats = draw(model)
        _, _, _, good = good_set(stats, measure, rise)
        for b in good:
            passes[b] += verdict(stats, good, b)[2]
    return {b: p / draws for b, p in passes.items()}


def firmness(chance):
    """A verdict's pass chance in words: a firm pass or fail, or one the grid cannot resolve."""
    if chance is None:
        return "-"
    if chance >= FIRM:
        return f"firm pass ({chance:.0%})"
    if chance <= 1 - FIRM:
        return f"firm fail ({chance:.0%})"
    return f"unresolved ({chance:.0%})"


def timed_on(rows, timings, on):
    """The batches with a run of day `on` (a date's prefix), among the grid's and its timings'."""
    return sorted({int(r["batch"]) for r in list(rows) + list(timings) if str(r.get("date", "")).startswith(on)})


def retime_batches(stats, measure):
    """The good set's members whose mean time is within RETIME_RATIO of its fastest's."""
    _, _, _, good = good_set(stats, measure)
    fastest = min(stats[b][2] for b in good)
    return [b for b in good if stats[b][2] <= RETIME_RATIO * fastest]


def at_least(chances, k):
    """The chance that at least k of independent events with these chances happen."""
    counts = [1.0]  # counts[j]: the chance of exactly j so far
    for c in chances:
        counts = [(counts[j] if j < len(counts) else 0.0) * (1 - c) + (counts[j - 1] * c if j else 0.0)
                  for j in range(len(counts) + 1)]
    return sum(counts[k:])


def needed(cells):
    """The passes issue #30 asks of so many cells: 90 % of them."""
    return math.ceil(PASS_SHARE * cells - 1e-9)


def resolution(paths, seeds_scale=1.0, time_noise=1.0, paired=False):
    """What the kept grids resolve: per cell, each batch's pass chance against the grid's own noise
    (pass_chances), and the best any pick has. A pick that knew every batch's true means would pick, at
    best, the batch with the best chance (the best of estimates, so a little high); over the cells it
    passes the sum of those chances, and 90 % of them with the chance at_least gives."""
    print("| cell | good set | pass chance per batch (the grid's noise; those at 0 % left out) | the best pick's |")
    print("|---|---|---|---:|")
    bests = []
    for path in paths:
        name, rows, timings = read_cell(path)
        measure = measure_of(name)
        runs, _ = seed_runs(rows, measure, timings)
        _, _, _, good = good_set(stats_of(runs), measure)
        chances = pass_chances(runs, measure, seeds_scale=seeds_scale, time_noise=time_noise, paired=paired)
        best = max(chances, key=chances.get)
        bests.append(chances[best])
        shown = ", ".join(f"{b} {c:.0%}" for b, c in sorted(chances.items()) if f"{c:.0%}" != "0%")
        print(f"| {name} | {', '.join(map(str, good))} | {shown} | {best}: {chances[best]:.0%} |")
    need = needed(len(bests))
    print(f"\nThe best pick in every cell passes an expected {sum(bests):.1f} of {len(bests)} cells against grids "
          f"measured again{f' with {seeds_scale:g}x the seeds' if seeds_scale != 1 else ''}"
          f"{f', the times with {time_noise:g}x their noise' if time_noise != 1 else ''}; at least {need} "
          f"(90 %) with a chance of {at_least(bests, need):.0%}.")


def time_check(path, a, b):
    """The time ratio of batches a and b on each day they both ran (the grid's runs and the timing rows,
    by date), the ratios' standard deviation, and noise_model's error of the ratio over every run: a
    check on the model's time noise."""
    name, rows, timings = read_cell(path)
    days = {}
    for r in list(rows) + list(timings):
        days.setdefault(str(r["date"])[:10], []).append(r)
    ratios = []
    for day, runs in sorted(days.items()):
        ta, tb = ([r["train_s"] for r in runs if r["batch"] == x] for x in (a, b))
        if ta and tb:
            ratios.append(statistics.mean(ta) / statistics.mean(tb))
            print(f"{day}: {ratios[-1]:.3f} ({len(ta)} and {len(tb)} runs)")
    model = noise_model(seed_runs(rows, measure_of(name), timings)[0])
    (_, _, _, t_a, se_a, _), (_, _, _, t_b, se_b, _) = model[a], model[b]
    spread = f"{statistics.stdev(ratios):.3f}" if len(ratios) > 1 else "-"
    print(f"{name} {a}/{b}: the days' standard deviation {spread}; the model's error over every run "
          f"{(t_a / t_b) * math.hypot(se_a / t_a, se_b / t_b):.3f}")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="The kept grids' batches worth timing again, what they resolve, or "
                                                 "a check on the time noise the resolution assumes.")
    parser.add_argument("command", choices=["retime-batches", "resolution", "time-check"])
    parser.add_argument("grids", nargs="+", help="bench/grids/CELL.csv (retime-batches: one; time-check: one, then "
                                                 "the two batches)")
    parser.add_argument("--seeds-scale", type=float, default=1.0,
                        help="resolution: as if each batch had this many times its seeds, each timed as often")
    parser.add_argument("--paired", action="store_true",
                        help="resolution: the seeds paired across batches (paired_noise_model), not drawn apart")
    parser.add_argument("--time-noise", type=float, default=1.0,
                        help="resolution: the times' errors times this (0: exact times, the quality's noise alone)")
    args = parser.parse_args()
    if args.command == "resolution":
        resolution(args.grids, args.seeds_scale, args.time_noise, args.paired)
    elif args.command == "time-check":
        if len(args.grids) != 3:
            sys.exit("usage: python3 bench/advice_grid.py time-check bench/grids/CELL.csv BATCH BATCH")
        time_check(args.grids[0], int(args.grids[1]), int(args.grids[2]))
    elif len(args.grids) != 1:
        sys.exit("usage: python3 bench/advice_grid.py retime-batches bench/grids/CELL.csv")
    else:
        name = args.grids[0].rsplit("/", 1)[-1].split(".")[0]
        stats, _ = grid_stats(read_kept_grid(args.grids[0]), measure_of(name))
        print(",".join(str(b) for b in retime_batches(stats, measure_of(name))))
