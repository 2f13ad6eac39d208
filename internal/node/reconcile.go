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
// (adopt.go), and takes over what it missed: in the walk over the table that begins then
// (sweep.go), and in walks that follow it at once while one still adopts sessions or more
// events were lost during it. Then the walks go back to touchInterval's pace.
//
// Opening a million sessions at 20,000 a second lost 855,375 events with a ring of 256 KiB
// (issue 28): the daemon adopted 5,000 per 5-s walk, and the datapath aged some out meanwhile.

// reconcilePerTurn bounds the sessions one turn of the loop adopts (the rest of the walk's
// step waits for the next turn): each is an ILCC entry, a route (a netlink request) and a
// timeline event, some 100 us in the lab (200,000 sessions opened at 20,000 a second were
// recorded in ~23 s, events and adoptions alike), and a turn must not hold a Locator Update
// for more than a few milliseconds.
const reconcilePerTurn = 50

// checkEventsLost (with the datapath's events_lost counter) makes the walk under way adopt the
// sessions the ILCC lacks if the datapath lost events since the loop last looked.
func (n *Node) checkEventsLost(lost uint64) {
	if lost != n.eventsLost {
		n.log.Warn("datapath events lost: reconciling the sessions with the datapath's maps", "lost", lost-n.eventsLost)
		n.eventsLost = lost
		n.count("events_reconciliations")
		n.reconcilePending = true
	}
}

// reconcileAgain decides, at the end of a walk that adopted adopted sessions and with the
// events_lost counter read after it (lostOK: read), whether the next walk reconciles and
// begins at once.
func (n *Node) reconcileAgain(lost uint64, lostOK bool, adopted int) bool {
	moved := lostOK && lost != n.eventsLost
	if moved {
		n.checkEventsLost(lost)
	}
	n.reconcilePending = reconcileNext(n.reconcilePending, adopted, moved)
	return n.reconcilePending
}

// reconcileNext: a walk follows at once when events were lost during the last one (a session
// opened behind the walk's cursor may be missing), or when the last one reconciled and found
// sessions missing (more may have been lost where it had passed); a walk that reconciled and
// found none ends the catching up.
func reconcileNext(reconciling bool, adopted int, lostDuring bool) bool {
	return lostDuring || (reconciling && adopted > 0)
}

// reconcile adopts the sessions of a step of the walk that the ILCC does not hold (their
// creation event was lost), and teaches the ILCC a remote nonce the datapath learned (its
// nonce-learned event was lost). It reports how many it adopted.
func (n *Node) reconcile(sessions []datapath.Session, now time.Time) int {
	adopt, nonces := toReconcile(sessions, n.cache.Binding)
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
	return len(adopt)
}

// missing says whether s is a session the ILCC lacks. Embryos are not sessions: only those
// this host spoke in count.
func missing(s *datapath.Session, binding func(wire.NID) (ilcc.Binding, bool)) bool {
	if s.Flags&datapath.SessionEmbryonic != 0 {
		return false
	}
	_, known := binding(s.RemoteNID)
	return !known
}

// reconcileCut is how many of sessions a turn handles so that it adopts at most limit: up to
// the limit-th the ILCC lacks, or all of them (at least one while limit is positive).
func reconcileCut(sessions []datapath.Session, binding func(wire.NID) (ilcc.Binding, bool), limit int) int {
	found := 0
	for i := range sessions {
		if !missing(&sessions[i], binding) {
			continue
		}
		if found == limit {
			return max(i, 1)
		}
		found++
	}
	return len(sessions)
}

// toReconcile picks, from the datapath's sessions, those the ILCC lacks and those whose
// remote nonce the datapath learned and the ILCC did not.
func toReconcile(sessions []datapath.Session, binding func(wire.NID) (ilcc.Binding, bool)) (adopt, nonces []datapath.Session) {
	for i := range sessions {
		s := &sessions[i]
		if s.Flags&datapath.SessionEmbryonic != 0 {
			continue
		}
		b, known := binding(s.RemoteNID)
		switch {
		case !known:
			adopt = append(adopt, *s)
		case b.RemoteNonce.IsZero() && !s.RemoteNonce.IsZero():
			nonces = append(nonces, *s)
		}
	}
	return adopt, nonces
}
