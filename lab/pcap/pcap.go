// Package pcap reads the classic libpcap files tcpdump writes (microsecond or nanosecond,
// either byte order) and decodes what the lab measures: IPv6 (through extension headers,
// noting an ILNP nonce option), TCP and UDP headers, and the sequence number iperf3 puts at the
// start of every UDP datagram. Ethernet, Linux cooked v1 and v2 (`tcpdump -i any`) link types.
package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Link types.
const (
	LinkEthernet = 1
	LinkSLL      = 113
	LinkSLL2     = 276
)

// Reader yields the records of one capture.
type Reader struct {
	r        *bufio.Reader
	order    binary.ByteOrder
	nano     bool
	LinkType uint32
	snap     uint32
}

// NewReader reads the file header.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var hdr [24]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	p := &Reader{r: br}
	switch {
	case binary.LittleEndian.Uint32(hdr[:]) == 0xa1b2c3d4:
		p.order = binary.LittleEndian
	case binary.BigEndian.Uint32(hdr[:]) == 0xa1b2c3d4:
		p.order = binary.BigEndian
	case binary.LittleEndian.Uint32(hdr[:]) == 0xa1b23c4d:
		p.order, p.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(hdr[:]) == 0xa1b23c4d:
		p.order, p.nano = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("pcap: bad magic %x (pcapng is not supported)", hdr[:4])
	}
	p.snap = p.order.Uint32(hdr[16:])
	p.LinkType = p.order.Uint32(hdr[20:]) & 0x0fffffff
	return p, nil
}

// Record is one captured frame.
type Record struct {
	Time    time.Time
	OrigLen int
	Data    []byte // valid until the next call to Next
}

// Next returns the next record or io.EOF. A truncated last record (tcpdump killed while
// writing) also ends the file with io.EOF.
func (p *Reader) Next() (Record, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(p.r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Record{}, io.EOF
		}
		return Record{}, err
	}
	sec, frac := p.order.Uint32(hdr[0:]), p.order.Uint32(hdr[4:])
	incl, orig := p.order.Uint32(hdr[8:]), p.order.Uint32(hdr[12:])
	if incl > 1<<18 {
		return Record{}, fmt.Errorf("pcap: record of %d bytes is implausible", incl)
	}
	data := make([]byte, incl)
	if _, err := io.ReadFull(p.r, data); err != nil {
		return Record{}, io.EOF
	}
	ns := int64(frac) * 1000
	if p.nano {
		ns = int64(frac)
	}
	return Record{Time: time.Unix(int64(sec), ns), OrigLen: int(orig), Data: data}, nil
}

// Direction of a frame seen with the Linux cooked link types.
const (
	DirUnknown  = -1
	DirIncoming = 0 // to us (PACKET_HOST)
	DirOutgoing = 4 // PACKET_OUTGOING
)

// Packet is the decoded part of a frame the lab cares about.
type Packet struct {
	Time     time.Time
	Dir      int // DirIncoming, DirOutgoing, other packet types, or DirUnknown (Ethernet)
	Ifindex  int // SLL2 only, else 0
	Src, Dst [16]byte
	Proto    uint8 // upper-layer protocol after extension headers
	Nonce    bool  // an ILNP nonce option (0x8B) was present
	SrcPort  uint16
	DstPort  uint16
	TCPSeq   uint32
	TCPAck   uint32
	TCPFlags uint8
	Payload  int   // upper-layer payload bytes (from the IPv6 length, not the snapshot)
	UDPSeq   int64 // iperf3 datagram counter, or -1
	ICMPType uint8
	// LUOp is a Locator Update's Operation (ICMPv6 type 156, RFC 6743 s.2: 1 Locator
	// Update, 2 its acknowledgement), 0 for anything else.
	LUOp      uint8
	Malformed bool
	// Encap: the frame was ILNPv6 in UDP/IPv4 (issue 14) to or from EncapPort; the fields
	// above describe the inner packet, except that the upper 64 bits of Src and Dst are the
	// outer endpoints as IPv4 locators (0x0000 | UDP port | IPv4 address, internal/encap's
	// mapping): where the packet really came from and went to, as the receiver's datapath
	// also takes them.
	Encap bool
	// Encap6: the frame was ILNPv6 in UDP/IPv6 (issue 24, bpf/lib/encap6.h) from and to
	// EncapPort; the fields describe the inner packet, whose addresses are the outer ones.
	Encap6 bool
}

