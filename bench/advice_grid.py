"""Issue #30's benchmark rule, shared by bench/run_advice_summary.py and bench/run_race_replay.py: a
cell's grid of full runs (per batch, the mean final quality over the training seeds, its standard
error, the mean training time), its good set (the batches within max(0.005, 2 standard errors of the
best mean) of the best), and the verdict on a pick (in the good set, and its mean time within 1.10x
of the good set's fastest). The transformer's cells are judged on final loss, the others on final
accuracy."""
import csv
import math
import statistics

GRID_FIELDS = ["seed", "batch", "epochs", "lr", "lr_capped", "warmup_steps", "steps", "final_accuracy", "final_loss",
               "train_s", "commit", "date"]
TIME_RATIO = 1.10


def measure_of(name):
    return "loss" if name.startswith("transformer") else "accuracy"


def quality(run, measure):
    """A full run's final quality in the cell's measure; None where the run failed."""
    return run.get("final_loss") if measure == "loss" else run.get("final_accuracy")


def read_kept_grid(path):
    """The rows of a kept grid (bench/grids/CELL.csv), numbers parsed."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            number = lambda k: float(r[k]) if r[k] not in ("", "None") else None
            rows.append({**r, "batch": int(r["batch"]), "epochs": number("epochs"),
                         "final_accuracy": number("final_accuracy"), "final_loss": number("final_loss"),
                         "train_s": float(r["train_s"])})
    return rows


def grid_stats(rows, measure):
    """Per batch: (mean quality, its standard error, mean train_s, seeds), over the seeds that finished;
    and the run's epochs."""
    runs = {}
    epochs = None
    for r in rows:
        epochs = r["epochs"]
        q = quality(r, measure)
        if q is not None:
            runs.setdefault(r["batch"], []).append((q, r["train_s"]))
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
    tol = max(0.005 * (stats[best][0] if loss else 1), 2 * stats[best][1])
    behind = (lambda m: m - stats[best][0]) if loss else (lambda m: stats[best][0] - m)
    return best, tol, behind, [b for b in sorted(stats) if behind(stats[b][0]) <= tol]


def verdict(stats, good, pick):
    """(in the good set, time / the good set's fastest, passes); the ratio is nan where the grid lacks
    the pick."""
    fastest = min(good, key=lambda b: stats[b][2])
    ratio = stats[pick][2] / stats[fastest][2] if pick in stats else float("nan")
    inside = pick in good
    return inside, ratio, inside and ratio <= TIME_RATIO
