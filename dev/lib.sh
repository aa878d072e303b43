# Sourced by the dev/ scripts (not run): what they share, written once.
#   dev_help "$@"          -h/--help: print the script's header comment (its usage) and exit 0
#   PYTHON                 the interpreter venvs are made with (python3.11, else python3; or as set)
#   up_to_date VENV WANTED, mark_up_to_date VENV WANTED
#                          whether VENV was last set up for WANTED (a digest of what it depends on), and record it
#   new_venv VENV          make VENV unless it is there
#   pip_install PYTHON ARGS...   pip install, quiet, without the package index's "Location ... is ignored" noise
#   our_packages [EXTRA] [-e]    the project's three packages, in the order they need each other, into the array
#                          OUR_PACKAGES (launcher[EXTRA], compare, toolkit; -e: editable): every install takes all three
#   lint                   the lint and type checks of every check (dev/test, dev/test-fast; .pre-commit-config.yaml)
#   PARALLEL               pytest's options to run tests in OPENTC_TEST_WORKERS processes (default 2: a test module
#                          at a time in each, so its module fixtures are made once); 1 runs them in this one

dev_help() {
  case "${1:-}" in
    -h|--help) echo "dev/${0##*/}:"; sed -n '2,/^[^#]/{/^#/{s/^# \{0,1\}//;p}}' "$0"; exit 0 ;;
  esac
}

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"

up_to_date() { [[ -f $1/.opentc-stamp && "$(cat "$1/.opentc-stamp")" == "$2" ]]; }
mark_up_to_date() { echo "$2" > "$1/.opentc-stamp"; }

new_venv() { [[ -x $1/bin/python ]] || "$PYTHON" -m venv "$1"; }

pip_install() {
  local python=$1
  shift
  "$python" -m pip install --quiet "$@" 2> >(grep -v "^WARNING: Location" >&2)
}

our_packages() {
  local extra=${1:+[$1]} editable=()
  [[ ${2:-} == -e ]] && editable=(-e)
  OUR_PACKAGES=()
  for package in "./launcher$extra" ./compare ./toolkit; do OUR_PACKAGES+=("${editable[@]}" "$package"); done
}

PARALLEL=()
if [[ ${OPENTC_TEST_WORKERS:-2} != 1 ]]; then
  PARALLEL=(-n "${OPENTC_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)   # tests/conftest.py's order
fi

lint() {
  .venv/bin/ruff check launcher/src compare/src toolkit/src tests benchmarks container dev/flavour dev/gpu-kit dev/image-sizes
  .venv/bin/mypy
}
