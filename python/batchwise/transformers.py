"""batchwise for the Hugging Face Trainer: one line.

    from batchwise.transformers import BatchwiseCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[BatchwiseCallback()])

Under `batchwise ... --cmd`, it prints one `batchwise: step samples=N batch=B` line per optimizer
step (on_step_end: after the optimizer step, once per gradient_accumulation_steps batches), with
N = the samples the model was given in the step's training forwards x the world size and B the
largest of them on one device. They are counted as the model gets them (a forward pre-hook, the
first dimension of input_ids, inputs_embeds, pixel_values or its first tensor), not from
per_device_train_batch_size: a Trainer whose get_train_dataloader is the script's own trains
what its loader gives. Counted: forwards in training mode with grad enabled (an evaluation during
training is not), outside backward (gradient checkpointing's recomputation is not), each input once
per batch (a compute_loss that runs the model twice on it), and under DataParallel each replica's
share. Where the model counts nothing (not an nn.Module; torch.compile's graph runs no hook), each
batch is the per-device batch (per_device_train_batch_size, times the GPUs of DataParallel; as found
by auto_find_batch_size when that is on), but an epoch's last batch its remainder in one process
(counted from the loader's and the training set's lengths) and the training set's size per device
where that is smaller than a batch; a `batchwise: loss=X` line whenever the Trainer logs a training loss
(logging_steps), and `loss=nan` on the step after which the model's first trained parameter is
no longer finite (the Trainer's logging_nan_inf_filter, on by default, logs the running mean in
place of a loss that is not finite, and its logging_steps may log none in a trial); and the CUDA
peak (`peak_bytes`) after the steps batchwise asks for, when it stops the Trainer
(control.should_training_stop), and when training ends. Without batchwise it does nothing."""
from transformers import TrainerCallback

from . import Reporter, _batch_samples, _write

__all__ = ["BatchwiseCallback"]


