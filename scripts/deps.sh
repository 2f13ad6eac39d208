#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian 12 machine. Idempotent: a second run
# installs nothing and takes about a second.
set -euo pipefail

# groff-base and shellcheck check the package's man pages and maintainer scripts (make test).
# mptcpize, mptcpd (+ its plugins: addr_adv), wireguard-go and wireguard-tools run the lab's peers (modes mptcp and
# wireguard, issue 26).
packages=(clang llvm libbpf-dev bpftool iproute2 radvd iperf3 tcpdump tshark bind9
          bind9-dnsutils ethtool make nftables groff-base shellcheck
          mptcpd mptcpd-plugins mptcpize wireguard-go wireguard-tools)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# radvd and named are started by the lab in its own namespaces; keep the machine's own
# instances from running (Debian starts them on install when it can).
for svc in radvd named mptcp; do
  systemctl disable --now "$svc" >/dev/null 2>&1 || true
done

cd "$(dirname "$0")/.."
go mod download
