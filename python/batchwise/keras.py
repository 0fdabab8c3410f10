"""batchwise for Keras 3's model.fit: one line.

    from batchwise.keras import BatchwiseCallback
    model.fit(x, y, batch_size=batch, epochs=5, callbacks=[BatchwiseCallback()])

Works on Keras's torch backend (KERAS_BACKEND=torch), TensorFlow and JAX. Under
`batchwise ... --cmd`, it prints one `batchwise: step samples=N loss=X` line per optimizer step:
after each batch, or each gradient_accumulation_steps batches when the optimizer accumulates, and
covering steps_per_execution batches at a time when fit runs several per call; N counts the
samples of each batch as the model's train_step got them, with `batch=` the largest (on the torch
backend, whose fit looks train_step up at every batch; TensorFlow's and JAX's bind it before the
callback can count, and there N counts `batch_size` samples per batch, default BATCHWISE_BATCH,
which is what batchwise passes as {batch}; pass the batch size fit gets when the script does not
take batchwise's); X is the loss as Keras logs it (the epoch's running mean). After the steps batchwise
asks for, it stops fit (model.stop_training, checked after every batch) and prints the device peak
(`peak_bytes`), again when training ends. Without batchwise it does nothing."""
import keras

from . import Reporter, _batch_samples

__all__ = ["BatchwiseCallback"]


class BatchwiseCallback(keras.callbacks.Callback):
    """Reports each optimizer step of model.fit to batchwise and stops after the steps it asks for.

    `batch_size`: samples per batch where train_step is compiled and cannot count them (default:
    BATCHWISE_BATCH)."""

    def __init__(self, batch_size=None):
        super().__init__()
        self._reporter = Reporter(name="keras")  # checks BATCHWISE_BATCH and BATCHWISE_STEPS now
        self._batch_size = batch_size or self._reporter.batch
        self._last_batch = -1
        self._pending = 0
        self._seen = []         # the samples of each batch train_step got since the last batch's end
        self._pending_seen = []
        self._wrapped = None    # (model, its train_step) while fit runs

    def on_train_begin(self, logs=None):
        if not self._reporter.active:
            return
        model = self.model
        # A wrapper a fit that raised left behind (its on_train_end never ran) gives way to this one
        stale = vars(model).get("train_step")
        if stale is not None and getattr(stale, "_batchwise_original", None) is not None:
            del model.train_step
        elif stale is not None:
            return  # the script's own train_step on the instance: batch_size's count
        # The batch fit trains is the data train_step gets: fit's batch_size, not BATCHWISE_BATCH (a script that
        # ignores {batch} was reported at the batch batchwise asked for). The torch backend's train function looks
        # it up on the model at every batch; TensorFlow's and JAX's bound it before this hook, so there it never
        # runs and batch_size counts.
        original, seen = model.train_step, self._seen

        def train_step(data):
            samples = _batch_samples(data)
            if samples is not None:
                seen.append(samples)
            return original(data)

        train_step._batchwise_original = original
        model.train_step = train_step
        self._wrapped = (model, train_step)

    def on_epoch_begin(self, epoch, logs=None):
        self._last_batch = -1

    def on_train_batch_end(self, batch, logs=None):
        if not self._reporter.active:
            return
        # `batch` is the index of the last batch run; with steps_per_execution > 1 it jumps by that.
        ran = batch - self._last_batch
        self._pending += ran
        self._last_batch = batch
        # train_step's own count where it saw each batch (eagerly), else batch_size's
        seen, self._seen[:] = list(self._seen), []
        self._pending_seen += seen if len(seen) == ran else [None] * ran
        optimizer = getattr(self.model, "optimizer", None)
        accumulation = getattr(optimizer, "gradient_accumulation_steps", None) or 1
        if self._pending < accumulation:
            return
        counted = all(n is not None for n in self._pending_seen)
        if counted:
            samples, loader_batch = sum(self._pending_seen), max(self._pending_seen)
        else:
            samples, loader_batch = (self._pending * self._batch_size if self._batch_size else None), None
        self._pending, self._pending_seen = 0, []
        if self._reporter.step(samples, (logs or {}).get("loss"), batch=loader_batch):
            self._reporter.peak()
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self._wrapped is not None:
            model, train_step = self._wrapped
            if vars(model).get("train_step") is train_step:
                del model.train_step
            self._wrapped = None
        self._reporter.peak()

