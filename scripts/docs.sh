#!/usr/bin/env bash
# The library's DocC documentation: every library target (the layers of docs/ARCHITECTURE.md)
# in one combined archive, so that a link from the umbrella to a lower layer
# (``/SignetCore/SignetError``) is checked too. Warnings are errors: a broken symbol link or an
# undocumented parameter fails. Output: .build/plugins/Swift-DocC/outputs/Signet.doccarchive
# It shares .build with `swift build` (CI runs it after the tests): the symbol graphs come from
# the debug build already there (measured: 35 s, against 89 s for a scratch path of its own, and
# the next `swift build --build-tests` recompiles 4 files).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(SignetCore SignetCrypto SignetManifest SignetReverify SignetArchive SignetNetwork SignetPackage SignetInstall SignetTUF SignetPublish SignetUpdate Signet)
exec swift package generate-documentation --enable-experimental-combined-documentation \
  --warnings-as-errors "${targets[@]/#/--target=}"
