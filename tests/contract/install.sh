#!/usr/bin/env bash
# Installs the contract tools: the Python ones (requirements.txt, from PyPI) into a
# virtual environment, target/contract-venv or $OUTBOX_CONTRACT_VENV, and the TypeScript
# client's (package.json and package-lock.json, from the npm registry) into
# target/contract-node or $OUTBOX_CONTRACT_NODE. Each is left as it is when it already
# holds exactly these versions.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="$here/../../target"

venv="${OUTBOX_CONTRACT_VENV:-$target/contract-venv}"
if ! { [ -x "$venv/bin/schemathesis" ] && cmp -s "$here/requirements.txt" "$venv/requirements.txt"; }; then
  echo "installing the Python contract tools into $venv"
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$here/requirements.txt"
  "$venv/bin/pip" check --disable-pip-version-check >/dev/null
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi

node_tools="${OUTBOX_CONTRACT_NODE:-$target/contract-node}"
if ! { [ -x "$node_tools/node_modules/.bin/tsc" ] && cmp -s "$here/package-lock.json" "$node_tools/package-lock.json"; }; then
  echo "installing the TypeScript contract tools into $node_tools"
  rm -rf "$node_tools"
  mkdir -p "$node_tools"
  cp "$here/package.json" "$here/package-lock.json" "$node_tools/"
  (cd "$node_tools" && npm ci --silent --no-audit --no-fund)
fi
