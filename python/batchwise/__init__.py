"""batchwise from Python (docs/python.md).

In process, on your own model, optimizer, loss and data (the compiled engine, batchwise._engine):

    import batchwise
    report = batchwise.tune(model, optimizer, (x_train, y_train), memory_budget="2GiB")
    report.recommendation.batch, report.lr.lr, report.to_json(), report.html("tune.html")

fit, sweep, tune, noise and validate take the CLI's flags as options (memory_budget="256MiB",
batch_sizes=[...], epochs=10, lr_schedule="cosine", ...) and return a Report (batchwise._inprocess).
What follows is the other way, for code that cannot run in this process: the `--cmd` line protocol.

Under `batchwise fit|sweep|tune --cmd -- python train.py --batch-size {batch}`, batchwise runs the
script once per batch size with BATCHWISE_BATCH (the batch size) and BATCHWISE_STEPS (the step
lines it wants) in the environment, and reads `batchwise:` lines from its output. This module reads
those variables, prints one `batchwise: step samples=N loss=X` line per optimizer step, prints the
device's memory peak, and says when the steps asked for are done, so the script can stop. Run
without batchwise (neither variable set), every call here prints nothing and changes nothing.

The framework callbacks are one line each; each module imports its framework, so import only the
one you use:

    batchwise.lightning.BatchwiseCallback          Lightning (`lightning.pytorch`)
    batchwise.pytorch_lightning.BatchwiseCallback  the `pytorch_lightning` package
    batchwise.transformers.BatchwiseCallback       Hugging Face Trainer
    batchwise.keras.BatchwiseCallback              Keras 3 model.fit (torch, TensorFlow or JAX backend)

A plain PyTorch or Accelerate loop calls step() after each optimizer step:

    import batchwise
    batch = batchwise.batch_size(default=64)       # BATCHWISE_BATCH, or your default
    for x, y in loader:
        ...
        optimizer.step()
        if batchwise.step(samples=len(x), loss=loss):  # True once the steps asked for are done
            break
    batchwise.peak()                                # CUDA's peak, where there is one

Standard library only: the frameworks are imported by the callback modules, never here (torch,
TensorFlow and JAX are only looked at when the script has imported them already).
"""
import os
import sys

__version__ = "0.1.0"

#: The batch size of the trial (an integer >= 1), set by batchwise for the child command.
BATCH_VARIABLE = "BATCHWISE_BATCH"
#: The number of step lines batchwise wants (warm-up + measured steps), set with BATCH_VARIABLE.
STEPS_VARIABLE = "BATCHWISE_STEPS"

# (The engine's errors, batchwise.ConfigError and the rest, are attributes but not in __all__: a star import
# would load the compiled engine, which the --cmd helpers do without.)
__all__ = ["fit", "sweep", "tune", "noise", "validate", "Report", "TrainingError", "Interrupted", "BATCH_VARIABLE",
           "STEPS_VARIABLE", "BatchwiseError", "Reporter", "active", "batch_size", "device_peak_bytes", "done",
           "peak", "step", "steps"]


class BatchwiseError(ValueError):
    """A BATCHWISE_ variable holds something batchwise never writes there (not a whole number >= 1)."""


def _positive_int(name):
    """The variable's value as an int >= 1; None when it is not set. Raises BatchwiseError."""
    text = os.environ.get(name)
    if text is None:
        return None
    stripped = text.strip()
    if not stripped.isdigit() or not stripped.isascii() or int(stripped) < 1:
        raise BatchwiseError(
            f"{name}={text!r}: expected a whole number of at least 1 (batchwise sets it for each trial "
            f"of `--cmd`); unset {name} to train with the script's own value")
    return int(stripped)


def active():
    """Whether the script runs under batchwise (BATCHWISE_BATCH or BATCHWISE_STEPS is set)."""
    return BATCH_VARIABLE in os.environ or STEPS_VARIABLE in os.environ


def batch_size(default=None):
    """The batch size batchwise is trying (BATCHWISE_BATCH), or `default` when not run by batchwise.

    Raises BatchwiseError when the variable is set to anything but a whole number >= 1."""
    value = _positive_int(BATCH_VARIABLE)
    return default if value is None else value


def steps(default=None):
    """The optimizer steps batchwise wants (BATCHWISE_STEPS: warm-up + measured), or `default`.

    Raises BatchwiseError when the variable is set to anything but a whole number >= 1."""
    value = _positive_int(STEPS_VARIABLE)
    return default if value is None else value


