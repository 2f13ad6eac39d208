package datapath

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"ilnp/internal/pkttest"
	"ilnp/internal/wire"
)

// runMarked runs prog on in with skb->mark set (the first fields of struct __sk_buff: len and
// pkt_type must be zero in ctx_in, mark follows).
func runMarked(t *testing.T, prog *ebpf.Program, in []byte, mark uint32) (uint32, []byte) {
	t.Helper()
	ctx := make([]byte, 12)
	binary.LittleEndian.PutUint32(ctx[8:], mark)
	opts := ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256), Context: ctx}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return ret, opts.DataOut
}

func pathOf(t *testing.T, d *Datapath, k PathKey) PathStats {
	t.Helper()
	ps, err := d.Paths()
	must(t, err)
	for _, p := range ps {
		if p.Key == k {
			return p
		}
	}
	t.Fatalf("no path %+v among %+v", k, ps)
	return PathStats{}
}

// Every packet of a session is counted on the locator pair it carried: sent packets are
// unanswered until one arrives on the pair, which is the pair's proof of life.
func TestPathAccounting(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	l4 := transport(t, wire.ProtoUDP, h.viewSrc(), h.viewDst(), payload)
	out := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoUDP, l4))
	for range 3 {
		if ret, _ := d.egress(t, out); ret != verdictRedirect {
			t.Fatalf("egress verdict %d", ret)
		}
	}
	key := PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA2, Remote: lB2}
	p := pathOf(t, d, key)
	if p.TxPackets != 3 || p.Unanswered != 3 || p.FirstUnansweredTxNs == 0 || p.RxPackets != 0 || p.TxBytes == 0 {
		t.Fatalf("after 3 sent: %+v", p)
	}
	// One from the peer's active locator to our active one: the pair (lA2, lB2) is alive.
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA},
		h.peerNonce, wire.ProtoUDP, transport(t, wire.ProtoUDP, zeroLocator(from), zeroLocator(to), payload)))
	if ret, _ := d.ingress(t, in); ret != verdictNext {
		t.Fatalf("ingress verdict %d", ret)
	}
	p = pathOf(t, d, key)
	if p.RxPackets != 1 || p.Unanswered != 0 || p.FirstUnansweredTxNs != 0 || p.LastRxNs == 0 || p.RxBytes == 0 {
		t.Fatalf("after 1 received: %+v", p)
	}
	// From the peer's other locator to our other one: a second pair.
	in = frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB1, NID: nidB}, wire.ILV{Locator: lA1, NID: nidA},
		h.peerNonce, wire.ProtoUDP, transport(t, wire.ProtoUDP, zeroLocator(from), zeroLocator(to), payload)))
	if ret, _ := d.ingress(t, in); ret != verdictNext {
		t.Fatalf("ingress verdict %d", ret)
	}
	second := pathOf(t, d, PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA1, Remote: lB1})
	if second.RxPackets != 1 || second.TxPackets != 0 {
		t.Fatalf("second pair: %+v", second)
	}

	// LastRxFrom reads the one session: its own pair and the others from the locator asked.
	for _, c := range []struct {
		name    string
		remote  wire.L64
		locals  []wire.L64
		peer    wire.NID
		want    uint64
		wantAny bool
	}{
		{"own pair", lB2, []wire.L64{lA1, lA2}, nidB, p.LastRxNs, true},
		{"another pair", lB1, []wire.L64{lA2, lA1}, nidB, second.LastRxNs, true},
		{"another pair through a local locator not asked", lB1, []wire.L64{lA2}, nidB, 0, false},
		{"a locator nothing came from", lA1, []wire.L64{lA1, lA2}, nidB, 0, false},
		{"no such session", lB2, []wire.L64{lA1, lA2}, nidA, 0, false},
	} {
		got, err := d.LastRxFrom(nidA, c.peer, c.remote, c.locals)
		must(t, err)
		if (got != 0) != c.wantAny || (c.wantAny && got != c.want) {
			t.Errorf("LastRxFrom %s: %d, want %d (from Paths)", c.name, got, c.want)
		}
	}
}

// A probe (a session packet with the probe mark) leaves on the pair of its slot, not on the
// session's active pair; a slot naming another session, or no mark, changes nothing.
func TestProbePair(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	must(t, d.SetProbePair(7, PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA1, Remote: lB1}))
	must(t, d.SetProbePair(8, PathKey{LocalNID: nidA, RemoteNID: wire.NID(0x99), Local: lA1, Remote: lB1}))
	l4 := transport(t, wire.ProtoICMPv6, h.viewSrc(), h.viewDst(), payload)
	pkt := frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, l4))
	for _, tc := range []struct {
		name     string
		mark     uint32
		src, dst wire.L64
		verdict  uint32
	}{
		{"probe slot 7 (its locator lives on this interface)", ProbeMark | 7, lA1, lB1, verdictPass},
		{"other session's slot", ProbeMark | 8, lA2, lB2, verdictRedirect},
		{"no mark", 0, lA2, lB2, verdictRedirect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ret, out := runMarked(t, d.objs.IlnpEgress, pkt, tc.mark)
			if ret != tc.verdict {
				t.Fatalf("verdict %d, want %d", ret, tc.verdict)
			}
			p, raw := parseFrame(t, out)
			if p.IPv6.Src != addr(tc.src, nidA) || p.IPv6.Dst != addr(tc.dst, nidB) {
				t.Fatalf("wire %v -> %v, want locators %v -> %v", p.IPv6.Src, p.IPv6.Dst, tc.src, tc.dst)
			}
			if n, ok := p.Nonce(); !ok || n != h.nonce {
				t.Fatalf("nonce %v %v", n, ok)
			}
			checkWireChecksum(t, p, raw)
		})
	}
	if p := pathOf(t, d, PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA1, Remote: lB1}); p.TxPackets != 1 {
		t.Fatalf("probe pair counted %d sent, want 1", p.TxPackets)
	}
}

