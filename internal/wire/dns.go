package wire

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/miekg/dns"
)

// The DNS helpers use the RFC 6742 record types as implemented by
// github.com/miekg/dns (NID, L64, L32, LP). In all four, Preference orders
// records of the same type for the same owner and a LOWER value is MORE
// preferred (RFC 6742 s.2, as for MX); this package follows the RFC.

// RankedILV is an I-LV built from DNS records, with what ranked it.
type RankedILV struct {
	ILV           ILV
	Preference    uint16 // of the L64 record; lower is more preferred
	NIDPreference uint16 // of the NID record; lower is more preferred
	TTL           uint32 // the smaller TTL of the two records
}

// ILVsFromRRs combines the NID and L64 (and L32) records owned by name (class IN;
// other owners, classes and types are ignored) into I-LVs: every NID with
// every L64, as any of a node's NIDs may be used with any of its locators
// (RFC 6740). The result is ordered by L64 preference,
// then NID preference, then by value, so it is deterministic for an
// (unordered) RRset. A value listed twice keeps its lowest preference and
// TTL. An L32 record is an IPv4 locator (issue 14), kept as the L64 0x0000 | port |
// address with DefaultIPv4Port. It is an error if name has no NID or no locator record.
func ILVsFromRRs(name string, rrs []dns.RR) ([]RankedILV, error) {
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		return nil, fmt.Errorf("I-LVs from DNS: bad owner name %q", name)
	}
	owner := dns.CanonicalName(name)
	type ranked struct {
		pref uint16
		ttl  uint32
	}
	nids := map[NID]ranked{}
	locs := map[L64]ranked{}
	merge := func(r ranked, old ranked, had bool) ranked {
		if had {
			r.pref, r.ttl = min(r.pref, old.pref), min(r.ttl, old.ttl)
		}
		return r
	}
	for _, rr := range rrs {
		if rr == nil {
			continue
		}
		h := rr.Header()
		if h.Class != dns.ClassINET || dns.CanonicalName(h.Name) != owner {
			continue
		}
		switch rr := rr.(type) {
		case *dns.NID:
			k := NID(rr.NodeID)
			old, had := nids[k]
			nids[k] = merge(ranked{rr.Preference, h.Ttl}, old, had)
		case *dns.L64:
			k := L64(rr.Locator64)
			old, had := locs[k]
			locs[k] = merge(ranked{rr.Preference, h.Ttl}, old, had)
		case *dns.L32:
			k, ok := l32Locator(rr.Locator32)
			if !ok {
				continue
			}
			old, had := locs[k]
			locs[k] = merge(ranked{rr.Preference, h.Ttl}, old, had)
		}
	}
	switch {
	case len(nids) == 0 && len(locs) == 0:
		return nil, fmt.Errorf("I-LVs from DNS: no NID and no L64 or L32 record for %s", owner)
	case len(nids) == 0:
		return nil, fmt.Errorf("I-LVs from DNS: no NID record for %s", owner)
	case len(locs) == 0:
		return nil, fmt.Errorf("I-LVs from DNS: no L64 or L32 record for %s", owner)
	}
	out := make([]RankedILV, 0, len(nids)*len(locs))
	for l, lr := range locs {
		for n, nr := range nids {
			out = append(out, RankedILV{
				ILV:           ILV{Locator: l, NID: n},
				Preference:    lr.pref,
				NIDPreference: nr.pref,
				TTL:           min(lr.ttl, nr.ttl),
			})
		}
	}
	slices.SortFunc(out, compareRanked)
	return out, nil
}

// compareRanked: preference, NID preference, then IPv6 before IPv4 locators (an
// application's address should be native IPv6 when it can), then value.
func compareRanked(a, b RankedILV) int {
	return cmp.Or(
		cmp.Compare(a.Preference, b.Preference),
		cmp.Compare(a.NIDPreference, b.NIDPreference),
		cmp.Compare(isIPv4Locator(a.ILV.Locator), isIPv4Locator(b.ILV.Locator)),
		cmp.Compare(a.ILV.Locator, b.ILV.Locator),
		cmp.Compare(a.ILV.NID, b.ILV.NID),
	)
}

