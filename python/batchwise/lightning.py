"""batchwise for Lightning (`import lightning.pytorch`): one line in the Trainer.

    from batchwise.lightning import BatchwiseCallback
    trainer = L.Trainer(max_epochs=10, callbacks=[BatchwiseCallback()])

Under `batchwise ... --cmd`, it prints one `batchwise: step samples=N loss=X` line per optimizer step
(N: the samples of all the batches accumulated into that step, times the world size; X: the loss
training_step returned), stops the Trainer after the steps batchwise asks for (Trainer.should_stop),
and prints the CUDA peak (`peak_bytes`) then and when training ends. Without batchwise it does
nothing. For the `pytorch_lightning` package, use batchwise.pytorch_lightning.

In process instead (no --cmd): batchwise.lightning.fit / sweep / tune(module, datamodule, **options)
run batchwise's engine on the LightningModule's training_step and the DataModule's data."""
from lightning.pytorch.callbacks import Callback

from ._lightning import LightningReporting

__all__ = ["BatchwiseCallback", "fit", "sweep", "tune", "noise", "validate"]


def fit(module, datamodule=None, **options):
    """batchwise.fit on a LightningModule in this process: its training_step, its first optimizer,
    its (or the DataModule's) train_dataloader's dataset. Options as batchwise.fit's.

    Example: batchwise.lightning.fit(LitNet(), FashionData(), memory_budget="1GiB").fit.batch"""
    from ._inprocess import run_lightning
    return run_lightning("fit", module, datamodule, options)


def sweep(module, datamodule=None, **options):
    """batchwise.sweep on a LightningModule in this process (batch_sizes=[...] required)."""
    from ._inprocess import run_lightning
    return run_lightning("sweep", module, datamodule, options)


def tune(module, datamodule=None, **options):
    """batchwise.tune on a LightningModule in this process: what Tuner.scale_batch_size does (the
    largest batch that fits), plus the sweep, the noise scale, the race on the val_dataloader's data
    (held_out), the recommendation and its learning rate. The module's own optimizer is the one
    raced; its learning-rate schedulers are not used (the race sets the rate itself).

    Example: report = batchwise.lightning.tune(LitNet(), FashionData(), epochs=10, lr_schedule="cosine")"""
    from ._inprocess import run_lightning
    return run_lightning("tune", module, datamodule, options)


def noise(module, datamodule=None, **options):
    """batchwise.noise on a LightningModule in this process: the gradient noise scale of its
    training_step's loss. Options as batchwise.noise's."""
    from ._inprocess import run_lightning
    return run_lightning("noise", module, datamodule, options)


def validate(module, datamodule=None, **options):
    """batchwise.validate on a LightningModule in this process: real training at each of
    batch_sizes=[...] judged on its val_dataloader's data (or held_out=...); epochs=N with
    lr_schedule="cosine" for full runs. Options as batchwise.validate's."""
    from ._inprocess import run_lightning
    return run_lightning("validate", module, datamodule, options)


class BatchwiseCallback(LightningReporting, Callback):
    """Reports each optimizer step to batchwise and stops after the steps it asks for."""
