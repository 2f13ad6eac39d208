package mh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"ilnp/internal/wire"
)

// The home agent's Duplicate Address Detection of a home address (RFC 6275 s.10.3.1): a
// Neighbor Solicitation from the unspecified address to the address's solicited-node group
// (RFC 4862 s.5.4.2), and the Neighbor Advertisement a node using the address defends it with.

// ICMPv6 Neighbor Discovery message types (RFC 4861 s.4.3, s.4.4).
const (
	ICMPv6NeighborSolicit = 135
	ICMPv6NeighborAdvert  = 136
	protoICMPv6           = 58
)

// ErrNotAdvert: the ICMPv6 message is no valid Neighbor Advertisement.
var ErrNotAdvert = errors.New("not a valid neighbor advertisement")

// SolicitedNode is target's solicited-node multicast group ff02::1:ffXX:XXXX (RFC 4291 s.2.7.1).
func SolicitedNode(target netip.Addr) netip.Addr {
	g := netip.MustParseAddr("ff02::1:ff00:0").As16()
	t := target.As16()
	copy(g[13:], t[13:])
	return netip.AddrFrom16(g)
}

// AppendDADSolicitation appends a whole IPv6 packet: the DAD Neighbor Solicitation for target,
// from ::, to its solicited-node group, hop limit 255, without a Source Link-Layer Address
// option (RFC 4861 s.4.3 forbids it from ::), checksum set.
func AppendDADSolicitation(b []byte, target netip.Addr) ([]byte, error) {
	if !target.Is6() || target.Is4In6() || target.IsUnspecified() || target.IsMulticast() {
		return nil, errAt("marshal NS", -1, ErrBadAddress, "target %v", target)
	}
	src, dst := netip.IPv6Unspecified(), SolicitedNode(target)
	ns := make([]byte, 24)
	ns[0] = ICMPv6NeighborSolicit
	t := target.As16()
	copy(ns[8:], t[:])
	binary.BigEndian.PutUint16(ns[2:], wire.PseudoHeaderChecksum(src, dst, protoICMPv6, ns))
	h := wire.IPv6Header{PayloadLen: uint16(len(ns)), NextHeader: protoICMPv6, HopLimit: 255, Src: src, Dst: dst}
	return append(h.Append(b), ns...), nil
}

// ParseNeighborAdvert checks an ICMPv6 message as a raw ICMPv6 socket delivers it (the
// checksum already verified by the kernel) and the hop limit it arrived with, and returns the
// advertisement's target (RFC 4861 s.7.1.2: hop limit 255, code 0, at least 24 bytes, target
// not multicast).
func ParseNeighborAdvert(icmp []byte, hopLimit int) (netip.Addr, error) {
	switch {
	case len(icmp) < 24:
		return netip.Addr{}, fmt.Errorf("%w: %d bytes", ErrNotAdvert, len(icmp))
	case icmp[0] != ICMPv6NeighborAdvert || icmp[1] != 0:
		return netip.Addr{}, fmt.Errorf("%w: type %d code %d", ErrNotAdvert, icmp[0], icmp[1])
	case hopLimit != 255:
		return netip.Addr{}, fmt.Errorf("%w: hop limit %d", ErrNotAdvert, hopLimit)
	}
	target := netip.AddrFrom16([16]byte(icmp[8:24]))
	if target.IsMulticast() || target.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("%w: target %v", ErrNotAdvert, target)
	}
	return target, nil
}
