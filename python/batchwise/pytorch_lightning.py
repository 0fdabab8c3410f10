"""batchwise for the `pytorch_lightning` package: as batchwise.lightning, for its Trainer.

    from batchwise.pytorch_lightning import BatchwiseCallback
    trainer = pl.Trainer(max_epochs=10, callbacks=[BatchwiseCallback()])"""
from pytorch_lightning.callbacks import Callback

from ._lightning import LightningReporting

__all__ = ["BatchwiseCallback"]


class BatchwiseCallback(LightningReporting, Callback):
    """Reports each optimizer step to batchwise and stops after the steps it asks for."""