// Multipath: flows (5-tuples) spread over the pairs by weight, and every packet of one flow
// takes the same pair; ICMPv6 stays on the active pair.
func TestMultipathPerFlow(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	pairs := []MultipathPair{{Local: lA1, Remote: lB1, Weight: 1}, {Local: lA2, Remote: lB2, Weight: 1}}
	must(t, d.SetMultipath(nidA, nidB, pairs))
	pairOf := func(t *testing.T, proto uint8, sport uint16) wire.L64 {
		t.Helper()
		l4 := transport(t, proto, h.viewSrc(), h.viewDst(), payload)
		if proto == wire.ProtoTCP || proto == wire.ProtoUDP {
			binary.BigEndian.PutUint16(l4[0:], sport) // the checksum is not checked here
		}
		_, out := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), proto, l4)))
		p, _ := parseFrame(t, out)
		src, err := wire.ILVFromAddr(p.IPv6.Src)
		must(t, err)
		dst, err := wire.ILVFromAddr(p.IPv6.Dst)
		must(t, err)
		if (src.Locator == lA1) != (dst.Locator == lB1) {
			t.Fatalf("mixed pair %v -> %v", src.Locator, dst.Locator)
		}
		return src.Locator
	}
	for _, proto := range []uint8{wire.ProtoTCP, wire.ProtoUDP} {
		seen := map[wire.L64]int{}
		for port := uint16(40000); port < 40064; port++ {
			first := pairOf(t, proto, port)
			for range 3 {
				if again := pairOf(t, proto, port); again != first {
					t.Fatalf("proto %d port %d: pair changed %v -> %v", proto, port, first, again)
				}
			}
			seen[first]++
		}
		// 64 flows, two pairs of equal weight: both used, neither by fewer than 16.
		if seen[lA1] < 16 || seen[lA2] < 16 {
			t.Fatalf("proto %d: flows per pair %v", proto, seen)
		}
	}
	if got := pairOf(t, wire.ProtoICMPv6, 0); got != lA2 {
		t.Fatalf("ICMPv6 left on %v, want the active %v", got, lA2)
	}
	// Weight 0 on one pair: everything on the other.
	must(t, d.SetMultipath(nidA, nidB, []MultipathPair{{Local: lA1, Remote: lB1, Weight: 1}, {Local: lA2, Remote: lB2}}))
	for port := uint16(40000); port < 40016; port++ {
		if got := pairOf(t, wire.ProtoTCP, port); got != lA1 {
			t.Fatalf("port %d on %v with its pair's weight 0", port, got)
		}
	}
	must(t, d.SetMultipath(nidA, nidB, nil))
	for port := uint16(40000); port < 40016; port++ {
		if got := pairOf(t, wire.ProtoUDP, port); got != lA2 {
			t.Fatalf("multipath off: port %d on %v, want the active pair", port, got)
		}
	}
}

// A responder session is counted per pair only once it proved two-way traffic: not while an
// embryo, not on the answer that promotes it (a spoofed ping's), only from the correspondent's
// second packet on. A flood of first packets leaves the paths map empty.
func TestPathsOnlyForProvenSessions(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, false)
	from, to := addr(lB2, nidB), addr(lA2, nidA)
	theirs := mustNonce(t, 9, 8, 7, 6)
	in := frame(wire.AppendILNPPacket(nil, wire.ILV{Locator: lB2, NID: nidB}, wire.ILV{Locator: lA2, NID: nidA}, theirs, wire.ProtoUDP,
		transport(t, wire.ProtoUDP, zeroLocator(from), zeroLocator(to), payload)))
	noPaths := func(when string) {
		t.Helper()
		if ps, err := d.Paths(); err != nil || len(ps) != 0 {
			t.Fatalf("%s: paths %+v %v, want none", when, ps, err)
		}
	}
	if ret, _ := d.ingress(t, in); ret != verdictNext {
		t.Fatalf("first packet verdict %d", ret)
	}
	noPaths("embryo")
	reply := frame(ipv6Packet(addr(lA1, nidA), from, wire.ProtoUDP, transport(t, wire.ProtoUDP, addr(lA1, nidA), from, payload)))
	if ret, _ := d.egress(t, reply); ret != verdictRedirect && ret != verdictPass {
		t.Fatalf("answer verdict %d", ret)
	}
	noPaths("answered once (promoted)")
	if ret, _ := d.ingress(t, in); ret != verdictNext {
		t.Fatalf("second packet verdict %d", ret)
	}
	p := pathOf(t, d, PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA2, Remote: lB2})
	if p.RxPackets != 1 || p.TxPackets != 0 {
		t.Fatalf("after the second packet: %+v, want its receipt counted", p)
	}
}

