package pcap

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

func fileHeader(link uint32, nano bool) []byte {
	h := make([]byte, 24)
	magic := uint32(0xa1b2c3d4)
	if nano {
		magic = 0xa1b23c4d
	}
	binary.LittleEndian.PutUint32(h, magic)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 262144)
	binary.LittleEndian.PutUint32(h[20:], link)
	return h
}

func record(ts time.Time, data []byte, nano bool) []byte {
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h, uint32(ts.Unix()))
	frac := uint32(ts.Nanosecond() / 1000)
	if nano {
		frac = uint32(ts.Nanosecond())
	}
	binary.LittleEndian.PutUint32(h[4:], frac)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(data)))
	return append(h, data...)
}

var (
	srcAddr = [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0x02, 0x14, 0x4f, 0xff, 0xfe, 0x20, 0xcc, 0x01}
	dstAddr = [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0x02, 0x14, 0x4f, 0xff, 0xfe, 0x20, 0xee, 0x64}
)

// ipv6 builds an IPv6 packet, optionally with the 8-byte nonce destination option first.
func ipv6(proto uint8, upper []byte, nonce bool) []byte {
	var ext []byte
	next := proto
	if nonce {
		ext = []byte{proto, 0, 0x8b, 4, 0xde, 0xad, 0xbe, 0xef}
		next = 60
	}
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+len(upper)))
	h[6] = next
	h[7] = 64
	copy(h[8:], srcAddr[:])
	copy(h[24:], dstAddr[:])
	return append(append(h, ext...), upper...)
}

func tcpSeg(seq uint32, payload int) []byte {
	t := make([]byte, 20+payload)
	binary.BigEndian.PutUint16(t[0:], 40000)
	binary.BigEndian.PutUint16(t[2:], 5201)
	binary.BigEndian.PutUint32(t[4:], seq)
	t[12] = 5 << 4
	t[13] = ACK
	return t
}

func udpIperf(seq int32, payload int) []byte {
	u := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(u[0:], 5201)
	binary.BigEndian.PutUint16(u[2:], 41000)
	binary.BigEndian.PutUint16(u[4:], uint16(8+payload))
	binary.BigEndian.PutUint32(u[8+8:], uint32(seq))
	return u
}

func ether(ip []byte) []byte {
	e := make([]byte, 14)
	binary.BigEndian.PutUint16(e[12:], 0x86dd)
	return append(e, ip...)
}

func sll2(ip []byte, ifindex uint32, dir byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], 0x86dd)
	binary.BigEndian.PutUint32(h[4:], ifindex)
	binary.BigEndian.PutUint16(h[8:], 1)
	h[10] = dir
	h[11] = 6
	return append(h, ip...)
}

func TestReadEthernetAndSLL2(t *testing.T) {
	t0 := time.Unix(1700000000, 123456000)
	var f bytes.Buffer
	f.Write(fileHeader(LinkEthernet, false))
	f.Write(record(t0, ether(ipv6(ProtoTCP, tcpSeg(1000, 1400), true)), false))
	f.Write(record(t0.Add(time.Millisecond), ether(ipv6(ProtoUDP, udpIperf(42, 1300), false)), false))
	f.Write([]byte{1, 2, 3}) // a record cut short by a killed tcpdump ends the file
	pkts, err := ReadAll(&f)
	if err != nil || len(pkts) != 2 {
		t.Fatalf("ReadAll = %d packets, %v", len(pkts), err)
	}
	tcp := pkts[0]
	if !tcp.Time.Equal(t0) || tcp.Proto != ProtoTCP || !tcp.Nonce || tcp.TCPSeq != 1000 || tcp.Payload != 1400 || tcp.DstPort != 5201 {
		t.Errorf("tcp = %+v", tcp)
	}
	if tcp.SrcNID() != 0x02144ffffe20cc01 || tcp.DstNID() != 0x02144ffffe20ee64 {
		t.Errorf("NIDs %x %x", tcp.SrcNID(), tcp.DstNID())
	}
	udp := pkts[1]
	if udp.Proto != ProtoUDP || udp.Nonce || udp.UDPSeq != 42 || udp.Payload != 1300 {
		t.Errorf("udp = %+v", udp)
	}

	f.Reset()
	f.Write(fileHeader(LinkSLL2, true))
	f.Write(record(t0, sll2(ipv6(ProtoUDP, udpIperf(7, 300), true), 3, DirOutgoing), true))
	pkts, err = ReadAll(&f)
	if err != nil || len(pkts) != 1 {
		t.Fatalf("SLL2: %d packets, %v", len(pkts), err)
	}
	if p := pkts[0]; p.Dir != DirOutgoing || p.Ifindex != 3 || p.UDPSeq != 7 || !p.Nonce || !p.Time.Equal(t0) {
		t.Errorf("sll2 = %+v", p)
	}
}

