// Package reresolve decides when a node looks a correspondent up again in the rendezvous (DNS
// NID/L64 records) because its Locator Updates go unanswered, and what the answer changes.
//
// The case it exists for is simultaneous mobility (the "double jump", thesis ch. 3 and 7): in
// hard handoff both ends move within one RTT, each sends its LU to the other's old locator,
// which is already gone, and neither LU can ever arrive. The only place that knows where the
// correspondent went is the rendezvous, which the correspondent updates on its move. So when
// an LU exchange has had After transmissions go unanswered, the node looks the correspondent's
// name up again (bypassing caches), and, if the published locator set differs from the
// session's, replaces the session's remote locators with it and sends the LU there.
//
// After defaults to 1: the first LU timeout is the earliest sign that the correspondent may
// have moved, and waiting for the engine's give-up (all attempts, with exponential back-off)
// would put several seconds between the move and the recovery; one DNS query per unanswered
// LU is cheap. An answer that has not changed yet (the correspondent's DNS update is still in
// flight) is asked again after Interval, doubling up to MaxInterval, at most MaxLookups times
// per exchange, one lookup in flight per correspondent and at most MaxInFlight in all: there
// is no re-resolution storm.
//
// The Planner is pure: no I/O, no goroutines, the caller's clock. It is not safe for
// concurrent use: the daemon drives it from its loop.
package reresolve

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"ilnp/internal/lu"
	"ilnp/internal/wire"
)

// Defaults of Config.
const (
	DefaultAfter       = 1
	DefaultInterval    = 200 * time.Millisecond
	DefaultMaxInterval = 5 * time.Second
	DefaultMaxLookups  = 10
	DefaultMaxInFlight = 16
)

// Config bounds re-resolution. Zero fields take the defaults.
type Config struct {
	// After is the number of unanswered transmissions of one LU exchange before the first
	// lookup (1: at the first retransmission).
	After int
	// Interval is the least time between two lookups of one correspondent, and the wait
	// before asking again after an unchanged answer (doubled each time, up to MaxInterval).
	Interval    time.Duration
	MaxInterval time.Duration
	// MaxLookups is the number of lookups one LU exchange may cause.
	MaxLookups int
	// MaxInFlight is the number of correspondents being looked up at once.
	MaxInFlight int
	// MaxLocators caps the found set (the datapath's remote locator slots; 0: no cap).
	MaxLocators int
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.After = cmp.Or(c.After, DefaultAfter)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.MaxInterval = max(cmp.Or(c.MaxInterval, DefaultMaxInterval), c.Interval)
	c.MaxLookups = cmp.Or(c.MaxLookups, DefaultMaxLookups)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultMaxInFlight)
	return c
}

// ErrBadConfig is returned for a negative bound.
var ErrBadConfig = errors.New("bad re-resolution config")

// Validate rejects negative bounds.
func (c Config) Validate() error {
	if c.After < 0 || c.Interval < 0 || c.MaxInterval < 0 || c.MaxLookups < 0 || c.MaxInFlight < 0 || c.MaxLocators < 0 {
		return fmt.Errorf("%w: %+v", ErrBadConfig, c)
	}
	return nil
}

// Lookup asks the caller to look Peer up under Name now (Nth lookup of this exchange, from 1).
type Lookup struct {
	Peer wire.NID
	Name string
	N    int
}

type peer struct {
	exchange uint64
	msg      lu.Message // the LU to send once the correspondent is found
	gaveUp   bool
	lookups  int
	last     time.Time
	busy     bool
}

// Planner holds the per-correspondent re-resolution state.
type Planner struct {
	cfg      Config
	peers    map[wire.NID]*peer
	inFlight int
	stats    Stats
}

// Stats counts what the planner decided.
type Stats struct {
	Lookups   uint64 // lookups started
	Changed   uint64 // answers that changed a session's remote locators
	Unchanged uint64 // answers equal to the session's set (asked again later, if allowed)
	Failed    uint64 // lookups that failed or had no locator for the correspondent's NID
	Throttled uint64 // lookups not started because of a bound
}

// New returns a planner; zero fields of cfg take their defaults.
func New(cfg Config) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Planner{cfg: cfg.WithDefaults(), peers: map[wire.NID]*peer{}}, nil
}

// Stats returns the counters.
func (p *Planner) Stats() Stats { return p.stats }

// OnAction sees one action of the LU engine. name is the correspondent's name ("" when the
// node never resolved it: nothing to ask). It returns a lookup to start when the action says
// that After transmissions went unanswered (a retransmission, or the give-up) and no bound
// forbids it; a redirected transmission (lu.Engine.Redirect: the correspondent's new locator
// is known) asks nothing.
func (p *Planner) OnAction(a lu.Action, name string, now time.Time) (Lookup, bool) {
	st := p.peers[a.Message.Peer]
	if st == nil {
		p.prune()
		st = &peer{}
		p.peers[a.Message.Peer] = st
	}
	if st.exchange != a.Exchange {
		// A new exchange (a newer LU, or the engine's repair): its own budget.
		st.exchange, st.lookups, st.gaveUp = a.Exchange, 0, false
	}
	st.msg = a.Message
	unanswered := a.Attempt - 1 // a Transmit's earlier attempts all timed out
	if a.Kind == lu.GiveUp {
		st.gaveUp = true
		unanswered = a.Attempt
	}
	if a.Redirected {
		// Sent because the correspondent's new locator just became known (its own LU or an
		// earlier answer): no sign it is lost, nothing to ask.
		unanswered = 0
	}
	if name == "" || unanswered < p.cfg.After {
		return Lookup{}, false
	}
	return p.start(a.Message.Peer, st, name, now)
}

