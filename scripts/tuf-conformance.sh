#!/usr/bin/env bash
# Runs the TUF project's conformance suite (theupdateframework/tuf-conformance) against Signet's
# TUF client (scripts/tuf-conformance-client over `signet tuf`). CI runs it (.ci/run).
#
# The suite is the unmodified, pinned copy in ../shared/tuf-conformance (its PROVENANCE.md says
# where it comes from); $TUF_CONFORMANCE_SRC names another copy. It is installed (not editable:
# shared/ is read-only in CI) into its own virtual environment, .build-tuf-conformance/env
# (never committed), with its pinned dependencies from PyPI (python-tuf, securesystemslib,
# pytest); the clients run under faketime (scripts/install-deps.sh installs it). Expected
# failures, each with its reason, are in scripts/tuf-conformance-client.xfails (the suite reads
# it; an xfail that passes fails). There are none: keep it so.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${TUF_CONFORMANCE_SRC:-../shared/tuf-conformance}
[ -f "$src/pyproject.toml" ] || { echo "tuf-conformance: no suite at '$src' (set TUF_CONFORMANCE_SRC)" >&2; exit 1; }
work=.build-tuf-conformance
# Installed again when the copy changed (its pyproject and version file stand for it).
stamp=$(cat "$src/pyproject.toml" "$src/tuf_conformance/__init__.py" | sha256sum | cut -c1-16)
if [ "$(cat "$work/stamp" 2>/dev/null || true)" != "$stamp" ] || [ ! -x "$work/env/bin/pytest" ]; then
  rm -rf "$work"
  python3 -m venv "$work/env"
  "$work/env/bin/python" -m pip install -q "$src"
  echo "$stamp" > "$work/stamp"
fi
[ -x .build/debug/signet ] || swift build --product signet
client=$PWD/scripts/tuf-conformance-client
suite=$("$work/env/bin/python" -c 'import tuf_conformance, os; print(os.path.dirname(tuf_conformance.__file__))')
# The installed package's folder, not --pyargs: the --entrypoint option lives in its conftest.py.
cd "$work"
exec env/bin/pytest "$suite" --entrypoint "$client" -q -p no:cacheprovider "$@"
