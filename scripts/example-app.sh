#!/usr/bin/env bash
# Builds examples/reverify-app — an app in a package of its own that depends on this checkout's
# `SignetReverify` library product by path, as README's "Using the library" shows — and prints
# the path of its binary. ReverifyCLITests runs it (so `swift test` builds the example and checks
# that its binary links neither libzip nor libcurl). Its own build folder: .build-example.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --package-path examples/reverify-app --scratch-path "$PWD/.build-example" >&2
echo "$PWD/.build-example/debug/reverify-app"
