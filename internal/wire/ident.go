package wire

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// NID is an ILNPv6 Node Identifier: the low 64 bits of the IPv6 look-alike
// address (RFC 6741 s.3), held as a host byte order value.
type NID uint64

// L64 is an ILNPv6 64-bit Locator: the upper 64 bits (the routing prefix) of
// the IPv6 look-alike address (RFC 6741 s.3).
type L64 uint64

// String returns the RFC 6742 s.2.1 presentation form: four groups of four
// lower-case hex digits separated by colons, never "::".
func (n NID) String() string { return format64(uint64(n)) }

// String returns the RFC 6742 s.2.3 presentation form, as for NID.
func (l L64) String() string { return format64(uint64(l)) }

func format64(v uint64) string {
	const hexdigits = "0123456789abcdef"
	var b [19]byte
	j := 0
	for g := 0; g < 4; g++ {
		if g > 0 {
			b[j] = ':'
			j++
		}
		w := uint16(v >> (48 - 16*g))
		for s := 12; s >= 0; s -= 4 {
			b[j] = hexdigits[(w>>s)&0xf]
			j++
		}
	}
	return string(b[:])
}

// parse64 parses the RFC 6742 form "xxxx:xxxx:xxxx:xxxx". Leading zeros in a
// group may be left out on input (as in IPv6 text, RFC 4291 s.2.2), but
// exactly four groups are required: "::" is not allowed by RFC 6742.
func parse64(s string) (uint64, error) {
	if strings.Contains(s, "::") {
		return 0, errors.New(`"::" is not allowed (RFC 6742)`)
	}
	groups := strings.Split(s, ":")
	if len(groups) != 4 {
		return 0, fmt.Errorf("want 4 colon-separated groups, have %d", len(groups))
	}
	var v uint64
	for i, g := range groups {
		if len(g) == 0 || len(g) > 4 {
			return 0, fmt.Errorf("group %d %q: want 1 to 4 hex digits", i+1, g)
		}
		var w uint64
		for _, c := range []byte(g) {
			d, ok := hexval(c)
			if !ok {
				return 0, fmt.Errorf("group %d %q: %q is not a hex digit", i+1, g, c)
			}
			w = w<<4 | uint64(d)
		}
		v = v<<16 | w
	}
	return v, nil
}

func hexval(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ParseNID parses the RFC 6742 presentation form of a NID,
// e.g. "0014:4fff:ff20:ee64".
func ParseNID(s string) (NID, error) {
	v, err := parse64(s)
	if err != nil {
		return 0, fmt.Errorf("parse NID %q: %w", s, err)
	}
	return NID(v), nil
}

// ParseL64 parses an L64 in the RFC 6742 form "2001:0db8:0001:0000", or as
// an IPv6 prefix "2001:db8:1::" or "2001:db8:1::/64". The prefix forms must
// have the low 64 bits zero and, with a length, exactly /64 (an ILNPv6
// locator is always 64 bits, RFC 6741 s.3).
func ParseL64(s string) (L64, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return 0, fmt.Errorf("parse L64 %q: %w", s, err)
		}
		if !p.Addr().Is6() || p.Addr().Is4In6() {
			return 0, fmt.Errorf("parse L64 %q: not an IPv6 prefix", s)
		}
		if p.Bits() != 64 {
			return 0, fmt.Errorf("parse L64 %q: prefix length %d, want 64", s, p.Bits())
		}
		return l64FromPrefixAddr(s, p.Addr())
	}
	if strings.Contains(s, "::") || strings.Count(s, ":") == 7 {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return 0, fmt.Errorf("parse L64 %q: %w", s, err)
		}
		if !a.Is6() || a.Is4In6() || a.Zone() != "" {
			return 0, fmt.Errorf("parse L64 %q: not an IPv6 prefix", s)
		}
		return l64FromPrefixAddr(s, a)
	}
	v, err := parse64(s)
	if err != nil {
		return 0, fmt.Errorf("parse L64 %q: %w", s, err)
	}
	return L64(v), nil
}

