package mh

import (
	"net/netip"

	"ilnp/internal/wire"
)

// HomeAddressOptionType is the Home Address destination option (RFC 6275 s.6.3): act bits 11
// (discard and send ICMP even to multicast if not understood), chg bit 0.
const HomeAddressOptionType = 201

// destOptsHAOLen is a Destination Options header holding PadN(4 bytes) and the Home Address
// option at offset 6, which meets its 8n+6 alignment (s.6.3): 2+4+18 = 24 bytes.
const destOptsHAOLen = 24

// type2RHLen is the whole type 2 Routing header: Hdr Ext Len 2 (RFC 6275 s.6.4).
const type2RHLen = 24

// AppendHomeAddressDestOpts appends a Destination Options header carrying only the Home
// Address option for hoa.
func AppendHomeAddressDestOpts(b []byte, nextHeader uint8, hoa netip.Addr) ([]byte, error) {
	if !routableUnicast(hoa) {
		return nil, errAt("marshal home address option", -1, ErrBadAddress, "%v", hoa)
	}
	a := hoa.As16()
	b = append(b, nextHeader, destOptsHAOLen/8-1, byte(OptPadN), 2, 0, 0, HomeAddressOptionType, 16)
	return append(b, a[:]...), nil
}

// DestOpts is a parsed Destination Options header as this package sees it.
type DestOpts struct {
	NextHeader uint8
	// Length is the header's size in bytes.
	Length int
	// HomeAddress is the Home Address option's address; invalid when absent.
	HomeAddress netip.Addr
}

// ParseDestOpts parses the Destination Options header at the start of b (b may continue).
// It skips Pad1/PadN and unknown options whose action bits are 00 (RFC 8200 s.4.2) and
// rejects other unknown options, a second Home Address option, a misaligned or wrong-length
// one and a non-routable home address.
func ParseDestOpts(b []byte) (DestOpts, error) {
	if len(b) < 2 {
		return DestOpts{}, errAt("destination options", 0, ErrTruncated, "%d bytes", len(b))
	}
	n := (int(b[1]) + 1) * 8
	if n > len(b) {
		return DestOpts{}, errAt("destination options", 1, ErrTruncated, "header is %d bytes, %d present", n, len(b))
	}
	d := DestOpts{NextHeader: b[0], Length: n}
	for off := 2; off < n; {
		t := b[off]
		if t == byte(OptPad1) {
			off++
			continue
		}
		if off+2 > n {
			return DestOpts{}, errAt("destination option", off, ErrTruncated, "type %#x without a length", t)
		}
		l := int(b[off+1])
		end := off + 2 + l
		if end > n {
			return DestOpts{}, errAt("destination option", off, ErrTruncated, "type %#x length %d runs past the header", t, l)
		}
		switch {
		case t == byte(OptPadN):
		case t == HomeAddressOptionType:
			if d.HomeAddress.IsValid() {
				return DestOpts{}, errAt("home address option", off, ErrDuplicate, "second one")
			}
			if l != 16 {
				return DestOpts{}, errAt("home address option", off+1, ErrLength, "length %d, want 16", l)
			}
			if off%8 != 6 {
				return DestOpts{}, errAt("home address option", off, ErrMisaligned, "offset %d, want 8n+6", off)
			}
			a := netip.AddrFrom16([16]byte(b[off+2 : end]))
			if !routableUnicast(a) {
				return DestOpts{}, errAt("home address option", off+2, ErrBadAddress, "%v", a)
			}
			d.HomeAddress = a
		case t>>6 == 0:
			// RFC 8200 s.4.2: action 00, skip over the option.
		default:
			return DestOpts{}, errAt("destination option", off, ErrUnknownOption, "type %#x", t)
		}
		off = end
	}
	return d, nil
}

// AppendType2RH appends a type 2 Routing header carrying hoa, Segments Left 1.
func AppendType2RH(b []byte, nextHeader uint8, hoa netip.Addr) ([]byte, error) {
	if !routableUnicast(hoa) {
		return nil, errAt("marshal type 2 routing header", -1, ErrBadAddress, "%v", hoa)
	}
	a := hoa.As16()
	b = append(b, nextHeader, type2RHLen/8-1, 2, 1, 0, 0, 0, 0)
	return append(b, a[:]...), nil
}

// Type2RH is a parsed type 2 Routing header.
type Type2RH struct {
	NextHeader  uint8
	HomeAddress netip.Addr
}

