#!/usr/bin/env python3
"""Signet vs. the openssl + zip/unzip pipeline, alternating runs, medians and ratios.

Every row times Signet and its peer alternately (A B, then B A, ...), warms the inputs in the
page cache right before each timing (BENCHMARKING.md: the cache is paged out after a minute),
reads each child's peak RSS from wait4(), and reports the median time of each side and the
median of the per-pair ratios Signet/peer, against the targets of issue 6.
"""
import glob
import argparse, io, json, os, platform, random, shutil, statistics, subprocess, sys, time, zipfile

parser = argparse.ArgumentParser()
parser.add_argument("--signet", required=True)
parser.add_argument("--reps", type=int, default=3, help="pairs per row (default 3)")
parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 1 GiB inputs, 10,000 small files, 100 x 10 MiB")
parser.add_argument("--only", nargs="*", help="run only these rows")
parser.add_argument("--work", default=os.environ.get("BENCH_DIR", "/tmp/signet-bench"), help="scratch directory (data is kept between runs)")
parser.add_argument("--json", default="bench/results.json")
parser.add_argument("--out", help="where commands write their output (default WORK/out); e.g. a tmpfs, to time the CPU without the disk")
args = parser.parse_args()

GiB = 1 << 30
work = os.path.abspath(args.work)
os.makedirs(work, exist_ok=True)
signet = os.path.abspath(args.signet)


def sh(command, **kw):
    return subprocess.run(command, shell=True, check=True, executable="/bin/bash", **kw)


def timed(command):
    """Runs a shell command; returns (seconds, peak RSS in MiB of the largest process).

    The command runs under /usr/bin/time, which reports the largest RSS of its children: a
    child forked from this Python process directly would report this process's own peak (Linux
    carries the forked address space's high-water mark across exec), inflating every row that
    this process made large inputs for."""
    start = time.monotonic()
    with open(f"{work}/.rss", "w+") as rss:
        process = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss.name, "/bin/bash", "-c", command], stdout=subprocess.DEVNULL)
        status = process.wait()
        elapsed = time.monotonic() - start
        rss.seek(0)
        lines = [line for line in rss.read().split("\n") if line.strip().isdigit()]
    peak = int(lines[-1]) / 1024 if lines else 0
    if status != 0:
        sys.exit(f"benchmark command failed ({status}): {command}")
    return elapsed, peak


def warm(*paths):
    for path in paths:
        if os.path.isdir(path):
            sh(f"find {path!r} -type f -print0 | xargs -0 cat > /dev/null")
        elif os.path.exists(path):
            sh(f"cat {path!r} > /dev/null")


# ---- data -----------------------------------------------------------------------------------
size = int(GiB * args.scale)
small_count = int(10_000 * args.scale)
medium_count = max(2, int(100 * args.scale))
key = f"{work}/key.pem"
pub = f"{work}/pub.pem"
pub_der = f"{work}/pub.der"
if not os.path.exists(key):
    sh(f"openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out {key} 2>/dev/null && chmod 600 {key}")
    sh(f"openssl pkey -in {key} -pubout -out {pub} && openssl pkey -in {key} -pubout -outform DER -out {pub_der}")


def make_random(path, n):
    if not os.path.exists(path) or os.path.getsize(path) != n:
        sh(f"head -c {n} /dev/urandom > {path!r}")


def make_text(path, n, seed=1):
    if os.path.exists(path) and os.path.getsize(path) == n:
        return
    words = [("w%d" % i).encode() for i in range(5000)]
    rng = random.Random(seed)
    with open(path, "wb") as f:
        block = b"".join(b" ".join(rng.choice(words) for _ in range(12)) + b"\n" for _ in range(20000))
        written = 0
        while written < n:
            f.write(block[: n - written])
            written += len(block)


small = f"{work}/small"
medium = f"{work}/medium"


def common_data():
    """The inputs most rows share (3 GiB and 10,000 files): made only when a selected row needs them."""
    make_random(f"{work}/random.bin", size)
    make_random(f"{work}/one-kib.txt", 1024)
    make_text(f"{work}/text.txt", size)
    if not os.path.isdir(small) or len(os.listdir(small)) != min(small_count, 100):
        shutil.rmtree(small, ignore_errors=True)
        for i in range(small_count):
            d = f"{small}/d{i % 100:02d}"
            os.makedirs(d, exist_ok=True)
            with open(f"{d}/f{i:05d}.dat", "wb") as f:
                f.write(os.urandom(2048) + b"text " * 409 + b"!")
    if not os.path.isdir(medium) or len(os.listdir(medium)) != medium_count:
        shutil.rmtree(medium, ignore_errors=True)
        os.makedirs(medium)
        for i in range(medium_count):
            make_text(f"{medium}/part{i:03d}.txt", int(10 * (1 << 20)), seed=i)

# ---- rows -----------------------------------------------------------------------------------
out = os.path.abspath(args.out) if args.out else f"{work}/out"
S = signet
K = f"--key {key}"
# Peer pipelines: what release engineers script today.
sign_each = f"find . -type f ! -name '*.sig' -print0 | xargs -0 -I{{}} openssl dgst -sha256 -sign {key} -out {{}}.sig {{}}"
verify_each = f"find . -type f ! -name '*.sig' -print0 | xargs -0 -I{{}} openssl dgst -sha256 -verify {pub} -signature {{}}.sig {{}} > /dev/null"

def unpack_row(package, target):
    """Signet installs (verifying) a package; the peer unzips files + .sig and verifies each."""
    return dict(target=target, prepare=package,
        signet=lambda r: f"{S} unpack {work}/{package}.zip --dest {out}/s{r} --pubkey {pub_der}",
        peer=lambda r: f"unzip -q {work}/{package}-peer.zip -d {out}/p{r} && cd {out}/p{r} && {verify_each}")


rows = {
    "sign-1g": dict(target=1.05, inputs=[f"{work}/random.bin"],
        signet=lambda r: f"{S} sign {work}/random.bin {K} --out {out}/s{r}.sig",
        peer=lambda r: f"openssl dgst -sha256 -sign {key} -out {out}/p{r}.sig {work}/random.bin"),
    # Issue 28: the fixed cost of one run. 50 signatures of a 1 KiB file, one process each (the
    # way pipelines call openssl dgst), the peer doing the same with openssl.
    "sign-small-x50": dict(target=4.0, inputs=[f"{work}/one-kib.txt"],
        signet=lambda r: f"for i in $(seq 50); do {S} sign {work}/one-kib.txt {K} --out {out}/s{r}-$i.sig > /dev/null || exit 1; done",
        peer=lambda r: f"for i in $(seq 50); do openssl dgst -sha256 -sign {key} -out {out}/p{r}-$i.sig {work}/one-kib.txt || exit 1; done"),
    "pack-1g-stored": dict(target=0.4, inputs=[f"{work}/random.bin"],
        signet=lambda r: f"{S} pack {work}/random.bin {K} --name b --version 1 --store --out {out}/s{r}.zip",
        peer=lambda r: f"cd {work} && openssl dgst -sha256 -sign {key} -out random.bin.sig random.bin && zip -0 -q {out}/p{r}.zip random.bin random.bin.sig"),
    "pack-1g-text-deflate6": dict(target=0.9, inputs=[f"{work}/text.txt"],
        signet=lambda r: f"{S} pack {work}/text.txt {K} --name b --version 1 --compression-level 6 --out {out}/s{r}.zip",
        peer=lambda r: f"cd {work} && openssl dgst -sha256 -sign {key} -out text.txt.sig text.txt && zip -6 -q {out}/p{r}.zip text.txt text.txt.sig"),
    "pack-100x10m-deflate6": dict(target=0.55, inputs=[medium],
        signet=lambda r: f"{S} pack {medium} {K} --name b --version 1 --out {out}/s{r}.zip",
        peer=lambda r: f"cd {medium} && {sign_each} && zip -6 -q -r {out}/p{r}.zip . && rm -f *.sig"),
    "unpack-1g-stored": unpack_row("stored", 0.3),
    "unpack-1g-deflated": unpack_row("deflated", 0.7),
    "pack-10k-small": dict(target=0.05, inputs=[small],
        signet=lambda r: f"{S} pack {small} {K} --name b --version 1 --out {out}/s{r}.zip",
        peer=lambda r: f"cd {small} && {sign_each} && zip -q -r {out}/p{r}.zip . && find . -name '*.sig' -delete"),
    "unpack-10k-small": unpack_row("small", 0.2),
    "reverify-10k": dict(target=1.0, prepare="tree",
        signet=lambda r: f"{S} reverify {work}/tree --pubkey {pub_der}",
        peer=lambda r: f"cd {work}/tree && find . -path ./.signet -prune -o -type f -print0 | xargs -0 sha256sum > /dev/null"),
}


