"""A DataLoader worker process hits a bad record: PyTorch re-raises it in the main process, wrapped in a
"Caught ValueError in DataLoader worker process 0" whose message quotes the original traceback."""

import torch
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        if index == 5:
            raise ValueError(f"record {index} has a corrupt label field: 'n/a'")
        return torch.tensor([float(index)])


for batch in DataLoader(Records(), batch_size=2, num_workers=1):
    print("batch", batch.tolist(), flush=True)
