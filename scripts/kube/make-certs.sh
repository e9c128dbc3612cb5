#!/bin/sh
# Makes the certificates the Kubernetes base mounts and stores them as Secrets:
#   llm-gateway-aggregator-tls    the aggregator's server certificate (SANs: its
#                                 Service's DNS names), key, and the CA that
#                                 Envoy's client certificates chain to
#   llm-gateway-envoy-client-tls  Envoy's client certificate, key, and the CA
#                                 the aggregator's certificate chains to
#   llm-gateway-tls               (with --listener) the listener's HTTPS
#                                 certificate, from a separate edge CA, so
#                                 trusting the listener grants nothing on the
#                                 control plane
#
#   scripts/kube/make-certs.sh [--namespace NS] [--listener] [--listener-dns NAME]...
#                              [--days N] [--cluster-domain D] [--print | --out DIR]
#
# By default the Secrets are applied with kubectl to NS (llm-gateway), and
# every private key is deleted afterwards; --print writes the Secrets' YAML
# to stdout instead; --out DIR only writes the PEM files to DIR (nothing
# touches a cluster; DIR then holds the CA keys too). Running it again makes
# a new CA and new certificates: both Secrets change together, and the
# kubelet brings each pod the new files within about a minute, during which
# a reconnecting Envoy may be refused until both sides have them.
set -eu

namespace=llm-gateway
days=365
cluster_domain=cluster.local
listener=false
listener_dns=""
mode=apply
out=""

usage() {
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --namespace) namespace=${2:?--namespace needs a value}; shift 2 ;;
    --days) days=${2:?--days needs a value}; shift 2 ;;
    --cluster-domain) cluster_domain=${2:?--cluster-domain needs a value}; shift 2 ;;
    --listener) listener=true; shift ;;
    --listener-dns) listener=true; listener_dns="$listener_dns ${2:?--listener-dns needs a value}"; shift 2 ;;
    --print) mode=print; shift ;;
    --out) mode=out; out=${2:?--out needs a directory}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "make-certs: unknown argument $1" >&2; usage ;;
  esac
done

umask 077
if [ "$mode" = out ]; then
  mkdir -p "$out"
  dir=$out
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

# The DNS names a Service answers to from inside the cluster, as a SAN list.
service_sans() {
  echo "DNS:$1,DNS:$1.$namespace,DNS:$1.$namespace.svc,DNS:$1.$namespace.svc.$cluster_domain"
}

# ca NAME SUBJECT: a self-signed CA, NAME.crt and NAME.key.
ca() {
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -days "$days" \
    -subj "$2" -keyout "$dir/$1.key" -out "$dir/$1.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# leaf NAME CA SUBJECT USAGE [SANS]: NAME.crt and NAME.key signed by CA, for
# serverAuth or clientAuth only.
leaf() {
  ext="$dir/$1.ext"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$4"
    if [ -n "${5:-}" ]; then echo "subjectAltName=$5"; fi
  } >"$ext"
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "$3" \
    -keyout "$dir/$1.key" -out "$dir/$1.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$1.csr" -CA "$dir/$2.crt" -CAkey "$dir/$2.key" -CAcreateserial \
    -sha256 -days "$days" -extfile "$ext" -out "$dir/$1.crt" 2>/dev/null
  rm -f "$dir/$1.csr" "$ext"
}

ca control-plane-ca "/CN=llm-gateway control plane CA"
leaf aggregator control-plane-ca "/CN=llm-gateway-aggregator" serverAuth "$(service_sans llm-gateway-aggregator)"
leaf envoy-client control-plane-ca "/CN=llm-gateway-envoy" clientAuth
if [ "$listener" = true ]; then
  sans=$(service_sans llm-gateway)
  for name in $listener_dns; do sans="$sans,DNS:$name"; done
  ca edge-ca "/CN=llm-gateway edge CA"
  leaf listener edge-ca "/CN=llm-gateway" serverAuth "$sans"
fi
rm -f "$dir"/*.srl

if [ "$mode" = out ]; then
  ls "$dir"
  exit 0
fi

secrets() {
  kubectl -n "$namespace" create secret generic llm-gateway-aggregator-tls --type=kubernetes.io/tls \
    --from-file=tls.crt="$dir/aggregator.crt" --from-file=tls.key="$dir/aggregator.key" \
    --from-file=ca.crt="$dir/control-plane-ca.crt" --dry-run=client -o yaml
  echo ---
  kubectl -n "$namespace" create secret generic llm-gateway-envoy-client-tls --type=kubernetes.io/tls \
    --from-file=tls.crt="$dir/envoy-client.crt" --from-file=tls.key="$dir/envoy-client.key" \
    --from-file=ca.crt="$dir/control-plane-ca.crt" --dry-run=client -o yaml
  if [ "$listener" = true ]; then
    echo ---
    kubectl -n "$namespace" create secret tls llm-gateway-tls \
      --cert="$dir/listener.crt" --key="$dir/listener.key" --dry-run=client -o yaml
  fi
}

if [ "$mode" = print ]; then
  secrets
else
  secrets | kubectl apply -f -
fi
if [ "$listener" = true ]; then
  # What clients must trust for https://llm-gateway.<namespace>.svc (no key).
  cp "$dir/edge-ca.crt" ./llm-gateway-edge-ca.crt
  echo "wrote llm-gateway-edge-ca.crt: give it to the gateway's clients" >&2
fi
