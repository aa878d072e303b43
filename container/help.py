"""What `docker run <image>` prints (no command, `help` or `--help`): what the image is and how to use it.
Versions come from /opt/opentc/image.json, written and checked when the image was built."""

import json

with open("/opt/opentc/image.json", encoding="utf-8") as f:
    info = json.load(f)

print(f"""\
opentc {info['opentc']}: SageMaker Training Compiler rebuilt on open components, as a SageMaker training image.
PyTorch {info['torch']}, PyTorch/XLA {info['torch-xla']}, Python {info['python']}, transformers {info['transformers']},
accelerate {info['accelerate']}, datasets {info['datasets']}, sagemaker-training {info['sagemaker-training']};
base {info['base']}.
Two compilers: PyTorch/XLA (the default; XLA:CPU without GPUs, XLA:CUDA on GPUs through the {info['xla-cuda']},
CUDA {info['cuda']} libraries from torch's wheels, ptxas {info['ptxas']}) and torch.compile with TorchInductor
(Triton on GPUs, C++ with g++ on CPUs). The driver comes from the host.

Run a training job (a folder laid out like /opt/ml: input/config/*.json, input/data/<channel>/, code/):
  docker run --rm --gpus all -v /path/to/job:/opt/ml <image> train
(with no command and a job mounted, the image runs train too).
The model lands in /path/to/job/model, the verdict in output/success or output/failure. The compiler is
switched on by the hyperparameter sagemaker_training_compiler_enabled="true" in hyperparameters.json, and
sagemaker_training_compiler_backend="inductor" chooses TorchInductor instead of XLA.
`docker stop -t 120` stops a job as SageMaker does: SIGTERM to every worker, SIGKILL after
OPENTC_TERMINATION_GRACE (90) seconds.

Try the bundled sample job (a tiny GPT-2, compiler on; XLA:CPU without GPUs):
  docker run --rm <image> opentc-train /opt/opentc/sample-job

On SageMaker: push the image to ECR and give its URI to CreateTrainingJob (AlgorithmSpecification.TrainingImage)
or to sagemaker.estimator.Estimator(image_uri=...), with the hyperparameters above.
Extend it: FROM <image>, then `pip install -c /opt/opentc/constraints.txt ...` and COPY your code.
Any other command runs as given: docker run --rm -it <image> bash

Documentation: /opt/opentc/README.md in the image (docker run --rm <image> cat /opt/opentc/README.md),
and {info['source']}""")
