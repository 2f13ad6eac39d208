package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPv6HeaderLen is the size of the IPv6 fixed header (RFC 8200 s.3).
const IPv6HeaderLen = 40

// IPv6 Next Header values used with ILNPv6.
const (
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// IPv6Header is the IPv6 fixed header (RFC 8200 s.3), for building and
// checking packets in tests and tools.
type IPv6Header struct {
	TrafficClass uint8
	FlowLabel    uint32 // low 20 bits used
	PayloadLen   uint16
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     netip.Addr
}

// Append appends the 40-byte header. Src and Dst are written in their 16-byte
// form (an invalid netip.Addr is written as ::).
func (h IPv6Header) Append(b []byte) []byte {
	var hdr [IPv6HeaderLen]byte
	binary.BigEndian.PutUint32(hdr[0:4], 6<<28|uint32(h.TrafficClass)<<20|h.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(hdr[4:6], h.PayloadLen)
	hdr[6] = h.NextHeader
	hdr[7] = h.HopLimit
	if h.Src.IsValid() {
		s := h.Src.As16()
		copy(hdr[8:24], s[:])
	}
	if h.Dst.IsValid() {
		d := h.Dst.As16()
		copy(hdr[24:40], d[:])
	}
	return append(b, hdr[:]...)
}

// ParseIPv6Header parses the fixed header at the start of b. It checks the
// version and that b holds 40 bytes; it does not check PayloadLen against
// len(b) (callers decide how to treat truncation or trailing bytes).
func ParseIPv6Header(b []byte) (IPv6Header, error) {
	if len(b) < IPv6HeaderLen {
		return IPv6Header{}, fmt.Errorf("IPv6 header: %d bytes, want %d", len(b), IPv6HeaderLen)
	}
	w := binary.BigEndian.Uint32(b[0:4])
	if v := w >> 28; v != 6 {
		return IPv6Header{}, fmt.Errorf("IPv6 header: version %d, want 6", v)
	}
	return IPv6Header{
		TrafficClass: uint8(w >> 20),
		FlowLabel:    w & 0xfffff,
		PayloadLen:   binary.BigEndian.Uint16(b[4:6]),
		NextHeader:   b[6],
		HopLimit:     b[7],
		Src:          netip.AddrFrom16([16]byte(b[8:24])),
		Dst:          netip.AddrFrom16([16]byte(b[24:40])),
	}, nil
}