func (p *Planner) start(nid wire.NID, st *peer, name string, now time.Time) (Lookup, bool) {
	switch {
	case st.busy:
		return Lookup{}, false // the running lookup will ask again if it must
	case st.lookups >= p.cfg.MaxLookups,
		p.inFlight >= p.cfg.MaxInFlight,
		!st.last.IsZero() && now.Sub(st.last) < p.cfg.Interval:
		p.stats.Throttled++
		return Lookup{}, false
	}
	st.busy, st.last = true, now
	st.lookups++
	p.inFlight++
	p.stats.Lookups++
	return Lookup{Peer: nid, Name: name, N: st.lookups}, true
}

// Outcome is what the caller does with a lookup's answer.
type Outcome struct {
	// Locators replaces the session's remote locators (nil: keep them).
	Locators []wire.LocatorEntry
	// Send is the LU to (re)send now, to the new active locator, when Locators is set.
	Send    lu.Message
	HasSend bool
	// Again: look up again after Retry (the answer did not change yet).
	Again bool
	Retry time.Duration
}

// Done takes a lookup's answer: found is what the rendezvous returned for the name (err
// non-nil when the lookup failed), current is the session's remote locator set, pending says
// whether the LU engine still has an exchange outstanding for the correspondent. The
// correspondent's own records only count: entries of another NID are ignored, so a name that
// now points elsewhere cannot redirect the session.
func (p *Planner) Done(nid wire.NID, found []wire.RankedILV, err error, current []wire.L64, pending bool) Outcome {
	st := p.peers[nid]
	if st == nil || !st.busy {
		return Outcome{}
	}
	st.busy = false
	p.inFlight--
	if !pending && !st.gaveUp {
		return Outcome{} // answered meanwhile: nothing to repair
	}
	locs := Locators(nid, found, p.cfg.MaxLocators)
	if err != nil || len(locs) == 0 {
		p.stats.Failed++
		return p.again(st)
	}
	if SameSet(current, locs) {
		p.stats.Unchanged++
		return p.again(st)
	}
	p.stats.Changed++
	msg := st.msg
	msg.Dest = wire.ILV{Locator: locs[0].Locator, NID: nid}
	// The exchange the found locators answer is over: a later timeout of the new LU gets a
	// fresh budget (a new exchange).
	st.exchange, st.lookups, st.gaveUp = 0, 0, false
	return Outcome{Locators: locs, Send: msg, HasSend: true}
}

// again asks for the next lookup after Interval, doubled for each lookup already made this
// exchange, at most MaxInterval: the first answers come quickly (the correspondent's update is
// usually a few ms behind its move), and the budget still spans the LU engine's whole
// retransmission schedule when the update is slow (defaults: 0.2 s ... 5 s, about 30 s in all).
func (p *Planner) again(st *peer) Outcome {
	if st.lookups >= p.cfg.MaxLookups {
		return Outcome{}
	}
	wait := p.cfg.Interval
	for i := 1; i < st.lookups && wait < p.cfg.MaxInterval; i++ {
		wait *= 2
	}
	return Outcome{Again: true, Retry: min(wait, p.cfg.MaxInterval)}
}

// Retry is Done's Again: it starts the next lookup of nid if the bounds allow it.
func (p *Planner) Retry(nid wire.NID, name string, now time.Time) (Lookup, bool) {
	st := p.peers[nid]
	if st == nil || name == "" {
		return Lookup{}, false
	}
	return p.start(nid, st, name, now)
}

// maxPeers bounds the state kept: correspondents whose sessions ended without Forget are
// dropped when a new one would exceed it (those with a lookup in flight stay). Dropping one
// only resets its budget for its current exchange.
const maxPeers = 4096

func (p *Planner) prune() {
	if len(p.peers) < maxPeers {
		return
	}
	for nid, st := range p.peers {
		if !st.busy {
			delete(p.peers, nid)
		}
	}
}

// Forget drops a correspondent (its session ended). A lookup in flight still ends with Done.
func (p *Planner) Forget(nid wire.NID) {
	if st := p.peers[nid]; st != nil && !st.busy {
		delete(p.peers, nid)
	}
}

// Locators is the correspondent's locator set from a rendezvous answer: its NID's entries,
// each locator once, most preferred first (the answer's order breaks ties), at most limit of
// them (the datapath's remote locator slots; <= 0: no limit).
func Locators(nid wire.NID, found []wire.RankedILV, limit int) []wire.LocatorEntry {
	var out []wire.LocatorEntry
	seen := map[wire.L64]bool{}
	idx := make([]int, 0, len(found))
	for i := range found {
		idx = append(idx, i)
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Compare(found[a].Preference, found[b].Preference)
	})
	for _, i := range idx {
		v := found[i]
		if v.ILV.NID != nid || v.ILV.Locator == 0 || seen[v.ILV.Locator] {
			continue
		}
		seen[v.ILV.Locator] = true
		out = append(out, wire.LocatorEntry{Locator: v.ILV.Locator, Preference: v.Preference})
		if len(out) == limit {
			break
		}
	}
	return out
}

// SameSet reports whether the found entries name exactly the current locators (order and
// preferences aside).
func SameSet(current []wire.L64, found []wire.LocatorEntry) bool {
	a := slices.Clone(current)
	b := make([]wire.L64, 0, len(found))
	for _, e := range found {
		b = append(b, e.Locator)
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
