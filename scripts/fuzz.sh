#!/usr/bin/env bash
# Fuzzes one parser of untrusted bytes with libFuzzer (and AddressSanitizer) for SECONDS.
#
#   scripts/fuzz.sh TARGET SECONDS        TARGET: a folder of Tests/SignetCLITests/FuzzCorpus (SignetFuzz
#                                         without arguments lists the same names)
#
# Builds Fuzz/SignetFuzz with -sanitize=fuzzer,address into .build-fuzz (lld: the default gold
# linker crashes on it; --export-dynamic: main finds LLVMFuzzerRunDriver with dlsym, because
# Swift's main replaces libFuzzer's). Starts from a copy of the seed corpus
# Tests/SignetCLITests/FuzzCorpus/TARGET (new inputs libFuzzer finds stay in
# .build-fuzz/corpus/TARGET). Prints libFuzzer's own report and its final statistics (executions,
# executions per second). A crash fails the script; its input is copied into the seed corpus, so
# that FuzzCorpusTests runs it in every test run from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET SECONDS}
seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
[ -d "Tests/SignetCLITests/FuzzCorpus/$target" ] || { echo "fuzz.sh: no seed corpus Tests/SignetCLITests/FuzzCorpus/$target" >&2; exit 2; }

swift build --product SignetFuzz --scratch-path .build-fuzz \
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld -Xlinker --export-dynamic >&2
binary=.build-fuzz/debug/SignetFuzz
work=.build-fuzz/corpus/$target
artifacts=.build-fuzz/artifacts/$target
mkdir -p "$work" "$artifacts"
cp -n "Tests/SignetCLITests/FuzzCorpus/$target"/* "$work"/ 2>/dev/null || true

# Leak checking stays off: the parsers run millions of times and the toolchain's own runtime
# keeps caches; AddressSanitizer still stops at any memory error.
status=0
ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" "$binary" "$target" -max_total_time="$seconds" -print_final_stats=1 \
  -rss_limit_mb=2048 -timeout=20 -artifact_prefix="$artifacts/" "$work" 2>&1 | tee ".build-fuzz/$target.log" || status=$?
if ! grep -q "Done [0-9]* runs in" ".build-fuzz/$target.log"; then
  echo "fuzz.sh: $target did not fuzz (no libFuzzer report)" >&2
  status=1
fi
for crash in "$artifacts"/crash-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
  [ -e "$crash" ] || continue
  cp "$crash" "Tests/SignetCLITests/FuzzCorpus/$target/"
  echo "fuzz.sh: $target: $(basename "$crash") added to Tests/SignetCLITests/FuzzCorpus/$target (add a regression test)" >&2
  status=1
done
runs=$(grep -o "stat::number_of_executed_units: *[0-9]*" ".build-fuzz/$target.log" | grep -o "[0-9]*$" || echo 0)
rate=$(grep -o "stat::average_exec_per_sec: *[0-9]*" ".build-fuzz/$target.log" | grep -o "[0-9]*$" || echo 0)
echo "fuzz.sh: $target: $runs executions in ${seconds}s ($rate/s), status $status"
exit "$status"
