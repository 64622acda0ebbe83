#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Signet needs to build and test, if any are missing.
# Safe to run again: it installs nothing when everything is there.
set -euo pipefail

need=()
# Libraries, found through pkg-config as Package.swift finds them.
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
pkg-config --exists libcrypto 2>/dev/null || need+=(libssl-dev)
pkg-config --exists libzip 2>/dev/null || need+=(libzip-dev)
pkg-config --exists libcurl 2>/dev/null || need+=(libcurl4-openssl-dev)
# PKCS#11 types for keys on tokens (the token's module is loaded at run time).
pkg-config --exists p11-kit-1 2>/dev/null || need+=(libp11-kit-dev)
# SoftHSM2, a real PKCS#11 token the token tests make in a temporary directory.
{ [ -e /usr/lib/softhsm/libsofthsm2.so ] && command -v softhsm2-util >/dev/null 2>&1; } || need+=(softhsm2)
# p11-kit's proxy module: the default module when none is named (it loads SoftHSM2 via its
# /usr/share/p11-kit/modules entry).
compgen -G "/usr/lib/*/p11-kit-proxy.so" >/dev/null || [ -e /usr/lib64/p11-kit-proxy.so ] || need+=(p11-kit-modules)
# The peers the tests run Signet against.
for pair in gcc:gcc mkfs.xfs:xfsprogs filefrag:e2fsprogs systemd-analyze:systemd openssl:openssl unzip:unzip zip:zip getfattr:attr setfattr:attr python3:python3 bash:bash evmctl:ima-evm-utils curl:curl strace:strace script:bsdutils; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
# The peers bench/run.sh compares Signet with (issue 28): minisign, and rauc (which builds its
# bundles with mksquashfs).
# /usr/bin/time measures each side's peak RSS (bench/bench.py).
# zsync and casync, the peers of issue 40's chunked updates; bsdtar and 7z, other readers of
# issue 51's deflated chunks; fsverity, the reference digest of issue 52's fs-verity files.
for pair in minisign:minisign rauc:rauc mksquashfs:squashfs-tools zsync:zsync zsyncmake:zsync casync:casync bsdtar:libarchive-tools 7z:p7zip-full fsverity:fsverity; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ -x /usr/bin/time ] || need+=(time)
# Debian's Go with golang.org/x/mod (sumdb/note, sumdb/tlog): the peer of the transparency log's
# signed notes, tiles and proofs (issue 66), built offline from /usr/share/gocode.
command -v go >/dev/null 2>&1 || need+=(golang-go)
[ -d /usr/share/gocode/src/golang.org/x/mod/sumdb/tlog ] || need+=(golang-golang-x-mod-dev)
# nginx, a real HTTPS server the download tests start on loopback (not as a service).
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || need+=(nginx-light)
# Apache httpd and lighttpd, the other HTTPS servers (CDN and mirror stand-ins) the download
# tests start on loopback (issue 36), with lighttpd's TLS module.
[ -x /usr/sbin/apache2 ] || need+=(apache2)
[ -x /usr/sbin/lighttpd ] || need+=(lighttpd)
[ -e /usr/lib/lighttpd/mod_openssl.so ] || need+=(lighttpd-mod-openssl)

# The VM suite (issue 38, scripts/vm/run.sh): qemu boots a Debian 12 image that mmdebstrap
# builds from Debian's packages; losetup mounts the replayed power-cut images.
for pair in qemu-system-x86_64:qemu-system-x86 mmdebstrap:mmdebstrap losetup:mount; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done

# faketime: the TUF conformance suite (scripts/tuf-conformance.sh) runs clients at other times.
command -v faketime >/dev/null 2>&1 || need+=(faketime)
# pip, for python-tuf below, and venv, for the conformance suite's own environment.
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
python3 -c "import ensurepip" >/dev/null 2>&1 || need+=(python3-venv)

# python-tuf (PyPI `tuf`) and securesystemslib with its crypto extra: the other side of the TUF
# tests (issue 37): a repository made with python-tuf's Metadata API, python-tuf's ngclient.
# jsonschema: validates every command's --json output against docs/schema/ (issue 41).
# varlink: the client of `signet serve` (its varlink.cli and Client; issue 65).
python_deps() {
  python3 -c "import tuf.ngclient, securesystemslib.signer, cryptography, jsonschema, varlink" >/dev/null 2>&1 && return 0
  echo "install-deps: installing python-tuf, jsonschema and varlink from PyPI"
  python3 -m pip install -q "tuf==7.0.1" "securesystemslib[crypto]" "jsonschema>=4.18" "varlink==31.0.0" \
    || python3 -m pip install -q --break-system-packages "tuf==7.0.1" "securesystemslib[crypto]" "jsonschema>=4.18" "varlink==31.0.0"
}

if [ ${#need[@]} -eq 0 ]; then
  python_deps
  echo "install-deps: everything Signet needs is installed"
  exit 0
fi

echo "install-deps: installing ${need[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: need root (or sudo) to install: ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
python_deps
