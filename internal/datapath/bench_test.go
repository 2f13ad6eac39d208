package datapath

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// benchFigures is what BenchmarkDatapath writes to bench/out/datapath.json.
type benchFigures struct {
	ILNPBps   float64 `json:"ilnp_bps"`
	IPv6Bps   float64 `json:"ipv6_bps"`
	Ratio     float64 `json:"ratio"`
	EgressNs  float64 `json:"egress_ns"`
	IngressNs float64 `json:"ingress_ns"`
}

// BenchmarkDatapath measures ns per packet of the two programs (BPF_PROG_TEST_RUN, one fresh
// packet per run, the kernel's own timing) and TCP bulk throughput with ILNP against plain IPv6
// over the same namespace path, then writes bench/out/datapath.json.
func BenchmarkDatapath(b *testing.B) {
	var fig benchFigures
	b.Run("egress", func(b *testing.B) { fig.EgressNs = benchProgram(b, true) })
	b.Run("ingress", func(b *testing.B) { fig.IngressNs = benchProgram(b, false) })
	b.Run("tcp-throughput", func(b *testing.B) { fig.ILNPBps, fig.IPv6Bps, fig.Ratio = benchThroughput(b) })
	out := filepath.Join("..", "..", "bench", "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		b.Fatal(err)
	}
	js, _ := json.MarshalIndent(fig, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "datapath.json"), append(js, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("datapath: egress %.0f ns/pkt, ingress %.0f ns/pkt, TCP ILNP %.2f Gbit/s vs IPv6 %.2f Gbit/s, ratio %.3f\n",
		fig.EgressNs, fig.IngressNs, fig.ILNPBps/1e9, fig.IPv6Bps/1e9, fig.Ratio)
}

// benchProgram runs one fresh 1400-byte TCP packet per BPF_PROG_TEST_RUN (repeat would reuse
// the already translated buffer) and returns the mean kernel-measured ns per packet.
func benchProgram(b *testing.B, egress bool) float64 {
	d := newDatapath(b, Options{})
	h := hostA(b, 4)
	h.setup(b, d, true)
	body := make([]byte, 1400)
	var in []byte
	prog := d.objs.IlnpEgress
	if egress {
		in = frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoTCP, tcpSegment(h.viewSrc(), h.viewDst(), body)))
	} else {
		from, to := addr(lB2, nidB), addr(lA2, nidA)
		in = frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, h.peerNonce, wire.ProtoTCP,
			tcpSegment(zeroLocator(from), zeroLocator(to), body)))
		prog = d.objs.IlnpIngress
	}
	want := map[bool]uint32{true: verdictRedirect, false: verdictNext}[egress]
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ret, dur, err := prog.Benchmark(in, 1, nil)
		if err != nil || ret != want {
			b.Fatalf("run: verdict %d, %v", ret, err)
		}
		total += dur
	}
	ns := float64(total.Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "kernel-ns/pkt")
	return ns
}

// benchThroughput runs iperf3 from A to B in pairs of 3-second runs, ILNP (B's session-view
// address) and plain IPv6 (another address of B), over the same path with the same offloads: TSO
// on and the router's links at MTU 1600 (the workaround for the router GSO bug, platform.md).
// The order inside a pair alternates. The machine is shared, so each figure is the median over
// the pairs and the ratio the median of the per-pair ratios.
//
// It also reports where the datapath's share of the difference goes: the four programs' kernel
// run time (BPF_ENABLE_STATS) per packet they saw and per MB delivered, ILNP runs against IPv6
// runs (the programs see plain IPv6 too and pass it).
func benchThroughput(b *testing.B) (ilnp, ipv6, ratio float64) {
	nstest.RequireTool(b, "iperf3")
	tp := newTopo(b, topoOptions{})
	tp.b.Start(nil, "iperf3", "-s", "-p", "5201")
	time.Sleep(300 * time.Millisecond)
	if stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		defer stats.Close()
	} else {
		b.Logf("BPF_ENABLE_STATS: %v (no program run times)", err)
	}
	const pairs = 7
	var il, v6, ratios []float64
	var cost [2]progCost // ILNP, IPv6
	run := func(dst netip.Addr, c *progCost) float64 {
		t0, n0 := progTime(b, tp)
		bps, bytes := iperf(b, tp, dst)
		t1, n1 := progTime(b, tp)
		c.ns, c.runs, c.bytes = c.ns+t1-t0, c.runs+n1-n0, c.bytes+bytes
		return bps
	}
	for i := 0; i < pairs; i++ {
		var x, y float64
		if i%2 == 0 {
			x = run(tp.viewB, &cost[0])
			y = run(tp.plainB, &cost[1])
		} else {
			y = run(tp.plainB, &cost[1])
			x = run(tp.viewB, &cost[0])
		}
		il, v6, ratios = append(il, x), append(v6, y), append(ratios, x/y)
	}
	for i, name := range []string{"ilnp", "ipv6"} {
		if c := cost[i]; c.runs > 0 && c.bytes > 0 {
			b.Logf("%s: programs ran %d times, %.0f ns per run, %.1f us per MB delivered", name, c.runs,
				float64(c.ns)/float64(c.runs), float64(c.ns)/1e3/(float64(c.bytes)/1e6))
			b.ReportMetric(float64(c.ns)/1e3/(float64(c.bytes)/1e6), name+"-bpf-us/MB")
		}
	}
	c, err := tp.da.Counters()
	if err != nil {
		b.Fatal(err)
	}
	if c["egress_ilnp"] == 0 {
		b.Fatal("the ILNP runs did not go through the datapath")
	}
	ilnp, ipv6, ratio = median(il), median(v6), median(ratios)
	b.Logf("ILNP %v\nIPv6 %v\nratios %v", il, v6, ratios)
	b.ReportMetric(ilnp/1e9, "ilnp-Gbit/s")
	b.ReportMetric(ipv6/1e9, "ipv6-Gbit/s")
	b.ReportMetric(ratio, "ratio")
	return ilnp, ipv6, ratio
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// progCost sums the programs' run time (ns) and runs over some iperf3 runs, and the bytes
// those delivered.
type progCost struct{ ns, runs, bytes uint64 }

// progTime is the kernel run time (ns) and run count so far of both hosts' programs.
func progTime(b *testing.B, tp *topo) (ns, runs uint64) {
	b.Helper()
	for _, p := range []*ebpf.Program{tp.da.objs.IlnpEgress, tp.da.objs.IlnpIngress, tp.db.objs.IlnpEgress, tp.db.objs.IlnpIngress} {
		s, err := p.Stats()
		if err != nil {
			b.Fatalf("program stats: %v", err)
		}
		ns, runs = ns+uint64(s.Runtime.Nanoseconds()), runs+s.RunCount
	}
	return ns, runs
}

// iperf returns the bit rate and the bytes the receiver got.
func iperf(b *testing.B, tp *topo, dst netip.Addr) (float64, uint64) {
	b.Helper()
	out, err := tp.a.Try("iperf3", "-c", dst.String(), "-p", "5201", "-t", "3", "-J")
	if err != nil {
		b.Fatalf("iperf3 to %v: %v", dst, err)
	}
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Bytes         uint64  `json:"bytes"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &r); err != nil {
		b.Fatalf("iperf3 JSON: %v", err)
	}
	return r.End.SumReceived.BitsPerSecond, r.End.SumReceived.Bytes
}
