#!/usr/bin/env bash
# A test PKI for the HTTPS walk-throughs, made with the openssl CLI alone: a root CA, an
# intermediate CA it signs, a server certificate for HOST (default localhost) the intermediate
# signs, the chain a server sends (leaf, then intermediate), and a spare key for a backup pin.
#
#   examples/pki/make-test-pki.sh DIR [HOST]
#
# DIR/root.pem           the root: what devices ship in their --tls-ca folder
# DIR/intermediate.pem   the intermediate: what README's $PIN_NOW pins (--tls-pin DIR/intermediate.pem)
# DIR/server.pem, DIR/server.key, DIR/chain.pem   for the server (nginx: ssl_certificate chain.pem)
# DIR/backup-key.pem     a key kept offline for the next intermediate (README's $PIN_BACKUP)
#
# For tests and trials only: the keys are not encrypted and live 30 days.
set -euo pipefail
dir=${1:?usage: make-test-pki.sh DIR [HOST]}
host=${2:-localhost}
mkdir -p "$dir"
cd "$dir"
days=30

# Root CA (self-signed).
openssl req -x509 -newkey rsa:3072 -nodes -keyout root.key -out root.pem -days "$days" -subj "/CN=Test Root CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# Intermediate CA, signed by the root; it may sign server certificates only (pathlen 0).
openssl req -newkey rsa:3072 -nodes -keyout intermediate.key -out intermediate.csr -subj "/CN=Test Intermediate CA" 2>/dev/null
printf 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n' > intermediate.ext
openssl x509 -req -in intermediate.csr -CA root.pem -CAkey root.key -CAcreateserial -out intermediate.pem -days "$days" \
  -extfile intermediate.ext 2>/dev/null

# Server certificate for $host, signed by the intermediate: the name in subjectAltName (Signet,
# like browsers, does not accept a name only in the subject CN).
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=$host" 2>/dev/null
printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\nbasicConstraints=critical,CA:FALSE\n' "$host" > server.ext
openssl x509 -req -in server.csr -CA intermediate.pem -CAkey intermediate.key -CAcreateserial -out server.pem -days "$days" \
  -extfile server.ext 2>/dev/null
cat server.pem intermediate.pem > chain.pem

# The backup pin's key, for the intermediate that will replace this one.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:3072 -out backup-key.pem 2>/dev/null

rm -f ./*.csr ./*.ext ./*.srl
chmod 600 ./*.key backup-key.pem
openssl verify -CAfile root.pem -untrusted intermediate.pem server.pem >/dev/null
echo "test PKI in $dir: root.pem, intermediate.pem, chain.pem + server.key for $host, backup-key.pem"
