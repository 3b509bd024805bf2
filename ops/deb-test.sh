#!/usr/bin/env bash
# Installs an llmbus .deb on a fresh Debian 12 root and checks that its `llmbus serve` answers.
#
#   ops/deb-test.sh PACKAGE.deb MODEL.gguf        (as root; `make deb-test` runs it)
#
# The root is a minimal debootstrap of bookworm, made once and kept as a tarball in
# .cache/debootstrap/ (debootstrap takes minutes; each run unpacks a fresh copy). In a chroot
# of it: `apt-get install ./PACKAGE.deb` (apt resolves the package's dependencies from Debian),
# then `llmbus serve` from /usr/bin with MODEL on a free loopback port; from outside, a
# /v1/completions request must come back with text. Prints each step; exits non-zero on failure.
set -euo pipefail

deb=${1:?usage: deb-test.sh PACKAGE.deb MODEL.gguf}
model=${2:?usage: deb-test.sh PACKAGE.deb MODEL.gguf}
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${LLMBUS_DEB_CACHE:-$here/.cache/debootstrap}
base=$cache/bookworm-minbase.tar.gz
[ "$(id -u)" = 0 ] || { echo "deb-test: needs root (debootstrap, chroot)"; exit 2; }
command -v debootstrap >/dev/null || { echo "deb-test: debootstrap missing (apt-get install debootstrap)"; exit 2; }

say() { printf '%s deb-test: %s\n' "$(date +%T)" "$*"; }

if [ ! -s "$base" ]; then
  say "making the base root (debootstrap --variant=minbase bookworm, once)"
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/root.XXXXXX")
  debootstrap --variant=minbase bookworm "$tmp" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 ||
    { echo "debootstrap failed: $cache/debootstrap.log"; tail -5 "$cache/debootstrap.log"; exit 1; }
  tar -C "$tmp" -czf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$tmp"
fi

root=$(mktemp -d /tmp/llmbus-deb-root.XXXXXX)
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null || true
  for m in proc dev/pts dev; do umount -l "$root/$m" 2>/dev/null || true; done
  rm -rf "$root"
}
trap cleanup EXIT

say "fresh root in $root"
tar -C "$root" -xzf "$base"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
cp "$deb" "$root/tmp/llmbus.deb"
cp "$model" "$root/tmp/model.gguf"

say "apt-get install ./llmbus.deb ($(dpkg-deb -f "$deb" Version), depends: $(dpkg-deb -f "$deb" Depends))"
chroot "$root" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/llmbus.deb' \
  >"$root/tmp/apt.log" 2>&1 || { tail -20 "$root/tmp/apt.log"; exit 1; }
chroot "$root" /bin/sh -c 'ls -l /usr/bin/llmbus /usr/lib/*/libllmbus-client.so* /usr/include/llmbus_client.h \
  /usr/lib/systemd/system/llmbus-api-server.service /etc/llmbus/llmbus.env /usr/share/llmbus/schemas/generate_request.fbs' ||
  { echo "installed files missing"; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
say "llmbus serve in the root, HTTP on 127.0.0.1:$port"
chroot "$root" /usr/bin/llmbus serve --model /tmp/model.gguf --http "127.0.0.1:$port" --metrics-port 0 \
  >"$root/tmp/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$serve_pid" 2>/dev/null || { echo "serve exited:"; tail -20 "$root/tmp/serve.log"; exit 1; }
  sleep 0.5
done
answer=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "model", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}') ||
  { echo "no answer:"; tail -20 "$root/tmp/serve.log"; exit 1; }
text=$(printf '%s' "$answer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
[ -n "$text" ] || { echo "empty completion: $answer"; exit 1; }
say "answered: \"The capital of France is$text\""
say "PASS: the package installs on a fresh Debian 12 root and its llmbus serve answers"
