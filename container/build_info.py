"""Build step, not kept in the image: checks that what the image's labels claim is what got installed, and
writes /opt/opentc/image.json (read by help.py). A mismatch fails the build, so the labels cannot go stale.

usage: build_info.py OUTPUT.json KEY=VALUE...   keys: opentc torch torch-xla torch-xla.build cuda python
       (checked), base os source (recorded as given)
"""

import importlib.metadata as metadata
import json
import platform
import sys

import torch


def torch_xla_origin() -> str:
    """The URL the torch-xla wheel came from, or "" when pip took it from an index (PyPI)."""
    direct = metadata.distribution("torch-xla").read_text("direct_url.json")
    return json.loads(direct)["url"] if direct else ""


def main(output: str, claims: dict[str, str]) -> int:
    found = {
        "opentc": metadata.version("opentc-toolkit"),
        "opentc-launcher": metadata.version("opentc-launcher"),
        "torch": metadata.version("torch"),
        "torch-xla": metadata.version("torch-xla"),
        "torch-xla.origin": torch_xla_origin() or "PyPI",
        "torch.cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
        "transformers": metadata.version("transformers"),
        "accelerate": metadata.version("accelerate"),
        "datasets": metadata.version("datasets"),
        "sagemaker-training": metadata.version("sagemaker-training"),
    }
    build = claims["torch-xla.build"]
    problems = [f"{key}: the label says {claims[key]}, installed is {found[key]}"
                for key in ("opentc", "torch", "torch-xla") if found[key].split("+")[0] != claims[key]]
    if found["opentc-launcher"] != found["opentc"]:
        problems.append(f"opentc-launcher {found['opentc-launcher']} != opentc-toolkit {found['opentc']}")
    if not (found["python"] + ".").startswith(claims["python"] + "."):
        problems.append(f"python: the label says {claims['python']}, installed is {found['python']}")
    if claims["cuda"] != "none" and found["torch.cuda"] != claims["cuda"]:
        problems.append(f"cuda: the label says {claims['cuda']}, torch is built for {found['torch.cuda']}")
    if build.startswith("cuda") and f"/cuda/{build[4:]}/" not in found["torch-xla.origin"]:
        problems.append(f"torch-xla.build: the label says {build}, the wheel came from {found['torch-xla.origin']}")
    if build == "pypi-cpu" and found["torch-xla.origin"] != "PyPI":
        problems.append(f"torch-xla.build: the label says {build}, the wheel came from {found['torch-xla.origin']}")
    if problems:
        print("build_info.py: the image's labels do not match what is installed:", *problems, sep="\n  ",
              file=sys.stderr)
        return 1
    info = {**found, **{k: v for k, v in claims.items() if k not in found}}
    with open(output, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    print(json.dumps(info, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])))
