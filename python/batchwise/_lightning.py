"""The Lightning callback's body, shared by batchwise.lightning (`lightning.pytorch`) and
batchwise.pytorch_lightning (the `pytorch_lightning` package): a Trainer accepts only callbacks
derived from its own package's Callback class. Imports no framework."""
from collections.abc import Mapping

from . import Reporter, _batch_samples


def step_loss(outputs):
    """The loss a training_step returned: the tensor itself, or a dict's "loss"; None otherwise."""
    if isinstance(outputs, Mapping):
        return outputs.get("loss")
    return outputs if hasattr(outputs, "item") else None


class LightningReporting:
    """One `batchwise: step` line per optimizer step of a Lightning Trainer, stop after the steps
    batchwise asks for, the CUDA peak at the end. Mixed into each package's Callback class."""

    def __init__(self):
        super().__init__()
        self._reporter = Reporter(name="lightning")  # checks BATCHWISE_BATCH and BATCHWISE_STEPS now
        self._last_global_step = 0
        self._samples = 0
        self._batch = None  # the largest batch of this optimizer step, as this process's loader gave it
        self._batches = 0   # the batches of this optimizer step
        self._uncounted = None  # the type of a batch whose samples _batch_samples could not count
        self._loss = None

    def on_train_start(self, trainer, pl_module):
        self._reporter.main_process = trainer.is_global_zero
        self._last_global_step = trainer.global_step
        self._samples, self._batch, self._batches = 0, None, 0
        self._loss = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self._reporter.active:
            return
        samples = _batch_samples(batch)
        self._samples += samples if samples is not None else (self._reporter.batch or 0)
        if samples is not None:
            self._batch = max(self._batch or 0, samples)
        else:  # counted as the batch asked for, and said so: batchwise cannot check that it trained it
            self._uncounted = type(batch).__name__
        self._batches += 1
        # Lightning hands each batch's loss divided by accumulate_grad_batches: their sum is the
        # optimizer step's mean loss. Added as tensors, so only the step line waits for the device.
        loss = step_loss(outputs)
        if loss is not None:
            loss = loss.detach() if hasattr(loss, "detach") else loss
            self._loss = loss if self._loss is None else self._loss + loss
        # With accumulate_grad_batches = k, the optimizer steps (and global_step rises) every k
        # batches: the step line waits for it and counts all k batches' samples, on every rank.
        if trainer.global_step == self._last_global_step:
            return
        self._last_global_step = trainer.global_step
        total = self._samples * trainer.world_size if self._samples else None
        # an epoch's last step of fewer batches than accumulate_grad_batches: its losses were divided by it all
        # the same, so their sum is the mean only once scaled back (it read 0.33 for 1.4 at one batch of four)
        accumulated = getattr(trainer, "accumulate_grad_batches", 1) or 1
        if self._loss is not None and 0 < self._batches < accumulated:
            self._loss = self._loss * (accumulated / self._batches)
        loss, loader_batch, self._samples, self._batch, self._loss = self._loss, self._batch, 0, None, None
        uncounted, self._uncounted, self._batches = self._uncounted, None, 0
        if self._reporter.step(total, loss, batch=loader_batch, uncounted=uncounted):
            self._reporter.peak()
            # Stops after this batch (Lightning still runs validation when it is due, and whatever
            # follows fit() in the script); min_steps / min_epochs, if set, can delay the stop.
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module):
        self._reporter.peak()
