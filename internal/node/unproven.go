package node

import (
	"time"

	"ilnp/internal/datapath"
)

// unprovenPackets: a responder session whose correspondent sent no more than this (only the
// packet that opened it) is what a spoofed packet that drew an answer from an application (a
// ping) leaves in the session table.
// The datapath promotes it on that answer; nothing shows the correspondent is really at its
// locator, so it gets the short session-unproven-timeout instead of session-idle-timeout.
// Together with new-sessions-per-second that bounds the table: rate x (timeout + touchInterval)
// sessions at most (1000/s x 15 s = 15,000 of 65,536 by default).
const unprovenPackets = 1

// countUnproven tells the datapath how many sessions of its table (sessions, the whole of it)
// an Echo Reply promoted (its bounded unproven pool).
func (n *Node) countUnproven(sessions []datapath.Session) {
	pool := uint64(0)
	for _, s := range sessions {
		if s.Flags&datapath.SessionUnproven != 0 {
			pool++
		}
	}
	if err := n.dp.SetUnprovenCount(pool); err != nil {
		n.log.Debug("unproven pool", "err", err)
	}
}

// expireUnproven closes responder sessions that stayed unproven longer than the configured
// timeout (sessions: a step of the sweep over the datapath's session table). Such a session
// stays unproven however many pings its correspondent sends: the kernel answers anyone.
func (n *Node) expireUnproven(sessions []datapath.Session, now time.Time) {
	timeout := n.cfg.SessionUnprovenTimeout
	if timeout <= 0 {
		return
	}
	mono := datapath.MonotonicNs()
	for _, s := range sessions {
		if s.Flags&datapath.SessionResponder == 0 || (s.RxPackets > unprovenPackets && s.Flags&datapath.SessionUnproven == 0) {
			continue
		}
		last := max(s.LastTxNs, s.LastRxNs, s.CreatedNs)
		if mono < last || time.Duration(mono-last) < timeout {
			continue
		}
		logged := n.securityEvent("sessions_unproven_expired", "unproven session closed", "peer", s.RemoteNID,
			"rx_packets", s.RxPackets)
		eff := n.cache.CloseSession(s.RemoteNID, "unproven: the correspondent sent nothing after its first packet")
		if !logged {
			eff.Events = nil // a flood's worth of expiries is summarised, not put on the timeline
		}
		if len(eff.Removed) == 0 {
			// Not in the ILCC (promoted while the daemon was away): the datapath entry only.
			if err := n.dp.DeleteSession(s.LocalNID, s.RemoteNID); err != nil {
				n.log.Debug("delete unproven session", "peer", s.RemoteNID, "err", err)
			}
			continue
		}
		n.apply(eff, now)
	}
}
