#!/usr/bin/env bash
# Throwaway credentials for a local TLS + SuperNode-authentication trial of Flower.
#
#   ./gen-certs.sh DIR [NUM_SUPERNODES [NAME ...]]   (default: 2 SuperNodes)
#
# Writes into DIR:
#   ca.pem, ca.key            a self-signed certificate authority (valid 30 days)
#   server.pem, server.key    the certificate of the SuperLink and of the Fleet proxy
#                             (topofl.deploy.proxy), signed by the CA, for the
#                             names localhost, 127.0.0.1 and every NAME (a DNS name or
#                             an IP address, e.g. superlink.example.org) (SAN)
#   supernode-<i>, supernode-<i>.pub
#                             one ECDSA P-384 key pair per SuperNode, OpenSSH format
#                             (what `flower-supernode --auth-supernode-private-key`
#                             and `flwr supernode register` read)
#
# For trials on one machine only: keys are unencrypted and the CA key stays next to
# the certificates. For a real federation use your organisation's PKI and let each
# site generate its own SuperNode key (only the .pub leaves the site).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 DIR [NUM_SUPERNODES [NAME ...]]" >&2
    exit 2
fi
out=$1
nodes=${2:-2}
if ! [[ $nodes =~ ^[0-9]+$ ]]; then
    echo "$0: NUM_SUPERNODES must be a whole number; got '$nodes'" >&2
    exit 2
fi
san="DNS:localhost, IP:127.0.0.1"
for name in "${@:3}"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then
        san="$san, IP:$name"
    elif [[ $name =~ ^[A-Za-z0-9.-]+$ ]]; then
        san="$san, DNS:$name"
    else
        echo "$0: NAME '$name' is neither an IP address nor a DNS name" >&2
        exit 2
    fi
done
mkdir -p "$out"
cd "$out"
umask 077

# Certificate authority
openssl req -x509 -newkey rsa:3072 -nodes -sha256 -days 30 \
    -keyout ca.key -out ca.pem -subj "/CN=topofl trial CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# SuperLink (and Fleet proxy) server certificate for localhost, 127.0.0.1 and NAME ...
openssl req -newkey rsa:3072 -nodes -sha256 \
    -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
cat > server.ext <<EXT
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = $san
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
EXT
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -days 30 -sha256 -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
openssl verify -CAfile ca.pem server.pem >/dev/null

# SuperNode authentication keys: ECDSA P-384, OpenSSH format
for ((i = 0; i < nodes; i++)); do
    rm -f "supernode-$i" "supernode-$i.pub"
    if command -v ssh-keygen >/dev/null 2>&1; then
        ssh-keygen -q -t ecdsa -b 384 -N "" -C "supernode-$i" -f "supernode-$i"
    else
        python3 - "supernode-$i" <<'PY'
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

key = ec.generate_private_key(ec.SECP384R1())
path = sys.argv[1]
with open(path, "wb") as fh:
    fh.write(key.private_bytes(serialization.Encoding.PEM,
                               serialization.PrivateFormat.OpenSSH,
                               serialization.NoEncryption()))
with open(path + ".pub", "wb") as fh:
    fh.write(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH) + b"\n")
PY
    fi
done
chmod 644 ca.pem server.pem supernode-*.pub

echo "wrote to $(pwd):"
ls -1
