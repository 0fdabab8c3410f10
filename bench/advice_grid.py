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

    python3 bench/advice_grid.py retime-batches bench/grids/CELL.csv   # the batches worth timing again"""
import csv
import math
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


def run_time(row, timings, on=None):
    """A grid run's time: its own, averaged with the timing rows of the same seed and batch that ended the
    same. A row that did not is another run (the grid's run was replaced since, or the build changed the
    numbers): it is left out, and stderr says so. With `on` (a date's prefix, 2026-12-02), only the runs
    of that day count, where there are any: the machine's CPU and speed change from day to day, and
    the tunes judged ran on that day."""
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
    return statistics.mean(r["train_s"] for r in runs)


def grid_stats(rows, measure, timings=(), on=None):
    """Per batch: (mean quality, its standard error, mean train_s, seeds), over the seeds that finished;
    and the run's epochs. A seed's time is the mean of its run and its timing rows (`on`: of those of
    that day alone, where it has any; run_time)."""
    runs = {}
    epochs = None
    for r in rows:
        epochs = r["epochs"]
        q = quality(r, measure)
        if q is not None:
            runs.setdefault(r["batch"], []).append((q, run_time(r, timings, on)))
    stats = {}
    for b, xs in runs.items():
        qs = [x[0] for x in xs]
        se = statistics.stdev(qs) / math.sqrt(len(qs)) if len(qs) > 1 else 0.0
        stats[b] = (statistics.mean(qs), se, statistics.mean(x[1] for x in xs), len(qs))
    return stats, epochs


def good_set(stats, measure):
    """The best batch, the tolerance, how far a mean quality is behind the best, and the batches within
    the tolerance of the best mean."""
    loss = measure == "loss"
    best = (min if loss else max)(stats, key=lambda b: stats[b][0])
    # The best mean's own standard error: a batch whose seeds scatter widely (one diverges) must
    # not join the set by its own spread.
    tol = max(LEAST_TOLERANCE * (stats[best][0] if loss else 1), 2 * stats[best][1])
    behind = (lambda m: m - stats[best][0]) if loss else (lambda m: stats[best][0] - m)
    return best, tol, behind, [b for b in sorted(stats) if behind(stats[b][0]) <= tol]


def verdict(stats, good, pick):
    """(in the good set, time / the good set's fastest, passes); the ratio is nan where the grid lacks
    the pick."""
    fastest = min(good, key=lambda b: stats[b][2])
    ratio = stats[pick][2] / stats[fastest][2] if pick in stats else float("nan")
    inside = pick in good
    return inside, ratio, inside and ratio <= TIME_RATIO


def timed_on(rows, timings, on):
    """The batches with a run of day `on` (a date's prefix), among the grid's and its timings'."""
    return sorted({int(r["batch"]) for r in list(rows) + list(timings) if str(r.get("date", "")).startswith(on)})


def retime_batches(stats, measure):
    """The good set's members whose mean time is within RETIME_RATIO of its fastest's."""
    _, _, _, good = good_set(stats, measure)
    fastest = min(stats[b][2] for b in good)
    return [b for b in good if stats[b][2] <= RETIME_RATIO * fastest]


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "retime-batches":
        sys.exit("usage: python3 bench/advice_grid.py retime-batches bench/grids/CELL.csv")
    name = sys.argv[2].rsplit("/", 1)[-1].split(".")[0]
    stats, _ = grid_stats(read_kept_grid(sys.argv[2]), measure_of(name))
    print(",".join(str(b) for b in retime_batches(stats, measure_of(name))))
