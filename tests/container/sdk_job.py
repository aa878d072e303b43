"""One SageMaker Python SDK local-mode job against an image, fully offline; run with an SDK venv's python.

    .venv-sdk2/bin/python sdk_job.py v2 IMAGE ROOT --source DIR --entry-script train.py [--channel train=DIR]
                                     [--distribution JSON]
    .venv-sdk3/bin/python sdk_job.py v3 IMAGE ROOT --source DIR (--entry-script F | --command C) [--torchrun N]
                                     [--hp key=json ...] [--env K=V ...] [--channel name=DIR ...] [--no-source]

v2 is `sagemaker.estimator.Estimator(image_uri=..., instance_type="local")` (with --distribution, the SDK's
`sagemaker.pytorch.PyTorch`, which turns `distribution=` into hyperparameters), v3 is
`ModelTrainer(training_mode=Mode.LOCAL_CONTAINER)`, as docs/sagemaker.md's recipes use them. Offline: a region, no
instance-metadata lookups, the SDK's telemetry off, local code and file:// data; no AWS call is made. Writes
ROOT/result.json: {"raised": the exception's text or null}; the SDK raises when the container exits non-zero.
"""

import argparse
import json
import os
import subprocess
import sys
import traceback

p = argparse.ArgumentParser()
p.add_argument("sdk", choices=["v2", "v3"])
p.add_argument("image")
p.add_argument("root")
p.add_argument("--source")
p.add_argument("--entry-script")
p.add_argument("--command")
p.add_argument("--torchrun", type=int)
p.add_argument("--distribution", help="v2: a JSON object for PyTorch(distribution=...), the SDK's PyTorch estimator")
p.add_argument("--hp", action="append", default=[])
p.add_argument("--env", action="append", default=[])
p.add_argument("--channel", action="append", default=[])
args = p.parse_args()

root = os.path.abspath(args.root)
os.makedirs(root, exist_ok=True)
config = os.path.join(root, "sdk-config.yaml")
with open(config, "w") as f:
    f.write("SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n")
os.environ.update(AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                  SAGEMAKER_USER_CONFIG_OVERRIDE=config)
hyperparameters = {}
for item in args.hp:
    key, value = item.split("=", 1)
    hyperparameters[key] = json.loads(value)
environment = dict(item.split("=", 1) for item in args.env)
channels = dict(item.split("=", 1) for item in args.channel)

raised = None
try:
    if args.sdk == "v2":
        from sagemaker.estimator import Estimator
        from sagemaker.local import LocalSession

        session = LocalSession()
        session.config = {"local": {"local_code": True, "container_root": os.path.join(root, "tmp")}}
        os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
        from sagemaker.pytorch import PyTorch

        kind, extra = (Estimator, {})
        if args.distribution:
            kind, extra = PyTorch, {"distribution": json.loads(args.distribution)}
        estimator = kind(
            **extra, image_uri=args.image, role="arn:aws:iam::111111111111:role/local", instance_type="local",
            instance_count=1, entry_point=args.entry_script, source_dir=args.source,
            hyperparameters=hyperparameters, environment=environment, output_path=f"file://{root}/out",
            sagemaker_session=session)
        estimator.fit({name: f"file://{folder}" for name, folder in channels.items()})
    else:
        from sagemaker.core.training.configs import Compute, InputData, SourceCode
        from sagemaker.train.distributed import Torchrun
        from sagemaker.train.model_trainer import Mode, ModelTrainer

        source = None
        if args.source:
            source = SourceCode(source_dir=args.source, entry_script=args.entry_script, command=args.command)
        trainer = ModelTrainer(
            training_mode=Mode.LOCAL_CONTAINER, training_image=args.image, base_job_name="opentc-test",
            source_code=source, compute=Compute(instance_type="local_cpu", instance_count=1),
            distributed=Torchrun(process_count_per_node=args.torchrun) if args.torchrun else None,
            hyperparameters=hyperparameters, environment=environment, local_container_root=root)
        trainer.train(input_data_config=[InputData(channel_name=name, data_source=folder)
                                         for name, folder in channels.items()])
except Exception as e:  # noqa: BLE001  (the SDK raises RuntimeError when the container exits non-zero)
    traceback.print_exc()
    raised = f"{type(e).__name__}: {e}"
finally:
    # Neither SDK removes its containers: the compose files say which.
    for folder, _, files in os.walk(root):
        if "docker-compose.yaml" in files:
            subprocess.run(["docker-compose", "-f", os.path.join(folder, "docker-compose.yaml"), "rm", "-f", "-s"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
with open(os.path.join(root, "result.json"), "w") as f:
    json.dump({"raised": raised}, f)
sys.exit(0)
