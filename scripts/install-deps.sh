#!/usr/bin/env bash
# Installs the Debian packages shmccl builds with, when any is missing. Safe to run repeatedly.
set -euo pipefail

packages=(cmake g++ make pkg-config libnuma-dev liburing-dev libdnnl-dev ocl-icd-opencl-dev libgtest-dev libgmock-dev
          libbenchmark-dev clang-format)
packages+=("$@")

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "installing: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
