package node

import (
	"ilnp/internal/datapath"
	"ilnp/internal/wire"
)

// recoverPerPass bounds the sessions recoverSessions records in one pass (every
// touchInterval): each is a datapath read, an ILCC entry and a route, and a pass must not
// stall the loop for long.
const recoverPerPass = 5000

// recoverSessions records in the ILCC the datapath's sessions it lacks: those whose session
// event the datapath could not report (its ring was full, dp_events_lost). Nothing else would
// ever tell the daemon of them: a correspondent's later packets find the session in place. A CN
// opening 100,000 sessions at 5,000 a second missed 8,585 that way, for good, and their LUs
// went unanswered (issue 28). sessions is the datapath's table, read once by touchSessions.
func (n *Node) recoverSessions(sessions []datapath.Session) {
	for _, s := range sessionsToRecover(sessions, n.cache.Has, recoverPerPass) {
		n.count("sessions_recovered")
		n.openSession(s.LocalNID, s.RemoteNID, 0, "session whose event was lost", s.Flags&datapath.SessionResponder == 0)
	}
}

// sessionsToRecover picks, up to limit, the sessions (not embryos) whose correspondent the ILCC
// does not know.
func sessionsToRecover(sessions []datapath.Session, known func(wire.NID) bool, limit int) []datapath.Session {
	var out []datapath.Session
	for _, s := range sessions {
		if len(out) == limit {
			break
		}
		if s.Flags&datapath.SessionEmbryonic != 0 || known(s.RemoteNID) {
			continue
		}
		out = append(out, s)
	}
	return out
}