// EncapPort is the UDP port of encapsulated ILNPv6 (internal/encap.DefaultPort): a UDP/IPv4
// frame to or from it is decoded as the ILNPv6 packet inside.
var EncapPort uint16 = 49191

// SrcNID and DstNID are the low 64 bits (the ILNP identifier part) of the addresses.
func (p *Packet) SrcNID() uint64 { return binary.BigEndian.Uint64(p.Src[8:]) }

// DstNID is the destination's identifier.
func (p *Packet) DstNID() uint64 { return binary.BigEndian.Uint64(p.Dst[8:]) }

// TCP flags.
const (
	FIN = 0x01
	SYN = 0x02
	RST = 0x04
	ACK = 0x10
)

// Protocols.
const (
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// Decode parses one record of the given link type. ok is false for frames that are neither
// IPv6 nor ILNPv6 encapsulated in UDP/IPv4 (Encap).
func Decode(linkType uint32, rec Record) (pkt Packet, ok bool) {
	pkt = Packet{Time: rec.Time, Dir: DirUnknown, UDPSeq: -1}
	b := rec.Data
	var etherType uint16
	switch linkType {
	case LinkEthernet:
		if len(b) < 14 {
			return pkt, false
		}
		etherType = binary.BigEndian.Uint16(b[12:])
		b = b[14:]
		if etherType == 0x8100 && len(b) >= 4 {
			etherType = binary.BigEndian.Uint16(b[2:])
			b = b[4:]
		}
	case LinkSLL:
		if len(b) < 16 {
			return pkt, false
		}
		pkt.Dir = int(binary.BigEndian.Uint16(b[0:]))
		etherType = binary.BigEndian.Uint16(b[14:])
		b = b[16:]
	case LinkSLL2:
		if len(b) < 20 {
			return pkt, false
		}
		etherType = binary.BigEndian.Uint16(b[0:])
		pkt.Ifindex = int(binary.BigEndian.Uint32(b[4:]))
		pkt.Dir = int(b[10])
		b = b[20:]
	default:
		return pkt, false
	}
	if etherType == 0x0800 {
		return decodeEncap(pkt, b)
	}
	return decodeEncap6(pkt, b)
}

// decodeEncap6 decodes an IPv6 frame, and a UDP/IPv6 one from and to EncapPort that carries an
// IPv6 packet as that packet (Encap6).
func decodeEncap6(pkt Packet, b []byte) (Packet, bool) {
	if len(b) >= 48+40 && b[0]>>4 == 6 && b[6] == ProtoUDP && b[48]>>4 == 6 &&
		binary.BigEndian.Uint16(b[40:]) == EncapPort && binary.BigEndian.Uint16(b[42:]) == EncapPort {
		if inner, ok := decodeIPv6(pkt, b[48:]); ok {
			inner.Encap6 = true
			return inner, true
		}
	}
	return decodeIPv6(pkt, b)
}

// decodeEncap decodes a UDP/IPv4 frame to or from EncapPort as the ILNPv6 packet it carries
// (ok false for any other IPv4 frame, or one whose payload is not IPv6: a NAT keepalive).
func decodeEncap(pkt Packet, b []byte) (Packet, bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != ProtoUDP {
		return pkt, false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 || len(b) < ihl+8 || binary.BigEndian.Uint16(b[6:])&0x1fff != 0 {
		return pkt, false // not a first fragment: no UDP header
	}
	var src, dst [4]byte
	copy(src[:], b[12:16])
	copy(dst[:], b[16:20])
	u := b[ihl:]
	sport, dport := binary.BigEndian.Uint16(u[0:]), binary.BigEndian.Uint16(u[2:])
	if sport != EncapPort && dport != EncapPort {
		return pkt, false
	}
	pkt, ok := decodeIPv6(pkt, u[8:])
	if !ok {
		return pkt, false
	}
	pkt.Encap = true
	putL32(pkt.Src[:8], sport, src)
	putL32(pkt.Dst[:8], dport, dst)
	return pkt, true
}

// putL32 writes an IPv4 endpoint as a locator: 0x0000 | port | address.
func putL32(l []byte, port uint16, addr [4]byte) {
	l[0], l[1] = 0, 0
	binary.BigEndian.PutUint16(l[2:], port)
	copy(l[4:8], addr[:])
}

// decodeIPv6 decodes an IPv6 packet starting at b into pkt.
func decodeIPv6(pkt Packet, b []byte) (Packet, bool) {
	if len(b) < 40 || b[0]>>4 != 6 {
		return pkt, false
	}
	payloadLen := int(binary.BigEndian.Uint16(b[4:]))
	next := b[6]
	copy(pkt.Src[:], b[8:24])
	copy(pkt.Dst[:], b[24:40])
	b = b[40:]
	remaining := payloadLen // bytes after the fixed header, per the IPv6 header
	for hops := 0; ; hops++ {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options (RFC 8200 s.4)
			if len(b) < 8 || hops > 8 {
				pkt.Malformed = true
				return pkt, true
			}
			n := (int(b[1]) + 1) * 8
			if len(b) < n {
				pkt.Malformed = true
				return pkt, true
			}
			if next == 60 {
				pkt.Nonce = pkt.Nonce || hasNonce(b[2:n])
			}
			next = b[0]
			b, remaining = b[n:], remaining-n
			continue
		case 44: // fragment: only the first fragment carries the upper-layer header
			if len(b) < 8 {
				pkt.Malformed = true
				return pkt, true
			}
			if binary.BigEndian.Uint16(b[2:])&0xfff8 != 0 {
				pkt.Proto = b[0]
				return pkt, true
			}
			next = b[0]
			b, remaining = b[8:], remaining-8
			continue
		}
		break
	}
	pkt.Proto = next
	if remaining < 0 { // extension headers longer than the IPv6 payload length says
		pkt.Malformed = true
		return pkt, true
	}
	switch next {
	case ProtoTCP:
		if len(b) < 20 {
			pkt.Malformed = true
			return pkt, true
		}
		pkt.SrcPort = binary.BigEndian.Uint16(b[0:])
		pkt.DstPort = binary.BigEndian.Uint16(b[2:])
		pkt.TCPSeq = binary.BigEndian.Uint32(b[4:])
		pkt.TCPAck = binary.BigEndian.Uint32(b[8:])
		off := int(b[12]>>4) * 4
		pkt.TCPFlags = b[13]
		if off < 20 || remaining < off {
			pkt.Malformed = true
			return pkt, true
		}
		pkt.Payload = remaining - off
	case ProtoUDP:
		if len(b) < 8 {
			pkt.Malformed = true
			return pkt, true
		}
		pkt.SrcPort = binary.BigEndian.Uint16(b[0:])
		pkt.DstPort = binary.BigEndian.Uint16(b[2:])
		pkt.Payload = int(binary.BigEndian.Uint16(b[4:])) - 8
		if pkt.Payload < 0 {
			pkt.Payload = 0
			pkt.Malformed = true
			return pkt, true
		}
		// iperf3 datagrams start with sec, usec, and a 32-bit counter (network order).
		if pkt.Payload >= 12 && len(b) >= 8+12 {
			pkt.UDPSeq = int64(int32(binary.BigEndian.Uint32(b[8+8:])))
		}
	case ProtoICMPv6:
		if len(b) >= 1 {
			pkt.ICMPType = b[0]
		}
		if pkt.ICMPType == 156 && len(b) >= 6 {
			pkt.LUOp = b[5]
		}
		pkt.Payload = remaining
	}
	return pkt, true
}

// hasNonce walks TLV options looking for the ILNP nonce (type 0x8B, RFC 6744 s.2).
func hasNonce(opts []byte) bool {
	for i := 0; i < len(opts); {
		t := opts[i]
		if t == 0 { // Pad1
			i++
			continue
		}
		if i+1 >= len(opts) {
			return false
		}
		if t == 0x8b {
			return true
		}
		i += 2 + int(opts[i+1])
	}
	return false
}

// ReadAll decodes every IPv6 frame of a capture (and every encapsulated one, Encap).
func ReadAll(r io.Reader) ([]Packet, error) {
	p, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	var pkts []Packet
	for {
		rec, err := p.Next()
		if err == io.EOF {
			return pkts, nil
		}
		if err != nil {
			return pkts, err
		}
		if pkt, ok := Decode(p.LinkType, rec); ok {
			pkts = append(pkts, pkt)
		}
	}
}
