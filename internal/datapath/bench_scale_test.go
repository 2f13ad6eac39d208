package datapath

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"ilnp/internal/wire"
)

// scaleTableSize sizes the session table, embryos and paths for the largest run.
const scaleTableSize = 131072

// scaleCycle is how many of the sessions the *-1024 runs' packets cycle over, spread evenly
// over the table: their lookups find entries that other packets pushed out of the caches, as a
// busy correspondent's do. The egress and ingress runs send the packets of one session, as
// BenchmarkDatapath does, among the others in the maps.
const scaleCycle = 1024

// BenchmarkDatapathScale measures what BenchmarkDatapath's egress and ingress do (kernel ns per
// fresh 1400-byte TCP packet, BPF_PROG_TEST_RUN) with 1,000, 10,000 and 100,000 sessions in the
// maps, each with its main locator pair counted in its entry (issue 28: flat in the session
// count). The *-all runs send small packets of every session in a scattered order, so that at
// 100,000 a session's entry is as cold as a busy correspondent's (ilnp-lab scale): its lines
// left the core's caches since its last packet.
func BenchmarkDatapathScale(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			d := newDatapath(b, Options{SessionTableSize: scaleTableSize})
			h := hostA(b, 4)
			h.setup(b, d, false)
			egress, ingress, coldEgress, coldIngress := fillSessions(b, d, h, n)
			one := len(egress) / 2
			b.Run("egress", func(b *testing.B) { benchPackets(b, d.objs.IlnpEgress, egress[one:one+1], verdictRedirect) })
			b.Run("ingress", func(b *testing.B) { benchPackets(b, d.objs.IlnpIngress, ingress[one:one+1], verdictNext) })
			b.Run("egress-1024", func(b *testing.B) { benchPackets(b, d.objs.IlnpEgress, egress, verdictRedirect) })
			b.Run("ingress-1024", func(b *testing.B) { benchPackets(b, d.objs.IlnpIngress, ingress, verdictNext) })
			b.Run("egress-all", func(b *testing.B) { benchPackets(b, d.objs.IlnpEgress, coldEgress, verdictRedirect) })
			b.Run("ingress-all", func(b *testing.B) { benchPackets(b, d.objs.IlnpIngress, coldIngress, verdictNext) })
		})
	}
}

// scaleNID is the correspondent of the i-th session.
func scaleNID(i int) wire.NID { return wire.NID(0x02cc000000000000 | uint64(i+1)) }

// fillSessions puts n sessions of h's NID with correspondents scaleNID(i) (h's locators, a
// nonce of their own each, their main pair counted in their entry as traffic would have left
// it) and returns one
// outgoing and one incoming packet for each of up to scaleCycle of them, and a small one each
// way for every session, in a scattered order (a prime stride).
func fillSessions(b *testing.B, d *Datapath, h host, n int) (egress, ingress, coldEgress, coldIngress [][]byte) {
	b.Helper()
	start := time.Now()
	step := max(1, n/scaleCycle)
	body := make([]byte, 1400)
	small := make([]byte, 64)
	coldEgress, coldIngress = make([][]byte, n), make([][]byte, n)
	for i := range n {
		remote := scaleNID(i)
		var nb [4]byte
		binary.BigEndian.PutUint32(nb[:], uint32(i+1))
		nonce, err := wire.NonceFromBytes(nb[:])
		must(b, err)
		must(b, d.PutSession(Session{
			LocalNID: h.nid, RemoteNID: remote, LocalView: h.l1, RemoteView: h.peer1, RemoteActive: h.peer2,
			RemoteLocators: []RemoteLocator{{Locator: h.peer1, State: LocatorValid}, {Locator: h.peer2, State: LocatorActive}},
			LocalNonce:     h.nonce, RemoteNonce: nonce,
		}))
		sk := sessionKey(h.nid, remote)
		var v ilnpBPFIlnpSession
		must(b, d.objs.Sessions.Lookup(sk, &v))
		v.Pair = ilnpBPFIlnpPair{Local: be64(uint64(h.l2)), Remote: be64(uint64(h.peer2)), TxPackets: 1, RxPackets: 1}
		must(b, d.objs.Sessions.Update(sk, &v, ebpf.UpdateExist))
		at := (i * 7919) % n
		src, dst := addr(h.l1, h.nid), addr(h.peer1, remote)
		coldEgress[at] = frame(ipv6Packet(src, dst, wire.ProtoTCP, tcpSegment(src, dst, small)))
		from, to := addr(h.peer2, remote), addr(h.l2, h.nid)
		coldIngress[at] = frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: h.peer2, NID: remote},
			wire.ILV{Locator: h.l2, NID: h.nid}, nonce, wire.ProtoTCP, tcpSegment(zeroLocator(from), zeroLocator(to), small)))
		if i%step != 0 || len(egress) == scaleCycle {
			continue
		}
		egress = append(egress, frame(ipv6Packet(src, dst, wire.ProtoTCP, tcpSegment(src, dst, body))))
		ingress = append(ingress, frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: h.peer2, NID: remote},
			wire.ILV{Locator: h.l2, NID: h.nid}, nonce, wire.ProtoTCP, tcpSegment(zeroLocator(from), zeroLocator(to), body))))
	}
	e, err := d.Entries()
	must(b, err)
	pairs, err := d.Paths()
	must(b, err)
	if e["sessions"] != n || len(pairs) != n {
		b.Fatalf("filled %d sessions, %d pairs; want %d each", e["sessions"], len(pairs), n)
	}
	b.Logf("%d sessions in %v, packets cycle over %d of them", n, time.Since(start).Round(time.Millisecond), len(egress))
	return egress, ingress, coldEgress, coldIngress
}

// benchPackets runs the packets in turn, one fresh packet per BPF_PROG_TEST_RUN, and reports
// the mean kernel-measured ns per packet.
func benchPackets(b *testing.B, prog *ebpf.Program, pkts [][]byte, want uint32) {
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ret, dur, err := prog.Benchmark(pkts[i%len(pkts)], 1, nil)
		if err != nil || ret != want {
			b.Fatalf("run: verdict %d, %v", ret, err)
		}
		total += dur
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "kernel-ns/pkt")
}
