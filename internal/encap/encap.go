// Package encap holds what ILNPv6 across IPv4 and NAT needs outside the datapath: how an IPv4
// locator (RFC 6742 L32) and the UDP port it is reached on are carried as an L64 in the ILCC
// and the BPF maps, the encapsulation port, and the MTU arithmetic of ILNPv6 in UDP/IPv4
// (bpf/lib/encap.h does the packets).
//
// Mapping: L64 = 0x0000 | port (16 bits) | IPv4 address (32 bits). The 0000::/16 block is
// IETF-reserved (RFC 4291 s.2.4), so no routable IPv6 locator collides with it, and address and
// port together are the endpoint exactly as a NAT presents it: a receiver takes them from the
// outer header of a nonce-verified packet (WireGuard-style roaming).
package encap

import (
	"fmt"
	"net/netip"

	"ilnp/internal/wire"
)

// DefaultPort is the UDP port encapsulated ILNPv6 goes to when none is configured. UDP because
// it passes every NAT (a NAT translates and keeps bindings only for protocols it knows), as
// HIP (RFC 5770) and Teredo (RFC 4380) do; this number because it lies in the dynamic range
// (RFC 6335 s.6), which IANA never assigns, so no registered service uses it; ILNP has no
// assigned port.
const DefaultPort = 49191

// Header sizes of the encapsulation and the nonce header (RFC 6744 s.2) it carries.
const (
	IPv4HeaderLen = 20
	UDPHeaderLen  = 8
	// Overhead is what encapsulation adds in front of the ILNPv6 packet.
	Overhead      = IPv4HeaderLen + UDPHeaderLen
	ipv6HeaderLen = 40
	tcpHeaderLen  = 20
)

// IsL32 reports whether l is an IPv4 endpoint in the mapping above.
func IsL32(l wire.L64) bool {
	return l>>48 == 0 && uint32(l) != 0
}

// Family names l's address family as ilnpctl shows it: "ipv4" for an IPv4 endpoint, else
// "ipv6".
func Family(l wire.L64) string {
	if IsL32(l) {
		return "ipv4"
	}
	return "ipv6"
}

// L32 is the locator of an IPv4 endpoint; the address must be IPv4 (not IPv4-mapped IPv6),
// neither it nor the port zero.
func L32(ep netip.AddrPort) (wire.L64, error) {
	a := ep.Addr()
	if !a.Is4() {
		return 0, fmt.Errorf("encap: %v is not an IPv4 address", a)
	}
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	if v == 0 || ep.Port() == 0 {
		return 0, fmt.Errorf("encap: %v: zero address or port", ep)
	}
	return wire.L64(uint64(ep.Port())<<32 | uint64(v)), nil
}

// Endpoint is the IPv4 endpoint l stands for; ok is false for an IPv6 locator.
func Endpoint(l wire.L64) (ep netip.AddrPort, ok bool) {
	if !IsL32(l) {
		return netip.AddrPort{}, false
	}
	v := uint32(l)
	a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	return netip.AddrPortFrom(a, uint16(l>>32)), true
}

// nonceHeaderLen is the size of the Destination Options header holding a nonce of size bytes.
func nonceHeaderLen(nonceSize int) (int, error) {
	switch nonceSize {
	case 4:
		return 8, nil
	case 12:
		return 16, nil
	}
	return 0, fmt.Errorf("encap: nonce size %d, want 4 or 12 (RFC 6744 s.2)", nonceSize)
}

// InnerMTU is the largest IPv6 packet a socket may send to an encapsulated peer over a link of
// linkMTU bytes: the datapath adds the nonce header and then IPv4 + UDP, and neither it nor the
// path fragments (DF is set). 1500 and a 4-byte nonce give 1500 - 28 - 8 = 1464.
func InnerMTU(linkMTU, nonceSize int) (int, error) {
	h, err := nonceHeaderLen(nonceSize)
	if err != nil {
		return 0, err
	}
	mtu := linkMTU - Overhead - h
	if mtu < 1280 {
		return 0, fmt.Errorf("encap: link MTU %d leaves %d bytes for IPv6, below its minimum 1280 (RFC 8200 s.5)", linkMTU, mtu)
	}
	return mtu, nil
}

// TCPMSS is the TCP maximum segment size that fits InnerMTU (1404 for 1500 and a 4-byte nonce).
func TCPMSS(linkMTU, nonceSize int) (int, error) {
	mtu, err := InnerMTU(linkMTU, nonceSize)
	if err != nil {
		return 0, err
	}
	return mtu - ipv6HeaderLen - tcpHeaderLen, nil
}
