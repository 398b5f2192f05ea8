#!/usr/bin/env bash
# Installs the contract tools (requirements.txt, from PyPI) into a virtual environment:
# target/contract-venv, or $OUTBOX_CONTRACT_VENV. Does nothing when it already holds
# exactly these versions.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${OUTBOX_CONTRACT_VENV:-$here/../../target/contract-venv}"
stamp="$venv/requirements.txt"
if [ -x "$venv/bin/schemathesis" ] && cmp -s "$here/requirements.txt" "$stamp"; then
  exit 0
fi
python="${PYTHON:-python3}"
echo "installing the contract tools into $venv"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$here/requirements.txt"
"$venv/bin/pip" check --disable-pip-version-check >/dev/null
cp "$here/requirements.txt" "$stamp"
