"""batchwise for Lightning (`import lightning.pytorch`): one line in the Trainer.

    from batchwise.lightning import BatchwiseCallback
    trainer = L.Trainer(max_epochs=10, callbacks=[BatchwiseCallback()])

Under `batchwise ... --cmd`, it prints one `batchwise: step samples=N loss=X` line per optimizer step
(N: the samples of all the batches accumulated into that step, times the world size; X: the loss
training_step returned), stops the Trainer after the steps batchwise asks for (Trainer.should_stop),
and prints the CUDA peak (`peak_bytes`) then and when training ends. Without batchwise it does
nothing. For the `pytorch_lightning` package, use batchwise.pytorch_lightning."""
from lightning.pytorch.callbacks import Callback

from ._lightning import LightningReporting

__all__ = ["BatchwiseCallback"]


class BatchwiseCallback(LightningReporting, Callback):
    """Reports each optimizer step to batchwise and stops after the steps it asks for."""