func l64FromPrefixAddr(s string, a netip.Addr) (L64, error) {
	b := a.As16()
	if binary.BigEndian.Uint64(b[8:]) != 0 {
		return 0, fmt.Errorf("parse L64 %q: low 64 bits are not zero (an address, not a /64 prefix)", s)
	}
	return L64(binary.BigEndian.Uint64(b[:8])), nil
}

// Prefix returns the locator as an IPv6 /64 prefix.
func (l L64) Prefix() netip.Prefix {
	return netip.PrefixFrom(ILV{Locator: l}.Addr(), 64)
}

// ILV is an Identifier-Locator Vector, the pair [L64, NID] (RFC 6740 s.2).
type ILV struct {
	Locator L64
	NID     NID
}

// ILVFromAddr splits an IPv6 address into its locator and identifier. A zone
// is dropped. IPv4 and IPv4-mapped IPv6 addresses are rejected.
func ILVFromAddr(a netip.Addr) (ILV, error) {
	if !a.Is6() || a.Is4In6() {
		return ILV{}, fmt.Errorf("I-LV from %v: not an IPv6 address", a)
	}
	b := a.As16()
	return ILV{
		Locator: L64(binary.BigEndian.Uint64(b[:8])),
		NID:     NID(binary.BigEndian.Uint64(b[8:])),
	}, nil
}

// Addr returns the 128-bit IPv6 look-alike address L64|NID.
func (v ILV) Addr() netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(v.Locator))
	binary.BigEndian.PutUint64(b[8:], uint64(v.NID))
	return netip.AddrFrom16(b)
}

// String returns "L64,NID" in the RFC 6742 forms, e.g.
// "2001:0db8:0001:0000,0014:4fff:ff20:ee64" (the thesis hosts-file order).
func (v ILV) String() string { return v.Locator.String() + "," + v.NID.String() }

// ParseILV parses the String form "L64,NID" (L64 in any ParseL64 form) or a
// plain IPv6 address.
func ParseILV(s string) (ILV, error) {
	l, n, ok := strings.Cut(s, ",")
	if !ok {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return ILV{}, fmt.Errorf("parse I-LV %q: want L64,NID or an IPv6 address: %w", s, err)
		}
		v, err := ILVFromAddr(a)
		if err != nil {
			return ILV{}, fmt.Errorf("parse I-LV %q: %w", s, err)
		}
		return v, nil
	}
	loc, err := ParseL64(strings.TrimSpace(l))
	if err != nil {
		return ILV{}, fmt.Errorf("parse I-LV %q: %w", s, err)
	}
	nid, err := ParseNID(strings.TrimSpace(n))
	if err != nil {
		return ILV{}, fmt.Errorf("parse I-LV %q: %w", s, err)
	}
	return ILV{Locator: loc, NID: nid}, nil
}

// ulBit is the universal/local bit of a modified EUI-64 interface identifier
// (RFC 4291 Appendix A), bit 0x02 of the first octet.
const ulBit = 1 << 57

// NIDFromMAC derives a NID from a 48-bit MAC (modified EUI-64, RFC 4291
// Appendix A: FFFE inserted in the middle, u/l bit inverted) or from a 64-bit
// EUI-64 (u/l bit inverted). RFC 6741 s.3 allows this derivation.
func NIDFromMAC(mac net.HardwareAddr) (NID, error) {
	var b [8]byte
	switch len(mac) {
	case 6:
		copy(b[:3], mac[:3])
		b[3], b[4] = 0xff, 0xfe
		copy(b[5:], mac[3:])
	case 8:
		copy(b[:], mac)
	default:
		return 0, fmt.Errorf("NID from MAC %v: %d bytes, want 6 (MAC-48) or 8 (EUI-64)", mac, len(mac))
	}
	return NID(binary.BigEndian.Uint64(b[:]) ^ ulBit), nil
}

// RandomNID returns an ephemeral NID from crypto/rand with the u/l bit
// cleared, marking it as not globally unique (RFC 4291 Appendix A, RFC 6741
// s.3; as RFC 4941 does for temporary addresses).
func RandomNID() (NID, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("random NID: %w", err)
	}
	return NID(binary.BigEndian.Uint64(b[:]) &^ ulBit), nil
}