def prepare(kind):
    """Packages for the unpack rows: Signet's, and the peer's zip of files + .sig beside them."""
    if kind in ("stored", "deflated"):
        source = f"{work}/random.bin" if kind == "stored" else f"{work}/text.txt"
        if not os.path.exists(f"{work}/{kind}.zip"):
            sh(f"{S} pack {source} {K} --name b --version 1 {'--store' if kind == 'stored' else ''} --out {work}/{kind}.zip > /dev/null")
            name = os.path.basename(source)
            sh(f"cd {work} && openssl dgst -sha256 -sign {key} -out {name}.sig {name} && zip {'-0' if kind == 'stored' else '-6'} -q {kind}-peer.zip {name} {name}.sig")
        return [f"{work}/{kind}.zip", f"{work}/{kind}-peer.zip"]
    if kind == "small":
        if not os.path.exists(f"{work}/small.zip"):
            sh(f"{S} pack {small} {K} --name b --version 1 --out {work}/small.zip > /dev/null")
            sh(f"cd {small} && {sign_each} && zip -q -r {work}/small-peer.zip . && find . -name '*.sig' -delete")
        return [f"{work}/small.zip", f"{work}/small-peer.zip"]
    if kind == "random-256m":
        make_random(f"{work}/random-256m.bin", int(256 * (1 << 20) * args.scale))
        return [f"{work}/random-256m.bin"]
    if kind == "tree":
        if not os.path.isdir(f"{work}/tree"):
            sh(f"{S} unpack {work}/small.zip --dest {work}/tree --pubkey {pub_der} > /dev/null")
        return [f"{work}/tree"]
    return []


# ---- fair peers: the same durability as Signet (issue 14) ------------------------------------
# Signet fsyncs what it writes; a peer row with "+ sync" does too, beside the plain one.
for name in ["pack-1g-stored", "unpack-1g-stored", "pack-10k-small", "unpack-10k-small"]:
    base = rows[name]
    rows[name + "+sync"] = dict(base, peer=(lambda peer: lambda r: f"( {peer(r)} ) && sync")(base["peer"]))

# ---- 50,000 small files in 50 folders (issue 14) -----------------------------------------------
many_count = int(50_000 * args.scale)
many = f"{work}/many"


def make_many():
    if os.path.isdir(many) and sum(len(files) for _, _, files in os.walk(many)) == many_count:
        return
    shutil.rmtree(many, ignore_errors=True)
    rng = random.Random(7)
    words = [("w%d" % i) for i in range(3000)]
    for i in range(many_count):
        d = f"{many}/d{i % 50:02d}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/f{i:05d}.txt", "w") as f:
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(20, 300))) + "\n")


rows["pack-50k"] = dict(target=0.1, prepare="many",
    signet=lambda r: f"{S} pack {many} {K} --name b --version 1 --out {out}/s{r}.zip",
    peer=lambda r: f"cd {many} && {sign_each} && zip -q -r {out}/p{r}.zip . && find . -name '*.sig' -delete && sync")
rows["unpack-50k+sync"] = dict(target=1.0, prepare="many-packages",
    signet=lambda r: f"{S} unpack {work}/many.zip --dest {out}/s{r} --pubkey {pub_der}",
    peer=lambda r: f"unzip -q {work}/many-plain.zip -d {out}/p{r} && sync")
# The least any tool must do for the same result on disk: the files, Signet's two attributes on
# each (the same bytes, restored by setfattr from a dump of an installed tree) and a sync. Signet
# also verifies every file and its signature, stages and swaps the tree, and writes its record.
rows["unpack-50k-vs-attrs-floor"] = dict(target=1.3, prepare="many-floor",
    signet=lambda r: f"{S} unpack {work}/many.zip --dest {out}/s{r} --pubkey {pub_der}",
    peer=lambda r: f"unzip -q {work}/many-plain.zip -d {out}/p{r} && cd {out}/p{r} && setfattr --restore={work}/many-attrs.dump && sync")
def reverify_row(tree, target):
    """Signet re-verifies an installed tree; the peer hashes the same files with sha256sum."""
    return dict(target=target, prepare=tree,
        signet=lambda r: f"{S} reverify {work}/{tree} --pubkey {pub_der}",
        peer=lambda r: f"cd {work}/{tree} && find . -path ./.signet -prune -o -type f -print0 | xargs -0 sha256sum > /dev/null")


rows["reverify-50k"] = reverify_row("many-tree", 0.6)
# What any re-verification must do, as the unpack floor above: hash every file (sha256sum) and
# read every file's signature attribute (getfattr, one process for the tree). On ext4 the
# attribute read alone is about half of sha256sum's time here (an external xattr block per file,
# and the kernel's mbcache insert on every read): issue 50's restated target for reverify.
rows["reverify-50k-vs-attrs-floor"] = dict(target=0.6, prepare="many-tree",
    signet=lambda r: f"{S} reverify {work}/many-tree --pubkey {pub_der}",
    peer=lambda r: f"cd {work}/many-tree && find . -path ./.signet -prune -o -type f -print0 | xargs -0 sha256sum > /dev/null"
                   f" && find . -path ./.signet -prune -o -type f -print0 | xargs -0 getfattr -n user.signet.sig --absolute-names > /dev/null")
rows["reverify-2000x4k"] = reverify_row("4k-tree", 1.0)   # issue 28: process start dominates; stays <= 1.0

# ---- a key on a PKCS#11 token (issue 15): SoftHSM2 against the same key from a file ---------
token_dir = f"{work}/hsm"
token_env = f"SOFTHSM2_CONF={token_dir}/softhsm2.conf"
token_key = f"--key 'pkcs11:token=bench;object=bench' --pkcs11-module /usr/lib/softhsm/libsofthsm2.so --passphrase-file {token_dir}/pin.txt"
rows["pack-2000-token-vs-file"] = dict(target=2.0, prepare="token",
    signet=lambda r: f"{token_env} {S} pack {work}/2k {token_key} --name t --version 1 --out {out}/s{r}.zip",
    peer=lambda r: f"{S} pack {work}/2k {K} --name t --version 1 --out {out}/p{r}.zip")

# ---- downloads: a real nginx on loopback with a private CA (issue 13) -----------------------
download_size = int(256 * (1 << 20) * args.scale)
server = {}


def start_nginx():
    """nginx over HTTPS on a free loopback port, serving {work}/www; stopped at exit."""
    if server:
        return server
    import atexit, socket
    d = f"{work}/nginx"
    os.makedirs(f"{d}/tmp", exist_ok=True)
    os.makedirs(f"{work}/www", exist_ok=True)
    if not os.path.exists(f"{d}/chain.pem"):
        sh(f"""cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -keyout root.key -out root.pem -days 365 -subj /CN=bench-root \\
              -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null \\
            && openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj /CN=localhost 2>/dev/null \\
            && printf 'subjectAltName=DNS:localhost\\n' > leaf.ext \\
            && openssl x509 -req -in leaf.csr -CA root.pem -CAkey root.key -CAcreateserial -out leaf.pem -days 365 -extfile leaf.ext 2>/dev/null \\
            && cp leaf.pem chain.pem""")
    def free_port():
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        found = probe.getsockname()[1]
        probe.close()
        return found
    port, http_port = free_port(), free_port()
    user = "user root root;" if os.geteuid() == 0 else ""
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(f"""daemon off; {user} pid {d}/nginx.pid; error_log {d}/error.log; worker_processes 1;
events {{ worker_connections 64; }}
http {{ access_log off; sendfile on; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{ listen 127.0.0.1:{port} ssl; server_name localhost; ssl_certificate {d}/chain.pem; ssl_certificate_key {d}/leaf.key; root {work}/www;
    location /link100m/ {{ alias {work}/www/; limit_rate 12500k; }} }}
  server {{ listen 127.0.0.1:{http_port}; server_name localhost; root {work}/www; access_log {d}/http-access.log;
    location /link100m/ {{ alias {work}/www/; limit_rate 12500k; }} }} }}
""")
    nginx = "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else shutil.which("nginx")
    process = subprocess.Popen([nginx, "-c", f"{d}/nginx.conf", "-p", d, "-e", f"{d}/error.log"], stderr=subprocess.DEVNULL)
    atexit.register(process.terminate)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    server.update(port=port, root=f"{d}/root.pem", url=f"https://localhost:{port}", http=f"http://127.0.0.1:{http_port}",
                  http_log=f"{d}/http-access.log")
    return server