// ParseType2RH parses the Routing header at the start of b (b may continue); it must be a
// type 2 header of exactly 24 bytes with Segments Left 1 and a routable home address.
func ParseType2RH(b []byte) (Type2RH, error) {
	if len(b) < 4 {
		return Type2RH{}, errAt("routing header", 0, ErrTruncated, "%d bytes", len(b))
	}
	if b[2] != 2 {
		return Type2RH{}, errAt("routing header", 2, ErrRoutingType, "routing type %d", b[2])
	}
	if b[1] != type2RHLen/8-1 {
		return Type2RH{}, errAt("type 2 routing header", 1, ErrRoutingType, "hdr ext len %d, want 2", b[1])
	}
	if len(b) < type2RHLen {
		return Type2RH{}, errAt("type 2 routing header", 0, ErrTruncated, "%d bytes, want 24", len(b))
	}
	if b[3] != 1 {
		return Type2RH{}, errAt("type 2 routing header", 3, ErrSegmentsLeft, "segments left %d", b[3])
	}
	a := netip.AddrFrom16([16]byte(b[8:24]))
	if !routableUnicast(a) {
		return Type2RH{}, errAt("type 2 routing header", 8, ErrBadAddress, "%v", a)
	}
	return Type2RH{NextHeader: b[0], HomeAddress: a}, nil
}

// Envelope is the IPv6 part of a MIPv6 packet: addresses and the optional MIPv6 extension
// headers.
type Envelope struct {
	Src, Dst netip.Addr
	// HomeAddress, when valid, goes in a Home Address destination option (MN -> CN/HA while
	// away: Src is the care-of address).
	HomeAddress netip.Addr
	// RoutingHome, when valid, goes in a type 2 Routing header (CN/HA -> MN while away: Dst is
	// the care-of address).
	RoutingHome netip.Addr
	// HopLimit of the IPv6 header; 0 means 64.
	HopLimit uint8
}

// PseudoSrc is the source address of the upper-layer pseudo-header: the home address when a
// Home Address option is present (RFC 6275 s.6.1.1, s.11.3.1).
func (e Envelope) PseudoSrc() netip.Addr {
	if e.HomeAddress.IsValid() {
		return e.HomeAddress
	}
	return e.Src
}

// PseudoDst is the destination address of the upper-layer pseudo-header: the final
// destination, i.e. the routing header's home address when present (RFC 8200 s.8.1).
func (e Envelope) PseudoDst() netip.Addr {
	if e.RoutingHome.IsValid() {
		return e.RoutingHome
	}
	return e.Dst
}

// AppendPacket appends IPv6 | [type 2 RH] | [Destination Options with HAO] | payload, where
// proto is the payload's protocol. The payload's own checksum is the caller's business (use
// PseudoSrc/PseudoDst).
func AppendPacket(b []byte, e Envelope, proto uint8, payload []byte) ([]byte, error) {
	if !e.Src.Is6() || !e.Dst.Is6() {
		return nil, errAt("marshal packet", -1, ErrBadAddress, "%v -> %v", e.Src, e.Dst)
	}
	var ext []byte
	var err error
	next := proto
	if e.HomeAddress.IsValid() {
		if ext, err = AppendHomeAddressDestOpts(nil, next, e.HomeAddress); err != nil {
			return nil, err
		}
		next = ProtoDestOpts
	}
	if e.RoutingHome.IsValid() {
		rh, err := AppendType2RH(nil, next, e.RoutingHome)
		if err != nil {
			return nil, err
		}
		ext = append(rh, ext...)
		next = ProtoRouting
	}
	if n := len(ext) + len(payload); n > 0xffff {
		return nil, errAt("marshal packet", -1, ErrLength, "payload %d bytes", n)
	}
	hl := e.HopLimit
	if hl == 0 {
		hl = 64
	}
	h := wire.IPv6Header{PayloadLen: uint16(len(ext) + len(payload)), NextHeader: next, HopLimit: hl,
		Src: e.Src, Dst: e.Dst}
	return append(append(h.Append(b), ext...), payload...), nil
}

