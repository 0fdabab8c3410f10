"""What a run race's compressed runs say about the larger batches' deficit, from tune reports.

For each candidate of `run_race`, its two compressed runs (2f and 4f of the user's run) are placed
on the reference's learning curve (a power law through the reference's three runs, as the race's
measured_share does): the samples the reference needed to reach the candidate's held-out error, as a
share of the samples the candidate trained, and the deficit in samples (trained minus needed). If the
deficit stopped growing as the run doubles (growth 1 per doubling), a larger batch's loss would be a
fixed cost paid early, and its gap would close over a long run; if it doubles (growth 2), the share
that counts is constant and the gap closes only as the reference's curve flattens.

The critical batch the 4f share implies: McCandlish et al. (2018) count a sample at batch B as
1 / (1 + B / B_crit) of one at the smallest batches, so a share s of the reference's (batch b) is
(1 + b / B_crit) / (1 + B / B_crit), and B_crit = (s B - b) / (1 - s); at or below 0 where s is at
most b / B (every step counts the same whatever its batch: the step-limited regime).

    python3 bench/run_race_deficit.py bench-results/run-advice/*.tune.*.json
"""
import json
import math
import sys


def needed(samples, errors, error):
    """The samples at which the reference's curve (a power law with a floor through its three runs)
    reaches `error`; None where the curve does not fall."""
    d1, d2 = errors[0] - errors[1], errors[1] - errors[2]
    if d2 <= 0:
        return None
    if d2 >= d1:  # every doubling buys d2
        return samples[2] * 2 ** (-(error - errors[2]) / d2)
    r = d2 / d1
    alpha = -math.log2(r)
    scale = d1 / (1 - r)
    floor = errors[0] - scale
    if error <= floor:
        return math.inf
    return samples[0] * ((error - floor) / scale) ** (-1 / alpha)


def main():
    for path in sys.argv[1:]:
        race = json.load(open(path)).get("run_race")
        if race:  # a longer round's own entries: the first round's verdicts it kept are at other lengths
            race["entries"] = [e for e in race["entries"] if not e.get("earlier_round")]
        if not race or len(race.get("runs", [])) != 3:
            print(f"{path}: no run race with three reference runs")
            continue
        accuracy = race["measure"] == "accuracy"
        error = (lambda run: 1 - run["accuracy"]) if accuracy else (lambda run: run["loss"])
        reference = race["reference_batch"]
        samples = [run["steps"] * reference for run in race["runs"]]
        errors = [error(run) for run in race["runs"]]
        per_epoch = samples[2] / race["lengths_epochs"][2]
        print(f"== {path}: {race['epochs']:g}-epoch run, reference {reference}, compressed runs of "
              f"{', '.join(f'{x:.3g}' for x in race['lengths_epochs'])} epochs; pick {race.get('best_batch')}")
        print("  batch  steps(4f)  share(2f)  share(4f)  deficit epochs (2f, 4f)  growth per doubling  cap_factor  "
              "B_crit(4f)")
        for e in race["entries"][1:]:
            if not e.get("run") or not e.get("shorter_run"):
                print(f"  {e['batch']:>5}  {e.get('message', '')}")
                continue
            cells = []
            for run in (e["shorter_run"], e["run"]):
                own = run["steps"] * e["batch"]
                need = needed(samples, errors, error(run))
                cells.append((own, need))
            shares = [need / own if need is not None else math.nan for own, need in cells]
            deficits = [(own - need) / per_epoch if need is not None else math.nan for own, need in cells]
            growth = deficits[1] / deficits[0] if deficits[0] > 0 else math.nan
            s = shares[1]
            implied = (s * e["batch"] - reference) / (1 - s) if s < 1 else math.inf
            print(f"  {e['batch']:>5}  {e['run']['steps']:>9}  {shares[0]:>9.3f}  {shares[1]:>9.3f}  "
                  f"{deficits[0]:>10.3f}, {deficits[1]:<10.3f}  {growth:>19.2f}  {e['cap_factor']:>10.2f}  "
                  f"{implied if implied > 0 else 0:>10.0f}")
        noise = ", ".join(f"{run.get('b_simple') or 0:.0f}" for run in race["runs"])
        print(f"  the noise scale (B_simple) after the reference's three runs: {noise}")


if __name__ == "__main__":
    main()
