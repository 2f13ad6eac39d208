package node

import (
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/ilcc"
	"ilnp/internal/wire"
)

// The datapath tells the loop about the sessions it opens and the nonces it learns through its
// event ring. Security events are rate-limited before they enter it (bpf/lib/observe.h), but a
// ring can still fill (a burst of new sessions while the loop is busy); the datapath then
// counts the event as lost (events_lost), and a session whose event was lost would live in
// the datapath with no ILCC entry, no route and no Locator Updates: orphaned. So when the
// counter moves, the loop compares its view with the maps, as a restarted daemon does
// (adopt.go), and takes over what it missed.

// reconcilePerPass bounds the sessions one pass adopts (every touchInterval): each is an ILCC
// entry and a route, and a pass must not stall the loop. A CN opening 100,000 sessions at
// 5,000 a second lost 8,585 session events (issue 28): they are adopted over two passes.
const reconcilePerPass = 5000

// checkEventsLost (with the datapath's events_lost counter) starts reconciling (in the sweep over the session table that begins now,
// and the next ones while one stops at reconcilePerPass) if the datapath lost events since the
// last time.
func (n *Node) checkEventsLost(lost uint64) {
	if lost != n.eventsLost {
		n.log.Warn("datapath events lost: reconciling the sessions with the datapath's maps", "lost", lost-n.eventsLost)
		n.eventsLost = lost
		n.count("events_reconciliations")
		n.reconcilePending = true
	}
}

// reconcile adopts the sessions of the datapath's table (or a step's part of it) that the ILCC
// does not hold (their creation event was lost), at most limit of them, and teaches the ILCC a
// remote nonce the datapath learned (its nonce-learned event was lost). It reports how many it
// adopted and whether it stopped at the limit.
func (n *Node) reconcile(sessions []datapath.Session, now time.Time, limit int) (adopted int, more bool) {
	adopt, nonces, more := toReconcile(sessions, n.cache.Binding, limit)
	for _, s := range adopt {
		n.openSession(s.LocalNID, s.RemoteNID, int64(s.CreatedNs), "adopted: its event was lost",
			s.Flags&datapath.SessionInitiator != 0)
		n.count("sessions_reconciled")
	}
	for _, s := range nonces {
		eff, err := n.cache.LearnRemoteNonce(s.RemoteNID, s.RemoteNonce, now)
		if err != nil {
			n.log.Warn("nonce not learned", "peer", s.RemoteNID, "err", err)
			continue
		}
		n.apply(eff, now)
		n.count("nonces_reconciled")
	}
	return len(adopt), more
}

// toReconcile picks, from the datapath's sessions, those the ILCC lacks (at most limit; more
// says some were left for the next pass) and those whose remote nonce the datapath learned and
// the ILCC did not. Embryos are not sessions: only those this host spoke in count.
func toReconcile(sessions []datapath.Session, binding func(wire.NID) (ilcc.Binding, bool), limit int) (adopt, nonces []datapath.Session, more bool) {
	for _, s := range sessions {
		if s.Flags&datapath.SessionEmbryonic != 0 {
			continue
		}
		b, known := binding(s.RemoteNID)
		switch {
		case !known && len(adopt) == limit:
			more = true
		case !known:
			adopt = append(adopt, s)
		case b.RemoteNonce.IsZero() && !s.RemoteNonce.IsZero():
			nonces = append(nonces, s)
		}
	}
	return adopt, nonces, more
}
