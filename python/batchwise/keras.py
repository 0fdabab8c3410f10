"""batchwise for Keras 3's model.fit: one line.

    from batchwise.keras import BatchwiseCallback
    model.fit(x, y, batch_size=batch, epochs=5, callbacks=[BatchwiseCallback()])

Works on Keras's torch backend (KERAS_BACKEND=torch), TensorFlow and JAX. Under
`batchwise ... --cmd`, it prints one `batchwise: step samples=N loss=X` line per optimizer step:
after each batch, or each gradient_accumulation_steps batches when the optimizer accumulates, and
covering steps_per_execution batches at a time when fit runs several per call; N counts
`batch_size` samples per batch (default: BATCHWISE_BATCH, which is what batchwise passes as
{batch}; pass the batch size fit gets when the script does not take batchwise's); X is the loss as
Keras logs it (the epoch's running mean). After the steps batchwise asks for, it stops fit
(model.stop_training, checked after every batch) and prints the device peak (`peak_bytes`), again
when training ends. Without batchwise it does nothing."""
import keras

from . import Reporter

__all__ = ["BatchwiseCallback"]


class BatchwiseCallback(keras.callbacks.Callback):
    """Reports each optimizer step of model.fit to batchwise and stops after the steps it asks for.

    `batch_size`: samples per batch (default: BATCHWISE_BATCH)."""

    def __init__(self, batch_size=None):
        super().__init__()
        self._reporter = Reporter()  # checks BATCHWISE_BATCH and BATCHWISE_STEPS now
        self._batch_size = batch_size or self._reporter.batch
        self._last_batch = -1
        self._pending = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._last_batch = -1

    def on_train_batch_end(self, batch, logs=None):
        if not self._reporter.active:
            return
        # `batch` is the index of the last batch run; with steps_per_execution > 1 it jumps by that.
        self._pending += batch - self._last_batch
        self._last_batch = batch
        optimizer = getattr(self.model, "optimizer", None)
        accumulation = getattr(optimizer, "gradient_accumulation_steps", None) or 1
        if self._pending < accumulation:
            return
        samples = self._pending * self._batch_size if self._batch_size else None
        self._pending = 0
        if self._reporter.step(samples, (logs or {}).get("loss")):
            self._reporter.peak()
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        self._reporter.peak()
