#!/usr/bin/env bash
# The library's DocC documentation: every library target (the layers of docs/ARCHITECTURE.md)
# in one combined archive, so that a link from the umbrella to a lower layer
# (``/SignetCore/SignetError``) is checked too. Warnings are errors: a broken symbol link or an
# undocumented parameter fails. Output: .build-docs/plugins/Swift-DocC/outputs/Signet.doccarchive
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(SignetCore SignetCrypto SignetManifest SignetReverify SignetArchive SignetNetwork SignetPackage SignetInstall SignetTUF Signet)
exec swift package --scratch-path .build-docs generate-documentation --enable-experimental-combined-documentation \
  --warnings-as-errors "${targets[@]/#/--target=}"
