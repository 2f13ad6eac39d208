package ilcc

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"ilnp/internal/wire"
)

// Candidate is a local locator as a handoff policy sees it.
type Candidate struct {
	Locator    wire.L64
	IfIndex    int
	Preference uint16
	// Learned is when the locator appeared (kept across refreshes; reset by a flap).
	Learned time.Time
	// Deprecated: its preferred lifetime has run out (RFC 4862 s.5.5.4).
	Deprecated bool
	// Current: it is the active locator now.
	Current bool
	// Quality is what the path liveness measured through the locator (SetLocalQuality);
	// Measured is false until then.
	Quality Quality
}

// Policy is the handoff decision: it ranks the local locators, best first. The first becomes
// Active; in soft mode the rest are Valid and advertised in this order (their LU preference
// is the rank), in hard mode they are Aged. Policies must be deterministic; the cache repairs
// a result that is not a permutation of its input.
type Policy interface {
	Name() string
	Order(cands []Candidate) []Candidate
}

// Newest is the thesis's policy (s.3.2.7): a newly learned locator means the node has moved
// into a new network, so use the newest locator. Deprecated locators rank last.
type Newest struct{}

func (Newest) Name() string { return "newest" }

func (Newest) Order(cands []Candidate) []Candidate {
	out := slices.Clone(cands)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Deprecated != b.Deprecated {
			return !a.Deprecated
		}
		if !a.Learned.Equal(b.Learned) {
			return a.Learned.After(b.Learned)
		}
		return locatorLess(a.Locator, b.Locator)
	})
	return out
}

// ByPreference uses the locator with the lowest configured Preference (e.g. wired before
// wireless), newest first among equals, so a node can stay on a better network while a worse
// one appears and disappears. Deprecated locators rank last.
type ByPreference struct{}

func (ByPreference) Name() string { return "preference" }

func (ByPreference) Order(cands []Candidate) []Candidate {
	out := slices.Clone(cands)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Deprecated != b.Deprecated {
			return !a.Deprecated
		}
		if a.Preference != b.Preference {
			return a.Preference < b.Preference
		}
		if !a.Learned.Equal(b.Learned) {
			return a.Learned.After(b.Learned)
		}
		return locatorLess(a.Locator, b.Locator)
	})
	return out
}

var policies = map[string]Policy{"newest": Newest{}, "preference": ByPreference{}, "quality": ByQuality{}, "multipath": Multipath{}}

// PolicyNames lists the built-in policies.
func PolicyNames() []string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// PolicyByName returns a built-in policy.
func PolicyByName(name string) (Policy, error) {
	if p, ok := policies[strings.ToLower(strings.TrimSpace(name))]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("handoff policy %q: want one of %s", name, strings.Join(PolicyNames(), ", "))
}

// rank applies p and repairs its result: unknown or repeated locators are dropped and
// candidates it left out are appended in their input order. A panicking policy is a
// programming error and is not recovered.
func rank(p Policy, cands []Candidate) []Candidate {
	ordered := p.Order(slices.Clone(cands))
	known := make(map[wire.L64]Candidate, len(cands))
	for _, c := range cands {
		known[c.Locator] = c
	}
	out := make([]Candidate, 0, len(cands))
	for _, c := range ordered {
		if orig, ok := known[c.Locator]; ok {
			out = append(out, orig)
			delete(known, c.Locator)
		}
	}
	for _, c := range cands {
		if _, ok := known[c.Locator]; ok {
			out = append(out, c)
		}
	}
	return out
}
