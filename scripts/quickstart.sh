#!/usr/bin/env bash
# Quick start: installs what is missing, builds signet, and runs the main job end to end on
# keys-example/ (TEST-ONLY keys): sign resources, verify them, check against openssl, and show
# that a tampered file is caught. Exits non-zero if anything does not behave as shown.
# SIGNET=/usr/bin/signet runs it against an installed binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# expect_exit N COMMAND...: runs COMMAND, which must fail with exit status N.
expect_exit() {
  local want=$1 status=0
  shift
  "$@" || status=$?
  if [ "$status" -ne "$want" ]; then
    echo "expected exit $want from: $*; got $status" >&2
    exit 1
  fi
}

step "Install missing Debian packages"
scripts/install-deps.sh

if [ -n "${SIGNET:-}" ]; then
  # An installed signet (CI runs this against the Debian package's /usr/bin/signet).
  step "Use $SIGNET"
  signet=$SIGNET
else
  step "Build signet (release)"
  # With the Swift runtime linked in, as scripts/build-deb.sh packages it: one release
  # configuration, built once. SIGNET_SCRATCH names the build folder (CI gives the one its
  # package was built in, so this finds it built).
  scratch=${SIGNET_SCRATCH:-.build}
  swift build -c release --product signet --static-swift-stdlib --scratch-path "$scratch" 2>&1 | tail -n 1
  signet="$(swift build -c release --static-swift-stdlib --scratch-path "$scratch" --show-bin-path)/signet"
fi
"$signet" --version

# git does not keep file modes; private key material should not be readable by others.
chmod 600 keys-example/private_key.pem keys-example/private_key.p12 keys-example/passphrase.txt

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -R examples/assets "$work/assets"
resources=("$work/assets/hello.txt" "$work/assets/config.json" "$work/assets/img/logo.svg")
key=(--key keys-example/private_key.pem --passphrase-file keys-example/passphrase.txt)
pub=(--pubkey keys-example/public_key.der)

step "Sign the resources (publisher side)"
"$signet" sign "${resources[@]}" "${key[@]}"

step "Verify each one with the public key (client side)"
for file in "${resources[@]}"; do
  "$signet" verify "$file" --signature "$file.sig" "${pub[@]}"
done

step "Byte-identical to openssl dgst -sha256 -sign, and openssl verifies signet's signature"
openssl dgst -sha256 -sign keys-example/private_key.pem -passin file:keys-example/passphrase.txt \
  -out "$work/openssl.sig" "$work/assets/hello.txt"
cmp "$work/openssl.sig" "$work/assets/hello.txt.sig" && echo "identical: $work/assets/hello.txt.sig"
openssl pkey -pubin -inform DER -in keys-example/public_key.der -out "$work/public.pem"
openssl dgst -sha256 -verify "$work/public.pem" -signature "$work/assets/hello.txt.sig" "$work/assets/hello.txt"

step "A tampered resource is caught (exit 1)"
printf 'one more line\n' >> "$work/assets/hello.txt"
expect_exit 1 "$signet" verify "$work/assets/hello.txt" --signature "$work/assets/hello.txt.sig" "${pub[@]}"

step "Pack the resources into a signed package (reproducible under SOURCE_DATE_EPOCH)"
rm -f "$work"/assets/*.sig "$work"/assets/img/*.sig
cp examples/assets/hello.txt "$work/assets/hello.txt"
SOURCE_DATE_EPOCH=1700000000 "$signet" pack "$work/assets" "${key[@]}" --name example-assets --version 1.0.0 --out "$work/assets.zip"
SOURCE_DATE_EPOCH=1700000000 "$signet" pack "$work/assets" "${key[@]}" --name example-assets --version 1.0.0 --out "$work/again.zip"
cmp "$work/assets.zip" "$work/again.zip" && echo "byte-identical: $work/assets.zip"

step "Inspect it: contents, then full verification without extracting anything"
"$signet" inspect "$work/assets.zip" "${pub[@]}"

step "Info-ZIP unzip reads it, and openssl verifies the manifest signature"
unzip -l "$work/assets.zip"
unzip -q "$work/assets.zip" -d "$work/unzipped"
openssl dgst -sha256 -verify "$work/public.pem" -signature "$work/unzipped/.signet/manifest.json.sig" "$work/unzipped/.signet/manifest.json"

step "Unpack: verified first, staged beside the destination, installed in one step"
"$signet" unpack "$work/assets.zip" --dest "$work/installed" "${pub[@]}"
ls -la "$work/installed" "$work/installed/.signet"

step "Each installed file carries its signature in extended attributes"
getfattr -d -m 'user.signet' "$work/installed/config.json"
getfattr --only-values -n user.signet.sig "$work/installed/config.json" > "$work/config.xattr.sig"
openssl dgst -sha256 -verify "$work/public.pem" -signature "$work/config.xattr.sig" "$work/installed/config.json"

step "A tampered package is refused before anything is written (exit 1)"
python3 - "$work/assets.zip" "$work/tampered.zip" <<'PY'
import sys, zipfile
src = zipfile.ZipFile(sys.argv[1])
with zipfile.ZipFile(sys.argv[2], "w") as out:
    for info in src.infolist():
        data = src.read(info.filename)
        out.writestr(info, data + b"!" if info.filename == "hello.txt" else data)
PY
expect_exit 1 "$signet" unpack "$work/tampered.zip" --dest "$work/tampered-install" "${pub[@]}"
if [ -e "$work/tampered-install" ]; then
  echo "a refused package must not create its destination" >&2
  exit 1
fi

step "Machine-readable output"
"$signet" inspect "$work/assets.zip" "${pub[@]}" --json

step "Later, on the device: re-verify the installed tree from its attributes"
"$signet" reverify "$work/installed" "${pub[@]}"
"$signet" status "$work/installed/img/logo.svg" "${pub[@]}"

step "A modified file is named, and a stripped attribute is found (exit 1)"
printf 'edited\n' >> "$work/installed/hello.txt"
setfattr -x user.signet.sig "$work/installed/config.json"
expect_exit 1 "$signet" reverify "$work/installed" "${pub[@]}"

step "Undo the edit; --repair restores the stripped attribute, after checking the content"
cp examples/assets/hello.txt "$work/installed/hello.txt"
"$signet" reverify "$work/installed" "${pub[@]}" --repair
getfattr -n user.signet.sig --only-values "$work/installed/config.json" > "$work/restored.sig"
openssl dgst -sha256 -verify "$work/public.pem" -signature "$work/restored.sig" "$work/installed/config.json"
echo "config.json: attribute restored (openssl verifies it)"

step "Done: signing, packages, installation and re-verification work on this machine"
