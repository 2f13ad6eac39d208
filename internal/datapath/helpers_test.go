package datapath

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"ilnp/internal/nstest"
	"ilnp/internal/pkttest"
	"ilnp/internal/wire"
)

// TCX verdicts as BPF_PROG_TEST_RUN reports them.
const (
	verdictNext     = 0xffffffff
	verdictPass     = 0
	verdictDrop     = 2
	verdictRedirect = 7
)

// Two hosts: A (this side in most tests) and B, each with two locators; the session view is
// [lA1:nidA] <-> [lB1:nidB] and the active locators are lA2 and lB2.
const (
	nidA = wire.NID(0x021b21fffe6797a8)
	nidB = wire.NID(0x0250b6fffe0a0b0c)
	nidC = wire.NID(0x02aabbfffe000001)
	lA1  = wire.L64(0x20010db8000a0001)
	lA2  = wire.L64(0x20010db8000a0002)
	lB1  = wire.L64(0x20010db8000b0001)
	lB2  = wire.L64(0x20010db8000b0002)
	lX   = wire.L64(0x20010db8000f0001) // a locator nobody announced
)

func addr(l wire.L64, n wire.NID) netip.Addr { return wire.ILV{Locator: l, NID: n}.Addr() }

func zeroLocator(a netip.Addr) netip.Addr {
	b := a.As16()
	clear(b[:8])
	return netip.AddrFrom16(b)
}

