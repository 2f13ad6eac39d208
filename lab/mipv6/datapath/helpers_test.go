package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"ilnp/internal/nstest"
	"ilnp/internal/pkttest"
	"ilnp/internal/wire"
	"ilnp/lab/mipv6/mh"
)

// TCX verdicts as BPF_PROG_TEST_RUN reports them.
const (
	verdictNext     = 0xffffffff
	verdictPass     = 0
	verdictDrop     = 2
	verdictRedirect = 7
)

// The lab's plan: CN on L1, HA = R2 on the home link L2, MN's home address on L2 and its
// care-of address on L3.
var (
	cn    = netip.MustParseAddr("2001:db8:1::cc")
	ha    = netip.MustParseAddr("2001:db8:2::1")
	hoa   = netip.MustParseAddr("2001:db8:2::64")
	coa   = netip.MustParseAddr("2001:db8:3::64")
	other = netip.MustParseAddr("2001:db8:3::99") // an address nobody registered
)

// Packet builders shared with the ILNP datapath's tests (internal/pkttest).
var (
	ethHeader  = pkttest.EthHeader
	frame      = pkttest.Frame
	tcpSegment = pkttest.TCP
	ipv6Packet = pkttest.IPv6
)

var payload = []byte("mobile ipv6 baseline payload, long enough to be a real segment")

// transport builds an upper-layer message of proto with its checksum over src and dst.
func transport(t testing.TB, proto uint8, src, dst netip.Addr) []byte {
	t.Helper()
	msg, ok := pkttest.Transport(proto, src, dst, payload)
	if !ok {
		t.Fatalf("no builder for protocol %d", proto)
	}
	return msg
}

var protocols = []struct {
	name  string
	proto uint8
}{{"tcp", wire.ProtoTCP}, {"udp", wire.ProtoUDP}, {"icmpv6", wire.ProtoICMPv6}}

// tunnelled is pkt inside an RFC 2473 outer header as the datapath builds it.
func tunnelled(src, dst netip.Addr, pkt []byte) []byte {
	return ipv6Packet(src, dst, 41, 64, pkt)
}

// envelope builds a packet with the lab/mipv6/mh encoder (type 2 RH and/or HAO).
func envelope(t testing.TB, e mh.Envelope, proto uint8, l4 []byte) []byte {
	t.Helper()
	b, err := mh.AppendPacket(nil, e, proto, l4)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newDatapath(t testing.TB) *Datapath {
	t.Helper()
	nstest.RequireRoot(t)
	d, err := Load(Options{})
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

func runProg(prog *ebpf.Program, in []byte) (uint32, []byte, error) {
	opts := ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256)}
	ret, err := prog.Run(&opts)
	return ret, opts.DataOut, err
}

func run(t testing.TB, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	ret, out, err := runProg(prog, in)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return ret, out
}

// runIn runs prog inside ns, where its FIB lookups see that namespace's routes.
func runIn(t testing.TB, ns *nstest.NS, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	var (
		ret uint32
		out []byte
	)
	must(t, ns.Do(func() error {
		var err error
		ret, out, err = runProg(prog, in)
		return err
	}))
	return ret, out
}

func counter(t testing.TB, d *Datapath, name string) uint64 {
	t.Helper()
	return pkttest.Counter(t, d, name)
}

// expect checks a verdict and the frame byte for byte.
func expect(t testing.TB, ret uint32, out []byte, wantRet uint32, want []byte) {
	t.Helper()
	if ret != wantRet {
		t.Fatalf("verdict %d, want %d", int32(ret), int32(wantRet))
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("frame differs\n got % x\nwant % x", out, want)
	}
}

// checkHomeChecksum verifies a packet's transport checksum from scratch the way a MIPv6
// receiver does: over the home address (the HAO's address as source, the type 2 RH's address
// as destination, RFC 6275 s.6.3, s.6.4), with the lab/mipv6/mh parser.
func checkHomeChecksum(t testing.TB, pkt []byte, src, dst netip.Addr) {
	t.Helper()
	p, err := mh.ParsePacket(pkt)
	if err != nil {
		t.Fatalf("packet does not parse: %v\n% x", err, pkt)
	}
	if p.PseudoSrc() != src || p.PseudoDst() != dst {
		t.Fatalf("pseudo-header %v -> %v, want %v -> %v", p.PseudoSrc(), p.PseudoDst(), src, dst)
	}
	if c := wire.PseudoHeaderChecksum(p.PseudoSrc(), p.PseudoDst(), p.Proto, p.Payload); c != 0 {
		t.Fatalf("checksum of protocol %d over %v -> %v does not verify (residue %#04x)", p.Proto, src, dst, c)
	}
}

// packetTooBig is the ICMPv6 Packet Too Big the datapath builds for pkt: from -> pkt's source,
// quoting pkt up to 1280 bytes in all, rounded down to 4 bytes.
func packetTooBig(from netip.Addr, mtu uint32, pkt []byte) []byte {
	h, err := wire.ParseIPv6Header(pkt)
	if err != nil {
		panic(err)
	}
	quote := pkt[:min(len(pkt), 1280-48)&^3]
	msg := binary.BigEndian.AppendUint32([]byte{2, 0, 0, 0}, mtu)
	msg = append(msg, quote...)
	binary.BigEndian.PutUint16(msg[2:], wire.PseudoHeaderChecksum(from, h.Src, wire.ProtoICMPv6, msg))
	return ipv6Packet(from, h.Src, wire.ProtoICMPv6, 64, msg)
}

// swappedFrame is frame with the Ethernet addresses swapped (a packet turned around).
func swappedFrame(pkt []byte) []byte {
	f := frame(pkt)
	copy(f[0:6], ethHeader[6:12])
	copy(f[6:12], ethHeader[0:6])
	return f
}
