package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPv6 extension header Next Header values walked by ParsePacket.
const (
	ProtoHopByHop = 0
	ProtoRouting  = 43
	ProtoFragment = 44
	ProtoNoNext   = 59
)

// maxExtHeaders bounds the extension header walk.
const maxExtHeaders = 8

// Packet is an IPv6 packet split into its parts by ParsePacket.
type Packet struct {
	IPv6 IPv6Header
	// DestOpts is the Destination Options header that carried the nonce, or
	// the last one seen if none did (HasDestOpts false: there was none).
	DestOpts    DestOpts
	HasDestOpts bool
	// Proto is the upper-layer protocol (the last Next Header) and Offset
	// where its header starts in the parsed buffer; End is 40 + PayloadLen.
	Proto  uint8
	Offset int
	End    int
}

// Nonce returns the packet's ILNPv6 nonce, if it has one.
func (p Packet) Nonce() (Nonce, bool) {
	return p.DestOpts.Nonce, p.HasDestOpts && p.DestOpts.HasNonce
}

// ParsePacket parses an IPv6 packet: the fixed header, then the
// Hop-by-Hop, Routing, Fragment and Destination Options headers (RFC 8200
// s.4) up to the upper-layer header. The buffer must hold 40 + PayloadLen
// bytes (more, e.g. link-layer padding, is ignored). At most one nonce
// option may appear in the whole packet (RFC 6744). A non-first fragment
// ends the walk with Proto set to the fragment's Next Header.
func ParsePacket(b []byte) (Packet, error) {
	h, err := ParseIPv6Header(b)
	if err != nil {
		return Packet{}, fmt.Errorf("packet: %w", err)
	}
	p := Packet{IPv6: h, End: IPv6HeaderLen + int(h.PayloadLen)}
	if p.End > len(b) {
		return Packet{}, fmt.Errorf("packet: payload length %d, only %d bytes follow the header", h.PayloadLen, len(b)-IPv6HeaderLen)
	}
	b = b[:p.End]
	next, off := h.NextHeader, IPv6HeaderLen
	for i := 0; ; i++ {
		if i > maxExtHeaders {
			return Packet{}, fmt.Errorf("packet: more than %d extension headers", maxExtHeaders)
		}
		switch next {
		case ProtoDestOpts:
			d, err := ParseDestOpts(b[off:])
			if err != nil {
				return Packet{}, fmt.Errorf("packet: at offset %d: %w", off, err)
			}
			if d.HasNonce && p.HasDestOpts && p.DestOpts.HasNonce {
				return Packet{}, fmt.Errorf("packet: second nonce option in the header at offset %d (RFC 6744 allows one)", off)
			}
			if !p.DestOpts.HasNonce {
				p.DestOpts, p.HasDestOpts = d, true
			}
			next, off = d.NextHeader, off+d.Length
		case ProtoHopByHop, ProtoRouting:
			if len(b)-off < 2 || len(b)-off < (int(b[off+1])+1)*8 {
				return Packet{}, fmt.Errorf("packet: extension header %d at offset %d truncated", next, off)
			}
			next, off = b[off], off+(int(b[off+1])+1)*8
		case ProtoFragment:
			if len(b)-off < 8 {
				return Packet{}, fmt.Errorf("packet: fragment header at offset %d truncated", off)
			}
			fragOff := binary.BigEndian.Uint16(b[off+2:]) >> 3
			next, off = b[off], off+8
			if fragOff != 0 {
				p.Proto, p.Offset = next, off
				return p, nil
			}
		default:
			p.Proto, p.Offset = next, off
			return p, nil
		}
	}
}

// UpperLayer returns the upper-layer bytes of a packet parsed from b.
func (p Packet) UpperLayer(b []byte) []byte { return b[p.Offset:p.End] }

// ChecksumOK reports whether the UDP, TCP or ICMPv6 checksum of a packet
// parsed from b verifies over the pseudo-header of its own addresses
// (RFC 8200 s.8.1). A zero UDP checksum is invalid over IPv6.
func (p Packet) ChecksumOK(b []byte) (bool, error) {
	l4 := p.UpperLayer(b)
	var at int
	switch p.Proto {
	case ProtoUDP:
		at = 6
	case ProtoTCP:
		at = 16
	case ProtoICMPv6:
		at = 2
	default:
		return false, fmt.Errorf("checksum: protocol %d has no known checksum", p.Proto)
	}
	if len(l4) < at+2 {
		return false, fmt.Errorf("checksum: protocol %d header truncated (%d bytes)", p.Proto, len(l4))
	}
	if p.Proto == ProtoUDP && l4[6] == 0 && l4[7] == 0 {
		return false, nil
	}
	return PseudoHeaderChecksum(p.IPv6.Src, p.IPv6.Dst, p.Proto, l4) == 0, nil
}

// AppendUDP appends a UDP header and payload with the checksum filled in
// for src and dst (a computed zero is sent as 0xffff, RFC 8200 s.8.1).
func AppendUDP(b []byte, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(payload)))
	b = append(b, 0, 0)
	b = append(b, payload...)
	c := PseudoHeaderChecksum(src, dst, ProtoUDP, b[start:])
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[start+6:], c)
	return b
}

// AppendILNPPacket appends a whole ILNPv6 packet: the IPv6 header from src
// to dst (hop limit 64), a Destination Options header with the nonce, and
// the upper-layer bytes l4 of protocol proto (checksum already filled in).
func AppendILNPPacket(b []byte, src, dst ILV, n Nonce, proto uint8, l4 []byte) []byte {
	ext := 8
	if n.Len() == 12 {
		ext = 16
	}
	b = IPv6Header{
		PayloadLen: uint16(ext + len(l4)), NextHeader: ProtoDestOpts, HopLimit: 64,
		Src: src.Addr(), Dst: dst.Addr(),
	}.Append(b)
	b = AppendNonceHeader(b, proto, n)
	return append(b, l4...)
}
