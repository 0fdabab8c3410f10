"""batchwise in process: fit, sweep and tune run the C++ engine (batchwise._engine) on your own
torch.nn.Module, optimizer, loss and data, in this process. No TorchScript, no process per trial.

    import batchwise
    report = batchwise.tune(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                            (x_train, y_train), memory_budget="2GiB")
    report.recommendation.batch, report.lr.lr

Each trial is real training in this process: your model's forward and your loss through torch's
own Python bindings, backward, your optimizer's step; the engine times it and measures its memory
(on CPU an exact count of every tensor byte against the budget, on CUDA the caching allocator's
peaks), catches out of memory by type, and puts the model, the optimizer's state and torch's random
number generators back bit-identically after every trial.
"""
import contextlib
import copy
import difflib
import importlib.machinery
import importlib.util
import inspect
import io
import json
import numbers
import operator
import os
import random
import re
import sys
import threading

__all__ = ["fit", "sweep", "tune", "noise", "validate", "Report", "TrainingError", "Interrupted", "ConfigError",
           "DataError", "ModelError", "DeviceError"]


def __getattr__(name):
    """The engine's errors, as the calls raise them: ConfigError and DataError (ValueErrors: an option or
    the data refused), ModelError and DeviceError (RuntimeErrors: the model or the device failed)."""
    if name in ("ConfigError", "DataError", "ModelError", "DeviceError"):
        return getattr(_engine(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class TrainingError(RuntimeError):
    """Your model, loss or optimizer raised while batchwise trained it; the exception it raised is
    the cause (``__cause__``), with its traceback."""


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C stopped batchwise.validate after the step under way: ``.report`` holds the runs that
    had ended, judged among themselves (report.validation.interrupted, .not_trained: the run under
    way and those after it), with no batch recommended from a part of the grid. The model, its
    optimizer and the RNGs are as they were. A KeyboardInterrupt, so it ends a script as any Ctrl-C
    does; catch it to keep the runs. The other calls raise a plain KeyboardInterrupt."""


def _engine():
    """The compiled engine: batchwise/_engine*.so (pip install ./python), or the file BATCHWISE_ENGINE names."""
    engine = _load_engine()
    import torch
    if engine.torch_version != torch.__version__.split("+")[0]:
        raise ImportError(f"batchwise's engine was built against torch {engine.torch_version}, but this is torch "
                          f"{torch.__version__}; a LibTorch extension runs only with the torch it was built with: "
                          "rebuild it here with `pip install --no-build-isolation ./python`")
    return engine


def _load_engine():
    path = os.environ.get("BATCHWISE_ENGINE")
    if path:
        if "batchwise._engine" in sys.modules:
            return sys.modules["batchwise._engine"]
        import torch  # noqa: F401  (the engine links against torch's libraries; load them first)
        loader = importlib.machinery.ExtensionFileLoader("batchwise._engine", path)
        spec = importlib.util.spec_from_file_location("batchwise._engine", path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        sys.modules["batchwise._engine"] = module
        return module
    try:
        import torch  # noqa: F401
        from . import _engine as engine
    except ImportError as e:
        raise ImportError(
            f"batchwise's engine is not built ({e}); build it into the package with "
            "`pip install --no-build-isolation ./python` from a batchwise checkout (docs/python.md), or point "
            "BATCHWISE_ENGINE at a built _engine*.so") from None
    return engine


# ---- options -------------------------------------------------------------------------------------

def _is_bool(value):
    """A Python or NumPy bool (NumPy 2 names its type "bool", NumPy 1 "bool_")."""
    numpy = sys.modules.get("numpy")
    return isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_))


def _int(value):
    """A whole number: an int (not a bool: True is no batch size), a NumPy integer, or a float
    without a fraction (64.0, NumPy's too); 2.7 is refused, not cut to 2."""
    if _is_bool(value):
        raise TypeError(value)
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if isinstance(value, numbers.Real):
        if not float(value).is_integer():
            raise ValueError(value)
        return int(value)
    return operator.index(value)


_int.what = "whole number"


def _float(value):
    """A number (an int, a float, a NumPy number); not a bool, nor a string."""
    if _is_bool(value) or isinstance(value, (str, bytes)):
        raise TypeError(value)
    return float(value)


_float.what = "number"


def _bool(value):
    """True or False (a NumPy bool too); not a string: "false" would be true."""
    if _is_bool(value):
        return bool(value)
    raise TypeError(value)


_bool.what = "bool (True or False)"


def _sizes(value):
    if isinstance(value, str):  # "16,32,64" or a range, "16-4096*2", as the CLI's --batch-sizes reads them
        try:
            return list(_engine().parse_batch_sizes(value))
        except Exception as e:  # noqa: BLE001  (the engine's ConfigError, said as this option's)
            raise ValueError(str(e)) from None
    return [_int(v) for v in value]


_sizes.what = "list of batch sizes, or a string such as \"16,32,64\" or \"16-4096*2\""


def _phases(value):
    """A batch-size schedule: "64:0,256:2" (the CLI's spelling) or [(64, 0), (256, 2)]: batch 64
    from the start, 256 from epoch 2."""
    text = value if isinstance(value, str) else ",".join(f"{int(batch)}:{float(epoch):g}" for batch, epoch in value)
    if not text:  # refused as the CLI's --batch-schedule '' is, not ignored: leave it out for none
        raise ValueError("an empty schedule")
    return text


_phases.what = "batch-size schedule: \"64:0,256:2\" or [(64, 0), (256, 2)]"


# The options, named as the CLI's flags (--memory-budget is memory_budget=...), and what each takes.
_COMMON = {"device": str, "memory_budget": None, "target": _float, "trial_timeout": _float, "no_monitor": _bool,
           "seed": _int, "progress": None}
_FIT = {"min": _int, "max": _int, "multiple_of": _int, "mode": str, "fit_steps": _int, "warmup": _int}
_SWEEP = {"batch_sizes": _sizes, "steps": _int, "repetitions": _int, "min_time": _float, "warmup": _int}
_TUNE = {"no_noise": _bool, "noise_steps": _int, "no_race": _bool, "advice_budget": _float,
         "target_accuracy": _float, "target_loss": _float, "base_batch": _int, "epochs": _float, "lr_schedule": str,
         "held_out": None, "sweep_all": _bool}
_NOISE = {"batch": _int, "micro_batch": _int, "noise_steps": _int, "fixed_weights": _bool, "smoothing": _float}
_VALIDATE = {"batch_sizes": _sizes, "held_out": None, "target_accuracy": _float, "target_loss": _float,
             "epochs": _float, "lr_schedule": str, "batch_schedule": _phases, "max_epochs": _float,
             "max_seconds": _float, "eval_every": _int, "base_batch": _int, "held_out_samples": _int,
             "stop_slower_than": _float, "rule_lr": _bool}
_NUMBERS = (_int, _float)
# noise and validate run no trials: a trial's timeout and its utilisation sampling are no options of
# theirs (refused by name, as the CLI's noise and validate refuse --trial-timeout and --no-monitor).
_RUNS = {name: convert for name, convert in _COMMON.items() if name not in ("trial_timeout", "no_monitor")}
_OPTIONS = {"fit": {**_COMMON, **_FIT}, "sweep": {**_COMMON, **_SWEEP},
            "tune": {**_COMMON, **_FIT, **_SWEEP, **_TUNE}, "noise": {**_RUNS, **_NOISE},
            "validate": {**_RUNS, **_VALIDATE}}


def _check_names(command, given, prefix="batchwise"):
    """A misspelt option is named, with the nearest ones, before anything else is said of the call."""
    known = _OPTIONS[command]
    for name, value in given.items():
        if name not in known:
            near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            near += [k for k in known if k.split("_")[0] == name.split("_")[0] and k not in near]
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            shown = repr(value) if len(repr(value)) <= 60 else f"<{type(value).__name__}>"  # not a tensor's values
            raise TypeError(f"{prefix}.{command}: unknown option {name}={shown}{hint} "
                            f"(its options: {', '.join(sorted(known))})")


def _options(command, given):
    """Each option converted and bounded; its name was checked by _required, which every call runs first."""
    known = _OPTIONS[command]
    out = {}
    for name, value in given.items():
        convert = known[name]
        try:
            out[name] = value if convert is None or value is None else convert(value)
        except (TypeError, ValueError) as e:
            what = getattr(convert, "what", convert.__name__)
            why = f" ({e})" if convert is _sizes and isinstance(value, str) and str(e) else ""  # the engine's words
            raise TypeError(f"batchwise.{command}: {name}={value!r} is not a {what}{why}") from None
        # The CLI's bounds (its flag's), before anything runs: steps=0, max=2**40, epochs=0, seed=-1.
        if convert in _NUMBERS and out[name] is not None:
            why = _engine().out_of_bound("--" + name.replace("_", "-"), float(out[name]), f"{name}={value!r}")
            if why:
                raise ValueError(f"batchwise.{command}: {why}")
        if convert is _sizes:
            for size in out[name]:
                why = _engine().out_of_bound("--batch", float(size), f"batch size {size} in {name}")
                if why:
                    raise ValueError(f"batchwise.{command}: {why}")
    if out.get("seed") is not None and out["seed"] > 2 ** 64 - 1:
        raise ValueError(f"batchwise.{command}: seed={out['seed']}: must be at most {2 ** 64 - 1}")
    budget = out.get("memory_budget")
    if isinstance(budget, str):
        try:  # the engine's reading, the CLI's: "memory_budget: '0.4' is less than a byte; ..."
            out["memory_budget"] = _engine().parse_bytes(budget)
        except Exception as e:  # noqa: BLE001 - the engine's ConfigError, named for this call
            raise type(e)(f"batchwise.{command}: {e} (leave memory_budget out for the device's)") from None
    elif budget is not None:
        try:
            out["memory_budget"] = _int(budget)
        except (TypeError, ValueError):
            raise TypeError(f"batchwise.{command}: memory_budget={budget!r} is not a number of bytes nor a size "
                            "such as \"512MiB\"") from None
        if not 1 <= out["memory_budget"] <= 2 ** 62:
            raise ValueError(f"batchwise.{command}: memory_budget={budget!r}: must be a number of bytes from 1 to "
                             "2**62, or a size such as \"512MiB\" (leave it out for the device's)")
    schedule = out.get("lr_schedule")
    if schedule in ("cosine", "step") and not out.get("epochs"):
        raise ValueError(f"batchwise.{command}: lr_schedule={schedule!r}: a decaying rate decays over a run of "
                         "known length; give epochs=N")
    progress = out.get("progress", True)
    if progress is True:
        out["progress"] = lambda line: print(line, file=sys.stderr, flush=True)
    elif progress in (False, None):
        out["progress"] = None
    elif not callable(progress):
        raise TypeError(f"batchwise.{command}: progress={progress!r}: pass True (lines on stderr), False, or a "
                        "callable that takes each line")
    return out


# ---- data ----------------------------------------------------------------------------------------

class _Data:
    """A dataset held as two CPU tensors, inputs [N, ...] and targets [N] or [N, K], which the engine
    draws its batches from (as the CLI's built-in datasets)."""

    def __init__(self, name, inputs, targets, dtype=None):
        import torch
        if inputs.dtype == torch.uint8:
            inputs = inputs.float()  # the model gets what the user's loop would give it, not pixels /255
        if dtype is not None:  # floating values in the model's floating type (NumPy's float64, float32 weights)
            inputs = inputs.to(dtype) if inputs.is_floating_point() else inputs
            targets = targets.to(dtype) if targets.is_floating_point() else targets
        # an inference tensor (made under torch.inference_mode) cannot be saved for backward: a copy of it can
        inputs, targets = (t.clone() if t.is_inference() else t for t in (inputs, targets))
        self.name, self.inputs, self.targets = name, inputs.detach().cpu().contiguous(), targets.detach().cpu().contiguous()
        classes = not targets.is_floating_point()
        if classes:
            self.targets = self.targets.long()
        self.num_classes = int(self.targets.max()) + 1 if classes and len(self.targets) else 0


def _collated(dataset, collate, what):
    """A map-style dataset's samples, collated in chunks into (inputs, targets)."""
    import torch
    xs, ys = [], []
    for start in range(0, len(dataset), 1024):
        samples = [dataset[i] for i in range(start, min(start + 1024, len(dataset)))]  # its own errors as they are
        try:
            batch = collate(samples)
        except Exception as e:  # noqa: BLE001  (the collate's own error, named as the data's)
            raise TypeError(f"{what}: the {type(dataset).__name__}'s samples could not be collated "
                            f"({type(e).__name__}: {e}); pass (inputs, targets) tensors, a Dataset or a DataLoader "
                            "of (input, target) pairs") from e
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            sample = samples[0]
            if isinstance(sample, (tuple, list)) and len(sample) == 2:  # the pairs were; the collate_fn's batch is not
                raise TypeError(f"{what}: its collate_fn ({getattr(collate, '__name__', type(collate).__name__)}) "
                                f"gave a {type(batch).__name__}, not an (inputs, targets) pair; give a collate_fn "
                                "that returns (inputs, targets), or none")
            raise TypeError(f"{what}: each sample of the {type(dataset).__name__} must be an (input, target) pair, "
                            f"not a {type(sample).__name__}; pass (inputs, targets) tensors, a Dataset or a "
                            "DataLoader of such pairs"
                            + ("; samples of named fields (Hugging Face style) are for batchwise --cmd with the "
                               "Transformers callback (docs/cmd.md)" if isinstance(sample, dict) else ""))
        batch = list(batch)
        for k, part in enumerate(batch):
            # A collate_fn of the user's that gives one item a sample (labels as a list of numbers, inputs as a list of
            # equal-shaped tensors), as the data given whole may be: one tensor (they had been refused as "a int of")
            if isinstance(part, (tuple, list)) and len(part) == len(samples) and len(samples) > 0 \
                    and getattr(collate, "__name__", "") != "default_collate":
                if all(isinstance(v, numbers.Number) and not isinstance(v, bool) for v in part):
                    batch[k] = torch.as_tensor(part)
                elif all(isinstance(v, torch.Tensor) for v in part) and len({tuple(v.shape) for v in part}) == 1 \
                        and not all(v.dim() >= 1 and v.shape[0] == len(samples) for v in part):  # a batch transposed
                    batch[k] = torch.stack(part)
        for k, name in ((0, "input"), (1, "target")):
            part = batch[k]
            if isinstance(part, (tuple, list, dict)):  # several tensors: torch.as_tensor's own error named nothing
                own = samples[0][k] if isinstance(samples[0], (tuple, list)) and len(samples[0]) == 2 else part
                if isinstance(own, (tuple, list)) and all(isinstance(v, (int, float)) for v in own):
                    raise TypeError(f"{what}: each sample's {name} is a {type(own).__name__} of {len(own)} numbers, "
                                    f"where batchwise feeds the model one {name} tensor; return it as a tensor "
                                    "(torch.tensor(...) in __getitem__)")
                raise TypeError(f"{what}: each sample's {name} is a {type(own).__name__} of "
                                f"{len(part)}, where batchwise feeds the model one {name} tensor; stack them into "
                                "one tensor (and split it in the model's forward), or tune your own training script "
                                "with batchwise --cmd (docs/cmd.md)")
        xs.append(torch.as_tensor(batch[0]))
        ys.append(torch.as_tensor(batch[1]))
    try:
        return torch.cat(xs), torch.cat(ys)
    except RuntimeError:  # a collate that pads each chunk to its own longest sample: all of them at once
        if len(xs) == 1:
            raise
        return _collated_whole(dataset, collate, what)


def _collated_whole(dataset, collate, what):
    """_collated in one chunk: a padding collate_fn pads every sample to the same width."""
    import torch
    samples = [dataset[i] for i in range(len(dataset))]
    try:
        x, y = collate(samples)
        return torch.as_tensor(x), torch.as_tensor(y)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"{what}: the {type(dataset).__name__}'s samples could not be collated "
                        f"({type(e).__name__}: {e}); pass (inputs, targets) tensors, a Dataset or a DataLoader "
                        "of (input, target) pairs") from e


def _from_numpy(array):
    """A NumPy array as a tensor, of its own type (_Data gives floating values the model's)."""
    import torch
    return torch.as_tensor(array.__array__())


def _drawn(loader, dataset):
    """The indices a DataLoader's sampler draws from its dataset, where they are not every sample once
    (a SubsetRandomSampler's split, a WeightedRandomSampler's draw, a DistributedSampler's shard), in
    the order drawn; None where they are (its sequential or shuffling sampler over the whole set). A
    batch_sampler=BatchSampler(sampler) is read through its sampler; a sampler that never ends is read
    for one epoch of the dataset."""
    import itertools
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler
    batches = loader.batch_sampler
    if batches is not None and type(batches) is not BatchSampler:  # a batch_sampler of the user's own
        count = len(batches) if hasattr(batches, "__len__") else len(dataset)
        return _kept_generator([batches, getattr(batches, "sampler", None)], lambda: [
            int(i) for batch in itertools.islice(batches, count) for i in batch])
    sampler = batches.sampler if batches is not None else loader.sampler
    if type(sampler) is SequentialSampler:
        return None
    if type(sampler) is RandomSampler and not sampler.replacement and sampler.num_samples == len(dataset):
        return None
    count = len(sampler) if hasattr(sampler, "__len__") else len(dataset)
    return _kept_generator([sampler], lambda: [int(i) for i in itertools.islice(sampler, count)])


def _kept_generator(samplers, draw):
    """draw(), with each sampler's draw state put back after, so that the user's next epoch draws what it would
    have: its attributes that are generators (torch's, NumPy's Generator and RandomState, a random.Random), their
    state, and its plain numbers and strings (an epoch count its __iter__ advances). A batch sampler's own had been
    left advanced where only its inner sampler's torch generator was kept."""
    kept = []
    for sampler in samplers:
        try:
            attributes = list(vars(sampler).items())
        except TypeError:  # None, or an object without a __dict__
            continue
        for name, value in attributes:
            if name in ("data_source", "dataset", "sampler"):  # what it draws from, not its draw's state
                continue
            if isinstance(value, (bool, int, float, str)):
                kept.append((sampler, name, value, None))
            elif isinstance(value, list) and len(value) <= 1 << 20:  # an order it keeps (a permutation and a position)
                kept.append((sampler, name, value, ("list", list(value))))
            elif isinstance(value, random.Random):
                kept.append((sampler, name, value, value.getstate()))
            elif hasattr(value, "bit_generator"):  # numpy.random.Generator
                kept.append((sampler, name, value, copy.deepcopy(value.bit_generator.state)))
            elif hasattr(value, "get_state") and hasattr(value, "set_state"):  # torch.Generator, numpy RandomState
                kept.append((sampler, name, value, value.get_state()))
    try:
        return draw()
    finally:
        for sampler, name, value, state in kept:
            setattr(sampler, name, value)
            if isinstance(state, tuple) and len(state) == 2 and state[0] == "list":
                value[:] = state[1]
            elif isinstance(value, random.Random):
                value.setstate(state)
            elif hasattr(value, "bit_generator"):
                value.bit_generator.state = state
            elif state is not None:
                value.set_state(state)


def _load_keeping_groups(optimizer, state_dict):
    """optimizer.load_state_dict(state_dict), its param_groups list, each group's dict, its state dict and each
    parameter's state dict in it the very objects they were: torch's makes new ones, and a handle the user kept on
    a group (to unfreeze a backbone) or on a parameter's state, or a wrapper sharing the list or the state
    (ZeroRedundancyOptimizer's, Lookahead's), had been cut off from the optimizer the call returned. Each state tensor keeps the type it was saved in: torch's load casts floating state
    to its parameter's type (a bfloat16 model's float32 momentum had come back bfloat16, rounded)."""
    import torch
    groups, dicts, state = optimizer.param_groups, list(optimizer.param_groups), optimizer.state
    per_parameter = dict(state)  # each parameter's state dict, put back below as the object it was
    optimizer.load_state_dict(state_dict)
    saved_ids = [i for g in state_dict.get("param_groups", []) for i in g.get("params", [])]
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for index, param in zip(saved_ids, params):
        saved, loaded = state_dict.get("state", {}).get(index), optimizer.state.get(param)
        if not isinstance(saved, dict) or not isinstance(loaded, dict):
            continue
        for key, value in saved.items():
            now = loaded.get(key)
            if isinstance(value, torch.Tensor) and isinstance(now, torch.Tensor) and now.dtype != value.dtype:
                loaded[key] = value.to(device=now.device)
    for param, loaded in list(optimizer.state.items()):
        mine = per_parameter.get(param)
        if isinstance(mine, dict) and isinstance(loaded, dict) and mine is not loaded:
            values = dict(loaded)
            mine.clear()
            mine.update(values)
            optimizer.state[param] = mine
    if optimizer.state is not state:
        loaded = dict(optimizer.state)
        state.clear()
        state.update(loaded)
        optimizer.state = state
    if optimizer.param_groups is groups or len(optimizer.param_groups) != len(dicts):
        return
    for mine, loaded in zip(dicts, optimizer.param_groups):
        if mine is not loaded:
            values = dict(loaded)
            mine.clear()
            mine.update(values)
    groups[:] = dicts
    optimizer.param_groups = groups


def _data(data, what, dtype=None):
    """(inputs, targets) tensors, a TensorDataset, a map-style Dataset, or a DataLoader over one; their
    floating values in `dtype`, the model's, where given."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset, Subset, TensorDataset
    from torch.utils.data.dataloader import default_collate, default_convert
    def array(t):  # a tensor, or a NumPy array (anything with __array__) as one
        return isinstance(t, torch.Tensor) or (hasattr(t, "__array__") and hasattr(t, "shape") and len(t.shape) > 0)

    if isinstance(data, dict):
        raise TypeError(f"{what}: a dict (keys {', '.join(repr(k) for k in list(data)[:4])}); pass (inputs, targets) "
                        "tensors, a Dataset or a DataLoader")
    if isinstance(data, (tuple, list)) and len(data) == 2 and any(getattr(t, "shape", None) == () for t in data):
        kind = "inputs" if getattr(data[0], "shape", None) == () else "targets"  # a NumPy scalar array too
        raise ValueError(f"{what}: the {kind} are a 0-d tensor (one number); pass tensors whose first dimension "
                         "counts the samples")
    if isinstance(data, (tuple, list)) and len(data) != 2 and data and all(array(t) for t in data):
        raise TypeError(f"{what}: a {type(data).__name__} of {len(data)} arrays; pass two, (inputs, targets)")
    def one_kind(t):  # a list of numbers, of lists or of tensors alike: one side of (inputs, targets)
        kinds = {"number" if isinstance(e, numbers.Number) else "array" if array(e) else
                 "list" if isinstance(e, (list, tuple)) else type(e).__name__ for e in t}
        return len(kinds) <= 1
    def listed_pair(d):  # (inputs, targets) as lists; a sample (input, target[, ...]) mixes kinds, two such are two long
        return (all(isinstance(t, (list, tuple)) for t in d) and not len(d[0]) == len(d[1]) == 2 and
                all(one_kind(t) for t in d))
    if (isinstance(data, (tuple, list)) and len(data) == 2 and
            ((any(array(t) for t in data) and all(array(t) or isinstance(t, (list, tuple)) for t in data)) or
             listed_pair(data))):
        # targets (or inputs) as a Python list beside a tensor, or both as lists: a list of labels is read as
        # torch.as_tensor reads it, a list of tensors stacked (the pair had been taken for a dataset of two samples,
        # and its collation failed)
        def listed(t, kind, beside):
            if (t and len(t) != len(beside) and  # several inputs, each of the other side's samples
                    all(array(e) and len(e.shape) > 0 and e.shape[0] == len(beside) for e in t)):
                arrays = "tensors" if all(isinstance(e, torch.Tensor) for e in t) else "arrays"
                raise TypeError(f"{what}: the {kind} are a {type(t).__name__} of {len(t)} {arrays} beside "
                                f"{len(beside)} samples, where batchwise feeds the model one {kind[:-1]} tensor; stack "
                                "them into one tensor (and split it in the model's forward), or tune your own training "
                                "script with batchwise --cmd (docs/cmd.md)")
            try:
                if t and all(array(e) for e in t):  # NumPy's too (torch.as_tensor warns that a list of them is slow)
                    return torch.stack([e if isinstance(e, torch.Tensor) else _from_numpy(e) for e in t])
                return torch.as_tensor(t)
            except (TypeError, ValueError, RuntimeError) as e:
                raise TypeError(f"{what}: the {kind} are a {type(t).__name__} that is no tensor ({e}); pass a tensor, "
                                "a list of numbers, or a list of tensors of one shape") from None
        data = tuple(t if array(t) else listed(t, kind, beside)
                     for t, kind, beside in zip(data, ("inputs", "targets"), (data[1], data[0])))
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(array(t) for t in data):
        x, y = (t if isinstance(t, torch.Tensor) else _from_numpy(t) for t in data)
        name = f"{'tensors' if isinstance(data[0], torch.Tensor) else 'arrays'} {list(x.shape)}"
    elif isinstance(data, DataLoader) or isinstance(data, TensorDataset) or hasattr(data, "__getitem__"):
        collate = data.collate_fn if isinstance(data, DataLoader) else default_collate
        dataset = data.dataset if isinstance(data, DataLoader) else data
        if collate is default_convert:  # batch_size=None: the loader's converts samples one by one; batchwise batches
            first = dataset[0] if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and len(dataset) \
                else None  # them (it had refused them, naming a collate_fn the user never gave), unless each is a batch
            if isinstance(first, (tuple, list)) and len(first) == 2 and all(isinstance(t, torch.Tensor) for t in first) \
                    and first[0].dim() >= 1 and first[1].dim() >= 1 and first[0].shape[0] == first[1].shape[0] > 1:
                raise TypeError(f"{what}: each item of the {type(dataset).__name__} is a batch of {first[0].shape[0]} "
                                "(a loader of batch_size=None); batchwise draws batches of every size from single "
                                "samples: give a dataset of (input, target) samples")
            collate = default_collate
        if isinstance(dataset, IterableDataset) or not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(f"{what}: {type(dataset).__name__} is an iterable dataset; batchwise draws batches of "
                            "every size from a map-style dataset (with __len__ and __getitem__) or tensors")
        indices = _drawn(data, dataset) if isinstance(data, DataLoader) else None
        if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2 and collate in (default_collate,
                                                                                            default_convert):
            x, y = dataset.tensors  # a loader's own collate_fn is used, below, as for any dataset
            if indices is not None:
                x, y = x[indices], y[indices]
        else:
            try:
                x, y = _collated(Subset(dataset, indices) if indices is not None else dataset, collate, what)
            except TypeError as e:
                if isinstance(data, (tuple, list)) and len(data) == 2 and all(  # lists of two alike: two samples
                        isinstance(t, (list, tuple)) and len(t) == 2 and one_kind(t) for t in data):
                    raise TypeError(f"{e} (a pair of two-item lists is read as a dataset of two samples; pass "
                                    "(inputs, targets) as tensors)") from None
                raise
        name = f"{type(dataset).__name__} ({len(x)} samples{', as its loader samples them' if indices else ''})"
    else:
        raise TypeError(f"{what}: a {type(data).__name__}; pass (inputs, targets) tensors, a Dataset or a DataLoader")
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"{what}: {len(x)} inputs and {len(y)} targets; they must be as many, and more than none")
    for kind, t in (("inputs", x), ("targets", y)):  # copying one out had raised torch's NotImplementedError
        if t.device.type == "meta":
            raise ValueError(f"{what}: the {kind} are on the 'meta' device, which holds shapes and no values; pass "
                             "tensors with values (on 'cpu' or 'cuda')")
    return _engine().untracked(lambda: _Data(name, x, y, dtype))



# ---- the adapter the engine calls ----------------------------------------------------------------

_OPTIMIZER_KINDS = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw"}


def _mse(output, target):
    """The default loss for value targets: mean squared error, of an output as many values as its
    target (a [N, 1] output beside [N] targets is compared value by value, not broadcast to [N, N])."""
    import torch
    if output.shape != target.shape:
        if output.numel() != target.numel():
            labels = (output.dim() == 2 and output.shape[1] > 1 and target.dim() == 1 and target.is_floating_point()
                      and bool((target == target.round()).all()))
            raise ValueError(f"the model gives {list(output.shape)} for targets of {list(target.shape)}: mean "
                             "squared error needs as many outputs as target values; pass loss=... for another "
                             "comparison" + ("; the targets are whole numbers in a floating type: class labels? "
                                             "pass them as integers (y.long()), which cross-entropy trains on"
                                             if labels else ""))
        target = target.reshape(output.shape)
    return torch.nn.functional.mse_loss(output, target)


def _one_number(loss):
    """The loss, where it is one number. One a sample (reduction="none") is refused as the user's own error,
    which ends the call at its first trial: it backpropagates at batch 1 alone, and a fit whose larger batches
    had failed on it answered 1."""
    numel = getattr(loss, "numel", None)
    if numel is not None and numel() != 1:
        raise ValueError(f"it gave a tensor of shape {list(loss.shape)}, not one number: reduce it (its .mean(), or "
                         "the loss's reduction='mean')")
    return loss


class _Adapter:
    """The model, optimizer, loss and data as the engine (python/src/engine.cpp) calls them."""

    _default_loss_labels = True  # the default cross-entropy reads labels as a column ([N, 1]) as [N]

    def __init__(self, command, model, optimizer, data, loss, options, data_what="data", held_out_what="held_out"):
        import torch
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"batchwise.{command}: model is a {type(model).__name__}, not a torch.nn.Module")
        self.model = model
        parameters = list(model.parameters())
        if not any(p.requires_grad for p in parameters):
            raise ValueError(f"batchwise.{command}: {type(model).__name__} has no trainable parameters")
        if isinstance(optimizer, torch.optim.Optimizer):
            self.optimizer = optimizer
        elif callable(optimizer):
            self.optimizer = optimizer(model.parameters())
            if not isinstance(self.optimizer, torch.optim.Optimizer):
                raise TypeError(f"batchwise.{command}: optimizer(model.parameters()) returned a "
                                f"{type(self.optimizer).__name__}, not a torch.optim.Optimizer")
        else:
            raise TypeError(f"batchwise.{command}: optimizer is a {type(optimizer).__name__}; pass a torch.optim "
                            "optimizer over the model's parameters, or a function of the parameters that makes one")
        owned = {id(p) for p in parameters}
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in owned:
                    raise ValueError(f"batchwise.{command}: the optimizer holds a tensor that is not a parameter of "
                                     f"{type(model).__name__}; make it over model.parameters()")
        if not any(p.requires_grad for group in self.optimizer.param_groups for p in group["params"]):
            raise ValueError(f"batchwise.{command}: the optimizer holds no parameter that requires grad, so its steps "
                             f"would change nothing of {type(model).__name__}; make it over the trainable ones "
                             "(model.parameters())")
        if any(p.is_meta for p in parameters):
            raise ValueError(f"batchwise.{command}: {type(model).__name__}'s parameters are on the meta device, "
                             "shapes without values, which cannot train; materialise them first "
                             "(model.to_empty(device='cpu'), then initialise or load the weights)")
        lazy = [n for n, p in model.named_parameters() if isinstance(p, torch.nn.parameter.UninitializedParameter)]
        if lazy:  # the probe's forward had shaped and initialised them, drawing from the RNGs it then put back
            raise ValueError(f"batchwise.{command}: {type(model).__name__}'s {lazy[0]} is a lazy module's parameter "
                             "not shaped yet (LazyLinear and the others shape theirs at their first forward); run "
                             "one forward first, model(inputs[:2]), then make the optimizer over its parameters")
        sparse = [n for n, m in model.named_modules()
                  if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse and m.weight.requires_grad]
        if sparse or any(p.grad is not None and p.grad.is_sparse for p in parameters):
            where = f"{sparse[0] or 'the model'} (sparse=True)" if sparse else "a parameter's sparse gradient"
            raise ValueError(f"batchwise.{command}: {type(model).__name__}: {where}: sparse gradients are not "
                             "supported (their memory and state are not counted as a dense tensor's); make it with "
                             "sparse=False, which trains to the same weights with a dense gradient")
        try:
            closure = inspect.signature(self.optimizer.step).parameters.get("closure")
        except (TypeError, ValueError):  # a step without a signature to read: it is called as any other
            closure = None
        if closure is not None and closure.default is inspect.Parameter.empty:
            raise ValueError(f"batchwise.{command}: {type(self.optimizer).__name__}'s step() needs a closure that "
                             "evaluates the model again (L-BFGS: up to max_iter forwards and backwards a step); "
                             "batchwise measures one forward, backward and step() a batch, so it cannot measure that "
                             "training; pass an optimizer whose step() takes none (SGD, Adam, AdamW, ...)")
        given = options.get("device")
        try:  # "auto", as the CLI's default: where the model is
            device = torch.device(given if given not in (None, "auto") else
                                  (parameters[0].device if parameters else "cpu"))
        except RuntimeError:
            raise ValueError(f"batchwise.{command}: device={given!r} is not a device; give 'cpu', 'cuda', 'cuda:N' "
                             "or 'auto'") from None
        if device.type not in ("cpu", "cuda"):  # 'meta' holds no values; the engine trains on a CPU or CUDA
            raise ValueError(f"batchwise.{command}: device={given!r}: batchwise trains on 'cpu' or 'cuda' "
                             f"('{device.type}' is not one); give 'cpu', 'cuda', 'cuda:N' or 'auto'")
        if device.type == "cuda" and device.index is None and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())  # "cuda" is the current one, as model.cuda()'s
        for p in parameters:
            if p.device != device:
                raise ValueError(f"batchwise.{command}: {type(model).__name__} has a parameter on {p.device}, but "
                                 f"the trials run on {device}; move the model with model.to('{device}')")
        self.device = str(device)
        # The model's floating type, which floating data takes: its first floating parameter that the optimizer
        # trains (a frozen bf16 teacher declared ahead of a float32 model had turned its data bf16, and the model
        # refused it), else its first floating parameter's
        trained = {id(p) for group in getattr(self.optimizer, "param_groups", ()) for p in group.get("params", ())}
        floating = [p for p in parameters if p.is_floating_point()]
        dtype = next((p.dtype for p in floating if p.requires_grad and id(p) in trained),
                     floating[0].dtype if floating else None)
        self.data = _data(data, f"batchwise.{command}: {data_what}", dtype)
        held_out = options.get("held_out")
        self.held_out = _data(held_out, f"batchwise.{command}: {held_out_what}", dtype) if held_out is not None else None
        # Class labels coded as whole floats beside the training data's integers: the loss had raised torch's "expected
        # target dtype to be Long" from the first evaluation, with no fix
        if self.held_out is not None and self.data.num_classes > 0 and self.held_out.targets.is_floating_point() \
                and self.held_out.targets.dim() == self.data.targets.dim() \
                and bool((self.held_out.targets == self.held_out.targets.round()).all()):
            raise TypeError(f"batchwise.{command}: {held_out_what}: its targets are whole numbers in a floating type, "
                            "where the training data's are class labels (integers); pass them as integers too "
                            "(y.long())")
        self.model_name = type(model).__name__
        self.optimizer_name = type(self.optimizer).__name__
        self.optimizer_kind = _OPTIMIZER_KINDS.get(self.optimizer_name, self.optimizer_name)
        self.seed = int(options.get("seed") or 0)
        if loss is None:
            classes = self.data.num_classes > 0
            self._loss = torch.nn.functional.cross_entropy if classes else _mse
            self.loss_name = "cross-entropy" if classes else "mse"
            for part in (self.data, self.held_out) if classes and self._default_loss_labels else ():
                if part is not None and part.targets.dim() == 2 and part.targets.shape[1] == 1:
                    part.targets = part.targets.reshape(-1)  # labels as a column ([N, 1]): one a sample, for it
        elif isinstance(loss, type):  # the class, not one: calling it made a module of the output as its options
            raise TypeError(f"batchwise.{command}: loss is the class {loss.__name__}, not a loss; pass an instance, "
                            f"{loss.__module__.replace('torch.nn.modules.loss', 'torch.nn')}.{loss.__name__}()")
        elif callable(loss):
            self._loss = loss
            self.loss_name = getattr(loss, "__name__", type(loss).__name__)
        else:
            raise TypeError(f"batchwise.{command}: loss is a {type(loss).__name__}; pass a function of (output, "
                            "target), such as torch.nn.CrossEntropyLoss(), or None")
        # A loss of torch's that reads the output's column at each class label: labels it has no column
        # for are refused before anything trains (the engine's probe_labels), but the one it skips.
        functional = (torch.nn.functional.cross_entropy, torch.nn.functional.nll_loss)
        self.cross_entropy_ignore_index = (
            self._loss.ignore_index if isinstance(self._loss, (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss))
            else -100 if any(self._loss is f for f in functional) else None)
        self._modes = [m.training for m in model.modules()]
        # Each module's own parameter and buffer objects (None where one is registered empty): a forward
        # that assigns a new tensor to a buffer (self.ema = 0.9 * self.ema + ...) swaps the object, and
        # the engine restores the objects it was given; they are put back in their seats with the state.
        self._seats = [(m, kind, name, t) for m in model.modules() for kind in ("_parameters", "_buffers")
                       for name, t in getattr(m, kind).items() if t is not None]  # one filled lazily stays
        # ... through the call (the engine's saved state does not hold it), and is emptied again at its end: a buffer
        # registered as None that a forward fills from its batch had kept a trial batch's values, and the user's
        # state_dict a key it had not had
        self._empty = [(m, kind, name) for m in model.modules() for kind in ("_parameters", "_buffers")
                       for name, t in getattr(m, kind).items() if t is None]
        self._tensor = torch.Tensor
        # BatchNorm that trains (normalises over the batch): a frozen one (eval, in a model in training mode) keeps
        # its running statistics, as train() below leaves it
        self.batchnorm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and (m.training or not model.training)
                             for m in model.modules())

    # What the engine calls.
    def parameters(self):
        return list(self.model.named_parameters())

    def buffers(self):
        return [(n, b) for n, b in self.model.named_buffers() if b is not None]

    def training(self):
        return self.model.training

    def forward(self, x):
        out = self.model(x)
        if isinstance(out, self._tensor):  # the common case first: one check a step
            return out
        if hasattr(out, "logits"):
            out = out.logits
        elif isinstance(out, dict) and "logits" in out:
            out = out["logits"]
        elif isinstance(out, (tuple, list)) and out:
            out = out[0]
        return out

    def train(self, on):
        if on and self._modes[0]:  # back to the modes it came with (a frozen BatchNorm stays frozen)
            for module, mode in zip(self.model.modules(), self._modes):
                module.training = mode
        else:
            self.model.train(on)

    def loss(self, output, target):
        return _one_number(self._loss(output, target))

    def step(self):
        self.optimizer.step()

    def get_lr(self, group):
        return float(self.optimizer.param_groups[group]["lr"])

    def set_lr(self, group, lr):
        self.optimizer.param_groups[group]["lr"] = lr

    def optimizer_settings(self, group):
        """The group's (momentum, beta1, beta2, eps, weight_decay), 0 where it has none: the run plan
        says the user's, not the defaults of an optimizer of that name."""
        g = self.optimizer.param_groups[group]

        def number(value):  # 0 for what is not one number (Adafactor's eps is a pair)
            try:
                return float(value or 0.0)
            except (TypeError, ValueError):
                return 0.0
        betas = g.get("betas")
        beta1, beta2 = (betas[0], betas[1]) if isinstance(betas, (tuple, list)) and len(betas) == 2 else (0, 0)
        return (number(g.get("momentum")), number(beta1), number(beta2), number(g.get("eps")),
                number(g.get("weight_decay")))

    def reference_group(self):
        """The group whose rate is the engine's: the first whose lr is above 0 (a frozen group ahead of
        the trained ones leaves theirs), else the first."""
        for i, g in enumerate(self.optimizer.param_groups):
            if 0 < float(g["lr"]) < float("inf"):  # as the engine's reference_group (src/engine/workload.cpp)
                return i
        return 0

    def optimizer_groups(self):
        return [list(g["params"]) for g in self.optimizer.param_groups]

    def optimizer_state_bytes(self):
        import torch
        # a value under a key of its own (torch keeps one that is no parameter's) is no per-parameter dict
        return sum(v.nbytes for state in self.optimizer.state.values()
                   for v in (state.values() if isinstance(state, dict) else [state]) if isinstance(v, torch.Tensor))

    def save_optimizer(self):
        import torch
        buffer = io.BytesIO()
        torch.save(self.optimizer.state_dict(), buffer)
        return buffer.getvalue()

    def load_optimizer(self, data):
        import torch
        _load_keeping_groups(self.optimizer, torch.load(io.BytesIO(data), weights_only=False))
        self.reseat()  # the engine restores the state after every trial, the optimizer's with it

    def reseat(self):
        """Every parameter and buffer object back in the module that held it when the call began."""
        for module, kind, name, tensor in self._seats:
            seats = getattr(module, kind)
            if seats.get(name) is not tensor:
                seats[name] = tensor

    # Around the engine call.
    def count_the_state(self):
        """On CPU: the model's tensors, its gradients and the optimizer's state moved into memory the
        engine counts (made before the engine was loaded, they were not), so the budget holds them
        as it holds a built-in model's. Values, Parameter objects and the optimizer are unchanged; the
        tensors' own storage comes back after the call (return_the_storage)."""
        import torch
        self._own_storage = []
        if torch.device(self.device).type != "cpu":
            return
        def kept(tensor):  # only storage that is more than this tensor's: else it is freed, as it was
            if tensor is None or not (tensor.is_shared() or tensor.untyped_storage().nbytes() > tensor.nbytes):
                return None
            return tensor
        with torch.no_grad():
            for t in list(self.model.parameters()) + [b for _, b in self.buffers()]:
                data, grad = kept(t.data), kept(t.grad)
                if data is not None or grad is not None:
                    self._own_storage.append((t, data, grad))
                t.data = t.data.clone()
                if t.grad is not None:
                    t.grad = t.grad.clone()
        if self.optimizer.state:
            _load_keeping_groups(self.optimizer, copy.deepcopy(self.optimizer.state_dict()))

    def return_the_storage(self):
        """Each tensor's own storage back where it was shared or part of a larger one, holding the values the call
        left in the counted copy: a model in shared memory (model.share_memory(), trained by other processes too)
        had been left in memory of the call's, unshared, and parameters that were views of one flat tensor no
        longer were. (Other storage is not kept through the call: the host would hold the model twice.)"""
        import torch
        with torch.no_grad():
            for t, data, grad in getattr(self, "_own_storage", []):
                if data is not None and t.data.shape == data.shape and t.data.dtype == data.dtype:
                    data.copy_(t.data)
                    t.data = data
                if grad is not None and t.grad is not None and t.grad.shape == grad.shape \
                        and t.grad.dtype == grad.dtype:
                    grad.copy_(t.grad)
                    t.grad = grad
        self._own_storage = []

    def restore_modes(self):
        self.reseat()
        for module, kind, name in self._empty:
            getattr(module, kind)[name] = None
        for module, mode in zip(self.model.modules(), self._modes):
            module.training = mode


class _StepAdapter(_Adapter):
    """A LightningModule: its training_step((x, y), 0) is the forward and the loss of a training
    step; in evaluation its forward gives the logits (accuracy) and training_step the loss. Its
    self.log calls without a Trainer are left silent."""

    _default_loss_labels = False  # training_step takes the labels as its DataLoader gives them

    def __init__(self, command, module, optimizer, data, options, data_what="data", held_out_what="held_out"):
        super().__init__(command, module, optimizer, data, None, options, data_what, held_out_what)
        import lightning.pytorch as L
        self.has_forward = any("forward" in vars(c) for c in type(module).__mro__[:type(module).__mro__.index(
            L.LightningModule)])
        if not self.has_forward:
            self.data.num_classes = 0  # no logits to score: the held-out loss alone
            if self.held_out is not None:
                self.held_out.num_classes = 0
        self.loss_name = f"{type(module).__name__}.training_step"
        self.loss_where = self.loss_name  # what the engine names where it raised, as Lightning's own hook
        import inspect
        try:  # training_step(self, batch) is Lightning's too: batch_idx only where it takes one
            parameters = inspect.signature(module.training_step).parameters.values()
            parameters = list(parameters)
            self._batch_idx = any(p.kind == p.VAR_POSITIONAL for p in parameters) or sum(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters) >= 2
        except (TypeError, ValueError):
            self._batch_idx = True
        self.cross_entropy_ignore_index = None  # training_step's own loss, whatever it reads
        self._x = None

    def forward(self, x):
        self._x = x
        if not self.model.training and self.has_forward:
            return super().forward(x)
        return x.new_zeros(x.shape[:1])  # training_step computes the forward, in loss()

    def loss(self, output, target):
        import warnings
        x, self._x = self._x, None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = self.model.training_step((x, target), 0) if self._batch_idx else self.model.training_step((x, target))
        if isinstance(out, dict):
            if "loss" not in out:
                raise TypeError(f"it returned a dict without 'loss' (keys {', '.join(map(repr, out))}); return the "
                                "loss, or {'loss': loss, ...}")
            out = out["loss"]
        if out is None:
            raise TypeError("it returned None (a step skipped?); batchwise trains every step: return the loss")
        return _one_number(out)


def _overridden(obj, name, base):
    """Whether `obj` defines `name` itself, on its class or on itself (LightningDataModule.from_datasets sets
    its loaders on the instance), rather than inheriting `base`'s (Lightning's default hooks raise "must be
    implemented")."""
    return name in vars(obj) or getattr(type(obj), name, None) is not getattr(base, name, None)


def lightning_parts(module, datamodule, command):
    """The optimizer (the one configure_optimizers gives, at the module's own rate), the training data and
    the validation data (None where there is none) of a LightningModule and its DataModule, or of a
    LightningModule and the training data given as trainer.fit's second argument (a DataLoader)."""
    import lightning.pytorch as L
    where = f"batchwise.lightning.{command}"
    name = type(module).__name__
    if not isinstance(module, L.LightningModule):
        raise TypeError(f"{where}: {name} is a {'torch.nn.Module' if hasattr(module, 'parameters') else 'plain object'}"
                        ", not a LightningModule; pass a plain model to batchwise.fit / sweep / tune with its "
                        "optimizer and data")
    if not module.automatic_optimization:
        raise TypeError(f"{where}: {name} uses manual optimization (automatic_optimization = False): its "
                        "training_step steps its optimizers itself, which batchwise cannot time step by step in "
                        "process; measure it with `batchwise tune --cmd` and batchwise.lightning.BatchwiseCallback")
    if not any(True for _ in module.parameters()) and _overridden(module, "configure_model", L.LightningModule):
        raise ValueError(f"{where}: {name} has no parameters yet: its layers are built in configure_model(), "
                         "which a Trainer calls; call module.configure_model() first")
    try:
        optim = module.configure_optimizers()
    except Exception as e:  # noqa: BLE001  (most often self.trainer, which is there only under a Trainer)
        raise TypeError(f"{where}: {name}.configure_optimizers() raised {type(e).__name__}: {e} (batchwise calls it "
                        "without a Trainer: build the optimizer without self.trainer, e.g. a scheduler's length "
                        "from a number of your own)") from e
    optimizers = []

    def collect(item):  # an optimizer; a dict {"optimizer": ...}; a list or tuple of them, ([opts], [scheds])
        if hasattr(item, "step") and hasattr(item, "param_groups"):
            optimizers.append(item)
        elif isinstance(item, dict) and "optimizer" in item:
            collect(item["optimizer"])
        elif isinstance(item, (list, tuple)):
            for part in (item[:1] if len(item) == 2 and isinstance(item[0], (list, tuple)) else item):
                collect(part)
    collect(optim)
    if not optimizers:
        raise TypeError(f"{where}: configure_optimizers() gave {optim!r}; batchwise trains with the optimizer it "
                        "gives")
    if len(optimizers) > 1:
        raise TypeError(f"{where}: {name}.configure_optimizers() gave {len(optimizers)} optimizers; Lightning trains "
                        "several only with manual optimization: measure it with `batchwise tune --cmd` and "
                        "batchwise.lightning.BatchwiseCallback")
    optim = optimizers[0]
    given_data = datamodule is not None and not isinstance(datamodule, L.LightningDataModule)
    source = module if datamodule is None or given_data else datamodule
    if datamodule is not None and not given_data:
        datamodule.prepare_data()
        datamodule.setup("fit")
    base = L.LightningModule if source is module else L.LightningDataModule
    if given_data:  # trainer.fit(module, loader): the training data itself
        train = datamodule
    elif not _overridden(source, "train_dataloader", base):
        raise TypeError(f"{where}: {type(source).__name__} defines no train_dataloader(); define it, or pass a "
                        "LightningDataModule or the training DataLoader as the second argument")
    else:
        train = source.train_dataloader()
    val = source.val_dataloader() if _overridden(source, "val_dataloader", base) else None
    if isinstance(val, (list, tuple)):  # several validation loaders: the first, as Lightning's first
        val = val[0] if val else None
    # What the messages name the data by: the hook that gave it, or the argument
    data_what = "the training DataLoader given" if given_data else f"{type(source).__name__}.train_dataloader()"
    return optim, train, val, data_what, f"{type(source).__name__}.val_dataloader()"


def run_lightning(command, module, datamodule, options):
    _required(command, options, "batchwise.lightning", held_out=False)
    with _generators_kept():  # a datamodule's setup may split its data at random
        optimizer, train, val, data_what, val_what = lightning_parts(module, datamodule, command)
        hook = val_what  # the module's or the datamodule's, as the data came from it
        if command in ("tune", "validate") and val is not None and "held_out" not in options:
            options = {**options, "held_out": val}
        else:
            val_what = "held_out"  # the user's own option
        _required(command, options, "batchwise.lightning", val_hook=hook)
        try:
            with _scheduled_rates(optimizer):  # the optimizer may be one the module keeps (self.opt)
                return _call(command, options,
                             lambda o: _StepAdapter(command, module, optimizer, train, o, data_what, val_what))
        except Exception as e:  # the engine's and the adapter's words name this call: batchwise.lightning.fit
            plain = f"batchwise.{command}:"
            if e.args and isinstance(e.args[0], str) and e.args[0].startswith(plain):
                e.args = (f"batchwise.lightning.{command}:" + e.args[0][len(plain):],) + e.args[1:]
            raise


@contextlib.contextmanager
def _scheduled_rates(optimizer):
    """A scheduler made on the optimizer (a warm-up, OneCycleLR) has moved its rate: the one trained at is the
    one the scheduler starts from (initial_lr), or OneCycleLR's peak (max_lr, its lr argument). Set for the call
    and put back after it (the plain API had scaled a warm-up's first rate, 25 times below OneCycleLR's peak), as
    is the scheduler's mark that the optimizer has stepped (the trials' steps had set it, and torch's warning of a
    scheduler stepped before its optimizer then never came)."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list):  # a function that makes the optimizer: no scheduler on it yet
        yield
        return
    marked = optimizer.__dict__.get("_opt_called", _NOT_SET) if hasattr(optimizer, "__dict__") else _NOT_SET
    moved = [group.get("lr") for group in groups]
    for group in groups:
        rate = group.get("max_lr", group.get("initial_lr"))
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0:
            group["lr"] = float(rate)
    try:
        yield
    finally:
        for group, lr in zip(groups, moved):
            group["lr"] = lr
        if marked is _NOT_SET:
            getattr(optimizer, "__dict__", {}).pop("_opt_called", None)
        else:
            optimizer._opt_called = marked


_NOT_SET = object()


# ---- the report ----------------------------------------------------------------------------------

_FIELDS = None


def _report_fields():
    """The report's fields as the engine declares them (fields.h): {name: None or a record's fields}."""
    global _FIELDS
    if _FIELDS is None:
        _FIELDS = _engine().report_fields()
    return _FIELDS


class _Record:
    """A record of the report with its fields as attributes (docs/report-schema.md): a field that is
    absent (a phase that did not run) is None; a name that is no field of the record is an
    AttributeError naming the nearest ones."""

    def __init__(self, data, fields, path):
        self._data, self._fields, self._path = data, fields, path

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._fields is not None and name not in self._fields:
            near = difflib.get_close_matches(name, list(self._fields), 3)
            raise AttributeError(f"{self._path} has no field {name!r}; " +
                                 (f"did you mean {', '.join(near)}?" if near else f"its fields: {', '.join(self._fields)}"))
        return _wrap(self._data.get(name), self._fields.get(name) if self._fields else None, f"{self._path}.{name}")

    def __getitem__(self, name):
        return _wrap(self._data[name], self._fields.get(name) if self._fields else None, f"{self._path}.{name}")

    def __contains__(self, name):
        return name in self._data

    def __dir__(self):
        return list(self._fields or self._data)

    def to_dict(self):
        return copy.deepcopy(self._data)

    def __repr__(self):
        shown = ", ".join(f"{k}={v!r}" for k, v in self._data.items() if not isinstance(v, (dict, list)))
        return f"<{self._path}: {shown}>"


def _wrap(value, fields, path):
    if isinstance(value, dict):
        return _Record(value, fields, path)
    if isinstance(value, list):
        return [_wrap(v, fields, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


class Report(_Record):
    """What fit, sweep or tune measured: the same record as the CLI's JSON report.

    report.fit.batch, report.sweep.points[0].samples_per_s, report.recommendation.batch, report.lr.lr;
    report.to_json() (the CLI's --json), report.html(path) (its --html), str(report) (its table),
    report.summary() (its short view: the answer and why)."""

    def __init__(self, text, command=None):
        super().__init__(json.loads(text), _report_fields(), "report")
        self._json = text
        self._command = command  # its texts name the CLI's flags as this call's options

    def to_json(self):
        return self._json

    def html(self, path):
        """The page written to `path` whole, as the CLI's --html: drawn first, then put in place (an open(path, "w")
        had emptied the user's file before a drawing that raised); into /dev/stdout, a FIFO or a device as it is
        (a file renamed onto /dev/null had replaced the device, as root)."""
        page = _engine().html(self._json)
        for stream in (sys.stdout, sys.stderr):  # what Python holds for them goes first, where the page goes there
            if stream is not None:
                stream.flush()
        _engine().write_output(os.fspath(path), page, f"Report.html({os.fspath(path)!r})")
        return path

    def table(self):
        return _as_options(self._command, _engine().table(self._json))

    def summary(self):
        """The short view, as `batchwise tune` prints it without --verbose: the answer and why."""
        return _as_options(self._command, _engine().summary(self._json).replace(
            "every table: --verbose; the whole report: --json FILE or --html FILE",
            "every table: str(report); the whole report: report.to_json() or report.html(path)"))

    def __str__(self):
        return self.table()

    def __repr__(self):
        rec = self._data.get("recommendation") or {}
        fitted = (self._data.get("fit") or {}).get("batch")
        return f"<batchwise.Report fit batch {fitted}, recommended batch {rec.get('batch')}>"


# ---- the calls -----------------------------------------------------------------------------------

def _required(command, options, prefix="batchwise", held_out=True, val_hook=None):
    """What a command cannot run without, said before any data is read (`held_out`: check it too;
    `val_hook`: the Lightning hook that would have given it, "MyDataModule.val_dataloader()")."""
    _check_names(command, options, prefix)
    if command in ("sweep", "validate") and not options.get("batch_sizes"):
        raise TypeError(f"{prefix}.{command}: no batch sizes; pass batch_sizes=[16, 32, 64]")
    if held_out and command == "validate" and options.get("held_out") is None:
        raise TypeError(f"{prefix}.validate: no held_out data; validation judges each run on data it did not train "
                        "on: pass held_out=(x_test, y_test), a Dataset or a DataLoader"
                        + (f" (or define {val_hook})" if val_hook else ""))


def _run(command, model, optimizer, data, loss, options):
    _required(command, options)
    with _scheduled_rates(optimizer):
        return _call(command, options, lambda o: _Adapter(command, model, optimizer, data, loss, o))


def _as_options(command, text):
    """`text` with the CLI's flags named as `command`'s options (--max-epochs 2 is max_epochs=2 here;
    --lr is the optimizer's lr); a flag that is no option of it stays as it is, and a command quoted in
    backticks is its call where this API has one (_as_call)."""
    if command not in _OPTIONS:
        return text
    known = _OPTIONS[command]

    def option(match):
        name = match.group(1).replace("-", "_")
        if name == "lr":  # the CLI's base rate is the optimizer's own here ("lower --lr")
            return "the optimizer's lr" + (" " if match.group(2) else "")
        if name == "validate" and command == "tune" and not match.group(2):  # a call of its own here
            return "batchwise.validate(...)"
        if name not in known:
            return match.group(0)
        if known[name] is _bool and not match.group(2):  # --no-race is no_race=True here
            return f"{name}=True"
        return f"{name}=" if match.group(2) else name
    parts = re.split(r"(`[^`\n]*`)", text)  # the quoted ones at odd places
    return "".join(_as_call(part) if i % 2 else re.sub(r"--([a-z][a-z-]*)( (?=[0-9A-Z\"']))?", option,
                                             re.sub(r"\bthe base --lr\b(?!-)( +)?", _base_lr, part))
                   for i, part in enumerate(parts))


def _as_call(quoted):
    """A quoted CLI command this API has, `batchwise noise --batch 128 --noise-steps 64`, as its call,
    `batchwise.noise(model, optimizer, data, batch=128, noise_steps=64)` (the CLI's command cannot run the
    user's Python model); any other quoted text as it is."""
    match = re.fullmatch(r"`batchwise ([a-z]+)((?: --[a-z][a-z-]*(?: [^ `-][^ `]*)?)*)`", quoted)
    if not match or match.group(1) not in _OPTIONS:
        return quoted
    known = _OPTIONS[match.group(1)]
    args = []
    for flag, value in re.findall(r"--([a-z][a-z-]*)(?: ([^ `-][^ `]*))?", match.group(2)):
        name = flag.replace("-", "_")
        if name not in known:
            return quoted
        number = re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", value)
        args.append(f"{name}={value if number else repr(value)}" if value else f"{name}=True")
    return f"`batchwise.{match.group(1)}(model, optimizer, data{''.join(', ' + a for a in args)})`"


def _base_lr(match):
    """"the base --lr": in a table's column ("the base --lr  none"), "the base lr" padded to its width;
    in a sentence, "--lr", which _as_options names as the optimizer's lr."""
    spaces = match.group(1) or ""
    return "the base lr" + "  " + spaces if len(spaces) >= 2 else "--lr" + spaces


def _engine_error(command, error):
    """The engine's message with the CLI's flags named as this call's options, as the same exception type."""
    text = str(error)
    text = text[len(command) + 2:] if text.startswith(f"{command}: ") else text  # "batchwise.validate: validate: "
    return type(error)(f"batchwise.{command}: {_as_options(command, text)}")


@contextlib.contextmanager
def _generators_kept():
    """torch's, Python's and NumPy's generators as they were on entry, on the way out. Each trial puts
    torch's back, and the engine draws from none between trials; a call puts them back once more, with
    Python's and NumPy's, which the user's code may draw from: its dataset's random transforms as the
    samples are read, a LightningDataModule's setup."""
    import torch
    states = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
              random.getstate())
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        if states[1] is not None:
            torch.cuda.set_rng_state_all(states[1])
        random.setstate(states[2])
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)


_ONE_CALL = threading.Lock()


def _one_call_in_child():
    """A process forked while a call ran (by another thread) runs none: its copy of the lock is free again (it had
    refused every call there, "another batchwise call is running")."""
    global _ONE_CALL
    _ONE_CALL = threading.Lock()


os.register_at_fork(after_in_child=_one_call_in_child)


@contextlib.contextmanager
def _training_mode():
    """Gradients on and inference mode off on this thread (both are thread-local) while the call trains: under
    the caller's torch.no_grad() nothing had trained, and under torch.inference_mode() the parameters the call
    copies into counted memory had come back inference tensors, which never train again. The caller's modes
    come back on the way out."""
    import torch
    with torch.inference_mode(False), torch.enable_grad():
        yield


def _call(command, options, make_adapter):
    """One call at a time in a process: the CPU budget's count, its limit and the generators are the
    process's. A second call (another thread's, or one from a progress callback) is refused before it
    reads its data or counts its model (it had counted them into the running call's peak)."""
    if not _ONE_CALL.acquire(blocking=False):
        raise _engine().ConfigError(f"batchwise.{command}: another batchwise call (fit, sweep, tune, noise or "
                                    "validate) is running in this process; they run one at a time (the CPU budget is "
                                    "counted process-wide)")
    try:
        with _generators_kept(), _training_mode():
            return _call_kept(command, options, make_adapter)
    finally:
        _ONE_CALL.release()


def _call_kept(command, options, make_adapter):
    engine = _engine()
    options = _options(command, options)
    try:  # what the engine refuses whatever the data (two targets, a target beside epochs): before reading any
        engine.check_options(options, command)
    except engine.ConfigError as e:
        raise _engine_error(command, e) from None
    if options.get("epochs"):  # as the CLI refuses them: full runs train to their end
        for name in ("max_epochs", "max_seconds", "stop_slower_than"):
            if options.get(name) is not None:
                raise ValueError(f"batchwise.{command}: {name}={options[name]:g} limits a run to a target, and "
                                 f"epochs={options['epochs']:g} trains every run to its end; drop {name}")
    adapter = None
    try:
        adapter = make_adapter(options)
        options.pop("held_out", None)
        if command == "tune" and options.get("target_accuracy") and not adapter.data.num_classes:
            raise engine.ConfigError(f"batchwise.tune: target_accuracy={options['target_accuracy']:g}: the targets "
                                     "are floating-point values, not class labels, so there is no accuracy to reach; "
                                     "pass target_loss=...")
        if command == "validate" and not any(options.get(k) for k in ("epochs", "target_accuracy", "target_loss")):
            # Accuracy needs a classifier's targets, and is read on the held-out ones.
            which = "" if not adapter.data.num_classes else "held-out "
            if which == "" or not (adapter.held_out or adapter.data).num_classes:
                raise TypeError(f"batchwise.validate: no target and no epochs; the {which}targets are not class "
                                "labels, so there is no accuracy to reach: pass target_loss=..., or epochs=N for full "
                                "runs")
            options["target_accuracy"] = 0.85  # the CLI's default target
        if command == "tune" and not adapter.get_lr(adapter.reference_group()) > 0:
            # The advised rate scales the one given: refused before the trials (it had failed after them, "the base
            # batch (32) and rate (0) must be positive")
            raise ValueError(f"batchwise.tune: the optimizer's lr is {adapter.get_lr(adapter.reference_group()):g} in "
                             "every param group (and no scheduler on it starts from a rate above 0); tune scales the "
                             "rate you train at: set each group's lr to it before the call")
        if "min" not in options and adapter.batchnorm:
            options["min"] = 2  # BatchNorm in training mode cannot normalise a batch of one
        adapter.count_the_state()
        try:
            text, where, error, kept, unrestored = engine.run(adapter, options, command)
        except (engine.ConfigError, engine.DataError, engine.ModelError, engine.DeviceError) as e:
            raise _engine_error(command, e) from None  # named by the call (noise's had been bare)
    finally:
        if adapter is not None:
            adapter.return_the_storage()
            adapter.restore_modes()
    # Code of the user's that raised ends the call: an answer built around a step that failed for
    # another reason than memory would not be the user's training.
    if error is not None:
        # BatchNorm at a batch of one value per channel (batch_sizes=[1, ...]): the fix, as the CLI's hint says it
        hint = ("; BatchNorm cannot train on one value per channel (a batch of 1): start batch_sizes at 2"
                if "Expected more than 1 value per channel" in str(error) else "")
        raise TrainingError(f"batchwise.{command}: {where} raised {type(error).__name__}: {error}{hint} "
                            f"({_state_after(where, unrestored)})") from error
    if unrestored is not None:  # out of memory putting the state back after the call
        error = TrainingError(f"batchwise.{command}: {unrestored}, putting the state back after the call, failed "
                              f"({_state_after(None, unrestored)}; the report is this error's .report)")
        error.report = Report(text, command)
        raise error
    report = Report(text, command)
    if kept:  # validate, stopped by a Ctrl-C between its steps
        v = report.validation
        rest = [str(b) for b in v.not_trained] + (["the batch-size schedule"] if v.schedule_not_trained else [])
        ended = len(v.runs)
        said = (f"interrupted with {ended} of {ended + len(rest)} runs ended; {', '.join(rest)} "
                f"{'were' if len(rest) > 1 else 'was'} not trained, so no batch is recommended")
        interrupted = Interrupted(
            f"batchwise.{command}: {said} (the runs that ended are this exception's .report; the same call again "
            "trains the whole grid; the model, its optimizer and the RNGs are as they were)")
        # among the report's warnings too, as the CLI's: its answer line points to them
        record = json.loads(text)
        record.setdefault("context", {}).setdefault("warnings", []).append(
            f"{said} (to finish it: the same call again)")
        interrupted.report = Report(json.dumps(record), command)
        raise interrupted
    failed = _nothing_trained(report)
    if failed:
        error = TrainingError(f"batchwise.{command}: {_as_options(command, failed)} (the model, its optimizer and "
                              "the RNGs are as they were; the report is this error's .report)")
        error.report = report
        raise error
    return report


def _state_after(where, unrestored):
    """What a call that raised left of the user's state: all of it as it was, or, where `unrestored`
    (the call putting some of it back: the optimizer's load_state_dict, a module's train) raised, that
    part as the trial left it."""
    if unrestored is None:
        return "the model, its optimizer and the RNGs are as they were"
    part, verb, it = (("the optimizer's state", "is", "it") if unrestored.endswith(".load_state_dict")
                      else ("the modules' training modes", "are", "them"))
    lead = "so" if unrestored == where else f"and {unrestored}, putting the state back, raised too, so"
    return (f"{lead} {part} could not be put back and {verb} as the trial left {it}: set {it} again before training "
            "on; the rest is as it was")


def _nothing_trained(report):
    """Why nothing usable came of the call, where a trial failed without an exception of the user's
    (a loss that is not a scalar or not a number, an output batchwise cannot read): the CLI's exit 1.
    None where something trained, or where nothing fits (an answer: fit.outcome says so)."""
    fit = report.fit
    if fit is not None and fit.outcome == "error":
        return fit.message  # "batch 32 failed with an error, so no batch size is reported: ..."
    sweep = report.sweep
    if sweep is not None and sweep.points and not any(p.outcome == "ok" for p in sweep.points):
        failed = [p for p in sweep.points if p.outcome != "oom"]
        if failed:
            return (f"no batch trained: {len(failed)} of {len(sweep.points)} swept batches failed (batch "
                    f"{failed[0].batch}: {failed[0].message})")
    noise = report.noise_scale
    if noise is not None and noise.diverged and sweep is None:  # noise's own call (tune goes on without one)
        return noise.message  # "the training loss became NaN at step 1 of 3 (batch 64): ..."
    run_race = report.run_race  # its reference's rate diverged: tune answered none, in the CLI's words
    if run_race is not None and run_race.reference_diverged and report.recommendation is None:
        said = [w for w in report.context.warnings if w.startswith("no answer: the run race's reference")]
        if said:
            return said[0]
    validation = report.validation  # validate's own call (tune's answer stands unvalidated)
    if validation is not None and sweep is None and validation.runs and not validation.interrupted and all(
            run.outcome is not None for run in validation.runs):
        failed = [run for run in validation.runs if run.outcome != "oom"]
        if failed:
            return (f"no run trained: {len(failed)} of {len(validation.runs)} validation runs failed (batch "
                    f"{failed[0].batch}: {failed[0].message})")
    return None


def fit(model, optimizer, data, loss=None, **options):
    """The largest batch whose peak memory stays within target x memory_budget (the CLI's `fit`).

    model: a torch.nn.Module on its device; optimizer: a torch.optim optimizer over its parameters,
    or a function of the parameters that makes one; data: (inputs, targets) tensors, a Dataset or a
    DataLoader; loss: a function of (output, target), None for cross-entropy (integer targets) or
    mean squared error. Options as the CLI's flags: memory_budget="512MiB", target=0.9, min=1,
    max=65536, multiple_of=8, mode="model"|"binsearch"|"power", fit_steps=2, warmup=0, device, seed,
    progress (True: lines on stderr; False; or a callable taking each line).

    Example: batchwise.fit(model, opt, (x, y), memory_budget="256MiB").fit.batch
    """
    return _run("fit", model, optimizer, data, loss, options)


def sweep(model, optimizer, data, loss=None, **options):
    """samples/s at each batch size and the throughput knee (the CLI's `sweep`).

    batch_sizes=[16, 32, 64] (or "16,32,64") is required; steps=5, repetitions=3, min_time=0.1,
    and fit's options. Example: batchwise.sweep(model, opt, loader, batch_sizes=[32, 64, 128])
    """
    return _run("sweep", model, optimizer, data, loss, options)


def tune(model, optimizer, data, loss=None, **options):
    """The whole of `batchwise tune`: fit, sweep, noise scale, the batch race (or the run race with
    epochs=N, lr_schedule="cosine"), the recommendation, its learning rate and the run plan.

    held_out: the data the race judges on ((inputs, targets), a Dataset or DataLoader; default: a
    sample of the training data, named so); advice_budget (s), epochs, lr_schedule, base_batch,
    target_accuracy, target_loss, no_noise, no_race, and fit's and sweep's options.
    Example: batchwise.tune(model, opt, train_set, held_out=test_set, epochs=10, lr_schedule="cosine")
    """
    return _run("tune", model, optimizer, data, loss, options)


def noise(model, optimizer, data, loss=None, **options):
    """The gradient noise scale (the critical batch) along real training (the CLI's `noise`):
    batch=256 samples a step in micro-batches of micro_batch=32, over noise_steps=50 optimizer steps
    (fixed_weights=True: at the initial weights, no steps); smoothing=0.9. The model is put back.

    Example: batchwise.noise(model, opt, (x, y), batch=512, micro_batch=32).noise_scale.b_simple
    """
    return _run("noise", model, optimizer, data, loss, options)


def validate(model, optimizer, data, loss=None, **options):
    """Real training from the model's current weights at each of batch_sizes=[...] (the CLI's
    `validate`), judged on held_out data (required): to a target (target_accuracy=0.85 or
    target_loss=...; max_epochs=3, max_seconds=600 per batch), or full runs of epochs=N with
    lr_schedule="cosine" compared on final quality and training time. Each batch trains at the rate
    tune would advise for it (rule_lr=True: the scaling rule alone, from base_batch=32).
    batch_schedule="64:0,256:2" also trains that schedule of batch sizes over the full run.
    report.validation.runs[i].final_accuracy, report.recommendation.batch: the fastest good batch.

    Example: batchwise.validate(model, opt, train_set, held_out=test_set, batch_sizes=[32, 128, 512],
                                epochs=3, lr_schedule="cosine")
    """
    return _run("validate", model, optimizer, data, loss, options)
