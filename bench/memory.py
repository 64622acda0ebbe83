#!/usr/bin/env python3
"""Peak RSS of pack, inspect, unpack and reverify against the number of files.

    bench/memory.py --signet .build/release/signet 10000 50000 200000

For each count it makes a tree of that many small text files (200 B - 3 KiB, 1,000 per folder,
kept under --work between runs), packs it, inspects the package, unpacks it and re-verifies the
installed tree, reading each command's peak RSS from wait4(). It prints MiB per command and count,
then the slope in MiB per 10,000 files between consecutive counts, next to what the manifest's own
bytes and libzip's copy of the central directory that pack keeps (two entries per file) account for. Also the
RSS of `signet --version` (the runtime and libraries before any work).
"""
import argparse, os, random, shutil, subprocess, sys

parser = argparse.ArgumentParser()
parser.add_argument("--signet", required=True)
parser.add_argument("--work", default=os.environ.get("BENCH_DIR", "/tmp/signet-bench") + "/memory")
parser.add_argument("counts", nargs="*", type=int, default=[10_000, 50_000, 200_000])
args = parser.parse_args()
signet = os.path.abspath(args.signet)
work = os.path.abspath(args.work)
os.makedirs(work, exist_ok=True)


def sh(command):
    subprocess.run(command, shell=True, check=True, executable="/bin/bash")


def peak(arguments):
    """Runs signet with `arguments`; returns its peak RSS in MiB (it must succeed)."""
    process = subprocess.Popen([signet] + arguments, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"signet {' '.join(arguments)} failed ({os.waitstatus_to_exitcode(status)})")
    return usage.ru_maxrss / 1024


key, pub = f"{work}/key.pem", f"{work}/pub.der"
if not os.path.exists(key):
    sh(f"openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out {key} 2>/dev/null && chmod 600 {key}")
    sh(f"openssl pkey -in {key} -pubout -outform DER -out {pub}")

words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()
results = {}
baseline = peak(["--version"])
for count in args.counts:
    tree = f"{work}/tree-{count}"
    if not os.path.exists(tree + "/.complete"):
        shutil.rmtree(tree, ignore_errors=True)
        rng = random.Random(count)
        for index in range(count):
            folder = f"{tree}/d{index // 1000:03d}"
            if index % 1000 == 0:
                os.makedirs(folder)
            with open(f"{folder}/f{index:06d}.txt", "w") as out:
                out.write(" ".join(rng.choice(words) for _ in range(rng.randint(30, 450))))
        open(tree + "/.complete", "w").close()
    package, dest = f"{work}/p-{count}.zip", f"{work}/u-{count}"
    shutil.rmtree(dest, ignore_errors=True)
    for stale in (package,):
        if os.path.exists(stale):
            os.unlink(stale)
    # pack reads the folders as given; .complete is a marker of this script, not packed.
    folders = sorted(f"{tree}/{name}" for name in os.listdir(tree) if name.startswith("d"))
    row = {}
    # Beyond the default limits (50,000 files), pack and the client get the same --max-files.
    limits = ["--max-files", str(max(count, 50_000))]
    row["pack"] = peak(["pack"] + folders + ["--key", key, "--name", "memory", "--version", "1", "--out", package] + limits)
    row["inspect"] = peak(["inspect", package, "--pubkey", pub] + limits)
    row["unpack"] = peak(["unpack", package, "--dest", dest, "--pubkey", pub] + limits)
    row["reverify"] = peak(["reverify", dest, "--pubkey", pub])
    manifest = subprocess.run(["unzip", "-p", package, ".signet/manifest.json"], capture_output=True, check=True).stdout
    row["manifest_mib"] = len(manifest) / (1 << 20)
    results[count] = row
    shutil.rmtree(dest, ignore_errors=True)
    print(f"{count:>8} files: " + "  ".join(f"{name} {row[name]:6.1f}" for name in ("pack", "inspect", "unpack", "reverify"))
          + f"  MiB (manifest {row['manifest_mib']:.1f} MiB)", flush=True)

print(f"\nbaseline (signet --version): {baseline:.1f} MiB")
counts = sorted(results)
print(f"\n{'MiB per 10,000 files':28} {'pack':>7} {'inspect':>8} {'unpack':>7} {'reverify':>9} {'manifest':>9} {'libzip, pack (est.)':>20}")
for low, high in zip(counts, counts[1:]):
    scale = 10_000 / (high - low)
    slope = {name: (results[high][name] - results[low][name]) * scale for name in ("pack", "inspect", "unpack", "reverify", "manifest_mib")}
    # libzip 1.7 keeps about 270 bytes per central-directory entry (heaptrack), two entries per
    # file, for every entry of an archive it writes (pack). Readers show it 256 records at a time.
    libzip = 2 * 270 * 10_000 / (1 << 20)
    print(f"{f'{low:,} -> {high:,}':28} {slope['pack']:7.2f} {slope['inspect']:8.2f} {slope['unpack']:7.2f} {slope['reverify']:9.2f} {slope['manifest_mib']:9.2f} {libzip:20.2f}")
