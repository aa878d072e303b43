"""What SageMaker's PyTorch images give every job, distributed or not (aws/sagemaker-pytorch-training-toolkit,
`sagemaker_pytorch_container/training.py`), so that a script written for them finds it here too.

Their toolkit exports, before the user's script, `MASTER_ADDR=<hosts[0]>` and `MASTER_PORT=7777`, NCCL's socket
settings (`NCCL_SOCKET_IFNAME` the interface SageMaker names, `NCCL_IB_DISABLE=1`, `NCCL_DEBUG=WARN`) and
`SM_DLC_TORCH_VERSION`, and waits until every host's name resolves. The pre-torchrun recipe depends on the first two:
a script on each host calls `dist.init_process_group(backend, rank=hosts.index(current_host),
world_size=len(hosts))` and leaves the address to the container (their own test resource `mnist.py` does).

Here: a single worker gets MASTER_ADDR and MASTER_PORT (the job's master port, 7777 unless MASTER_PORT says
otherwise); several workers get the world opentc-run makes for them instead, as AWS's torchrun runner does. NCCL's
settings and the torch version reach every job; a value the container sets for one of NCCL's is kept. The interface
is named only where this machine has one by that name (NCCL reads the name as a prefix): a job run by hand on a host
network whose interfaces are called otherwise would have NCCL find none. The other hosts' names are waited for by
every multi-host job (plan.plan_world's peers). Not kept: their toolkit's reading of a script that died with gloo's
`EnforceNotMet` as a success; a failed script's exit code stands here.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from opentc_launcher.common import installed_version

SAGEMAKER_MASTER_PORT = 7777   # training.py's MASTER_PORT, and sagemaker-training's torchrun runner's
NCCL_DEFAULTS = {"NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"}
INTERFACE_VARIABLE = "SM_NETWORK_INTERFACE_NAME"   # resourceconfig.json's network_interface_name, for the script
NET_FOLDER = "/sys/class/net"


@dataclass(frozen=True)
class ContractEnvironment:
    """`decided`: facts of this job, which replace what the container had; `defaults`: what the container may set
    otherwise (its value is kept)."""

    decided: Mapping[str, str]
    defaults: Mapping[str, str]


def network_interfaces(folder: str = NET_FOLDER) -> frozenset[str]:
    """This machine's network interfaces, by name (empty where they cannot be listed)."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def contract_environment(hosts: tuple[str, ...], script_env: Mapping[str, str], master_port: int,
                         single_worker: bool, interfaces: Collection[str]) -> ContractEnvironment:
    """The variables of SageMaker's PyTorch images for a job on `hosts` (hosts[0] is the master), its SM_* variables
    `script_env` (the interface's name), its master port, and whether one worker runs per host (several get their
    world from opentc-run, which keeps it)."""
    decided: dict[str, str] = {}
    if single_worker:
        decided = {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(master_port)}
    torch = installed_version("torch")
    if torch:
        decided["SM_DLC_TORCH_VERSION"] = torch
    defaults = dict(NCCL_DEFAULTS)
    interface = script_env.get(INTERFACE_VARIABLE, "")
    if interface and any(name.startswith(interface) for name in interfaces):
        defaults["NCCL_SOCKET_IFNAME"] = interface
    return ContractEnvironment(decided, defaults)
