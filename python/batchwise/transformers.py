"""batchwise for the Hugging Face Trainer: one line.

    from batchwise.transformers import BatchwiseCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[BatchwiseCallback()])

Under `batchwise ... --cmd`, it prints one `batchwise: step samples=N batch=B` line per optimizer
step (on_step_end: after the optimizer step, once per gradient_accumulation_steps batches), with
N = the samples of the step's batches x the world size and B the largest of them on one device: the
batch of the data loader the Trainer trains from each (its batch_size, or its batch sampler's: a
Trainer whose get_train_dataloader is the script's own trains what that loader gives; where the
loader says none, per_device_train_batch_size, times the GPUs of DataParallel, as found by
auto_find_batch_size when that is on), but an epoch's last batch its remainder in one process
(data of a few batches train less than the batch x gradient_accumulation_steps in their last step;
counted from the loader's and the training set's lengths) and the training set's size per device
where that is smaller than a batch; a `batchwise: loss=X` line whenever the Trainer logs a training loss
(logging_steps), and `loss=nan` on the step after which the model's first trained parameter is
no longer finite (the Trainer's logging_nan_inf_filter, on by default, logs the running mean in
place of a loss that is not finite, and its logging_steps may log none in a trial); and the CUDA
peak (`peak_bytes`) after the steps batchwise asks for, when it stops the Trainer
(control.should_training_stop), and when training ends. Without batchwise it does nothing."""
from transformers import TrainerCallback

from . import Reporter, _write

__all__ = ["BatchwiseCallback"]


class BatchwiseCallback(TrainerCallback):
    """Reports each optimizer step to batchwise and stops after the steps it asks for."""

    def __init__(self):
        self._reporter = Reporter(name="transformers")  # checks BATCHWISE_BATCH and BATCHWISE_STEPS now
        self._in_epoch = 0   # batches of this epoch so far
        self._samples = 0    # samples of this optimizer step's batches so far, in this process
        self._batch = 0      # the largest of them

    def on_train_begin(self, args, state, control, **kwargs):
        self._reporter.main_process = state.is_world_process_zero

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._in_epoch = 0

    def on_substep_end(self, args, state, control, **kwargs):
        if self._reporter.active:
            self._count(self._next_batch(args, state, kwargs))

    def on_step_end(self, args, state, control, **kwargs):
        if not self._reporter.active:
            return
        self._count(self._next_batch(args, state, kwargs))
        # batch= is one device's: DataParallel (n_gpu > 1, one process) splits the loader's batch among the GPUs
        samples, loader_batch = self._samples * args.world_size, max(1, self._batch // max(1, args.n_gpu))
        self._samples, self._batch = 0, 0
        loss = _not_finite(kwargs.get("model")) if self._reporter.main_process else None  # the line's rank only
        if self._reporter.step(samples, loss, batch=loader_batch):
            self._reporter.peak()
            # The Trainer ends as after its last step: it still saves or evaluates where its
            # save_strategy / eval_strategy says so at the end of an epoch.
            control.should_training_stop = True

    def _count(self, batch):
        self._samples += batch
        self._batch = max(self._batch, batch)

    @staticmethod
    def _per_device(args, state, loader=None):
        """The batch the Trainer's loader gives (a get_train_dataloader of the script's own trains its loader's batch,
        whatever per_device_train_batch_size says: it had been measured as per_device_train_batch_size, and refused
        where that differed), else the Trainer's per-device batch."""
        for source in (loader, getattr(loader, "batch_sampler", None)):
            batch = getattr(source, "batch_size", None)
            if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
                return batch
        return getattr(state, "train_batch_size", None) or args.train_batch_size

    def _next_batch(self, args, state, kwargs):
        """The samples of the epoch's next batch in this process: the per-device batch, the epoch's last its
        remainder (a loader of known length over a training set of known size, one process, no drop_last); data of
        fewer samples than a batch train all of them a step (batchwise then knows the step did not train its batch)."""
        loader = kwargs.get("train_dataloader")
        per_device = self._per_device(args, state, loader)
        index, self._in_epoch = self._in_epoch, self._in_epoch + 1
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
        self._reporter.peak()


def _not_finite(model):
    """float("nan") where the model's first trained parameter holds a value that is not finite (a diverged step:
    the Trainer's own loss logging hides it), else None. Reading it waits for the device, as the step line does."""
    for parameter in getattr(model, "parameters", lambda: [])():
        if parameter.requires_grad:
            import torch  # the Trainer's own; imported by now

            return None if bool(torch.isfinite(parameter).all()) else float("nan")
    return None
