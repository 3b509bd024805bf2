#!/usr/bin/env bash
# Installs every system dependency of llmbus from Debian's packages, only what is missing.
# Idempotent, and quiet when everything is already present.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git python3 python3-venv
      libnats-dev nats-server libevent-dev
      flatbuffers-compiler libflatbuffers-dev python3-flatbuffers
      libcmocka-dev libpcre2-dev libjansson-dev libedit-dev curl prometheus
      libyaml-dev         # --config FILE (YAML) of every llmbus command (cmd/flags)
      libjpeg62-turbo-dev libpng-dev  # model/vision/image.h: the vision encoder's image decoding
      libsodium-dev libcrypt-dev      # base/hash.h keyed BLAKE2b; bcrypt password hashes in nats.conf
      zlib1g-dev                      # schemas/: KVTransferChunk's CRC-32 (zlib crc32_z)
      bible-kjv           # a public-domain test text (KJV) for llmbus perplexity's e2e test
      systemd iproute2    # systemd-analyze checks ops/deploy/; ip netns runs tests/cluster/
      clang libclang-rt-dev  # libFuzzer (make fuzz, the end of make test)
      dpkg-dev debootstrap)  # make deb (cpack runs dpkg-shlibdeps), make deb-test (a fresh root)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
