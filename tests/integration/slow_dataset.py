"""A dataset whose samples take at least 5 ms each (a sleep: a floor, whatever the machine), for the input-bound
verdict of `bench dataloader`: with 4 workers and batches of 4 a batch cannot arrive faster than every 5 ms."""

import time

import torch

SAMPLE_S = 0.005


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(SAMPLE_S)
        return torch.zeros(8)


def make() -> SlowDataset:
    return SlowDataset()
