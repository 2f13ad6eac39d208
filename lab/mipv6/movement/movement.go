// Package movement is the mobile node's movement detection for the lab's Mobile IPv6
// baseline (RFC 6275 s.11.5), as a pure decision over what router advertisements and link
// events have shown: at home when a link that is up advertises the home prefix (s.11.5.5),
// otherwise away with a care-of address formed on an advertised foreign prefix (s.11.5.1,
// s.11.5.3), keeping the current care-of address while its link and prefix stay valid.
package movement

import (
	"fmt"
	"net/netip"
	"sort"
	"time"
)

// Location is where the mobile node is.
type Location uint8

const (
	// Detached: no link that is up advertises a usable prefix.
	Detached Location = iota
	// AtHome: a link that is up advertises the home prefix.
	AtHome
	// Away: the node uses a care-of address on a foreign prefix.
	Away
)

func (l Location) String() string {
	names := [...]string{"detached", "home", "away"}
	if int(l) < len(names) {
		return names[l]
	}
	return fmt.Sprintf("location(%d)", uint8(l))
}

// Prefix is an on-link prefix learnt from a router advertisement.
type Prefix struct {
	Prefix     netip.Prefix
	ValidUntil time.Time
}

// Link is what is known about one interface.
type Link struct {
	Name     string
	Up       bool
	Prefixes []Prefix
}

// Config is the mobile node's home.
type Config struct {
	HomePrefix netip.Prefix
	// InterfaceID is the low 64 bits of the addresses the node forms (its home address's, so
	// the care-of address keeps the same identifier, as SLAAC would give it).
	InterfaceID uint64
}

// Decision is the outcome.
type Decision struct {
	Location Location
	Link     string
	Prefix   netip.Prefix
	// Address is the home address (AtHome) or the care-of address (Away).
	Address netip.Addr
	Reason  string
}

// Decide chooses where the node is now from links, preferring to keep prev.
func Decide(cfg Config, prev Decision, links []Link, now time.Time) Decision {
	sorted := append([]Link(nil), links...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	valid := func(l Link, want func(netip.Prefix) bool) (netip.Prefix, bool) {
		if !l.Up {
			return netip.Prefix{}, false
		}
		var out []netip.Prefix
		for _, p := range l.Prefixes {
			if now.Before(p.ValidUntil) && want(p.Prefix) {
				out = append(out, p.Prefix)
			}
		}
		if len(out) == 0 {
			return netip.Prefix{}, false
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Addr().Less(out[j].Addr()) })
		return out[0], true
	}
	isHome := func(p netip.Prefix) bool { return p == cfg.HomePrefix }
	// s.11.5.5: an advertisement of the home prefix on an up link means home. Prefer the link
	// already in use.
	for _, pass := range []bool{true, false} {
		for _, l := range sorted {
			if pass && l.Name != prev.Link {
				continue
			}
			if p, ok := valid(l, isHome); ok {
				return Decision{Location: AtHome, Link: l.Name, Prefix: p, Address: form(p, cfg.InterfaceID),
					Reason: fmt.Sprintf("home prefix %v advertised on %s", p, l.Name)}
			}
		}
	}
	foreign := func(p netip.Prefix) bool {
		return p.Bits() == 64 && p.Addr().Is6() && !p.Addr().IsLinkLocalUnicast() && !p.Addr().IsMulticast() && p != cfg.HomePrefix
	}
	// s.11.5.1: keep the care-of address while its link is up and its prefix valid.
	if prev.Location == Away {
		for _, l := range sorted {
			if l.Name != prev.Link || !l.Up {
				continue
			}
			for _, p := range l.Prefixes {
				if p.Prefix == prev.Prefix && now.Before(p.ValidUntil) {
					return prev
				}
			}
		}
	}
	for _, l := range sorted {
		if p, ok := valid(l, foreign); ok {
			reason := fmt.Sprintf("foreign prefix %v on %s", p, l.Name)
			if prev.Location == AtHome {
				reason = "home link lost; " + reason
			}
			return Decision{Location: Away, Link: l.Name, Prefix: p, Address: form(p, cfg.InterfaceID), Reason: reason}
		}
	}
	return Decision{Location: Detached, Reason: "no link advertises a usable prefix"}
}

// form puts the interface identifier in the prefix's low 64 bits.
func form(p netip.Prefix, iid uint64) netip.Addr {
	a := p.Masked().Addr().As16()
	for i := 0; i < 8; i++ {
		a[15-i] = byte(iid >> (8 * i))
	}
	return netip.AddrFrom16(a)
}

// Detector keeps the link view from events and reports decisions that change.
type Detector struct {
	cfg   Config
	links map[string]*Link
	last  Decision
}

// NewDetector starts detached with no links known.
func NewDetector(cfg Config) (*Detector, error) {
	if !cfg.HomePrefix.IsValid() || !cfg.HomePrefix.Addr().Is6() || cfg.HomePrefix.Bits() != 64 {
		return nil, fmt.Errorf("movement: home prefix %v must be an IPv6 /64", cfg.HomePrefix)
	}
	return &Detector{cfg: cfg, links: map[string]*Link{}}, nil
}

// Event is an input: LinkState or Advertisement (or Tick for prefix expiry).
type Event interface{ isEvent() }

// LinkState reports an interface going up or down.
type LinkState struct {
	Link string
	Up   bool
}

// PrefixInfo is one Prefix Information option of a router advertisement.
type PrefixInfo struct {
	Prefix        netip.Prefix
	ValidLifetime time.Duration
}

// Advertisement is a router advertisement received on Link.
type Advertisement struct {
	Link     string
	Prefixes []PrefixInfo
}

// Tick re-evaluates prefix lifetimes.
type Tick struct{}

func (LinkState) isEvent()     {}
func (Advertisement) isEvent() {}
func (Tick) isEvent()          {}

// Event applies ev and returns the current decision and whether it changed.
func (d *Detector) Event(ev Event, now time.Time) (Decision, bool) {
	switch e := ev.(type) {
	case LinkState:
		l := d.link(e.Link)
		l.Up = e.Up
		if !e.Up {
			l.Prefixes = nil // a link that went down must be re-learnt from fresh RAs
		}
	case Advertisement:
		l := d.link(e.Link)
		l.Up = true
	next:
		for _, pi := range e.Prefixes {
			p := Prefix{Prefix: pi.Prefix.Masked(), ValidUntil: now.Add(pi.ValidLifetime)}
			for i := range l.Prefixes {
				if l.Prefixes[i].Prefix == p.Prefix {
					l.Prefixes[i] = p // lifetime 0 expires it at once
					continue next
				}
			}
			l.Prefixes = append(l.Prefixes, p)
		}
	}
	var links []Link
	for _, l := range d.links {
		links = append(links, *l)
	}
	dec := Decide(d.cfg, d.last, links, now)
	changed := dec.Location != d.last.Location || dec.Address != d.last.Address
	d.last = dec
	return dec, changed
}

func (d *Detector) link(name string) *Link {
	l, ok := d.links[name]
	if !ok {
		l = &Link{Name: name}
		d.links[name] = l
	}
	return l
}

// NextExpiry is when a prefix on an up link expires next (the caller's Tick timer); zero when
// none will.
func (d *Detector) NextExpiry(now time.Time) time.Time {
	var next time.Time
	for _, l := range d.links {
		if !l.Up {
			continue
		}
		for _, p := range l.Prefixes {
			if p.ValidUntil.After(now) && (next.IsZero() || p.ValidUntil.Before(next)) {
				next = p.ValidUntil
			}
		}
	}
	return next
}
