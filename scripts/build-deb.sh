#!/usr/bin/env bash
# Builds the Debian package of signet: dist/signet_VERSION_ARCH.deb
#
#   scripts/build-deb.sh            then:  sudo apt-get install ./dist/signet_*.deb
#
# The binary is built with --static-swift-stdlib, so the package needs no Swift runtime: only
# libc, libcrypto (libssl3), libzip, libcurl and libxml2 (Foundation's XML parser), as
# dpkg-shlibdeps finds them. It carries the man pages (signet(1) and one page per command,
# generated from the same help text by swift-argument-parser's generate-manual plugin) and
# bash, zsh and fish completions, and the signet-update@.service/.timer units (systemd
# templates: one instance per /etc/signet/update.d/NAME.conf). Run lintian on the result (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/.*static let signet = "\(.*\)".*/\1/p' Sources/SignetCore/Version.swift)
arch=$(dpkg --print-architecture)
out=${OUT_DIR:-dist}
# The default build folder: the release build scripts/quickstart.sh made (the same flags) is
# reused, and the man pages come from the debug build `swift test` made.
# Its own build folder where one is given (CI builds it beside `swift test`, which holds .build).
scratch=${SIGNET_SCRATCH:-.build}
package="signet_${version}_${arch}.deb"

for tool in dpkg-deb dpkg-shlibdeps gzip strip; do
  command -v "$tool" >/dev/null || { echo "build-deb.sh: $tool is missing (apt-get install dpkg-dev binutils)" >&2; exit 1; }
done

root=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$root" "$work"' EXIT
chmod 0755 "$root"

echo "== man pages (generate-manual)" >&2
# The plugin builds every product in release and runs signet to read its help (the text is the
# same in every configuration). First: its build (without the static runtime) would otherwise
# leave the static build below stale, and the quick start that follows in the same folder
# would build signet once more.
touch "$work/manual-start"
swift package --scratch-path "$scratch" plugin generate-manual --multi-page --configuration release >&2
manuals=$(find "$scratch/plugins" -path '*GenerateManual*' -name 'signet*.1' -newer "$work/manual-start" | head -n 1 | xargs -r dirname)
[ -n "$manuals" ] || { echo "build-deb.sh: generate-manual made no pages" >&2; exit 1; }

echo "== build signet $version (release, static Swift runtime)" >&2
swift build -c release --product signet --static-swift-stdlib --scratch-path "$scratch" >&2
binary="$scratch/release/signet"

install -d -m 0755 "$root/usr/bin" "$root/usr/share/man/man1" "$root/usr/share/doc/signet" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d"
install -m 0755 "$binary" "$root/usr/bin/signet"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/signet"

for page in "$manuals"/signet*.1; do
  # mdoc wants .Pp between paragraphs, not blank lines (groff warns about each).
  sed 's/^$/.Pp/' "$page" | gzip -9n > "$root/usr/share/man/man1/$(basename "$page").gz"
done

echo "== completions" >&2
# bash-completion sources the file: no #! line.
"$root/usr/bin/signet" --generate-completion-script bash | sed '1{/^#!/d}' > "$root/usr/share/bash-completion/completions/signet"
"$root/usr/bin/signet" --generate-completion-script zsh > "$root/usr/share/zsh/vendor-completions/_signet"
"$root/usr/bin/signet" --generate-completion-script fish > "$root/usr/share/fish/vendor_completions.d/signet.fish"

# Documentation Debian policy asks for: the copyright file and the changelog.
cat > "$root/usr/share/doc/signet/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: signet
Comment: Signet, signed-resource packaging for Linux. The project has not chosen a
 licence yet; until it does, this package is for the team's own devices and CI.

Files: *
Copyright: 2026 The Signet developers
License: other
 No licence has been granted yet. See the project's README.
EOF
{
  echo "signet ($version) unstable; urgency=medium"
  echo
  echo "  * Release $version; see /usr/share/doc/signet/CHANGELOG.md.gz for the changes."
  echo
  echo " -- Signet developers <signet@example.org>  $(date -u -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")"
} | gzip -9n > "$root/usr/share/doc/signet/changelog.gz"
# The update service and its timer, the boot check, the varlink service and its socket
# (instance = a config in /etc/signet/update.d/), and the example config.
install -d -m 0755 "$root/lib/systemd/system" "$root/usr/share/doc/signet/examples"
install -m 0644 packaging/systemd/signet-update@.service packaging/systemd/signet-update@.timer packaging/systemd/signet-boot-check@.service \
  packaging/systemd/signet-serve@.socket packaging/systemd/signet-serve@.service "$root/lib/systemd/system/"
# The group that may ask the update service for Status (created by systemd-sysusers at install).
install -d -m 0755 "$root/usr/lib/sysusers.d"
install -m 0644 packaging/sysusers.d/signet.conf "$root/usr/lib/sysusers.d/signet.conf"
install -m 0644 examples/update/app.conf "$root/usr/share/doc/signet/examples/update-app.conf"
gzip -9n < CHANGELOG.md > "$root/usr/share/doc/signet/CHANGELOG.md.gz"
gzip -9n < docs/FORMAT.md > "$root/usr/share/doc/signet/FORMAT.md.gz"
find "$root/usr/share" -type f -exec chmod 0644 {} +

echo "== dependencies (dpkg-shlibdeps)" >&2
mkdir -p "$work/debian"
printf 'Source: signet\n\nPackage: signet\nArchitecture: any\n' > "$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O "$root/usr/bin/signet" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
# libcurl is loaded with dlopen on first download (not linked, so dpkg-shlibdeps cannot see
# it): named here, the version its header was built against at least.
curl_version=""
for header in /usr/include/*/curl/curlver.h /usr/include/curl/curlver.h; do
  [ -f "$header" ] || continue
  curl_version=$(sed -n 's/^#define LIBCURL_VERSION "\([0-9.]*\).*/\1/p' "$header")
  [ -z "$curl_version" ] || break
done
[ -n "$curl_version" ] || { echo "build-deb.sh: cannot read libcurl's version from curl/curlver.h" >&2; exit 1; }
depends="$depends, libcurl4 (>= $curl_version)"

install -d -m 0755 "$root/DEBIAN"
installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: signet
Version: $version
Architecture: $arch
Maintainer: Signet developers <signet@example.org>
Installed-Size: $installed_size
Depends: $depends
Recommends: p11-kit-modules
Suggests: softhsm2
Section: admin
Priority: optional
Homepage: https://example.org/signet
Description: sign, package, install and re-verify resources with RSA keys
 Signet signs files with RSA keys byte-compatibly with openssl dgst, packs
 them with a signed manifest into zip packages, and installs packages
 atomically after verifying them, keeping each file's signature in an
 extended attribute.
 .
 Installed trees can be re-verified later (modified, missing, added or unsigned
 files, and changed keys of JSON and property list files). Keys come from PEM,
 PKCS#12 or a PKCS#11 token; downloads over HTTPS are pinned.
EOF

# What dh_installsysusers would add: the group of sysusers.d/signet.conf, made at install.
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers signet.conf
fi
EOF
chmod 0755 "$root/DEBIAN/postinst"

mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out/$package" >&2
echo "$out/$package"
