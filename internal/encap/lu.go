package encap

import (
	"fmt"
	"net/netip"

	"ilnp/internal/wire"
)

// Locator Updates across families.
//
// Encoding: an IPv4 locator is listed as an ordinary RFC 6743 entry (locator 64, preference
// 16, lifetime 16) whose locator field holds the L32 mapping 0x0000 | port | IPv4. Why: the
// message keeps one fixed entry size and one parser, an IPv6-only set is byte for byte RFC
// 6743, and the two families are told apart by the entry itself, because 0000::/16 is
// IETF-reserved and never a routable IPv6 locator. The Code field cannot carry a flag: codes
// 1 and 2 mean "Operation in the Code field" in one St Andrews build (wire.QuirkOpInCode).
// A receiver without IPv4 support does NOT ignore such entries: FreeBSD ILNP installs every
// listed locator and sends to each in turn (ilnp-freebsd14 sys/netinet6/ilnp6.c
// lu_input_advert, ilnp6_update_inpcb), and the St Andrews code makes the first entry its
// active locator (ilnp-public-1 net/ipv6/ilnp6.c rcv_lu). So IPv4 entries go only to a peer
// that has shown it knows them (internal/dialect); this package rejects entries in
// 0000::/16 that are no valid endpoint.
//
// Behind a NAT the sender cannot know the endpoint its peer sees: the LU's own source locator,
// which the datapath replaces by the outer header's endpoint (bpf/lib/encap.h), is that
// endpoint, and WithSource adds it to the set.

// L32Entry is one IPv4 locator of a Locator Update.
type L32Entry struct {
	Endpoint   netip.AddrPort
	Preference uint16
	Lifetime   uint16
}

// Split is a Locator Update's locators by family, in message order.
type Split struct {
	L64 []wire.LocatorEntry
	L32 []L32Entry
}

// IPv6Only reports whether the set is a plain RFC 6743 one.
func (s Split) IPv6Only() bool { return len(s.L32) == 0 }

// SplitLocators sorts entries into the two families; an entry in 0000::/16 that is no valid
// IPv4 endpoint (zero address or port, or a zero locator) is an error.
func SplitLocators(entries []wire.LocatorEntry) (Split, error) {
	var s Split
	for i, e := range entries {
		if e.Locator>>48 != 0 {
			s.L64 = append(s.L64, e)
			continue
		}
		ep, ok := Endpoint(e.Locator)
		if !ok || ep.Port() == 0 {
			return Split{}, fmt.Errorf("encap: locator %d (%v): in the reserved 0000::/16 block but no IPv4 endpoint", i+1, e.Locator)
		}
		s.L32 = append(s.L32, L32Entry{Endpoint: ep, Preference: e.Preference, Lifetime: e.Lifetime})
	}
	return s, nil
}

// Entries is the Locator Update entry list for l64 followed by l32.
func Entries(l64 []wire.LocatorEntry, l32 []L32Entry) ([]wire.LocatorEntry, error) {
	out := make([]wire.LocatorEntry, 0, len(l64)+len(l32))
	for _, e := range l64 {
		if e.Locator>>48 == 0 {
			return nil, fmt.Errorf("encap: %v is not an IPv6 locator", e.Locator)
		}
		out = append(out, e)
	}
	for _, e := range l32 {
		l, err := L32(e.Endpoint)
		if err != nil {
			return nil, err
		}
		out = append(out, wire.LocatorEntry{Locator: l, Preference: e.Preference, Lifetime: e.Lifetime})
	}
	return out, nil
}

// ParseLocatorUpdate parses an LU (wire.ParseLocatorUpdate) and splits its locators.
func ParseLocatorUpdate(msg []byte, src, dst netip.Addr, opts wire.LUParseOptions) (wire.LocatorUpdate, Split, error) {
	lu, err := wire.ParseLocatorUpdate(msg, src, dst, opts)
	if err != nil {
		return wire.LocatorUpdate{}, Split{}, err
	}
	s, err := SplitLocators(lu.Locators)
	if err != nil {
		return wire.LocatorUpdate{}, Split{}, fmt.Errorf("locator update: %w", err)
	}
	return lu, s, nil
}

// WithSource adds the LU's source locator, when it is an IPv4 endpoint the set does not list
// (the sender is behind a NAT), with the best preference and lifetime of the listed IPv4
// locators (or of all, when it lists none).
func WithSource(s Split, src wire.L64) Split {
	ep, ok := Endpoint(src)
	if !ok {
		return s
	}
	add := L32Entry{Endpoint: ep, Preference: 0xffff}
	for _, e := range s.L32 {
		if e.Endpoint == ep {
			return s
		}
	}
	pick := func(pref, life uint16) {
		add.Preference = min(add.Preference, pref)
		add.Lifetime = max(add.Lifetime, life)
	}
	for _, e := range s.L32 {
		pick(e.Preference, e.Lifetime)
	}
	if len(s.L32) == 0 {
		for _, e := range s.L64 {
			pick(e.Preference, e.Lifetime)
		}
	}
	out := Split{L64: s.L64, L32: append(append([]L32Entry(nil), s.L32...), add)}
	return out
}

// AsSeen is the locator set of a Locator Update as its receiver can use it. The sender sends
// an LU from its most preferred locator (the first listed with the lowest preference); when
// that is an IPv4 endpoint and the LU arrived from another one (src, the outer source the
// datapath put in its place), a NAT translated it, and src takes its place with its
// preference and lifetime. Otherwise the set is returned unchanged (WithSource covers a
// sender that lists no IPv4 locator at all). The LU's acknowledgement keeps the original
// body: the sender matches it byte for byte.
func AsSeen(entries []wire.LocatorEntry, src wire.L64) []wire.LocatorEntry {
	if !IsL32(src) || len(entries) == 0 {
		return entries
	}
	best := 0
	for i, e := range entries {
		if e.Locator == src {
			return entries
		}
		if e.Preference < entries[best].Preference {
			best = i
		}
	}
	if !IsL32(entries[best].Locator) {
		return entries
	}
	out := append([]wire.LocatorEntry(nil), entries...)
	out[best].Locator = src
	return out
}