func TestRejectsBadMagic(t *testing.T) {
	if _, err := ReadAll(bytes.NewReader(make([]byte, 24))); err == nil {
		t.Error("zero header accepted")
	}
}

func FuzzReadAll(f *testing.F) {
	var seed bytes.Buffer
	seed.Write(fileHeader(LinkEthernet, false))
	seed.Write(record(time.Unix(1, 0), ether(ipv6(ProtoTCP, tcpSeg(1, 10), true)), false))
	f.Add(seed.Bytes())
	seed.Reset()
	seed.Write(fileHeader(LinkSLL2, true))
	seed.Write(record(time.Unix(1, 0), sll2(ipv6(ProtoUDP, udpIperf(1, 20), false), 2, 0), true))
	f.Add(seed.Bytes())
	seed.Reset()
	seed.Write(fileHeader(LinkSLL2, true))
	seed.Write(record(time.Unix(1, 0), sll2v4(udp4([4]byte{10, 0, 3, 2}, [4]byte{198, 51, 100, 2}, 49191, 49191,
		ipv6(ProtoICMPv6, []byte{156, 0, 0, 0, 1, 1, 0, 0}, true)), 0), true))
	f.Add(seed.Bytes())
	seed.Reset()
	seed.Write(fileHeader(LinkSLL2, true))
	seed.Write(record(time.Unix(1, 0), sll2(udp6(49191, 49191, ipv6(ProtoTCP, tcpSeg(1, 100), true)), 2, 0), true))
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		pkts, _ := ReadAll(bytes.NewReader(data))
		for _, p := range pkts {
			if p.Payload < 0 {
				t.Fatalf("negative payload %+v", p)
			}
		}
	})
}

// udp4 wraps payload in IPv4 (src, dst) and UDP (sport, dport), as the datapath encapsulates
// ILNPv6 (outer UDP checksum zero).
func udp4(src, dst [4]byte, sport, dport uint16, payload []byte) []byte {
	h := make([]byte, 28)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(28+len(payload)))
	h[6] = 0x40 // DF
	h[8] = 64
	h[9] = ProtoUDP
	copy(h[12:], src[:])
	copy(h[16:], dst[:])
	binary.BigEndian.PutUint16(h[20:], sport)
	binary.BigEndian.PutUint16(h[22:], dport)
	binary.BigEndian.PutUint16(h[24:], uint16(8+len(payload)))
	return append(h, payload...)
}

func sll2v4(ip []byte, dir byte) []byte {
	b := sll2(ip, 4, dir)
	binary.BigEndian.PutUint16(b[0:], 0x0800)
	return b
}

