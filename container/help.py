"""What `docker run <image>` prints (no command, `help` or `--help`): what the image is and how to use it.
Versions come from /opt/opentc/image.json, written and checked when the image was built."""

import json

with open("/opt/opentc/image.json", encoding="utf-8") as f:
    info = json.load(f)

xla = info.get("flavour", "xla") == "xla"
if xla:
    stack = f"PyTorch {info['torch']}, PyTorch/XLA {info['torch-xla']}"
    compilers = (f"Two compilers: PyTorch/XLA (the default; XLA:CPU without GPUs, XLA:CUDA on GPUs through the "
                 f"{info['xla-cuda']},\nCUDA {info['cuda']} libraries from torch's wheels, ptxas {info['ptxas']}) and "
                 f"torch.compile with TorchInductor\n(Triton on GPUs, C++ with g++ on CPUs). The driver comes from the "
                 f"host.")
    choose = ('sagemaker_training_compiler_backend="inductor" chooses TorchInductor instead of XLA.')
else:
    stack = f"PyTorch {info['torch']} (CUDA {info['cuda']})"
    compilers = (f"The inductor flavour: torch.compile with TorchInductor (Triton on GPUs, C++ with g++ on CPUs), CUDA "
                 f"{info['cuda']}\nlibraries from torch's wheels; the driver comes from the host and must support CUDA "
                 f"{info['cuda']} (R580 or later).\nNo PyTorch/XLA here: for XLA, or drivers older than R580, use the "
                 f"xla image ({info.get('xla-image-tag', 'its tag')}).")
    choose = "TorchInductor is this image's compiler (sagemaker_training_compiler_backend defaults to \"inductor\")."

print(f"""\
opentc {info['opentc']} ({info.get('flavour', 'xla')} flavour): SageMaker Training Compiler rebuilt on open components,
as a SageMaker training image. {stack}, Python {info['python']}, transformers {info['transformers']},
accelerate {info['accelerate']}, datasets {info['datasets']}, sagemaker-training {info['sagemaker-training']};
base {info['base']}.
{compilers}

Run a training job (a folder laid out like /opt/ml: input/config/*.json, input/data/<channel>/, code/):
  docker run --rm --gpus all -v /path/to/job:/opt/ml <image> train
(with no command and a job mounted, the image runs train too).
The model lands in /path/to/job/model, the verdict in output/success or output/failure. The compiler is
switched on by the hyperparameter sagemaker_training_compiler_enabled="true" in hyperparameters.json;
{choose}
`docker stop -t 120` stops a job as SageMaker does: SIGTERM to every worker, SIGKILL after
OPENTC_TERMINATION_GRACE (90) seconds.

Try the bundled sample job (a tiny GPT-2, compiler on; on the CPU without GPUs):
  docker run --rm <image> opentc-train /opt/opentc/sample-job

On SageMaker: push the image to ECR and give its URI to CreateTrainingJob (AlgorithmSpecification.TrainingImage)
or to sagemaker.estimator.Estimator(image_uri=...), with the hyperparameters above.
Extend it: FROM <image>, then `pip install -c /opt/opentc/constraints.txt ...` and COPY your code.
Any other command runs as given: docker run --rm -it <image> bash

Documentation: /opt/opentc/README.md and /opt/opentc/docs/ in the image
(docker run --rm <image> cat /opt/opentc/README.md), and {info['source']}""")
