#!/usr/bin/env bash
# Runs the TUF project's conformance suite (github.com/theupdateframework/tuf-conformance, at
# the pinned commit below) against Signet's TUF client (scripts/tuf-conformance-client over
# `signet tuf`). The suite is cloned into .build-tuf-conformance/ (never committed) with its own
# Python environment and its pinned dependencies (python-tuf, securesystemslib, pytest); it
# needs faketime (scripts/install-deps.sh installs it). Expected failures, each with its reason,
# are in scripts/tuf-conformance-client.xfails (the suite reads it; an xfail that passes fails).
#
# Where the suite comes from: $TUF_CONFORMANCE_SRC (a clone or a bare mirror holding the pinned
# commit), else GitHub. Machines that reach only Debian's packages and PyPI (the suite is not on
# PyPI) need the first: hence not a step of .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=eec841c186f81f2d9d8d30460c7e7deefa615f9e
work=.build-tuf-conformance
if [ "$(git -C "$work/src" rev-parse HEAD 2>/dev/null || true)" != "$commit" ]; then
  rm -rf "$work"
  mkdir -p "$work"
  git clone -q --no-checkout "${TUF_CONFORMANCE_SRC:-https://github.com/theupdateframework/tuf-conformance}" "$work/src"
  git -C "$work/src" checkout -q "$commit"
fi
if [ ! -x "$work/env/bin/pytest" ]; then
  python3 -m venv "$work/env"
  "$work/env/bin/python" -m pip install -q -e "$work/src"
fi
[ -x .build/debug/signet ] || swift build --product signet
client=$PWD/scripts/tuf-conformance-client
cd "$work/src"
exec ../env/bin/pytest tuf_conformance --entrypoint "$client" -q -p no:cacheprovider "$@"
