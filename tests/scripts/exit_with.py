"""Exits with the code given as --code, after saying so on stderr (as an argparse error would)."""

import argparse
import sys

p = argparse.ArgumentParser()
p.add_argument("--code", type=int, required=True)
args, _ = p.parse_known_args()
print(f"giving up with exit code {args.code}", file=sys.stderr)
sys.exit(args.code)
