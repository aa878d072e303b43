"""buildspec.yml (AWS CodeBuild), checked offline so that a typo fails CI rather than the release build.

Its structure against tests/buildspec.schema.json, then a dry run: every phase's commands in order, each
through the shell the buildspec names, in one shell process for the whole build as buildspec 0.2 runs them
(variables carry from phase to phase), with CodeBuild's rules for a failing phase (post_build runs after a
failed build unless on-failure is ABORT). Stubbed: `aws` (ECR) and `docker` (the engine, and the GPU image it
would build), as scripts on PATH that record their argv. Everything else runs for real, including pip and
pytest; the container tests skip themselves (OPENTC_CONTAINER_TESTS=skip) since docker is a stub.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "tests" / "buildspec.schema.json").read_text())
PHASES = ("install", "pre_build", "build", "post_build")
ACCOUNT, REGION = "123456789012", "us-west-2"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
VERSION = re.search(r'^version = "(.+)"', (REPO / "toolkit" / "pyproject.toml").read_text(), re.M)[1]
FLAVOURS = ("xla", "inductor")


def flavour(*args: str) -> str:
    return subprocess.run([str(REPO / "dev" / "flavour"), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


TAGS = {name: flavour(name, "tag", VERSION) for name in FLAVOURS}

STUB = """\
#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
record = {{"argv": [name, *sys.argv[1:]]}}
if "--password-stdin" in sys.argv:
    record["stdin"] = sys.stdin.read()
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps(record) + "\\n")
if sys.argv[1:3] == ["ecr", "get-login-password"]:
    print("stub-ecr-password")
if name == "nvidia-smi":
    for i in range(int(os.environ["STUB_GPUS"])):
        print(f"GPU {{i}}: NVIDIA H100 80GB HBM3 (UUID: GPU-stub-{{i}})")
if name == "docker" and "--gpus" in sys.argv and os.environ.get("STUB_GPU_JOBS") == "succeed":
    # What a GPU job leaves behind (there is no GPU here): the verdict, the compile report, the log line,
    # and for the all-reduce job each rank's result.
    job = next(a.split(":")[0] for a in sys.argv if a.endswith(":/opt/ml"))
    hps = json.load(open(f"{{job}}/input/config/hyperparameters.json"))
    program = hps["sagemaker_program"]
    inductor = "inductor" in hps.get("sagemaker_training_compiler_backend", "")
    world = int(os.environ["STUB_GPUS"])
    os.makedirs(f"{{job}}/model", exist_ok=True)
    if "xla_all_reduce" in program:
        for rank in range(world):
            with open(f"{{job}}/model/all-reduce-rank{{rank}}.json", "w") as f:
                json.dump({{"rank": rank, "world": world, "sum": world * (world + 1) / 2}}, f)
    elif "ddp_compile" in program:
        for rank in range(world):
            with open(f"{{job}}/model/ddp-rank{{rank}}.json", "w") as f:
                json.dump({{"rank": rank, "world": world, "replicas_equal": True, "backend": "nccl"}}, f)
    elif "fsdp2_compile" in program:
        with open(f"{{job}}/model/losses.json", "w") as f:
            json.dump({{"losses": [1.0, 0.5], "world": world, "sharded": True, "device": "cuda"}}, f)
    elif "run_clm_tiny" in program:
        os.makedirs(f"{{job}}/output/data", exist_ok=True)
        with open(f"{{job}}/output/data/trainer_metrics.json", "w") as f:
            json.dump({{"device": "cuda:0", "sharded": "fsdp" in hps}}, f)
    else:
        os.makedirs(f"{{job}}/output/data/compiler", exist_ok=True)
        open(f"{{job}}/output/success", "w").close()
        report = ({{"backend": "inductor", "device": "cuda"}} if inductor else {{"backend": "xla", "device": "CUDA"}})
        with open(f"{{job}}/output/data/compiler/compile-report-rank0.json", "w") as f:
            json.dump({{**report, "graphs_compiled": 2, "exit_code": 0}}, f)
        print("opentc-launcher INFO rank 0/1: torch.compile (TorchInductor) ready on cuda" if inductor else
              "opentc_toolkit INFO     PyTorch/XLA on PJRT_DEVICE=CUDA (1 GPU(s) on this host)")
sys.exit(1 if " ".join([name, *sys.argv[1:2]]) == os.environ.get("STUB_FAIL") else 0)
"""

# Runs the commands listed in the manifest ("phase policy file" lines) in this one shell, as CodeBuild does.
DRIVER = r"""
CODEBUILD_BUILD_SUCCEEDING=1; export CODEBUILD_BUILD_SUCCEEDING
__failed=
while read -r __phase __policy __file <&3; do
  if [ "$__phase" = "$__failed" ]; then continue; fi
  echo "[dry run: $__phase] $(cat "$__file")"
  eval "$(cat "$__file")" </dev/null
  __rc=$?
  echo "$__file $__rc" >>"$DRY_RUN_RESULTS"
  if [ "$__rc" -ne 0 ]; then
    __failed=$__phase; CODEBUILD_BUILD_SUCCEEDING=0
    [ "$__policy" = continue ] || break
  fi