// Probes (ICMPv6 echoes carrying the probe payload, ours or our kernel's answer to the peer's)
// touch neither the session's counters and idle timer nor a pair's unanswered count: an idle
// session still ages out, and an idle pair is not judged by its probes.
func TestProbesAreNotData(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	key := PathKey{LocalNID: nidA, RemoteNID: nidB, Local: lA2, Remote: lB2}
	send := func(l4 []byte, proto uint8) {
		t.Helper()
		if ret, _ := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), proto, l4))); ret != verdictRedirect {
			t.Fatalf("egress verdict %d", ret)
		}
	}
	send(transport(t, wire.ProtoUDP, h.viewSrc(), h.viewDst(), payload), wire.ProtoUDP)
	s0, err := d.GetSession(nidA, nidB)
	must(t, err)
	p0 := pathOf(t, d, key)
	for _, typ := range []byte{128, 129} {
		m := pkttest.ICMPEcho(h.viewSrc(), h.viewDst(), []byte("ILNPpath"))
		m[0] = typ
		m[2], m[3] = 0, 0
		binary.BigEndian.PutUint16(m[2:], wire.PseudoHeaderChecksum(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, m))
		send(m, wire.ProtoICMPv6)
	}
	s1, err := d.GetSession(nidA, nidB)
	must(t, err)
	p1 := pathOf(t, d, key)
	if s1.TxPackets != s0.TxPackets || s1.LastTxNs != s0.LastTxNs {
		t.Errorf("probes counted on the session: tx %d -> %d, last tx %d -> %d", s0.TxPackets, s1.TxPackets, s0.LastTxNs, s1.LastTxNs)
	}
	if p1.TxPackets != p0.TxPackets+2 || p1.Unanswered != p0.Unanswered || p1.FirstUnansweredTxNs != p0.FirstUnansweredTxNs {
		t.Errorf("pair after 2 probes: %+v (before %+v): want them sent, not waiting for an answer", p1, p0)
	}
	// An ordinary ping is the application's: counted.
	send(transport(t, wire.ProtoICMPv6, h.viewSrc(), h.viewDst(), payload), wire.ProtoICMPv6)
	if s2, err := d.GetSession(nidA, nidB); err != nil || s2.TxPackets != s1.TxPackets+1 {
		t.Errorf("a ping not counted on the session: %+v %v", s2, err)
	}
	if p2 := pathOf(t, d, key); p2.Unanswered != p1.Unanswered+1 {
		t.Errorf("a ping not waiting for an answer: %+v", p2)
	}
}

// TestProbeReplyPair: our kernel's echo of a peer's probe goes back on the pair the probe
// names (the peer's local locator, then its remote one), not on the session's active pair; a
// pair with a locator the session may not use, or a probe in the old 8-byte form, changes
// nothing.
func TestProbeReplyPair(t *testing.T) {
	d := newDatapath(t, Options{})
	h := hostA(t, 4)
	h.setup(t, d, true)
	reply := func(data []byte) (src, dst netip.Addr) {
		t.Helper()
		m := pkttest.ICMPEcho(h.viewSrc(), h.viewDst(), data)
		m[0] = 129
		m[2], m[3] = 0, 0
		binary.BigEndian.PutUint16(m[2:], wire.PseudoHeaderChecksum(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, m))
		ret, out := d.egress(t, frame(ipv6Packet(h.viewSrc(), h.viewDst(), wire.ProtoICMPv6, m)))
		if ret == verdictDrop {
			t.Fatalf("echo reply dropped")
		}
		p, _ := parseFrame(t, out)
		return p.IPv6.Src, p.IPv6.Dst
	}
	named := func(peerLocal, peerRemote wire.L64) []byte {
		b := append([]byte(nil), "ILNPpath"...)
		b = binary.BigEndian.AppendUint64(b, uint64(peerLocal))
		return binary.BigEndian.AppendUint64(b, uint64(peerRemote))
	}
	for _, c := range []struct {
		name     string
		data     []byte
		src, dst netip.Addr
	}{
		{"the probe's pair", named(lB1, lA1), addr(lA1, nidA), addr(lB1, nidB)},
		{"a remote locator the session does not list", named(wire.L64(0x2001_0db8_0bad_0000), lA1), h.wireSrc(), h.wireDst()},
		{"a local locator this node does not have", named(lB1, wire.L64(0x2001_0db8_0bad_0000)), h.wireSrc(), h.wireDst()},
		{"the old form, no pair", []byte("ILNPpath"), h.wireSrc(), h.wireDst()},
	} {
		if src, dst := reply(c.data); src != c.src || dst != c.dst {
			t.Errorf("%s: echo reply %v -> %v, want %v -> %v", c.name, src, dst, c.src, c.dst)
		}
	}
}
