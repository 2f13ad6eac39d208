package node

import (
	"time"

	"ilnp/internal/datapath"
)

// The datapath tells the loop about the sessions it opens and the nonces it learns through its
// event ring. Security events are rate-limited before they enter it (bpf/lib/observe.h), but a
// ring can still fill (a burst of new sessions while the loop is busy); the datapath then
// counts the event as lost (events_lost), and a session whose event was lost would live in
// the datapath with no ILCC entry, no route and no Locator Updates: orphaned. So when the
// counter moves, the loop compares its view with the maps, as a restarted daemon does
// (adopt.go), and takes over what it missed.

// reconcileLost reconciles with sessions (the datapath's session table, read once by
// touchSessions) if the datapath lost events since the last time.
func (n *Node) reconcileLost(sessions []datapath.Session, now time.Time) {
	lost, err := n.dp.EventsLost()
	if err != nil || lost == n.eventsLost {
		return
	}
	n.log.Warn("datapath events lost: reconciling the sessions with the datapath's maps", "lost", lost-n.eventsLost)
	n.eventsLost = lost
	n.count("events_reconciliations")
	n.reconcile(sessions, now)
}

// reconcile adopts every session of the datapath's table that the ILCC does not hold (its
// creation event was lost) and teaches the ILCC a remote nonce the datapath learned (its
// nonce-learned event was lost). Embryos are not in the table: only sessions this host spoke
// in are adopted.
func (n *Node) reconcile(sessions []datapath.Session, now time.Time) {
	for _, s := range sessions {
		if s.Flags&datapath.SessionEmbryonic != 0 {
			continue
		}
		b, known := n.cache.Binding(s.RemoteNID)
		switch {
		case !known:
			n.openSession(s.LocalNID, s.RemoteNID, int64(s.CreatedNs), "adopted: its event was lost",
				s.Flags&datapath.SessionInitiator != 0)
			n.count("sessions_reconciled")
		case b.RemoteNonce.IsZero() && !s.RemoteNonce.IsZero():
			eff, err := n.cache.LearnRemoteNonce(s.RemoteNID, s.RemoteNonce, now)
			if err != nil {
				n.log.Warn("nonce not learned", "peer", s.RemoteNID, "err", err)
				continue
			}
			n.apply(eff, now)
			n.count("nonces_reconciled")
		}
	}
}
