#!/usr/bin/env bash
# Regenerates Tests/SignetTestSupport/Fixtures/keys with the openssl CLI: one RSA-2048 key in every
# format Signet must read, plus keys Signet must refuse. The outputs are committed so the tests
# do not depend on key generation; run this again only to refresh them.
set -euo pipefail
out="${1:-$(cd "$(dirname "$0")/.." && pwd)/Tests/SignetTestSupport/Fixtures/keys}"
rm -rf "$out"
mkdir -p "$out"
cd "$out"
pass=passphrase.txt
printf 'correct horse battery staple\n' > "$pass"

# The main key, and every private format of it.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa2048-pkcs8.pem 2>/dev/null
openssl rsa -in rsa2048-pkcs8.pem -traditional -out rsa2048-pkcs1.pem 2>/dev/null
openssl rsa -in rsa2048-pkcs8.pem -traditional -aes256 -passout "file:$pass" -out rsa2048-pkcs1-encrypted.pem 2>/dev/null
openssl pkcs8 -topk8 -in rsa2048-pkcs8.pem -v2 aes-256-cbc -passout "file:$pass" -out rsa2048-pkcs8-encrypted.pem
openssl pkcs8 -topk8 -in rsa2048-pkcs8.pem -nocrypt -outform DER -out rsa2048-pkcs8.der
openssl pkcs8 -topk8 -in rsa2048-pkcs8.pem -v2 aes-256-cbc -passout "file:$pass" -outform DER -out rsa2048-pkcs8-encrypted.der
openssl rsa -in rsa2048-pkcs8.pem -traditional -outform DER -out rsa2048-pkcs1.der 2>/dev/null

# Its certificate and public forms.
openssl req -new -x509 -key rsa2048-pkcs8.pem -subj "/CN=Signet test fixture" -days 36500 \
  -addext "extendedKeyUsage=codeSigning" -out rsa2048-cert.pem
openssl x509 -in rsa2048-cert.pem -outform DER -out rsa2048-cert.der
openssl pkey -in rsa2048-pkcs8.pem -pubout -out rsa2048-spki.pem
openssl pkey -in rsa2048-pkcs8.pem -pubout -outform DER -out rsa2048-spki.der
openssl rsa -in rsa2048-pkcs8.pem -RSAPublicKey_out -out rsa2048-rsapublickey.pem 2>/dev/null
openssl rsa -in rsa2048-pkcs8.pem -RSAPublicKey_out -outform DER -out rsa2048-rsapublickey.der 2>/dev/null
# The key id FORMAT.md defines, as openssl computes it.
openssl pkey -pubin -inform DER -in rsa2048-spki.der -outform DER | openssl dgst -sha256 -r | cut -c1-64 > rsa2048.keyid

# PKCS#12: OpenSSL 3 default (AES-256/PBKDF2), legacy (RC2-40/3DES), and no passphrase.
openssl pkcs12 -export -inkey rsa2048-pkcs8.pem -in rsa2048-cert.pem -passout "file:$pass" -out rsa2048.p12
openssl pkcs12 -export -legacy -inkey rsa2048-pkcs8.pem -in rsa2048-cert.pem -passout "file:$pass" -out rsa2048-legacy.p12
openssl pkcs12 -export -inkey rsa2048-pkcs8.pem -in rsa2048-cert.pem -passout pass: -out rsa2048-nopass.p12

# A second, unrelated key (for "wrong key" cases and rotation).
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:3072 -out other3072-pkcs8.pem 2>/dev/null
openssl pkey -in other3072-pkcs8.pem -pubout -outform DER -out other3072-spki.der

# Keys Signet must refuse.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out rsa1024-pkcs8.pem 2>/dev/null
openssl pkey -in rsa1024-pkcs8.pem -pubout -outform DER -out rsa1024-spki.der
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ec-p256-pkcs8.pem
openssl ec -in ec-p256-pkcs8.pem -out ec-p256-traditional.pem 2>/dev/null
openssl pkey -in ec-p256-pkcs8.pem -pubout -outform DER -out ec-p256-spki.der
openssl genpkey -algorithm ED25519 -out ed25519-pkcs8.pem
openssl genpkey -genparam -algorithm DSA -pkeyopt dsa_paramgen_bits:2048 -out dsa-params.pem 2>/dev/null
openssl genpkey -paramfile dsa-params.pem -out dsa-pkcs8.pem
rm dsa-params.pem

chmod 600 ./*
echo "fixtures written to $out"