func mustNonce(t testing.TB, b ...byte) wire.Nonce {
	t.Helper()
	n, err := wire.NonceFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Packet builders shared with the MIPv6 baseline's tests (internal/pkttest).
var (
	ethHeader  = pkttest.EthHeader
	frame      = pkttest.Frame
	tcpSegment = pkttest.TCP
	icmpEcho   = pkttest.ICMPEcho
)

// transport builds an upper-layer message of proto with the checksum over src and dst.
func transport(t testing.TB, proto uint8, src, dst netip.Addr, payload []byte) []byte {
	t.Helper()
	msg, ok := pkttest.Transport(proto, src, dst, payload)
	if !ok {
		t.Fatalf("no builder for protocol %d", proto)
	}
	return msg
}

// ipv6Packet is the fixed header (hop limit 64) plus rest (extension headers and upper layer).
func ipv6Packet(src, dst netip.Addr, next uint8, rest ...[]byte) []byte {
	return pkttest.IPv6(src, dst, next, 64, rest...)
}

func newDatapath(t testing.TB, opts Options) *Datapath {
	t.Helper()
	nstest.RequireRoot(t)
	d, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

// BPF_PROG_TEST_RUN runs packets on lo (ifindex 1). The first locator lives there, the second
// (active) one on another interface, so egress redirects (the redirect itself is not performed
// by a test run).
const otherIfindex = 2

// host configures d as one end of the A-B session: local NID, both local locators, the session
// with both nonces.
type host struct {
	nid, peer            wire.NID
	l1, l2, peer1, peer2 wire.L64
	nonce, peerNonce     wire.Nonce
}

func hostA(t testing.TB, size int) host {
	na, nb := testNonces(t, size)
	return host{nid: nidA, peer: nidB, l1: lA1, l2: lA2, peer1: lB1, peer2: lB2, nonce: na, peerNonce: nb}
}

func hostB(t testing.TB, size int) host {
	na, nb := testNonces(t, size)
	return host{nid: nidB, peer: nidA, l1: lB1, l2: lB2, peer1: lA1, peer2: lA2, nonce: nb, peerNonce: na}
}

func testNonces(t testing.TB, size int) (wire.Nonce, wire.Nonce) {
	if size == 12 {
		return mustNonce(t, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac),
			mustNonce(t, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc)
	}
	return mustNonce(t, 0xa1, 0xa2, 0xa3, 0xa4), mustNonce(t, 0xb1, 0xb2, 0xb3, 0xb4)
}

func (h host) viewSrc() netip.Addr  { return addr(h.l1, h.nid) }
func (h host) viewDst() netip.Addr  { return addr(h.peer1, h.peer) }
func (h host) wireSrc() netip.Addr  { return addr(h.l2, h.nid) }
func (h host) wireDst() netip.Addr  { return addr(h.peer2, h.peer) }
func (h host) wireFrom() netip.Addr { return addr(h.peer2, h.peer) } // a packet from the peer

func (h host) setup(t testing.TB, d *Datapath, withSession bool) {
	t.Helper()
	must(t, d.SetLocalNID(h.nid, h.l1))
	must(t, d.PutLocalLocator(LocalLocator{Locator: h.l1, State: LocatorValid, Ifindex: 1, NextHop: netip.MustParseAddr("fe80::1")}))
	must(t, d.PutLocalLocator(LocalLocator{Locator: h.l2, State: LocatorActive, Ifindex: otherIfindex, NextHop: netip.MustParseAddr("fe80::2")}))
	must(t, d.SetActiveLocator(h.l2))
	if !withSession {
		return
	}
	must(t, d.PutSession(Session{
		LocalNID: h.nid, RemoteNID: h.peer, LocalView: h.l1, RemoteView: h.peer1, RemoteActive: h.peer2,
		RemoteLocators: []RemoteLocator{{Locator: h.peer1, State: LocatorValid}, {Locator: h.peer2, State: LocatorActive}},
		LocalNonce:     h.nonce, RemoteNonce: h.peerNonce,
	}))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func run(t testing.TB, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	opts := ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256)}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return ret, opts.DataOut
}

func (d *Datapath) egress(t testing.TB, in []byte) (uint32, []byte) {
	return run(t, d.objs.IlnpEgress, in)
}

func (d *Datapath) ingress(t testing.TB, in []byte) (uint32, []byte) {
	return run(t, d.objs.IlnpIngress, in)
}

func counter(t testing.TB, d *Datapath, name string) uint64 {
	t.Helper()
	return pkttest.Counter(t, d, name)
}

// parseFrame parses the IPv6 packet in an Ethernet frame.
func parseFrame(t testing.TB, f []byte) (wire.Packet, []byte) {
	t.Helper()
	if len(f) < 14 || !bytes.Equal(f[:14], ethHeader) {
		t.Fatalf("Ethernet header changed: % x", f[:min(14, len(f))])
	}
	p, err := wire.ParsePacket(f[14:])
	if err != nil {
		t.Fatalf("output does not parse: %v\n% x", err, f)
	}
	return p, f[14:]
}

// checkWireChecksum verifies an ILNP packet's transport checksum from scratch: TCP and UDP over
// the pseudo-header with both locators zero (RFC 6744 s.3), ICMPv6 over the real addresses.
func checkWireChecksum(t testing.TB, p wire.Packet, pkt []byte) {
	t.Helper()
	src, dst := p.IPv6.Src, p.IPv6.Dst
	if p.Proto != wire.ProtoICMPv6 {
		src, dst = zeroLocator(src), zeroLocator(dst)
	}
	if c := wire.PseudoHeaderChecksum(src, dst, p.Proto, p.UpperLayer(pkt)); c != 0 {
		t.Fatalf("wire checksum of protocol %d does not verify (residue %#04x)", p.Proto, c)
	}
}

func checkViewChecksum(t testing.TB, p wire.Packet, pkt []byte) {
	t.Helper()
	ok, err := p.ChecksumOK(pkt)
	if err != nil || !ok {
		t.Fatalf("session-view checksum of protocol %d does not verify: %v", p.Proto, err)
	}
}

// nextEvent waits for an event of the given type.
func nextEvent(t testing.TB, ch <-chan Event, want EventType) Event {
	t.Helper()
	timeout := time.After(2 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed while waiting for %v", want)
			}
			if ev.Type == want {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event", want)
		}
	}
}

func events(t testing.TB, d *Datapath) <-chan Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := d.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
