// Package pkttest builds the packets that the BPF datapaths' tests (the ILNP datapath and the
// lab's Mobile IPv6 baseline) feed to BPF_PROG_TEST_RUN: an Ethernet frame around an IPv6
// packet, and TCP and ICMPv6 messages with checksums as the kernel would compute them.
package pkttest

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"ilnp/internal/wire"
)

// EthHeader is the link-layer header Frame puts in front: 02:..:0b <- 02:..:0a, IPv6.
var EthHeader = []byte{0x02, 0, 0, 0, 0, 0xb, 0x02, 0, 0, 0, 0, 0xa, 0x86, 0xdd}

// Frame is pkt behind EthHeader.
func Frame(pkt []byte) []byte { return append(append([]byte(nil), EthHeader...), pkt...) }

// TCP is a PSH|ACK segment from port 40000 to 5201 carrying payload, its checksum over src and
// dst (what the kernel's TCP computes over the socket's addresses).
func TCP(src, dst netip.Addr, payload []byte) []byte {
	seg := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(seg[0:], 40000)
	binary.BigEndian.PutUint16(seg[2:], 5201)
	binary.BigEndian.PutUint32(seg[4:], 0x01020304)
	binary.BigEndian.PutUint32(seg[8:], 0x0a0b0c0d)
	seg[12] = 5 << 4
	seg[13] = 0x18 // PSH|ACK
	binary.BigEndian.PutUint16(seg[14:], 65000)
	seg = append(seg, payload...)
	binary.BigEndian.PutUint16(seg[16:], wire.PseudoHeaderChecksum(src, dst, wire.ProtoTCP, seg))
	return seg
}

// ICMPEcho is an Echo Request carrying payload, its checksum over src and dst.
func ICMPEcho(src, dst netip.Addr, payload []byte) []byte {
	m := append([]byte{128, 0, 0, 0, 0x12, 0x34, 0, 1}, payload...)
	binary.BigEndian.PutUint16(m[2:], wire.PseudoHeaderChecksum(src, dst, wire.ProtoICMPv6, m))
	return m
}

// Transport is a TCP, UDP (ports 40000 -> 5201) or ICMPv6 Echo message of proto with its
// checksum over src and dst; ok is false for another protocol.
func Transport(proto uint8, src, dst netip.Addr, payload []byte) (msg []byte, ok bool) {
	switch proto {
	case wire.ProtoTCP:
		return TCP(src, dst, payload), true
	case wire.ProtoUDP:
		return wire.AppendUDP(nil, src, dst, 40000, 5201, payload), true
	case wire.ProtoICMPv6:
		return ICMPEcho(src, dst, payload), true
	}
	return nil, false
}

// IPv6 is a fixed header with hop limit hopLimit followed by rest (extension headers and the
// upper layer), the payload length filled in.
func IPv6(src, dst netip.Addr, next, hopLimit uint8, rest ...[]byte) []byte {
	body := bytes.Join(rest, nil)
	b := wire.IPv6Header{PayloadLen: uint16(len(body)), NextHeader: next, HopLimit: hopLimit, Src: src, Dst: dst}.Append(nil)
	return append(b, body...)
}

// Counters is what both datapaths offer: named counters summed over CPUs.
type Counters interface {
	Counters() (map[string]uint64, error)
}

// Counter is one named counter of d; a name d does not have fails the test.
func Counter(t testing.TB, d Counters, name string) uint64 {
	t.Helper()
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := c[name]
	if !ok {
		t.Fatalf("no counter %q", name)
	}
	return v
}
