"""batchwise for the Hugging Face Trainer: one line.

    from batchwise.transformers import BatchwiseCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[BatchwiseCallback()])

Under `batchwise ... --cmd`, it prints one `batchwise: step samples=N` line per optimizer step
(on_step_end: after the optimizer step, once per gradient_accumulation_steps batches), with
N = the per-device batch (per_device_train_batch_size, times the GPUs of DataParallel; as found by
auto_find_batch_size when that is on; the training set's size per device where that is smaller) x
gradient_accumulation_steps x the world size; a
`batchwise: loss=X` line whenever the Trainer logs a training loss (logging_steps); and the CUDA
peak (`peak_bytes`) after the steps batchwise asks for, when it stops the Trainer
(control.should_training_stop), and when training ends. Without batchwise it does nothing."""
from transformers import TrainerCallback

from . import Reporter, _write

__all__ = ["BatchwiseCallback"]


class BatchwiseCallback(TrainerCallback):
    """Reports each optimizer step to batchwise and stops after the steps it asks for."""

    def __init__(self):
        self._reporter = Reporter()  # checks BATCHWISE_BATCH and BATCHWISE_STEPS now

    def on_train_begin(self, args, state, control, **kwargs):
        self._reporter.main_process = state.is_world_process_zero

    def on_step_end(self, args, state, control, **kwargs):
        if not self._reporter.active:
            return
        per_device = getattr(state, "train_batch_size", None) or args.train_batch_size
        # Data of fewer samples than a batch train all of them a step, not the batch: said so, batchwise then
        # knows the step did not train the batch it gave (it had read 64 samples a step off 40)
        loader = kwargs.get("train_dataloader")
        dataset = getattr(loader, "dataset", None)
        if dataset is not None and hasattr(dataset, "__len__"):
            per_device = min(per_device, max(1, len(dataset) // max(1, args.world_size)))
        samples = per_device * args.gradient_accumulation_steps * args.world_size
        if self._reporter.step(samples):
            self._reporter.peak()
            # The Trainer ends as after its last step: it still saves or evaluates where its
            # save_strategy / eval_strategy says so at the end of an epoch.
            control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        # The Trainer keeps the loss on the device between logging steps; reading it more often
        # would add a device sync to every step, so the loss goes to batchwise when it is logged.
        if self._reporter.active and self._reporter.main_process and logs and "loss" in logs:
            _write(f"loss={float(logs['loss']):.6g}")

    def on_train_end(self, args, state, control, **kwargs):
        self._reporter.peak()
