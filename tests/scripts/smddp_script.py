"""A script written for SageMaker's data parallelism library (SMDDP), as AWS's guide has it: the library's module
registers the "smddp" backend of torch.distributed."""

import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
import torch.distributed as dist

dist.init_process_group(backend="smddp")
