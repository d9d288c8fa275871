#!/usr/bin/env bash
# Create .venv with a Python >= 3.12 found on this machine and install ssgp-ppl with its dev extra.
# Usage: bash scripts/setup.sh        (idempotent: an existing good .venv is reused)
set -euo pipefail
cd "$(dirname "$0")/.."

ok() { "$@" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
  local c v
  for c in python3.14 python3.13 python3.12 python3 python; do
    if command -v "$c" >/dev/null 2>&1 && ok "$c"; then echo "$c"; return 0; fi
  done
  # pyenv installs that are not the active version (e.g. PYENV_VERSION=3.12.1 python3.12)
  if command -v pyenv >/dev/null 2>&1; then
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.(1[2-9])' | sort -V); do
      if PYENV_VERSION="$v" ok python3; then echo "PYENV_VERSION=$v python3"; return 0; fi
    done
  fi
  for p in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9]; do
    if [ -x "$p" ] && ok "$p"; then echo "$p"; return 0; fi
  done
  return 1
}

if [ -x .venv/bin/python ] && ok .venv/bin/python; then
  py=.venv/bin/python
else
  rm -rf .venv
  found=$(find_python) || { echo "setup: no Python >= 3.12 found (install one, e.g. pyenv install 3.12)" >&2; exit 2; }
  echo "setup: creating .venv with $found" >&2
  env $found -m venv .venv
  py=.venv/bin/python
fi
# reinstall only when pyproject.toml changed since the last install (the package is editable)
stamp=.venv/.ssgp-ppl-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$py" -c 'import ssgp_ppl' 2>/dev/null; then
  "$py" -m pip install -q --upgrade pip >/dev/null
  "$py" -m pip install -q -e ".[dev]"
  echo "$want" > "$stamp"
fi
echo "setup: ready ($("$py" --version))" >&2