class BatchwiseCallback(TrainerCallback):
    """Reports each optimizer step to batchwise and stops after the steps it asks for."""

    def __init__(self):
        self._reporter = Reporter(name="transformers")  # checks BATCHWISE_BATCH and BATCHWISE_STEPS now
        self._in_epoch = 0   # batches of this epoch so far
        self._samples = 0    # samples of this optimizer step's batches so far, in this process
        self._batch = 0      # the largest batch one device's model was given in it
        self._loader_batch = 0  # the largest of them as the loader's length says, where the model could not count
        self._counter = None    # _InputCounter on the model while training runs

    def on_train_begin(self, args, state, control, **kwargs):
        self._reporter.main_process = state.is_world_process_zero
        self._samples, self._batch, self._loader_batch = 0, 0, 0
        if self._counter is not None:  # a train() that raised never reached on_train_end
            self._counter.remove()
            self._counter = None
        if self._reporter.active:
            self._counter = _InputCounter.attach(kwargs.get("model"))

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._in_epoch = 0

    def on_substep_end(self, args, state, control, **kwargs):
        if self._reporter.active:
            self._count(args, state, kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        if not self._reporter.active:
            return
        self._count(args, state, kwargs)
        # batch= is one device's: DataParallel (n_gpu > 1, one process) splits the loader's batch among the GPUs
        # (the model's replicas each count their share; the loader's length gives the whole batch)
        batch = max(self._batch, self._loader_batch // max(1, args.n_gpu)) or None
        samples = self._samples * args.world_size
        self._samples, self._batch, self._loader_batch = 0, 0, 0
        loss = _not_finite(kwargs.get("model")) if self._reporter.main_process else None  # the line's rank only
        if self._reporter.step(samples, loss, batch=batch):
            self._reporter.peak()
            # The Trainer ends as after its last step: it still saves or evaluates where its
            # save_strategy / eval_strategy says so at the end of an epoch.
            control.should_training_stop = True

    def _count(self, args, state, kwargs):
        """Adds the batch just trained (one per on_substep_end / on_step_end): the samples the model was given, or
        where it counted none (not an nn.Module, or inputs it cannot read) what the loader's length says."""
        from_loader = self._next_batch(args, state, kwargs)  # the epoch's batch index moves on either way
        given = self._counter.take() if self._counter is not None else []
        if given:
            self._samples += sum(given)
            self._batch = max(self._batch, *given)
        else:
            self._samples += from_loader
            self._loader_batch = max(self._loader_batch, from_loader)

    @staticmethod
    def _per_device(args, state):
        return getattr(state, "train_batch_size", None) or args.train_batch_size

    def _next_batch(self, args, state, kwargs):
        """The samples of the epoch's next batch in this process as the Trainer's loader says (the fallback where
        the model counted none): the per-device batch, the epoch's last its remainder (a loader of known length over
        a training set of known size, one process, no drop_last); data of fewer samples than a batch train all of
        them a step (batchwise then knows the step did not train its batch)."""
        per_device = self._per_device(args, state)
        index, self._in_epoch = self._in_epoch, self._in_epoch + 1
        loader = kwargs.get("train_dataloader")
        try:
            batches, size = len(loader), len(loader.dataset)
        except (TypeError, AttributeError):  # an IterableDataset, or no loader
            return per_device
        if args.world_size > 1:
            return min(per_device, max(1, size // args.world_size))
        last = size - (batches - 1) * per_device
        if batches > 0 and index % batches == batches - 1 and 0 < last < per_device and not args.dataloader_drop_last:
            return last
        return min(per_device, size) if size > 0 else per_device

    def on_log(self, args, state, control, logs=None, **kwargs):
        # The Trainer keeps the loss on the device between logging steps; reading it more often
        # would add a device sync to every step, so the loss goes to batchwise when it is logged.
        if self._reporter.active and self._reporter.main_process and logs and "loss" in logs:
            _write(f"loss={float(logs['loss']):.6g}")

    def on_train_end(self, args, state, control, **kwargs):
        if self._counter is not None:
            self._counter.remove()
            self._counter = None
        self._reporter.peak()


def _not_finite(model):
    """float("nan") where the model's first trained parameter holds a value that is not finite (a diverged step:
    the Trainer's own loss logging hides it), else None. Reading it waits for the device, as the step line does."""
    for parameter in getattr(model, "parameters", lambda: [])():
        if parameter.requires_grad:
            import torch  # the Trainer's own; imported by now

            return None if bool(torch.isfinite(parameter).all()) else float("nan")
    return None


# The model's inputs that hold its batch, in this order; then its first positional tensor, then any other keyword's
_INPUTS = ("input_ids", "inputs_embeds", "pixel_values", "input_values", "input_features")
# keywords whose tensors are not one row per sample (position_ids and the cache broadcast; a count is a scalar)
_NOT_PER_SAMPLE = ("position_ids", "cache_position", "past_key_values", "num_items_in_batch")


def _model_input(args, kwargs):
    """The tensor whose first dimension is the batch a forward was given, or None."""
    def batched(value):
        shape = getattr(value, "shape", None)
        return shape is not None and len(shape) > 0

    for name in _INPUTS:
        if batched(kwargs.get(name)):
            return kwargs[name]
    for value in args:
        if batched(value):
            return value
    for name, value in kwargs.items():
        if name not in _NOT_PER_SAMPLE and batched(value):
            return value
    return None


class _InputCounter:
    """A forward pre-hook on the Trainer's model: the batch of each training forward, as the model is given it.

    Counted: forwards in training mode with grad enabled (an evaluation during training runs in eval mode under
    no_grad), outside a backward pass (a checkpointed module recomputed there), not under torch.compile's tracing
    (its graph would not run the hook: the loader's count stands), and each input once between two takes (a
    compute_loss that runs the model twice on its inputs gives them once). DataParallel's replicas share the
    model's hooks: each counts its share of the loader's batch, on its own thread."""

    def __init__(self, model):
        import threading

        self._model = model
        self._lock = threading.Lock()
        self._seen = []  # (the input, its samples) since the last take; held, so no other tensor takes its address
        self._handle = model.register_forward_pre_hook(_Hook(self), with_kwargs=True)

    @classmethod
    def attach(cls, model):
        """A counter on the model, or None where it is not an nn.Module that takes forward pre-hooks."""
        try:
            return cls(model) if callable(getattr(model, "register_forward_pre_hook", None)) else None
        except (TypeError, RuntimeError):  # an older torch without with_kwargs
            return None

    def hook(self, module, args, kwargs):
        import torch

        if not module.training or not torch.is_grad_enabled():
            return None
        if module is not self._model and not getattr(module, "_is_replica", False):
            return None  # a copy of the model (an EMA's deepcopy keeps its hooks)
        if torch.compiler.is_compiling() or _in_backward(torch):
            return None
        tensor = _model_input(args, kwargs)
        samples = _batch_samples(tensor) if tensor is not None else None
        if not samples:
            return None
        with self._lock:
            if not any(_same_input(tensor, other) for other, _ in self._seen):
                self._seen.append((tensor, samples))
        return None

    def take(self):
        """The samples of each distinct input the model was given since the last take."""
        with self._lock:
            seen, self._seen = self._seen, []
        return [samples for _, samples in seen]

    def remove(self):
        self._handle.remove()
        with self._lock:
            self._seen = []


class _Hook:
    """The counter's hook as the model holds it: a deepcopy of the model (an EMA's) shares it, and the hook leaves
    that copy's forwards uncounted; a pickled model (torch.save of the module) is unpickled with a hook that does
    nothing. (A bound method would copy the counter and its lock, which no pickle or deepcopy takes.)"""

    def __init__(self, counter):
        self._counter = counter

    def __call__(self, module, args, kwargs):
        return self._counter.hook(module, args, kwargs)

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return _no_hook, ()


def _no_hook():
    """What a pickled model's hook is unpickled as: nothing."""
    return _nothing


def _nothing(module, args, kwargs):
    return None


def _in_backward(torch):
    """Whether this thread runs inside autograd's backward (a reentrant checkpoint's recomputation)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    try:
        return task is not None and task() != -1
    except RuntimeError:
        return False


def _same_input(a, b):
    """The same tensor, or a view of the same memory of the same shape (a detached copy a checkpoint recomputes)."""
    if a is b:
        return True
    try:
        return a.device == b.device and a.data_ptr() == b.data_ptr() and a.shape == b.shape
    except (AttributeError, RuntimeError):  # not a plain tensor (a tensor subclass without storage)
        return False