// Encapsulated ILNPv6 (issue 14) decodes as the inner packet with the outer endpoints as its
// locators (0x0000 | port | IPv4 address); an LU's Operation is read; other IPv4 frames, NAT
// keepalives (no IPv6 inside) and other ports are not packets of the capture.
func TestDecodeEncapsulated(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	nat, cn := [4]byte{203, 0, 113, 3}, [4]byte{198, 51, 100, 2}
	lu := make([]byte, 8+16)
	lu[0], lu[4], lu[5] = 156, 1, 2 // type 156, one locator, Operation 2 (LU-ACK)
	var f bytes.Buffer
	f.Write(fileHeader(LinkSLL2, true))
	f.Write(record(t0, sll2v4(udp4(cn, nat, 49191, 49191, ipv6(ProtoUDP, udpIperf(9, 1300), true)), DirIncoming), true))
	f.Write(record(t0, sll2v4(udp4(nat, cn, 61000, 49191, ipv6(ProtoICMPv6, lu, true)), DirOutgoing), true))
	f.Write(record(t0, sll2v4(udp4(nat, cn, 61000, 49191, []byte{0}), DirOutgoing), true))                 // keepalive
	f.Write(record(t0, sll2v4(udp4(nat, cn, 5000, 5001, ipv6(ProtoUDP, udpIperf(1, 20), true)), 0), true)) // another port
	f.Write(record(t0, sll2v4(udp4(nat, cn, 61000, 49191, ipv6(ProtoUDP, udpIperf(1, 20), true))[:30], 0), true))
	pkts, err := ReadAll(&f)
	if err != nil || len(pkts) != 2 {
		t.Fatalf("ReadAll = %d packets (%+v), %v; want the data packet and the LU", len(pkts), pkts, err)
	}
	d := pkts[0]
	wantSrc := [8]byte{0, 0, 0xc0, 0x27, 198, 51, 100, 2}
	wantDst := [8]byte{0, 0, 0xc0, 0x27, 203, 0, 113, 3}
	if !d.Encap || !d.Nonce || d.Proto != ProtoUDP || d.UDPSeq != 9 || d.Payload != 1300 || d.Dir != DirIncoming ||
		[8]byte(d.Src[:8]) != wantSrc || [8]byte(d.Dst[:8]) != wantDst || d.SrcNID() != 0x02144ffffe20cc01 || d.DstNID() != 0x02144ffffe20ee64 {
		t.Errorf("encapsulated data = %+v", d)
	}
	l := pkts[1]
	if !l.Encap || l.ICMPType != 156 || l.LUOp != 2 || [8]byte(l.Src[:8]) != [8]byte{0, 0, 0xee, 0x48, 203, 0, 113, 3} {
		t.Errorf("encapsulated LU = %+v", l)
	}
}

// udp6 wraps an IPv6 packet in IPv6 + UDP from and to ports sport/dport, as encap6.h does
// (the outer addresses are the inner ones).
func udp6(sport, dport uint16, inner []byte) []byte {
	h := make([]byte, 48)
	copy(h, inner[:40])
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(inner)))
	h[6] = ProtoUDP
	binary.BigEndian.PutUint16(h[40:], sport)
	binary.BigEndian.PutUint16(h[42:], dport)
	binary.BigEndian.PutUint16(h[44:], uint16(8+len(inner)))
	return append(h, inner...)
}

// ILNPv6 in UDP/IPv6 (issue 24) decodes as the inner packet (TCP data, an LU); UDP/IPv6 on
// other ports, or without an IPv6 packet inside, stays the UDP datagram it is.
func TestDecodeEncapsulated6(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	lu := make([]byte, 8+16)
	lu[0], lu[4], lu[5] = 156, 1, 1
	var f bytes.Buffer
	f.Write(fileHeader(LinkSLL2, true))
	f.Write(record(t0, sll2(udp6(49191, 49191, ipv6(ProtoTCP, tcpSeg(7000, 1300), true)), 3, DirIncoming), true))
	f.Write(record(t0, sll2(udp6(49191, 49191, ipv6(ProtoICMPv6, lu, true)), 3, DirOutgoing), true))
	f.Write(record(t0, sll2(udp6(5000, 49191, ipv6(ProtoTCP, tcpSeg(1, 10), true)), 3, 0), true))
	pkts, err := ReadAll(&f)
	if err != nil || len(pkts) != 3 {
		t.Fatalf("ReadAll = %d packets, %v", len(pkts), err)
	}
	if d := pkts[0]; !d.Encap6 || !d.Nonce || d.Proto != ProtoTCP || d.TCPSeq != 7000 || d.Payload != 1300 {
		t.Errorf("encapsulated TCP = %+v", d)
	}
	if l := pkts[1]; !l.Encap6 || l.ICMPType != 156 || l.LUOp != 1 {
		t.Errorf("encapsulated LU = %+v", l)
	}
	if o := pkts[2]; o.Encap6 || o.Proto != ProtoUDP {
		t.Errorf("another port = %+v", o)
	}
}