// RRsFromILVs returns the NID and L64 records (class IN, owner name, the
// given TTL) that publish ilvs: one NID record per distinct NID and one L64
// record per distinct locator, NIDs first, each ordered as ILVsFromRRs
// orders; an IPv4 locator on DefaultIPv4Port becomes an L32 record (last). A value given with several preferences keeps the lowest. For I-LVs
// that form a full NID x L64 cross product, ILVsFromRRs of the result gives
// them back.
func RRsFromILVs(name string, ttl uint32, ilvs []RankedILV) ([]dns.RR, error) {
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		return nil, fmt.Errorf("DNS records from I-LVs: bad owner name %q", name)
	}
	if len(ilvs) == 0 {
		return nil, errors.New("DNS records from I-LVs: no I-LVs")
	}
	nids := map[NID]uint16{}
	locs := map[L64]uint16{}
	for _, v := range ilvs {
		if p, ok := nids[v.ILV.NID]; !ok || v.NIDPreference < p {
			nids[v.ILV.NID] = v.NIDPreference
		}
		if p, ok := locs[v.ILV.Locator]; !ok || v.Preference < p {
			locs[v.ILV.Locator] = v.Preference
		}
	}
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: dns.Fqdn(name), Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	var nidRRs, locRRs []dns.RR
	for n, p := range nids {
		nidRRs = append(nidRRs, &dns.NID{Hdr: hdr(dns.TypeNID), Preference: p, NodeID: uint64(n)})
	}
	var l32RRs []dns.RR
	for l, p := range locs {
		if a, ok := l32Address(l); ok {
			l32RRs = append(l32RRs, &dns.L32{Hdr: hdr(dns.TypeL32), Preference: p, Locator32: a.AsSlice()})
			continue
		}
		locRRs = append(locRRs, &dns.L64{Hdr: hdr(dns.TypeL64), Preference: p, Locator64: uint64(l)})
	}
	slices.SortFunc(nidRRs, func(a, b dns.RR) int {
		x, y := a.(*dns.NID), b.(*dns.NID)
		return cmp.Or(cmp.Compare(x.Preference, y.Preference), cmp.Compare(x.NodeID, y.NodeID))
	})
	slices.SortFunc(locRRs, func(a, b dns.RR) int {
		x, y := a.(*dns.L64), b.(*dns.L64)
		return cmp.Or(cmp.Compare(x.Preference, y.Preference), cmp.Compare(x.Locator64, y.Locator64))
	})
	slices.SortFunc(l32RRs, func(a, b dns.RR) int {
		x, y := a.(*dns.L32), b.(*dns.L32)
		return cmp.Or(cmp.Compare(x.Preference, y.Preference), slices.Compare(x.Locator32.To4(), y.Locator32.To4()))
	})
	return append(append(nidRRs, locRRs...), l32RRs...), nil
}

// isIPv4Locator is 1 for a locator in 0000::/16 (an IPv4 endpoint, internal/encap), else 0.
func isIPv4Locator(l L64) int {
	if l>>48 == 0 {
		return 1
	}
	return 0
}

// l32Locator is the locator of an L32 record's address (DefaultIPv4Port); ok is false for
// an address that is not IPv4 or is zero.
func l32Locator(ip net.IP) (L64, bool) {
	a, ok := netip.AddrFromSlice(ip.To4())
	if !ok || !a.Is4() || a.IsUnspecified() {
		return 0, false
	}
	b := a.As4()
	return L64(uint64(DefaultIPv4Port)<<32 | uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])), true
}

// l32Address is the IPv4 address an L32 record publishes for l: only an IPv4 locator on
// DefaultIPv4Port has one (the record has no port).
func l32Address(l L64) (netip.Addr, bool) {
	if l>>32 != DefaultIPv4Port || uint32(l) == 0 {
		return netip.Addr{}, false
	}
	v := uint32(l)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// LocatorPointer is an LP record's content (RFC 6742 s.2.4): the name whose
// L64 (or L32) records give this node's locators, e.g. a site's border
// router for a mobile network.
type LocatorPointer struct {
	Target     string // fully qualified, canonical (lower case)
	Preference uint16 // lower is more preferred
}

// LocatorPointers returns the LP records owned by name (class IN), most
// preferred first (ties by target), without duplicates.
func LocatorPointers(name string, rrs []dns.RR) []LocatorPointer {
	owner := dns.CanonicalName(name)
	var out []LocatorPointer
	for _, rr := range rrs {
		lp, ok := rr.(*dns.LP)
		if !ok || lp.Hdr.Class != dns.ClassINET || dns.CanonicalName(lp.Hdr.Name) != owner {
			continue
		}
		out = append(out, LocatorPointer{Target: dns.CanonicalName(lp.Fqdn), Preference: lp.Preference})
	}
	slices.SortFunc(out, func(a, b LocatorPointer) int {
		return cmp.Or(cmp.Compare(a.Preference, b.Preference), cmp.Compare(a.Target, b.Target))
	})
	return slices.Compact(out)
}

// L32Locator is an L32 record's content (RFC 6742 s.2.2): an ILNPv4 locator.
// ILNPv6 does not use it; it is parsed so ILNPv4 peers can be recognised.
type L32Locator struct {
	Locator    netip.Addr // IPv4
	Preference uint16     // lower is more preferred
}

// L32Locators returns the valid L32 records owned by name (class IN), most
// preferred first (ties by address), without duplicates.
func L32Locators(name string, rrs []dns.RR) []L32Locator {
	owner := dns.CanonicalName(name)
	var out []L32Locator
	for _, rr := range rrs {
		l, ok := rr.(*dns.L32)
		if !ok || l.Hdr.Class != dns.ClassINET || dns.CanonicalName(l.Hdr.Name) != owner {
			continue
		}
		a, ok := netip.AddrFromSlice(l.Locator32.To4())
		if !ok {
			continue
		}
		out = append(out, L32Locator{Locator: a, Preference: l.Preference})
	}
	slices.SortFunc(out, func(a, b L32Locator) int {
		return cmp.Or(cmp.Compare(a.Preference, b.Preference), a.Locator.Compare(b.Locator))
	})
	return slices.Compact(out)
}