done 3<"$DRY_RUN_MANIFEST"
"""


def load():
    return yaml.safe_load((REPO / "buildspec.yml").read_text())


class DryRun:
    def __init__(self, folder: Path, spec: dict, stub_fail: str = "", project_env: dict | None = None,
                 gpus: int = 0, gpu_jobs: str = ""):
        self.folder = folder
        bin_dir = folder / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("aws", "docker") + (("nvidia-smi",) if gpus else ()):
            (bin_dir / name).write_text(STUB.format(python=sys.executable))
            (bin_dir / name).chmod(0o755)
        manifest, self.commands = [], []
        assert all("finally" not in spec["phases"].get(p, {}) for p in PHASES), "the dry run has no `finally`"
        for phase in PHASES:
            body = spec["phases"].get(phase)
            if not body:
                continue
            default = "continue" if phase == "build" else "abort"   # CodeBuild: post_build runs after build
            policy = {"ABORT": "abort", "CONTINUE": "continue"}.get(body.get("on-failure"), default)
            for command in body["commands"]:
                path = folder / f"command-{len(self.commands)}"
                path.write_text(command)
                manifest.append(f"{phase} {policy} {path}\n")
                self.commands.append(command)
        (folder / "manifest").write_text("".join(manifest))
        shell = {"bash": "/bin/bash", "/bin/sh": "/bin/sh"}[spec.get("env", {}).get("shell", "/bin/sh")]
        env = {
            "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
            "HOME": str(folder), "LANG": "C.UTF-8",
            "STUB_LOG": str(folder / "calls.jsonl"), "STUB_FAIL": stub_fail,
            "STUB_GPUS": str(gpus), "STUB_GPU_JOBS": gpu_jobs, "TMPDIR": str(folder),
            "DRY_RUN_MANIFEST": str(folder / "manifest"), "DRY_RUN_RESULTS": str(folder / "results"),
            "PYTEST_DEBUG_TEMPROOT": str(folder), "OPENTC_CONTAINER_TESTS": "skip",
            # What CodeBuild provides, then the buildspec's variables, then the project's (which win).
            "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "CODEBUILD_SRC_DIR": str(REPO),
            "CODEBUILD_SOURCE_REPO_URL": "https://example.com/opentc.git",
            **spec.get("env", {}).get("variables", {}),
            "AWS_ACCOUNT_ID": ACCOUNT, **(project_env or {}),
        }
        proc = subprocess.run([shell, "-c", DRIVER], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout
        self.output = proc.stdout
        results = (folder / "results").read_text().splitlines() if (folder / "results").exists() else []
        self.exit_codes = [int(line.rsplit(" ", 1)[1]) for line in results]
        log = folder / "calls.jsonl"
        self.calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def argvs(self, *prefix):
        return [c["argv"] for c in self.calls if c["argv"][:len(prefix)] == list(prefix)]

    def index(self, *prefix):
        return next(i for i, c in enumerate(self.calls) if c["argv"][:len(prefix)] == list(prefix))


def build_args(argv):
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--build-arg")


def test_buildspec_matches_the_schema():
    jsonschema.validate(load(), SCHEMA)


@pytest.mark.parametrize(("mutate", "complaint"), [
    (lambda s: s["phases"].__setitem__("pre-build", s["phases"].pop("pre_build")), "pre-build"),
    (lambda s: s["phases"]["build"]["commands"].append({"echo built": "ok"}), "is not of type 'string'"),
    (lambda s: s["phases"]["build"].__setitem__("on-failure", "STOP"), "STOP"),
    (lambda s: s["env"]["variables"].__setitem__("DOCKER_BUILDKIT", 1), "is not of type 'string'"),
    (lambda s: s["phases"]["post_build"].pop("commands"), "'commands' is a required property"),
])
def test_the_schema_rejects_likely_mistakes(mutate, complaint):
    spec = copy.deepcopy(load())
    mutate(spec)
    with pytest.raises(jsonschema.ValidationError, match=re.escape(complaint)):
        jsonschema.validate(spec, SCHEMA)


def test_dry_run_logs_in_builds_tests_and_pushes_both_flavours_with_dlc_style_tags(tmp_path):
    run = DryRun(tmp_path, load())
    assert run.exit_codes == [0] * len(run.commands), run.output
    uris = {name: f"{REGISTRY}/opentc:{tag}" for name, tag in TAGS.items()}
    assert uris["xla"].endswith(f"-xla-gpu-py311-cu126-debian12-sagemaker-v{VERSION}")
    assert uris["inductor"].endswith(f"-inductor-gpu-py311-cu130-debian12-sagemaker-v{VERSION}")
    assert run.argvs("aws") == [["aws", "ecr", "get-login-password", "--region", REGION]]
    login = [c for c in run.calls if c["argv"][:2] == ["docker", "login"]]
    assert [c["argv"] for c in login] == [["docker", "login", "--username", "AWS", "--password-stdin", REGISTRY]]
    assert login[0]["stdin"].strip() == "stub-ecr-password"      # the password went through the pipe
    builds = run.argvs("docker", "build")
    assert [build[-3:] for build in builds] == [["--tag", uris[name], "."] for name in FLAVOURS]
    for name, build in zip(FLAVOURS, builds, strict=True):
        args = build_args(build)
        wanted = dict(line.split("=", 1) for line in flavour(name, "build-args", VERSION).splitlines())
        assert {key: args.get(key) for key in wanted} == wanted, name      # the stack file's versions
        assert args["OPENTC_VERSION"] == VERSION and args["SOURCE_URL"] == "https://example.com/opentc.git"
        assert "BASE_IMAGE" not in args, "the GPU images use the Dockerfile's base"
    assert ["docker", "run", "--rm", uris["xla"]] in run.argvs("docker", "run")                  # the help
    for uri in uris.values():
        assert any(argv[4:6] == ["python", "-c"] for argv in run.argvs("docker", "run", "--rm", uri))
    assert "container tests skipped: OPENTC_CONTAINER_TESTS=skip" in run.output          # pytest found them
    assert run.output.count("GPU gate skipped: no GPU visible on this host") == 2        # a CPU build host
    assert not [argv for argv in run.argvs("docker", "run") if "--gpus" in argv]
    assert run.argvs("docker", "push") == [["docker", "push", uris[name]] for name in FLAVOURS]
    order = [run.index("docker", "login"), run.index("docker", "build"), run.index("docker", "run"),
             run.index("docker", "push")]
    assert order == sorted(order) and run.calls[-1]["argv"][:2] == ["docker", "push"]


def test_the_repository_comes_from_the_project_environment(tmp_path):
    run = DryRun(tmp_path, load(), project_env={"ECR_REPOSITORY": "ml/opentc"})
    assert run.argvs("docker", "push") == [["docker", "push", f"{REGISTRY}/ml/opentc:{TAGS[name]}"]
                                           for name in FLAVOURS]


def test_a_typo_in_a_command_fails_the_dry_run_and_nothing_is_pushed(tmp_path):
    spec = load()
    spec["phases"]["build"]["commands"][0] = spec["phases"]["build"]["commands"][0].replace("image-build",
                                                                                          "image-biuld", 1)
    run = DryRun(tmp_path, spec)
    assert 127 in run.exit_codes                                  # command not found
    assert run.argvs("docker", "build") == [] and run.argvs("docker", "push") == []


@pytest.mark.parametrize("on_failure", ["ABORT", "CONTINUE"])
def test_a_failing_image_test_stops_the_push(tmp_path, on_failure):
    # With CONTINUE (CodeBuild's default for build), post_build still runs: its guard must stop the push.
    spec = load()
    spec["phases"]["build"]["on-failure"] = on_failure
    run = DryRun(tmp_path, spec, stub_fail="docker run")
    assert run.argvs("docker", "build") and run.argvs("docker", "run")
    assert run.argvs("docker", "push") == []
    assert run.exit_codes[-1] != 0


def gpu_runs(run):
    return [argv for argv in run.argvs("docker", "run") if "--gpus" in argv]


@pytest.mark.parametrize("gpus", [1, 4])
def test_on_a_gpu_host_the_gate_runs_each_images_jobs_and_checks_them_before_the_push(tmp_path, gpus):
    # Stubbed: nvidia-smi (it lists `gpus` GPUs) and what the GPU jobs leave behind (no GPU here).
    run = DryRun(tmp_path, load(), gpus=gpus, gpu_jobs="succeed")
    assert run.exit_codes == [0] * len(run.commands), run.output
    uris = {name: f"{REGISTRY}/opentc:{tag}" for name, tag in TAGS.items()}
    runs = gpu_runs(run)
    by_image = {name: [argv for argv in runs if argv[-2] == uri] for name, uri in uris.items()}
    # xla: the sample on XLA and on Inductor, then the all-reduce, DDP and two sharded jobs; inductor: all but XLA's.
    assert [len(by_image["xla"]), len(by_image["inductor"])] == ([6, 4] if gpus > 1 else [2, 1])
    assert all(argv[:5] == ["docker", "run", "--rm", "--gpus", "all"] and argv[-1] == "train" for argv in runs)
    for name in FLAVOURS:
        assert f"GPU gate passed ({name} image, {gpus} GPU(s))" in run.output
    assert "1/6 skipped: the inductor image has no XLA" in run.output
    assert ("3/6 to 6/6 skipped" in run.output) == (gpus == 1)
    assert ("6/6: the Trainer with --fsdp" in run.output) == (gpus > 1)
    last_gpu_run = max(i for i, c in enumerate(run.calls) if "--gpus" in c["argv"])
    assert run.index("docker", "push") > last_gpu_run


def test_a_gpu_job_that_leaves_no_verdict_fails_the_gate_and_nothing_is_pushed(tmp_path):
    run = DryRun(tmp_path, load(), gpus=2)          # docker exits 0, but the job wrote nothing
    assert len(gpu_runs(run)) == 1
    assert "GPU gate FAILED: the sample job left no output/success" in run.output
    assert run.argvs("docker", "push") == [] and run.exit_codes[-1] != 0