def _rank_zero():
    # torchrun, Accelerate and Lightning's launchers set RANK; a single process has none.
    text = os.environ.get("RANK", "0").strip()
    return not text.isdigit() or int(text) == 0


def _synchronize():
    """Waits for the CUDA device, so a step line marks the end of the step's work, not of its launch."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def device_peak_bytes():
    """The largest device memory this process has held, in bytes, or None where nothing says.

    torch (CUDA): torch.cuda.max_memory_reserved(), the caching allocator's peak (what the process
    took from the device: allocated tensors plus the cache, so fragmentation counts), largest over
    the devices this process used. TensorFlow: get_memory_info()["peak"] of its GPUs. JAX: its GPU
    devices' peak_bytes_in_use. Only frameworks the script has imported already are asked; a CPU
    run gives None (batchwise measures the process's resident memory itself)."""
    peaks = []
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        peaks += [torch.cuda.max_memory_reserved(i) for i in range(torch.cuda.device_count())]
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            for device in tf.config.list_logical_devices("GPU"):
                peaks.append(tf.config.experimental.get_memory_info(device.name)["peak"])
        except (AttributeError, ValueError, RuntimeError):  # an old TensorFlow, or no memory info
            pass
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            for device in jax.local_devices():
                stats = device.memory_stats() if device.platform == "gpu" else None
                if stats and "peak_bytes_in_use" in stats:
                    peaks.append(stats["peak_bytes_in_use"])
        except (AttributeError, RuntimeError):
            pass
    peaks = [int(p) for p in peaks if p]
    return max(peaks) if peaks else None


def _batch_samples(batch):
    """Samples in a batch as a data loader gives it: the first dimension of its first array (one, or one
    inside a tuple, list, dict or dataclass: its own arrays first, then what its lists hold, in order); None where it
    has none, or that dimension is not a whole number (a symbolic one, as a compiled step traces). A list
    collated per sample counts its items: a batch that is a list of samples (dicts of one sample's values, or
    tuples holding one beside its arrays: collate_fn=list), and, in a batch holding no array of its own, a list holding anything
    but arrays (torchvision's detection batches: a tuple of images beside a tuple of target dicts) or arrays
    of different first dimensions (sequences of their own lengths). Lightning's batch from several loaders,
    a list of their batches, counts the first's. The framework callbacks' count."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) > 0 and shape[0] is not None else None
        except (TypeError, ValueError):
            return None
    from collections.abc import Mapping  # a dict, or a mapping such as the Trainer's BatchEncoding
    import dataclasses
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):  # a collate_fn's dataclass: its fields
        batch = [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    if isinstance(batch, (list, tuple)) and batch and all(_one_sample(item) for item in batch):
        return len(batch)  # samples as the dataset gave them (collate_fn=list): dicts or tuples of one sample each
    items = list(batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ())
    for item in items:  # the batch's own arrays first, then what its lists hold
        if getattr(item, "shape", None) is not None:
            samples = _batch_samples(item)
            if samples is not None:  # a 0-d value beside them is none
                return samples
    for item in items:
        if isinstance(item, (list, tuple)) and item and _per_sample(item):
            return len(item)
    for item in items:
        samples = _batch_samples(item)
        if samples is not None:
            return samples
    return None


def _one_sample(item):
    """Whether an item of a batch's list is one sample: a dict of one sample's values (_per_sample), or a tuple
    or list holding such a dict or a single value (a 0-d array, a number, a string) beside its arrays."""
    from collections.abc import Mapping
    if isinstance(item, Mapping):
        return _per_sample(item)
    if not isinstance(item, (list, tuple)):
        return False
    def single(x):  # a dict, a 0-d array, a number or a string: one sample's
        shape = getattr(x, "shape", None)
        return isinstance(x, Mapping) or (len(shape) == 0 if shape is not None else not isinstance(x, (list, tuple)))
    return any(single(x) for x in item)


def _per_sample(items):
    """Whether a list (or a dict's values) in a batch holds one sample's items: anything but arrays, or arrays
    whose first dimensions differ (fields of a batch share theirs: the batch)."""
    from collections.abc import Mapping
    firsts = set()
    mapping = isinstance(items, Mapping)
    for item in (items.values() if mapping else items):
        if mapping and isinstance(item, (list, tuple)):
            continue  # a batch's dict holds lists too (its texts): no sign either way
        shape = getattr(item, "shape", None)
        if shape is None or len(shape) == 0:  # not an array, or a 0-d one: a sample's value
            return True
        firsts.add(shape[0])
    return len(firsts) > 1


def _write(text):
    """Prints one protocol line on stdout, in one write() of the file descriptor.

    The line starts on a fresh line: a progress bar (tqdm writes `\\r` updates without a newline)
    may have left a partial line, and batchwise reads only lines that begin with `batchwise:`.
    Written to fd 1 directly, after flushing sys.stdout, so nothing can split it."""
    try:
        sys.stdout.flush()
    except (AttributeError, ValueError, OSError):
        pass
    data = ("\nbatchwise: " + text + "\n").encode()
    while data:
        data = data[os.write(1, data):]


class Reporter:
    """Step lines for one training run: counts optimizer steps and says when to stop.

    `main_process`: whether this process prints step lines (default: RANK is unset or 0); in a
    data-parallel run only rank 0 prints them, with the global batch as `samples`, and every rank
    counts steps so all stop together. Every process prints its own peak (batchwise keeps the
    largest). Reads and checks BATCHWISE_BATCH and BATCHWISE_STEPS when made (BatchwiseError).

    `name`: a callback's name, said as it is made (`batchwise: reporter=NAME`): a run of it that
    then reports no step trained nothing (only evaluation, or zero steps), and batchwise says so
    rather than timing it by its wall time."""

    def __init__(self, main_process=None, name=None):
        self.active = active()
        self.batch = batch_size()    # None when not run by batchwise
        self.steps = steps()         # None: no limit
        self.main_process = _rank_zero() if main_process is None else bool(main_process)
        if self.active and self.main_process and name:
            _write(f"reporter={name}")
        self.steps_done = 0

    def step(self, samples=None, loss=None, batch=None, uncounted=None):
        """Reports one optimizer step: `samples` in it (default: the batch size), its `loss` (a
        number or a tensor; optional) and `batch`, the batch its data loader gave this process
        (optional: batchwise then knows a step of `samples` did not train the batch it asked for
        unless one of the two is it). `uncounted`: the type of a batch whose samples a callback
        could not count, which batchwise names (it cannot check that step's batch). Returns True
        once the steps batchwise asked for are done, and always False when not run by batchwise,
        where it prints nothing."""
        if not self.active:
            return False
        self.steps_done += 1
        if self.main_process:
            _synchronize()
            words = ["step"]
            if samples is not None:
                words.append(f"samples={int(samples)}")
            if batch is not None:
                words.append(f"batch={int(batch)}")
            if uncounted:
                words.append("uncounted=" + "".join(c for c in str(uncounted) if c.isalnum() or c in "._")[:60])
            if loss is not None:
                words.append(f"loss={float(loss):.6g}")  # float() of a device tensor waits for it too
            _write(" ".join(words))
        return self.done()

    def done(self):
        """Whether the steps batchwise asked for are done (False when not run by batchwise)."""
        return self.active and self.steps is not None and self.steps_done >= self.steps

    def peak(self):
        """Prints `batchwise: peak_bytes=N` (device_peak_bytes()) when run by batchwise and there is
        a figure; nothing on CPU."""
        if not self.active:
            return
        value = device_peak_bytes()
        if value is not None:
            _write(f"peak_bytes={value}")


_default = None


def _reporter():
    global _default
    if _default is None:
        _default = Reporter()
    return _default


def step(samples=None, loss=None, batch=None):
    """Reports one optimizer step of this process's loop (see Reporter.step); True once the steps
    batchwise asked for are done: break out of the loop then. `batch`: the batch your loader gave
    (len of its inputs), so that batchwise knows a script that ignored {batch}."""
    return _reporter().step(samples, loss, batch=batch)


def done():
    """Whether this process's loop has reported the steps batchwise asked for."""
    return _reporter().done()


def peak():
    """Prints this process's device-memory peak for batchwise (see Reporter.peak); call it once,
    after the loop."""
    _reporter().peak()


def __getattr__(name):
    """fit, sweep, tune, noise, validate, Report, TrainingError, Interrupted and the engine's errors
    (ConfigError, DataError, ModelError, DeviceError), from batchwise._inprocess (imported on first use:
    the --cmd helpers above need neither torch nor the compiled engine)."""
    if name in ("fit", "sweep", "tune", "noise", "validate", "Report", "TrainingError", "Interrupted", "ConfigError",
                "DataError", "ModelError", "DeviceError"):
        from . import _inprocess
        return getattr(_inprocess, name)
    raise AttributeError(f"module 'batchwise' has no attribute {name!r}")
