#!/usr/bin/env python3
"""A Hugging Face Trainer on a small GPT-2 built from a config (2 layers) and generated token
sequences: nothing is downloaded. Tuned by batchwise through one callback.

    pip install ./python transformers
    batchwise tune --cmd -- python examples/transformers_gpt2.py --batch-size {batch}

The only batchwise line is `callbacks=[BatchwiseCallback()]`: under batchwise it prints one
`batchwise: step` line per optimizer step (per_device_train_batch_size x gradient_accumulation_steps
samples) and stops the Trainer after the steps batchwise asks for; run by itself the script trains
as it would without it.
"""
import argparse
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from batchwise.transformers import BatchwiseCallback


class CountingSequences(torch.utils.data.Dataset):
    """Token sequences that count up from a random start by a random stride (mod the vocabulary):
    after two tokens the rest is predictable, so the loss falls. Generated from the index."""

    def __init__(self, size, seq_len, vocab_size):
        self.size, self.seq_len, self.vocab_size = size, seq_len, vocab_size

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        start, stride = torch.randint(self.vocab_size, (2,), generator=g)
        tokens = (start + (stride % 7 + 1) * torch.arange(self.seq_len)) % self.vocab_size
        return {"input_ids": tokens, "labels": tokens}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16, help="per_device_train_batch_size")
    parser.add_argument("--accumulate", type=int, default=1, help="gradient_accumulation_steps")
    parser.add_argument("--max-steps", type=int, default=200, help="optimizer steps")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--n-embd", type=int, default=128, help="GPT-2's width (4 heads)")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--logging-steps", type=int, default=50)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--without-batchwise", action="store_true", help="leave the callback out")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=4, n_embd=args.n_embd, n_positions=args.seq_len,
                        vocab_size=args.vocab_size, bos_token_id=args.vocab_size - 1, eos_token_id=args.vocab_size - 1)
    model = GPT2LMHeadModel(config)
    data = CountingSequences(100_000, args.seq_len, args.vocab_size)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=args.accumulate,
            max_steps=args.max_steps, learning_rate=1e-3, logging_steps=args.logging_steps, save_strategy="no",
            report_to="none", disable_tqdm=args.quiet, seed=0, dataloader_num_workers=0,
            dataloader_pin_memory=torch.cuda.is_available())
        trainer = Trainer(model=model, args=training, train_dataset=data,
                          callbacks=[] if args.without_batchwise else [BatchwiseCallback()])
        result = trainer.train()
    print(f"trained {result.global_step} optimizer steps, mean loss {result.training_loss:.6f}")


if __name__ == "__main__":
    main()