def download_row(kind, target):
    """Signet downloads and installs (or fetches) over HTTPS; the peer uses curl."""
    def url():
        return start_nginx()["url"] + "/dl.zip"
    def ca():
        return start_nginx()["root"]
    signet_unpack = lambda r: f"{S} unpack {url()} --dest {out}/s{r} --pubkey {pub_der} --tls-ca {ca()} --quiet"
    if kind == "curl+unpack":
        peer = lambda r: f"curl -sS --fail --cacert {ca()} -o {out}/p{r}.zip {url()} && {S} unpack {out}/p{r}.zip --dest {out}/p{r} --pubkey {pub_der} && rm {out}/p{r}.zip"
        return dict(target=target, prepare="download", signet=signet_unpack, peer=peer)
    if kind == "curl":
        peer = lambda r: f"curl -sS --fail --cacert {ca()} -o {out}/p{r}.zip {url()} && sync {out}/p{r}.zip"
        return dict(target=target, prepare="download", signet=signet_unpack, peer=peer)
    # fetch: one file, fsynced, against curl -o + sync of the same file.
    return dict(target=target, prepare="download-1g",
        signet=lambda r: f"{S} fetch {start_nginx()['url']}/random.bin --out {out}/s{r}.bin --tls-ca {ca()} --quiet",
        peer=lambda r: f"curl -sS --fail --cacert {ca()} -o {out}/p{r}.bin {start_nginx()['url']}/random.bin && sync {out}/p{r}.bin")


# ---- updates over range requests (issue 26) ---------------------------------------------------
# v1 of a 10,000-file, 256 MiB package installed; v2 changes 1% of the files. Signet reads v2 in
# place and fetches only those; the peer is the same update with --full-download.
delta_count = max(100, int(10_000 * args.scale))


def delta_url(name):
    return f"{start_nginx()['url']}/{name}"


def delta_unpack(r, side, extra="", path="delta-v2.zip"):
    return (f"{S} unpack {delta_url(path)} --dest {out}/{side}{r} --pubkey {pub_der} "
            f"--tls-ca {start_nginx()['root']} --quiet {extra}")


def delta_transfer():
    """One more update, untimed, with --json: what it moved (bytes, requests, files)."""
    target = f"{work}/delta/check"
    shutil.rmtree(target, ignore_errors=True)
    sh(f"cp -a {work}/delta/v1-tree {target}")
    command = [S, "unpack", delta_url("delta-v2.zip"), "--dest", target, "--pubkey", pub_der, "--tls-ca", start_nginx()["root"], "--json"]
    report = json.loads(subprocess.run(command, capture_output=True, text=True).stdout or "{}")
    shutil.rmtree(target, ignore_errors=True)
    transfer = report.get("transfer") or {}
    size = os.path.getsize(f"{work}/www/delta-v2.zip")
    # Issue 36 point 8 (the decision on issue 26): 2% of the package + 1 MiB + 0.25 KiB a file.
    transfer["bytes_budget"] = size // 50 + (1 << 20) + delta_count * 256
    transfer["within_budget"] = transfer.get("bytes_downloaded", 1 << 62) <= transfer["bytes_budget"]
    return transfer


rows["update-10k-1pct-vs-full-download"] = dict(target=1.0, prepare="delta",
    setup=lambda r: f"cp -a {work}/delta/v1-tree {out}/s{r} && cp -a {work}/delta/v1-tree {out}/p{r}",
    signet=lambda r: delta_unpack(r, "s"),
    peer=lambda r: delta_unpack(r, "p", "--full-download"),
    report=delta_transfer)

# The same over a 100 Mbit/s link (nginx limit_rate 12.5 MB/s per connection): on loopback the
# transfer is nearly free and both sides are bound by installing 10,000 files.
rows["update-10k-1pct-100mbit-vs-full-download"] = dict(rows["update-10k-1pct-vs-full-download"], target=0.2,
    signet=lambda r: delta_unpack(r, "s", path="link100m/delta-v2.zip"),
    peer=lambda r: delta_unpack(r, "p", "--full-download", path="link100m/delta-v2.zip"))

# ---- large files by their changed chunks, against zsync and casync (issue 40 point 4) ----------
# A 1 GiB image (x --scale) installed from v1; v2 changes 1% of its 4 KiB blocks at random, v3
# inserts 1 MiB in the middle of v1. Signet updates the installed tree over ranges; zsync
# (its .zsync control file beside the image) and casync (a chunk store and .caibx index, the
# installed image as the seed) rebuild the image from v1. All three over plain HTTP from the same
# nginx (zsync has no HTTPS); the peers are followed by a sync (Signet's tree is fsynced).
chunk_size = int(GiB * args.scale)


def chunk_url(name, link=""):
    return f"{start_nginx()['http']}/{link}c40/{name}"


def chunk_signet(r, case, link=""):
    return (f"{S} unpack {chunk_url(case + '.zip', link)} --allow-http --dest {out}/s{r} --pubkey {pub_der} --quiet 2>/dev/null")


def chunk_peer(r, case, peer, link="", folder="c40"):
    c = f"{work}/{folder}"
    url = lambda name: f"{start_nginx()['http']}/{link}{folder}/{name}"
    if peer == "zsync":
        return f"cd {out} && zsync -q -i {c}/v1.img -o {out}/p{r}.img {url(case + '.img.zsync')} && sync {out}/p{r}.img"
    return (f"casync extract --store={url('store.castr')} --seed={c}/v1.img {url(case + '.caibx')} "
            f"{out}/p{r}.img && sync {out}/p{r}.img")


def chunk_bytes(command):
    """Body bytes nginx's plain-HTTP log shows for one run of `command`."""
    log = start_nginx()["http_log"]
    # nginx logs a request once its answer went out: the last lines of the command before (a
    # timed run) may land after it returned. Let them land before counting from here.
    time.sleep(0.5)
    before = os.path.getsize(log) if os.path.exists(log) else 0
    sh(command)
    time.sleep(0.2)
    with open(log, "rb") as f:
        f.seek(before)
        lines = f.read().decode().splitlines()
    return sum(int(line.split('"')[2].split()[1]) for line in lines if line.count('"') >= 4), len(lines)


def chunk_report(case):
    """One more update by each of the three, untimed: bytes and requests, against the issue's budget."""
    def run():
        c = f"{work}/c40"
        results = {}
        target = f"{work}/c40/check"
        shutil.rmtree(target, ignore_errors=True)
        sh(f"cp -a {c}/v1-tree {target}")
        results["signet"] = chunk_bytes(f"{S} unpack {chunk_url(case + '.zip')} --allow-http --dest {target} --pubkey {pub_der} --quiet 2>/dev/null")
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(out, exist_ok=True)
        for peer in ["zsync", "casync"]:
            results[peer] = chunk_bytes(chunk_peer("-report", case, peer))
            for leftover in glob.glob(f"{out}/p-report.img*"):
                os.remove(leftover)
        budget = chunk_size * (2 if case == "v2" else 3) // 100 + (1 << 20)
        best = min(results["zsync"][0], results["casync"][0])
        return dict(signet_bytes=results["signet"][0], signet_requests=results["signet"][1], zsync_bytes=results["zsync"][0],
                    casync_bytes=results["casync"][0], casync_requests=results["casync"][1], image_bytes=chunk_size,
                    bytes_budget=budget, within_budget=results["signet"][0] <= budget, at_most_peers=results["signet"][0] <= best)
    return run


for case, label in [("v2", "1pct"), ("v3", "insert1m")]:
    for peer in ["zsync", "casync"]:
        rows[f"update-1g-{label}-chunks-vs-{peer}"] = dict(target=1.0, prepare="chunks",
            setup=lambda r: f"cp -a {work}/c40/v1-tree {out}/s{r}",
            signet=lambda r, case=case: chunk_signet(r, case), peer=lambda r, case=case, peer=peer: chunk_peer(r, case, peer),
            report=chunk_report(case))
        rows[f"update-1g-{label}-chunks-100mbit-vs-{peer}"] = dict(target=1.0, prepare="chunks",
            setup=lambda r: f"cp -a {work}/c40/v1-tree {out}/s{r}",
            signet=lambda r, case=case: chunk_signet(r, case, "link100m/"), peer=lambda r, case=case, peer=peer: chunk_peer(r, case, peer, "link100m/"))
    # The full download over the same link: Signet's update should take at most a tenth of it.
    rows[f"update-1g-{label}-chunks-100mbit-vs-full-download"] = dict(target=0.1, prepare="chunks",
        setup=lambda r: f"cp -a {work}/c40/v1-tree {out}/s{r} && cp -a {work}/c40/v1-tree {out}/p{r}",
        signet=lambda r, case=case: chunk_signet(r, case, "link100m/"),
        peer=lambda r, case=case: f"{S} unpack {chunk_url(case + '.zip', 'link100m/')} --allow-http --full-download --dest {out}/p{r} --pubkey {pub_der} --quiet 2>/dev/null")

# ---- compressible images: deflated chunks (issue 51 point 1) ------------------------------------
# The same updates on a compressible image: this machine's programs (/usr/bin, /usr/lib, in name
# order) up to the size, 2-3x compressible and not repeated text. Signet's package deflates it in
# 8 KiB segments; zsync and casync work from the uncompressed image as above (casync compresses
# its chunks). v2 rewrites 1% of the 4 KiB blocks with other program bytes, v3 inserts 1 MiB
# of other programs in the middle. The fresh-install report compares a whole install's bytes with
# gzip -6 of the image (+ 1 MiB) and casync's store for it.
def programs(n, skip=0):
    data = bytearray()
    for folder in ("/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/libexec", "/usr/share"):
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                try:
                    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) < 4096:
                        continue
                    with open(path, "rb") as f:
                        chunk = f.read()
                except OSError:
                    continue
                if skip > 0:
                    skip -= len(chunk)
                    continue
                data += chunk[:n - len(data)]
                if len(data) >= n:
                    return bytes(data)
    raise SystemExit(f"fewer than {n} bytes of programs on this machine")


