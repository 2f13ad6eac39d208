#!/bin/bash
# The floor of a nonce added at tc on BenchmarkDatapath's path (README, issue 28): A - R - B over
# veth, TSO on, router links at MTU 1600, host routes mtu 1492/advmss 1432; iperf3 A->B in PAIRS
# (default 6) pairs of 3-s runs, with min.c's two programs on both hosts and with none, order
# alternating; prints the ratios, their median and the programs' run time per run and per MB.
# Run as root under the lab lock: flock /work/briefs/lab.lock scripts/tput-floor/run.sh
set -e
DIR=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/tputfloorXXXXXX) # no dot: libbpf turns dots in pin paths into underscores
clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -c "$DIR/min.c" -o "$WORK/min.o"
mkdir -p "$WORK/bpffs"; mount -t bpf bpf "$WORK/bpffs"
A=flA-$$; R=flR-$$; B=flB-$$
cleanup() { for n in $A $R $B; do ip netns pids $n 2>/dev/null | xargs -r kill -9; ip netns del $n 2>/dev/null || true; done; sysctl -qw kernel.bpf_stats_enabled=$OLDSTATS; umount "$WORK/bpffs" 2>/dev/null; rm -rf "$WORK"; }
OLDSTATS=$(sysctl -n kernel.bpf_stats_enabled)
trap cleanup EXIT
for n in $A $R $B; do ip netns add $n; ip -n $n link set lo up; done
ip link add a0 netns $A type veth peer name r0 netns $R
ip link add b1 netns $B type veth peer name r1 netns $R
ip netns exec $R sysctl -qw net.ipv6.conf.all.forwarding=1
for d in r0 r1; do ip -n $R link set $d mtu 1600 up; ip -n $R addr add fe80::1/64 dev $d nodad; done
ip -n $R addr add 2001:db8:a:1::1/64 dev r0 nodad; ip -n $R addr add 2001:db8:b:1::1/64 dev r1 nodad
ip -n $A link set a0 up; ip -n $B link set b1 up
ip -n $A addr add 2001:db8:a:1::2/64 dev a0 nodad; ip -n $B addr add 2001:db8:b:1::2/64 dev b1 nodad
ip -n $A -6 route add default via fe80::1 dev a0 mtu 1492 advmss 1432
ip -n $B -6 route add default via fe80::1 dev b1 mtu 1492 advmss 1432
sleep 1
ip netns exec $B iperf3 -s -p 5201 -D; sleep 0.3
for t in 1 2 3 4 5; do ip netns exec $A iperf3 -c 2001:db8:b:1::2 -p 5201 -n 100K >/dev/null 2>&1 && break; sleep 0.5; done
# One program object pinned so both hosts share the map; the key is set once.
mkdir -p $WORK/bpffs/floor
bpftool prog loadall $WORK/min.o $WORK/bpffs/floor pinmaps $WORK/bpffs/floor/maps
bpftool map update pinned $WORK/bpffs/floor/maps/m key 1 0 0 0 0 0 0 0 value 0xde 0xad 0xbe 0xef 0 0 0 0
ids=$(bpftool prog show pinned $WORK/bpffs/floor/eg -j | jq .id; bpftool prog show pinned $WORK/bpffs/floor/in -j | jq .id)
attach() { for x in "$A a0" "$B b1"; do set -- $x; tc -n $1 qdisc add dev $2 clsact; tc -n $1 filter add dev $2 egress bpf da pinned $WORK/bpffs/floor/eg; tc -n $1 filter add dev $2 ingress bpf da pinned $WORK/bpffs/floor/in; done; }
detach() { for x in "$A a0" "$B b1"; do set -- $x; tc -n $1 qdisc del dev $2 clsact; done; }
stats() { for id in $ids; do bpftool prog show id $id -j | jq -r '"\(.run_time_ns // 0) \(.run_cnt // 0)"'; done | awk '{t+=$1; c+=$2} END{printf "%d %d", t, c}'; }
sysctl -qw kernel.bpf_stats_enabled=1
run() { ip netns exec $A iperf3 -c 2001:db8:b:1::2 -p 5201 -t 3 -J | jq '"\(.end.sum_received.bits_per_second) \(.end.sum_received.bytes)"' -r; }
bt=0; bc=0; bb=0; ratios=""
for i in $(seq 1 "${PAIRS:-6}"); do
  if [ $((i%2)) = 1 ]; then order="none min"; else order="min none"; fi
  for k in $order; do
    if [ $k = min ]; then attach; s0=$(stats); fi
    read -r bps bytes < <(run)
    if [ $k = min ]; then s1=$(stats); detach; set -- $s0 $s1; bt=$((bt+$3-$1)); bc=$((bc+$4-$2)); bb=$((bb+bytes)); m=$bps; else n=$bps; fi
  done
  r=$(awk -v m="$m" -v n="$n" 'BEGIN{printf "%.3f", m/n}'); ratios="$ratios $r"
  awk -v i="$i" -v m="$m" -v n="$n" -v r="$r" 'BEGIN{printf "pair %d: none %.2f Gbit/s, min %.2f Gbit/s, ratio %s\n", i, n/1e9, m/1e9, r}'
done
echo "ratios:$ratios median $(echo $ratios | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')"
awk -v t="$bt" -v c="$bc" -v b="$bb" 'BEGIN{printf "minimal programs: %d runs, %.0f ns per run, %.1f us per MB\n", c, t/c, t/1e3/(b/1e6)}'
