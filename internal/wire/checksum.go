package wire

import (
	"encoding/binary"
	"net/netip"
)

// InternetChecksum returns the RFC 1071 Internet checksum (the one's
// complement of the one's complement sum of 16-bit big-endian words) of the
// concatenation of data, with initial added to the sum first. The pieces are
// summed as one byte stream, so a piece of odd length does not shift the
// next one; an odd total length is padded with a zero byte.
//
// Computed over a message whose checksum field is zero, the result is the
// value to store; computed over a message with its checksum in place, the
// result is 0 when the checksum is correct.
func InternetChecksum(initial uint32, data ...[]byte) uint16 {
	sum := uint64(initial)
	odd := false
	for _, d := range data {
		if odd && len(d) > 0 {
			sum += uint64(d[0])
			d = d[1:]
			odd = false
		}
		for len(d) >= 2 {
			sum += uint64(binary.BigEndian.Uint16(d))
			d = d[2:]
		}
		if len(d) == 1 {
			sum += uint64(d[0]) << 8
			odd = true
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// PseudoHeaderChecksum returns the checksum of an upper-layer payload under
// the IPv6 pseudo-header (RFC 8200 s.8.1: source, destination, 32-bit
// upper-layer length = len(payload), three zero bytes, next header proto).
// With the payload's checksum field zero it is the value to store (UDP
// transmits a computed 0 as 0xffff); with the checksum in place, 0 means
// valid.
func PseudoHeaderChecksum(src, dst netip.Addr, proto uint8, payload []byte) uint16 {
	s, d := src.As16(), dst.As16()
	var tail [8]byte
	binary.BigEndian.PutUint32(tail[:4], uint32(len(payload)))
	tail[7] = proto
	return InternetChecksum(0, s[:], d[:], tail[:], payload)
}