// AppendMessage appends a whole IPv6 packet carrying m, its checksum computed over the
// envelope's pseudo-header.
//
// RFC 6275 s.6.1 allows a Home Address option only with a Binding Update and a type 2 routing
// header only with a Binding Acknowledgement; other combinations are ErrHeader.
func AppendMessage(b []byte, e Envelope, m Message) ([]byte, error) {
	if err := extensionsAllowed(e, m.Type(), -1); err != nil {
		return nil, err
	}
	body, err := Marshal(m, e.PseudoSrc(), e.PseudoDst())
	if err != nil {
		return nil, err
	}
	return AppendPacket(b, e, Proto, body)
}

// Packet is a parsed IPv6 packet: its envelope and the upper-layer payload.
type Packet struct {
	Envelope
	Proto   uint8
	Payload []byte
	// TrafficClass and FlowLabel of the IPv6 header.
	TrafficClass uint8
	FlowLabel    uint32
}

// ParsePacket parses IPv6 | [type 2 RH] | [Destination Options] | payload. The IPv6 Payload
// Length must match the bytes present. Other extension headers are not this package's
// business (ErrHeader).
func ParsePacket(b []byte) (Packet, error) {
	h, err := wire.ParseIPv6Header(b)
	if err != nil {
		return Packet{}, errAt("IPv6 header", 0, ErrTruncated, "%v", err)
	}
	if want := wire.IPv6HeaderLen + int(h.PayloadLen); want != len(b) {
		cause := ErrLength
		if want > len(b) {
			cause = ErrTruncated
		}
		return Packet{}, errAt("IPv6 header", 4, cause, "payload length %d, %d bytes present", h.PayloadLen, len(b)-wire.IPv6HeaderLen)
	}
	p := Packet{Envelope: Envelope{Src: h.Src, Dst: h.Dst, HopLimit: h.HopLimit},
		TrafficClass: h.TrafficClass, FlowLabel: h.FlowLabel}
	off, next := wire.IPv6HeaderLen, h.NextHeader
	for {
		switch next {
		case ProtoRouting:
			if p.RoutingHome.IsValid() {
				return Packet{}, errAt("type 2 routing header", off, ErrDuplicate, "second routing header")
			}
			rh, err := ParseType2RH(b[off:])
			if err != nil {
				return Packet{}, shift(err, off)
			}
			p.RoutingHome, next = rh.HomeAddress, rh.NextHeader
			off += type2RHLen
		case ProtoDestOpts:
			d, err := ParseDestOpts(b[off:])
			if err != nil {
				return Packet{}, shift(err, off)
			}
			if d.HomeAddress.IsValid() {
				if p.HomeAddress.IsValid() {
					return Packet{}, errAt("home address option", off, ErrDuplicate, "second destination options header with one")
				}
				p.HomeAddress = d.HomeAddress
			}
			next = d.NextHeader
			off += d.Length
		case 0, 44, 50, 51:
			return Packet{}, errAt("IPv6 extension header", off, ErrHeader, "next header %d", next)
		default:
			p.Proto, p.Payload = next, b[off:]
			return p, nil
		}
	}
}

// shift moves a parse error's offset from a sub-buffer into the packet.
func shift(err error, by int) error {
	if e, ok := err.(*Error); ok && e.Offset >= 0 {
		c := *e
		c.Offset += by
		return &c
	}
	return err
}

// ParseMessage parses an IPv6 packet carrying a Mobility Header and verifies the header's
// checksum over the packet's pseudo-header. It applies the extension-header rules of
// AppendMessage.
func ParseMessage(b []byte) (Packet, Message, error) {
	p, err := ParsePacket(b)
	if err != nil {
		return Packet{}, nil, err
	}
	off := len(b) - len(p.Payload)
	if p.Proto != Proto {
		return Packet{}, nil, errAt("packet", off, ErrHeader, "upper-layer protocol %d, not the Mobility Header", p.Proto)
	}
	m, err := Parse(p.Payload, p.PseudoSrc(), p.PseudoDst())
	if err != nil {
		return Packet{}, nil, shift(err, off)
	}
	if err := extensionsAllowed(p.Envelope, m.Type(), off); err != nil {
		return Packet{}, nil, err
	}
	return p, m, nil
}

func extensionsAllowed(e Envelope, t Type, off int) error {
	if e.HomeAddress.IsValid() && t != TypeBindingUpdate {
		return errAt("packet", off, ErrHeader, "home address option with %v", t)
	}
	if e.RoutingHome.IsValid() && t != TypeBindingAck {
		return errAt("packet", off, ErrHeader, "type 2 routing header with %v", t)
	}
	return nil
}