def prepare_zchunks():
    start_nginx()
    c = f"{work}/z51"
    site = f"{work}/www/z51"
    tag = f"{c}/made-for-{chunk_size}"
    if os.path.exists(tag):
        return [f"{c}/v1.img"]
    shutil.rmtree(c, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    os.makedirs(site)
    rng = random.Random(51)
    image = programs(chunk_size)
    other = programs((1 << 20) + chunk_size // 100 + (1 << 20), skip=chunk_size)
    v2 = bytearray(image)
    blocks = len(v2) // 4096
    patch = 1 << 20
    for b in rng.sample(range(blocks), blocks // 100):
        v2[b * 4096:(b + 1) * 4096] = other[patch:patch + 4096]
        patch += 4096
    middle = len(image) // 2
    v3 = image[:middle] + other[:1 << 20] + image[middle:]
    for name, data in [("v1", image), ("v2", bytes(v2)), ("v3", v3)]:
        os.makedirs(f"{c}/src-{name}")
        with open(f"{c}/src-{name}/image.img", "wb") as f:
            f.write(data)
        sh(f"{S} pack {c}/src-{name} {K} --name image --version 1 --sequence {name[1]} --out {site}/{name}.zip > /dev/null")
        os.link(f"{c}/src-{name}/image.img", f"{site}/{name}.img")
        sh(f"cd {site} && zsyncmake -u {name}.img -o {name}.img.zsync {name}.img > /dev/null 2>&1")
        sh(f"casync make --store={site}/store.castr {site}/{name}.caibx {site}/{name}.img > /dev/null")
    os.link(f"{c}/src-v1/image.img", f"{c}/v1.img")
    sh(f"{S} unpack {site}/v1.zip --dest {c}/v1-tree --pubkey {pub_der} > /dev/null")
    open(tag, "w").close()
    return [f"{c}/v1.img"]


def zchunk_url(name, link=""):
    return f"{start_nginx()['http']}/{link}z51/{name}"


def zchunk_peer(r, case, peer):
    return chunk_peer(r, case, peer, folder="z51")


def zchunk_report(case):
    def run():
        c = f"{work}/z51"
        target = f"{c}/check"
        shutil.rmtree(target, ignore_errors=True)
        sh(f"cp -a {c}/v1-tree {target}")
        signet = chunk_bytes(f"{S} unpack {zchunk_url(case + '.zip')} --allow-http --dest {target} --pubkey {pub_der} --quiet 2>/dev/null")
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(out, exist_ok=True)
        peers = {}
        for peer in ["zsync", "casync"]:
            peers[peer] = chunk_bytes(zchunk_peer("-report", case, peer))
            for leftover in glob.glob(f"{out}/p-report.img*"):
                os.remove(leftover)
        return dict(signet_bytes=signet[0], signet_requests=signet[1], zsync_bytes=peers["zsync"][0], casync_bytes=peers["casync"][0],
                    image_bytes=chunk_size, at_most_peers=signet[0] <= min(peers["zsync"][0], peers["casync"][0]))
    return run


def zchunk_fresh_report():
    c = f"{work}/z51"
    target = f"{c}/fresh"
    shutil.rmtree(target, ignore_errors=True)
    signet = chunk_bytes(f"{S} unpack {zchunk_url('v1.zip')} --allow-http --dest {target} --pubkey {pub_der} --quiet 2>/dev/null")
    shutil.rmtree(target, ignore_errors=True)
    gzipped = int(subprocess.run(f"gzip -6 -c {c}/v1.img | wc -c", shell=True, capture_output=True, text=True).stdout)
    os.makedirs(out, exist_ok=True)
    casync = chunk_bytes(f"casync extract --store={zchunk_url('store.castr')} {zchunk_url('v1.caibx')} {out}/p-fresh.img")
    for leftover in glob.glob(f"{out}/p-fresh.img*"):
        os.remove(leftover)
    budget = gzipped * 103 // 100 + (1 << 20)
    # The signed manifest every update downloads (issue 51: at most 0.6 MB for 1 GiB).
    with zipfile.ZipFile(f"{work}/www/z51/v1.zip") as z:
        manifest = z.getinfo(".signet/manifest.json").file_size
    return dict(signet_bytes=signet[0], gzip6_bytes=gzipped, casync_bytes=casync[0], budget_bytes=budget,
                within_budget=signet[0] <= budget, image_bytes=chunk_size, manifest_bytes=manifest,
                manifest_bytes_per_gib=manifest * GiB // chunk_size)


for case, label in [("v2", "1pct"), ("v3", "insert1m")]:
    for peer in ["zsync", "casync"]:
        rows[f"update-1g-{label}-deflated-chunks-vs-{peer}"] = dict(target=1.0, prepare="zchunks",
            setup=lambda r: f"cp -a {work}/z51/v1-tree {out}/s{r}",
            signet=lambda r, case=case: f"{S} unpack {zchunk_url(case + '.zip')} --allow-http --dest {out}/s{r} --pubkey {pub_der} --quiet 2>/dev/null",
            peer=lambda r, case=case, peer=peer: zchunk_peer(r, case, peer), report=zchunk_report(case))
# A fresh install of the compressible image against casync's (no seed); the report adds gzip -6.
rows["install-1g-deflated-chunks-vs-casync"] = dict(target=1.0, prepare="zchunks",
    signet=lambda r: f"{S} unpack {zchunk_url('v1.zip')} --allow-http --dest {out}/s{r} --pubkey {pub_der} --quiet 2>/dev/null",
    peer=lambda r: f"casync extract --store={zchunk_url('store.castr')} {zchunk_url('v1.caibx')} {out}/p{r}.img && sync {out}/p{r}.img",
    report=zchunk_fresh_report)
# pack of the compressible image (deflated in segments, both cores) against gzip -6 of it.
rows["pack-1g-compressible-vs-gzip6+sync"] = dict(target=1.2, prepare="zchunks",
    signet=lambda r: f"{S} pack {work}/z51/src-v1 {K} --name p --version 1 --sequence 1 --out {out}/s{r}.zip",
    peer=lambda r: f"gzip -6 -c {work}/z51/v1.img > {out}/p{r}.gz && sync {out}/p{r}.gz")

# pack's chunking on one core (taskset): the difference of the two times is the chunker's own
# cost, so its rate is the size over that difference (issue 40: at least 400 MB/s).
rows["pack-1g-stored-chunked-vs-unchunked-1core"] = dict(target=2.0, inputs=[f"{work}/random.bin"],
    signet=lambda r: f"taskset -c 0 {S} pack {work}/random.bin {K} --name p --version 1 --store --out {out}/s{r}.zip",
    peer=lambda r: f"taskset -c 0 {S} pack {work}/random.bin {K} --name p --version 1 --store --chunk-threshold 0 --out {out}/p{r}.zip")

# pack's chunking cost: a 1 GiB stored resource with its chunk index against the same without.
rows["pack-1g-stored-chunked-vs-unchunked"] = dict(target=1.15, inputs=[f"{work}/random.bin"],
    signet=lambda r: f"{S} pack {work}/random.bin {K} --name p --version 1 --store --out {out}/s{r}.zip",
    peer=lambda r: f"{S} pack {work}/random.bin {K} --name p --version 1 --store --chunk-threshold 0 --out {out}/p{r}.zip")

# The physical floor of pack of a stored file (issue 51's restated target, decided in issue 63):
# copying and syncing the same bytes (cp + sync) while `openssl dgst -sha256` hashes them, in
# parallel on the two cores. pack does both and more (the chunk index, the signatures, the zip
# structure, its own fsync); the zip + openssl + sync rows above stay reported beside it.
def pack_floor_row(path):
    return dict(target=1.25, inputs=[path],
        signet=lambda r: f"{S} pack {path} {K} --name b --version 1 --store --out {out}/s{r}.zip",
        peer=lambda r: f"( cp {path} {out}/p{r}.bin && sync {out}/p{r}.bin ) & openssl dgst -sha256 {path} > /dev/null; wait")


rows["pack-1g-stored-vs-overlapped-floor"] = pack_floor_row(f"{work}/random.bin")
rows["pack-256m-stored-vs-overlapped-floor"] = dict(pack_floor_row(f"{work}/random-256m.bin"), prepare="random-256m")

# ---- encrypted packages (issue 64, FORMAT.md §8): what encryption adds ------------------------
# The peer is Signet itself without encryption: the same 1 GiB stored file packed, or the same
# package's plaintext installed. Target 1.25 (encryption adds at most 25%). The device's key
# and certificate are a P-256 pair made once by openssl.
device_key, device_cert = f"{work}/device-ec.pem", f"{work}/device-ec-cert.pem"
rows["pack-1g-encrypted-vs-plain"] = dict(target=1.25, inputs=[f"{work}/random.bin"], prepare="device",
    signet=lambda r: f"{S} pack {work}/random.bin {K} --name b --version 1 --store --encrypt-to {device_cert} --out {out}/s{r}.zip",
    peer=lambda r: f"{S} pack {work}/random.bin {K} --name b --version 1 --store --out {out}/p{r}.zip")
rows["unpack-1g-encrypted-vs-plain"] = dict(target=1.25, prepare="encrypted",
    signet=lambda r: f"{S} unpack {work}/encrypted.zip --dest {out}/s{r} --pubkey {pub_der} --decryption-key {device_key}",
    peer=lambda r: f"{S} unpack {work}/stored.zip --dest {out}/p{r} --pubkey {pub_der}")

# ---- an up-to-date poll: Signet against python-tuf, the reference client (issues 37, 48) ---------
# The device already runs the channel's release. Signet's poll asks for the next root version
# (404) and timestamp.json on one connection, checks them and the stored snapshot and targets,
# and finds DIR up to date; the peer is python-tuf's ngclient refreshing the same repository
# from a metadata folder of its own (the same requests and checks, no install to compare). The
# channel index this row compared with before was removed in issue 48. The report gives
# Signet's requests and bytes.
def poll_update():
    p = f"{work}/poll"
    return (f"{S} update --repository {start_nginx()['url']}/poll/metadata/ --tuf-metadata {p}/device-metadata "
            f"--channel stable --dest {p}/device-tuf --tls-ca {start_nginx()['root']} --quiet")


def poll_python():
    p = f"{work}/poll"
    return (f"SSL_CERT_FILE={start_nginx()['root']} python3 -c 'import sys; from tuf.ngclient import Updater; "
            f"Updater(sys.argv[1], sys.argv[2], bootstrap=None).refresh()' {p}/python-metadata {start_nginx()['url']}/poll/metadata/")


def poll_report():
    p = f"{work}/poll"
    command = [S, "tuf", "refresh", "--metadata-dir", f"{p}/device-metadata", "--metadata-url", f"{start_nginx()['url']}/poll/metadata/",
               "--tls-ca", start_nginx()["root"], "--json"]
    report = json.loads(subprocess.run(command, capture_output=True, text=True).stdout or "{}")
    return dict(tuf_requests=report.get("requests"), tuf_bytes=report.get("bytes_downloaded"))


rows["update-uptodate-vs-python-tuf"] = dict(target=1.0, prepare="poll",
    signet=lambda r: poll_update(), peer=lambda r: poll_python(), report=poll_report)


# ---- the release log (issue 66, FORMAT.md §10) ---------------------------------------------------
# A proof in a log of 1,000,000 entries with three cosignatures (made by bench/tlog.py with PyPI
# cryptography), checked offline by `signet log verify`, 20 runs per sample. The peer is the same
# command on the same files with the proof's first line changed: it starts, parses its options,
# reads the policy and the proof and stops before any signature or hash. over_floor_ms (per run)
# is then what verifying costs: the log's signature, three cosignatures, the quorum and the
# inclusion path (target: 5 ms). Then 10,000 releases appended in one `log append` (tiles, entry
# bundles, the checkpoint and a proof per listed release, each written atomically, then sync)
# against Go's x/mod writing the tiles of 10,000 entries (Debian's golang-golang-x-mod-dev; no
# entries, proofs or signature).
tlog_dir = f"{work}/tlog"
rows["log-verify-1m-3cosig-vs-refused-at-parse"] = dict(target=1.5, prepare="tlog-proof", floor=20,
    signet=lambda r: f"for i in $(seq 20); do {S} log verify {tlog_dir}/proof --policy {tlog_dir}/policy --quiet || exit 1; done",
    peer=lambda r: f"for i in $(seq 20); do {S} log verify {tlog_dir}/not-a-proof --policy {tlog_dir}/policy --quiet 2> /dev/null; done; true",
    report=lambda: dict(proof_bytes=os.path.getsize(f"{tlog_dir}/proof")))
# The number is absolute (10 s): budget_s; the ratio to Go's tiles alone is for scale.
rows["log-append-10k-vs-go-xmod-tiles+sync"] = dict(target=400.0, budget_s=10.0, prepare="tlog-10k",
    setup=lambda r: f"cp -a {tlog_dir}/repo {out}/s{r}",
    signet=lambda r: f"{S} log append {out}/s{r} --key {tlog_dir}/log.pem --quiet && sync",
    peer=lambda r: f"{tlog_dir}/tlogpeer tiles 10000 {out}/p{r} > /dev/null && sync")


def prepare_tlog(kind):
    os.makedirs(tlog_dir, exist_ok=True)
    if kind == "tlog-proof":
        if not os.path.exists(f"{tlog_dir}/proof"):
            sh(f"python3 {os.path.dirname(os.path.abspath(__file__))}/tlog.py proof {tlog_dir}")
        with open(f"{tlog_dir}/proof", "rb") as f, open(f"{tlog_dir}/not-a-proof", "wb") as g:
            g.write(b"c2sp.org/tlog-proof@v0" + f.read()[len(b"c2sp.org/tlog-proof@v1"):])
        return [f"{tlog_dir}/proof", f"{tlog_dir}/policy", f"{tlog_dir}/not-a-proof"]
    if not os.path.exists(f"{tlog_dir}/tlogpeer"):
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../Tests/SignetCryptoTests/Go/tlogpeer.go")
        shutil.copy(source, f"{tlog_dir}/tlogpeer.go")
        sh(f"cd {tlog_dir} && GOPATH=/usr/share/gocode GO111MODULE=off GOFLAGS= GOCACHE={tlog_dir}/gocache go build -o tlogpeer tlogpeer.go")
    if not os.path.exists(f"{tlog_dir}/repo/log/checkpoint"):
        shutil.rmtree(f"{tlog_dir}/repo", ignore_errors=True)
        sh(f"openssl genpkey -algorithm ed25519 -out {tlog_dir}/log.pem")
        sh(f"{S} repo init {tlog_dir}/repo {K} > /dev/null 2>&1")
        vkey = subprocess.run([S, "log", "vkey", f"{tlog_dir}/log.pem", "--name", "example.com/bench-log"], capture_output=True, text=True).stdout.strip()
        with open(f"{tlog_dir}/none-policy", "w") as f:
            f.write(f"log {vkey}\nquorum none\n")
        sh(f"{S} log init {tlog_dir}/repo --key {tlog_dir}/log.pem --policy {tlog_dir}/none-policy > /dev/null")
        sh(f"python3 {os.path.dirname(os.path.abspath(__file__))}/tlog.py targets {tlog_dir}/repo/staging/targets.json 10000")
    return [f"{tlog_dir}/tlogpeer"]


# Issue 28 point 6: the tools device makers compare Signet with. minisign (Ed25519 over a
# BLAKE2b prehash, key without a password); rauc extract of a plain bundle (CMS signature over
# the squashfs, then unsquashfs), with a sync as Signet's unpack makes its tree durable.
rows["sign-1g-vs-minisign"] = dict(target=0.8, prepare="minisign", inputs=[f"{work}/random.bin"],
    signet=lambda r: f"{S} sign {work}/random.bin {K} --out {out}/s{r}.sig",
    peer=lambda r: f"minisign -S -s {work}/minisign.key -m {work}/random.bin -x {out}/p{r}.minisig > /dev/null")
rows["unpack-1g-vs-rauc-extract+sync"] = dict(target=0.7, prepare="rauc",
    signet=lambda r: f"{S} unpack {work}/rauc/signet.zip --dest {out}/s{r} --pubkey {pub_der}",
    peer=lambda r: f"rauc --keyring {work}/rauc/cert.pem extract {work}/rauc/bench.raucb {out}/p{r} > /dev/null 2>&1 && sync")
rows["unpack-https-256m-vs-curl+unpack"] = download_row("curl+unpack", 0.8)
rows["unpack-https-256m-vs-curl"] = download_row("curl", 1.3)
rows["fetch-1g-vs-curl+sync"] = download_row("fetch", 1.3)

# ---- structured resources compared key by key (issue 25; memory: issue 36 point 9) -----------
# A 15.5 MiB document (JSON, binary and XML property list) installed as a --structured resource,
# one value then changed in place (an allowed key): reverify parses the signed copy and the file
# and compares them key by key. The peer: Python parsing both and comparing (json / plistlib).
structured_formats = {"json": "doc.json", "bplist": "doc.plist", "xmlplist": "doc.xml.plist"}


def structured_row(kind, target):
    name = structured_formats[kind]
    tree = f"{work}/structured/{kind}-tree"
    loader = "json.load" if kind == "json" else "plistlib.load"
    return dict(target=target, prepare="structured", inputs=[f"{tree}/{name}", f"{tree}/.signet/structured/{name}"],
        signet=lambda r: f"{S} reverify {tree} --pubkey {pub_der} --allow-key '{name}:items.7.value' --quiet",
        peer=lambda r: (f"python3 -c \"import json, plistlib, sys; a = {loader}(open(sys.argv[1], 'rb')); "
                        f"b = {loader}(open(sys.argv[2], 'rb')); sys.exit(0 if a != b else 1)\" {tree}/{name} {tree}/.signet/structured/{name}"),
        # Issue 36 point 9: reverify's peak RSS at most 3 x the document + 32 MiB.
        report=lambda: dict(document_bytes=os.path.getsize(f"{tree}/{name}"),
                            rss_budget_mib=round((3 * os.path.getsize(f"{tree}/{name}") + (32 << 20)) / (1 << 20), 1)))


# Python's json is C: the row's target is Signet's own (two parses and a comparison in about
# a second, issue 36 point 9); the ratio is shown for scale.
rows["reverify-structured-json-16m-vs-python"] = structured_row("json", 2.0)
rows["reverify-structured-bplist-16m-vs-python"] = structured_row("bplist", 1.5)
rows["reverify-structured-xmlplist-16m-vs-python"] = structured_row("xmlplist", 1.5)

# ---- flash wear: an update writes what changed, not the app again (issue 39 point 1) ----------
# Bytes written come from the kernel's own accounting: getrusage's ru_oublock (GNU time's %O, in
# 512-byte units), which counts the pages the process dirtied in the page cache. Signet updates
# an installed tree sharing its unchanged files (hard links); the peer is the same update
# writing every file again (--force --keep-previous no: what every update did before issue 39).
shared_dir = f"{work}/shared2k"


def prepare_shared():
    if os.path.exists(f"{shared_dir}/v2.zip"):
        return
    shutil.rmtree(shared_dir, ignore_errors=True)
    rng = random.Random(39)
    src = f"{shared_dir}/src"
    for i in range(2000):   # 2,000 files, 21 MiB
        os.makedirs(f"{src}/d{i % 40:02d}", exist_ok=True)
        with open(f"{src}/d{i % 40:02d}/f{i:04d}.bin", "wb") as f:
            f.write(rng.randbytes(rng.randint(1000, 21000)))
    sh(f"{S} pack {src} {K} --name shared --version 1 --sequence 1 --out {shared_dir}/v1.zip > /dev/null")
    with open(f"{src}/d00/f0000.bin", "wb") as f:
        f.write(b"x" * 119)   # the one-file update of issue 39: 119 bytes
    sh(f"{S} pack {src} {K} --name shared --version 2 --sequence 2 --out {shared_dir}/v2.zip > /dev/null")


def written(command):
    """Bytes the command wrote (ru_oublock x 512), after a sync so earlier writeback is not counted."""
    os.sync()
    with open(f"{work}/.oublock", "w+") as f:
        sh(f"/usr/bin/time -f %O -o {f.name} {command} > /dev/null")
        f.seek(0)
        return int([line for line in f.read().split() if line.isdigit()][-1]) * 512


def changed_bytes(old_zip, new_zip):
    """Bytes of the resources the new package adds or changes."""
    def files(package):
        report = json.loads(subprocess.run([S, "inspect", package, "--json"], capture_output=True, text=True).stdout)
        return {f["path"]: (f["sha256"], f["size"]) for f in report["files"]}
    old, new = files(old_zip), files(new_zip)
    return sum(size for path, (digest, size) in new.items() if old.get(path, (None,))[0] != digest)


def shared_report(old_zip, new_zip, install, budget, keys=None):
    """One more update each way, untimed: the bytes written, against the issue's budget."""
    sides = {}
    keys = keys or f"--pubkey {pub_der}"
    os.makedirs(out, exist_ok=True)
    for side, extra in (("signet", ""), ("peer", "--force --keep-previous no")):
        target = f"{out}/w-{side}"
        shutil.rmtree(target, ignore_errors=True)
        sh(install(target))
        sides[side] = written(f"{S} unpack {new_zip} --dest {target} {keys} --quiet {extra}")
        shutil.rmtree(target, ignore_errors=True)
    changed = changed_bytes(old_zip, new_zip)
    return dict(signet_bytes_written=sides["signet"], rewrite_bytes_written=sides["peer"], changed_bytes=changed,
                budget_bytes=budget(changed), within_budget=sides["signet"] <= budget(changed))


def shared_install(target):
    prepare_shared()
    return f"{S} unpack {shared_dir}/v1.zip --dest {target} --pubkey {pub_der} --quiet"


rows["update-2k-1file-shared-vs-rewrite"] = dict(target=1.0,
    setup=lambda r: f"{shared_install(f'{out}/s{r}')} && {shared_install(f'{out}/p{r}')}",
    signet=lambda r: f"{S} unpack {shared_dir}/v2.zip --dest {out}/s{r} --pubkey {pub_der} --quiet",
    peer=lambda r: f"{S} unpack {shared_dir}/v2.zip --dest {out}/p{r} --pubkey {pub_der} --quiet --force --keep-previous no",
    # Issue 39: a one-file update of a 2,000-file, 21 MiB tree writes <= 2 MiB + the changed bytes.
    report=lambda: shared_report(f"{shared_dir}/v1.zip", f"{shared_dir}/v2.zip", shared_install, lambda c: (2 << 20) + c))

# Issue 51 point 4: the same one-file update packed by a second key the device trusts too (m-of-n
# release keys: whoever packs signs). Unchanged files are still shared.
key2 = f"{work}/key2.pem"


def prepare_other_key():
    prepare_shared()
    if not os.path.exists(key2):
        sh(f"openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out {key2} 2>/dev/null && chmod 600 {key2}")
        sh(f"openssl pkey -in {key2} -pubout -outform DER -out {work}/pub2.der")
    if not os.path.exists(f"{shared_dir}/v2-other-key.zip"):
        sh(f"{S} pack {shared_dir}/src --key {key2} --name shared --version 2 --sequence 2 --out {shared_dir}/v2-other-key.zip > /dev/null")


def other_key_report():
    prepare_other_key()
    # Issue 51: <= 2 x the changed bytes + the release's records (2 MiB) + 1.5 KiB per file.
    return shared_report(f"{shared_dir}/v1.zip", f"{shared_dir}/v2-other-key.zip", shared_install,
                         lambda c: 2 * c + (2 << 20) + 1536 * 2000, keys=f"--pubkey {pub_der} --pubkey {work}/pub2.der")


rows["update-2k-1file-other-key-shared-vs-rewrite"] = dict(target=1.0,
    setup=lambda r: (prepare_other_key(), f"{shared_install(f'{out}/s{r}')} && {shared_install(f'{out}/p{r}')}")[1],
    signet=lambda r: f"{S} unpack {shared_dir}/v2-other-key.zip --dest {out}/s{r} --pubkey {pub_der} --pubkey {work}/pub2.der --quiet",
    peer=lambda r: f"{S} unpack {shared_dir}/v2-other-key.zip --dest {out}/p{r} --pubkey {pub_der} --pubkey {work}/pub2.der --quiet --force --keep-previous no",
    report=other_key_report)

# The 10,000-file tree of the ranged-update rows, 1% of its files changed, from the package file.
rows["update-10k-1pct-shared-vs-rewrite"] = dict(target=1.0, prepare="delta",
    setup=lambda r: f"cp -a {work}/delta/v1-tree {out}/s{r} && cp -a {work}/delta/v1-tree {out}/p{r}",
    signet=lambda r: f"{S} unpack {work}/www/delta-v2.zip --dest {out}/s{r} --pubkey {pub_der} --quiet",
    peer=lambda r: f"{S} unpack {work}/www/delta-v2.zip --dest {out}/p{r} --pubkey {pub_der} --quiet --force --keep-previous no",
    # Issue 39: a 1% update of 10,000 files writes <= 2 x the changed bytes + 4 MiB.
    report=lambda: shared_report(f"{work}/www/delta-v1.zip", f"{work}/www/delta-v2.zip",
                                 lambda t: f"cp -a {work}/delta/v1-tree {t}", lambda c: 2 * c + (4 << 20)))

_prepare = prepare


def prepare(kind):
    if kind == "download":
        start_nginx()
        make_random(f"{work}/download.bin", download_size)
        if not os.path.exists(f"{work}/www/dl.zip"):
            sh(f"{S} pack {work}/download.bin {K} --name dl --version 1 --store --out {work}/www/dl.zip > /dev/null")
        return [f"{work}/www/dl.zip"]
    if kind == "delta":
        start_nginx()
        d = f"{work}/delta"
        if not os.path.exists(f"{work}/www/delta-v2.zip"):
            size = int(256 * (1 << 20) * args.scale) // delta_count
            for i in range(delta_count):
                os.makedirs(f"{d}/src/d{i % 100:02d}", exist_ok=True)
                with open(f"{d}/src/d{i % 100:02d}/f{i:05d}.bin", "wb") as f:
                    f.write(os.urandom(size))
            sh(f"{S} pack {d}/src {K} --name delta --version 1 --sequence 1 --out {work}/www/delta-v1.zip > /dev/null")
            shutil.rmtree(f"{d}/v1-tree", ignore_errors=True)
            sh(f"{S} unpack {work}/www/delta-v1.zip --dest {d}/v1-tree --pubkey {pub_der} > /dev/null")
            for i in range(0, delta_count, 100):
                with open(f"{d}/src/d{i % 100:02d}/f{i:05d}.bin", "wb") as f:
                    f.write(os.urandom(size))
            sh(f"{S} pack {d}/src {K} --name delta --version 2 --sequence 2 --out {work}/www/delta-v2.zip > /dev/null")
        return [f"{work}/www/delta-v2.zip", f"{d}/v1-tree"]
    if kind == "structured":
        d = f"{work}/structured"
        if not os.path.exists(f"{d}/made"):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            import plistlib

            def item(i):
                return {"id": i, "name": f"item-{i}", "path": f"/opt/app/data/{i:07d}.bin",
                        "description": f"resource {i}: " + "the quick brown fox jumps over the lazy dog " * 4,
                        "value": i * 1.5, "enabled": i % 2 == 0}

            writers = {"json": lambda f, doc: f.write(json.dumps(doc).encode()),
                       "bplist": lambda f, doc: plistlib.dump(doc, f, fmt=plistlib.FMT_BINARY),
                       "xmlplist": lambda f, doc: plistlib.dump(doc, f, fmt=plistlib.FMT_XML)}
            for kind_, name in structured_formats.items():
                # As many items as make about 15.5 MB in this format (the limit is 16 MiB).
                sample = io.BytesIO()
                writers[kind_](sample, {"version": 3, "items": [item(i) for i in range(1000)]})
                count = int(15_500_000 / (len(sample.getvalue()) / 1000))
                src = f"{d}/{kind_}-src"
                os.makedirs(src, exist_ok=True)
                while True:
                    document = {"version": 3, "items": [item(i) for i in range(count)]}
                    with open(f"{src}/{name}", "wb") as f:
                        writers[kind_](f, document)
                    if os.path.getsize(f"{src}/{name}") <= 16_000_000:
                        break
                    count = count * 15 // 16   # larger offsets in a larger binary list
                sh(f"{S} pack {src} {K} --name structured-{kind_} --version 1 --sequence 1 --structured '{name}' --out {d}/{kind_}.zip > /dev/null")
                sh(f"{S} unpack {d}/{kind_}.zip --dest {d}/{kind_}-tree --pubkey {pub_der} > /dev/null")
                # One value changed in place (same inode: its attributes stay).
                document["items"][7]["value"] = -1.25
                with open(f"{d}/{kind_}-tree/{name}", "r+b") as f:
                    f.truncate(0)
                    writers[kind_](f, document)
            open(f"{d}/made", "w").close()
        return [f"{d}/{kind}-tree/{name}" for kind, name in structured_formats.items()]
    if kind == "minisign":
        if not os.path.exists(f"{work}/minisign.key"):
            sh(f"minisign -G -W -p {work}/minisign.pub -s {work}/minisign.key > /dev/null")
        return []
    if kind == "rauc":
        # random.bin as one rauc image (a plain bundle: squashfs + CMS signature) and as a
        # stored Signet package, remade when random.bin's size changes (--scale).
        d = f"{work}/rauc"
        tag = f"{d}/made-for-{os.path.getsize(work + '/random.bin')}"
        if not os.path.exists(tag):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(f"{d}/content")
            sh(f"openssl req -x509 -newkey rsa:2048 -nodes -keyout {d}/key.pem -out {d}/cert.pem -days 3650 -subj '/CN=rauc bench' 2>/dev/null")
            os.link(f"{work}/random.bin", f"{d}/content/random.bin")
            with open(f"{d}/content/manifest.raucm", "w") as f:
                f.write("[update]\ncompatible=bench\nversion=1\n\n[bundle]\nformat=plain\n\n[image.rootfs]\nfilename=random.bin\n")
            sh(f"rauc --cert {d}/cert.pem --key {d}/key.pem bundle {d}/content {d}/bench.raucb > /dev/null 2>&1")
            sh(f"{S} pack {work}/random.bin {K} --name b --version 1 --store --out {d}/signet.zip > /dev/null")
            open(tag, "w").close()
        return [f"{d}/bench.raucb", f"{d}/signet.zip"]
    if kind == "many":
        make_many()
        return [many]
    if kind == "many-packages":
        make_many()
        if not os.path.exists(f"{work}/many.zip"):
            sh(f"{S} pack {many} {K} --name many --version 1 --out {work}/many.zip > /dev/null")
            sh(f"cd {many} && zip -q -r {work}/many-plain.zip .")
        return [f"{work}/many.zip", f"{work}/many-plain.zip"]
    if kind == "many-tree":
        prepare("many-packages")
        if not os.path.isdir(f"{work}/many-tree"):
            sh(f"{S} unpack {work}/many.zip --dest {work}/many-tree --pubkey {pub_der} > /dev/null")
        return [f"{work}/many-tree"]
    if kind == "many-floor":
        prepare("many-tree")
        if not os.path.exists(f"{work}/many-attrs.dump"):
            # Relative paths ("d00/f00000.txt"), restored from inside each extracted copy.
            sh(f"cd {work}/many-tree && getfattr -R -d -m '^user[.]signet[.]' -e hex d* > {work}/many-attrs.dump")
        return [f"{work}/many.zip", f"{work}/many-plain.zip", f"{work}/many-attrs.dump"]
    if kind == "4k-tree":
        if not os.path.isdir(f"{work}/4k-tree"):
            os.makedirs(f"{work}/4k", exist_ok=True)
            for i in range(2000):
                with open(f"{work}/4k/f{i:04d}.bin", "wb") as f:
                    f.write(os.urandom(4096))
            sh(f"{S} pack {work}/4k {K} --name k4 --version 1 --out {work}/4k.zip > /dev/null")
            sh(f"{S} unpack {work}/4k.zip --dest {work}/4k-tree --pubkey {pub_der} > /dev/null")
        return [f"{work}/4k-tree"]
    if kind == "token":
        # The bench key imported into a SoftHSM2 token of our own, and 2,000 small files.
        if not os.path.isdir(f"{token_dir}/tokens"):
            os.makedirs(f"{token_dir}/tokens")
            with open(f"{token_dir}/softhsm2.conf", "w") as f:
                f.write(f"directories.tokendir = {token_dir}/tokens\nobjectstore.backend = file\nlog.level = ERROR\n")
            with open(f"{token_dir}/pin.txt", "w") as f:
                f.write("1234\n")
            sh(f"{token_env} softhsm2-util --init-token --free --label bench --so-pin 5678 --pin 1234 > /dev/null")
            sh(f"{token_env} softhsm2-util --import {key} --token bench --label bench --id 01 --pin 1234 > /dev/null")
        if not os.path.isdir(f"{work}/2k"):
            os.makedirs(f"{work}/2k")
            for i in range(2000):
                with open(f"{work}/2k/f{i:04d}.txt", "w") as f:
                    f.write(f"resource {i}\n" * (1 + i % 40))
        return [f"{work}/2k"]
    if kind == "poll":
        start_nginx()
        p = f"{work}/poll"
        site = f"{work}/www/poll"
        if not os.path.exists(f"{p}/ready"):
            shutil.rmtree(p, ignore_errors=True)
            shutil.rmtree(site, ignore_errors=True)
            os.makedirs(f"{p}/app")
            for i in range(20):
                with open(f"{p}/app/f{i:02d}.txt", "w") as f:
                    f.write(f"file {i}\n" * 100)
            for k in ["root", "rel", "online"]:
                sh(f"{S} keygen --out {p}/keys/{k} --bits 2048 > /dev/null 2>&1")
            sh(f"{S} pack {p}/app --key {p}/keys/rel/private_key.pem --name app --version 1 --sequence 1 --out {p}/app-1.zip > /dev/null")
            sh(f"{S} repo init {site} --root-key {p}/keys/root/public_key.der --targets-key {p}/keys/rel/public_key.der "
               f"--snapshot-key {p}/keys/online/public_key.der --timestamp-key {p}/keys/online/public_key.der --quiet")
            sh(f"{S} repo sign {site} --role root --key {p}/keys/root/private_key.pem --digest $({S} repo status {site} --staged-digest root) --quiet")
            sh(f"{S} repo add {site} {p}/app-1.zip --channel stable --quiet")
            sh(f"{S} repo sign {site} --role targets --key {p}/keys/rel/private_key.pem --digest $({S} repo status {site} --staged-digest targets) --quiet")
            sh(f"{S} tuf init --metadata-dir {p}/device-metadata {site}/metadata/1.root.json --quiet")
            open(f"{p}/ready", "w").close()
        if not os.path.exists(f"{p}/python-metadata/root.json"):
            os.makedirs(f"{p}/python-metadata", exist_ok=True)
            shutil.copy(f"{site}/metadata/1.root.json", f"{p}/python-metadata/root.json")
        # Fresh timestamps (a day's lifetime), then both clients current: every poll is up to date.
        sh(f"{S} repo refresh {site} --snapshot-key {p}/keys/online/private_key.pem --timestamp-key {p}/keys/online/private_key.pem --quiet")
        sh(poll_update())
        sh(poll_python())
        return []
    if kind == "chunks":
        start_nginx()
        c = f"{work}/c40"
        site = f"{work}/www/c40"
        tag = f"{c}/made-for-{chunk_size}"
        if not os.path.exists(tag):
            shutil.rmtree(c, ignore_errors=True)
            shutil.rmtree(site, ignore_errors=True)
            os.makedirs(f"{c}/src")
            os.makedirs(site)
            import random
            rng = random.Random(40)
            make_random(f"{c}/v1.img", chunk_size)
            with open(f"{c}/v1.img", "rb") as f:
                image = bytearray(f.read())
            v2 = bytearray(image)
            blocks = len(v2) // 4096
            for b in rng.sample(range(blocks), blocks // 100):
                v2[b * 4096:(b + 1) * 4096] = os.urandom(4096)
            middle = len(image) // 2
            v3 = image[:middle] + os.urandom(1 << 20) + image[middle:]
            for name, data in [("v1", image), ("v2", v2), ("v3", v3)]:
                with open(f"{c}/{name}.img", "wb") as f:
                    f.write(data)
                os.makedirs(f"{c}/src-{name}")
                os.link(f"{c}/{name}.img", f"{c}/src-{name}/image.img")
                sh(f"{S} pack {c}/src-{name} {K} --name image --version 1 --sequence {name[1]} --out {site}/{name}.zip > /dev/null")
                if name != "v1":
                    os.link(f"{c}/{name}.img", f"{site}/{name}.img")
                    sh(f"cd {site} && zsyncmake -u {name}.img -o {name}.img.zsync {name}.img > /dev/null 2>&1")
                    sh(f"casync make --store={site}/store.castr {site}/{name}.caibx {c}/{name}.img > /dev/null")
            del image, v2, v3
            sh(f"{S} unpack {site}/v1.zip --dest {c}/v1-tree --pubkey {pub_der} > /dev/null")
            open(tag, "w").close()
        return [f"{c}/v1.img"]
    if kind == "zchunks":
        return prepare_zchunks()
    if kind == "download-1g":
        start_nginx()
        if not os.path.exists(f"{work}/www/random.bin"):
            os.link(f"{work}/random.bin", f"{work}/www/random.bin")
        return [f"{work}/www/random.bin"]
    if kind in ("tlog-proof", "tlog-10k"):
        return prepare_tlog(kind)
    if kind in ("device", "encrypted"):
        if not os.path.exists(device_cert):
            sh(f"openssl ecparam -name prime256v1 -genkey -noout -out {device_key} && chmod 600 {device_key}")
            sh(f"openssl req -new -x509 -key {device_key} -subj /CN=bench-device -days 3650 -out {device_cert}")
        if kind == "device":
            return [device_cert]
        _prepare("stored")
        if not os.path.exists(f"{work}/encrypted.zip"):
            sh(f"{S} encrypt {work}/stored.zip --to {device_cert} --out {work}/encrypted.zip > /dev/null")
        return [f"{work}/encrypted.zip", f"{work}/stored.zip"]
    return _prepare(kind)


selected = [name for name in rows if not args.only or name in args.only]
# Rows with inputs of their own (a package on nginx).
own_inputs = {"update-1g-1pct-chunks-vs-zsync", "update-1g-1pct-chunks-vs-casync", "update-1g-insert1m-chunks-vs-zsync",
              "update-1g-insert1m-chunks-vs-casync", "update-1g-1pct-chunks-100mbit-vs-zsync", "update-1g-1pct-chunks-100mbit-vs-casync",
              "update-1g-insert1m-chunks-100mbit-vs-zsync", "update-1g-insert1m-chunks-100mbit-vs-casync",
              "update-1g-1pct-chunks-100mbit-vs-full-download", "update-1g-insert1m-chunks-100mbit-vs-full-download",
              "update-uptodate-vs-python-tuf", "update-2k-1file-shared-vs-rewrite", "update-10k-1pct-shared-vs-rewrite", "update-10k-1pct-vs-full-download", "update-10k-1pct-100mbit-vs-full-download", "unpack-https-256m-vs-curl+unpack",
              "unpack-https-256m-vs-curl", "update-1g-1pct-deflated-chunks-vs-zsync", "update-1g-1pct-deflated-chunks-vs-casync",
              "update-1g-insert1m-deflated-chunks-vs-zsync", "update-1g-insert1m-deflated-chunks-vs-casync",
              "install-1g-deflated-chunks-vs-casync", "pack-1g-compressible-vs-gzip6+sync", "update-2k-1file-other-key-shared-vs-rewrite",
              "log-verify-1m-3cosig-vs-refused-at-parse", "log-append-10k-vs-go-xmod-tiles+sync"}
if any(name not in own_inputs for name in selected):
    common_data()
if "reverify-10k" in selected:
    prepare("small")
results = []
for name in selected:
    row = rows[name]
    inputs = list(row.get("inputs", [])) + (prepare(row["prepare"]) if "prepare" in row else [])
    pairs = []
    for r in range(args.reps):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        if "setup" in row:
            sh(row["setup"](r))   # untimed: what both sides start from
        order = ["signet", "peer"] if r % 2 == 0 else ["peer", "signet"]
        sample = {}
        for side in order:
            # Untimed: write out what the previous command left dirty (the peers never fsync),
            # so its writeback does not land in this command's time; then warm the inputs.
            os.sync()
            warm(*inputs)
            sample[side] = timed(row[side](r))
        pairs.append(sample)
        print(f"  {name} #{r + 1}: signet {sample['signet'][0]:.2f} s ({sample['signet'][1]:.1f} MiB), peer {sample['peer'][0]:.2f} s", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    if not pairs:
        continue   # --reps 0: inputs prepared, nothing timed
    signet_times = [p["signet"][0] for p in pairs]
    peer_times = [p["peer"][0] for p in pairs]
    ratio = statistics.median(p["signet"][0] / p["peer"][0] for p in pairs)
    results.append(dict(row=name, signet_median_s=round(statistics.median(signet_times), 3), peer_median_s=round(statistics.median(peer_times), 3),
                        ratio=round(ratio, 3), target=row["target"], met=ratio <= row["target"],
                        signet_peak_rss_mib=round(max(p["signet"][1] for p in pairs), 1),
                        samples=[dict(signet_s=p["signet"][0], peer_s=p["peer"][0], signet_rss_mib=p["signet"][1]) for p in pairs]))
    if "budget_s" in row:
        results[-1]["budget_s"] = row["budget_s"]
        results[-1]["budget_met"] = statistics.median(signet_times) <= row["budget_s"]
        print(f"  {name}: median {statistics.median(signet_times):.2f} s against a budget of {row['budget_s']} s", flush=True)
    if row.get("floor"):
        # The peer is the same process stopping before the work: what the work costs, per run
        # (`floor` runs per sample).
        results[-1]["over_floor_ms"] = round((statistics.median(signet_times) - statistics.median(peer_times)) * 1000 / row["floor"], 2)
        print(f"  {name}: {results[-1]['over_floor_ms']} ms over the process floor", flush=True)
    if "report" in row:
        results[-1]["report"] = row["report"]()
        print(f"  {name}: {results[-1]['report']}", flush=True)

cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
machine = dict(cpu=cpu, cores=os.cpu_count(), kernel=platform.release(), scale=args.scale, reps=args.reps,
               openssl=subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip(),
               signet=subprocess.run([S, "--version"], capture_output=True, text=True).stdout.strip())
print(f"\nmachine: {cpu}, {os.cpu_count()} cores, kernel {platform.release()}; scale {args.scale}, {args.reps} pairs per row")
print(f"{'row':24} {'signet s':>9} {'peer s':>9} {'ratio':>7} {'target':>7}  {'met':4} {'RSS MiB':>8}")
for r in results:
    print(f"{r['row']:24} {r['signet_median_s']:9.2f} {r['peer_median_s']:9.2f} {r['ratio']:7.3f} {r['target']:7.2f}  {'yes' if r['met'] else 'NO':4} {r['signet_peak_rss_mib']:8.1f}")
with open(args.json, "w") as f:
    json.dump(dict(machine=machine, results=results), f, indent=2)
print(f"\nwritten to {args.json}")
