package node

import (
	"fmt"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/ratelog"
	"ilnp/internal/timeline"
)

// Security events (forged or unverifiable messages) are all counted (ilnpctl show stats) but
// logged at a bounded rate: secLogBurst lines per kind per secLogInterval, and one summary line
// per kind for the rest, so a nonce-guessing flood cannot fill the log or hide what came first.
const (
	secLogInterval = 10 * time.Second
	secLogBurst    = 5
)

// Drops that are no attack (packets still arriving on a locator a hard handoff aged) go on the
// timeline with the datapath's kernel stamp, so the lab can count losses inside the host; a
// hard handoff drops hundreds, so their budget is larger, and still bounded.
const dropEventBurst = 2000

func newDropLog() *ratelog.Limiter {
	l, err := ratelog.New(secLogInterval, dropEventBurst)
	if err != nil {
		panic(err) // constants
	}
	return l
}

// datapathDrop records one packet the datapath dropped on an unusable local locator: counted
// always (stats), on the timeline within the budget.
func (n *Node) datapathDrop(ev datapath.Event) {
	kind := "drop_" + ev.Type.String()
	n.count(kind)
	if !n.drops.Allow(kind, time.Now()) {
		return
	}
	n.emit(timeline.Event{MonoNS: int64(ev.Ns), Kind: timeline.DatapathDrop, Peer: ev.RemoteNID.String(),
		Detail: fmt.Sprintf("%s from %s to %s", ev.Type, ev.Src, ev.Dst)})
}

func newSecurityLog() *ratelog.Limiter {
	l, err := ratelog.New(secLogInterval, secLogBurst)
	if err != nil {
		panic(err) // constants
	}
	return l
}

// securityEvent counts one event of kind (a stats counter of that name) and logs it unless
// the kind's log budget is spent; it reports whether it logged, so that callers put only
// logged events on the timeline too (the events file must not grow with a flood either).
func (n *Node) securityEvent(kind, msg string, args ...any) bool {
	n.count(kind)
	if !n.seclog.Allow(kind, time.Now()) {
		return false
	}
	n.log.Warn("security: "+msg, append([]any{"event", kind}, args...)...)
	return true
}

// securitySummary logs one line per kind of security event that was counted but not logged
// since the last summary.
func (n *Node) securitySummary() {
	for _, s := range n.seclog.Summary() {
		n.log.Warn("security: events not logged individually", "event", s.Kind, "suppressed", s.Count,
			"total", s.Total, "limit", secLogBurst, "per", secLogInterval)
	}
}
