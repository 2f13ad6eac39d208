package node

import (
	"context"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/sweep"
)

// Every touchInterval the loop walks the datapath's session table: traffic times into the ILCC
// (busy sessions never idle out), sessions whose events the ring lost (reconcile.go), unproven
// sessions (unproven.go), locator verification's probes. The table is read off the loop, in
// batches (readSessions), and the loop walks it sweepStepSize sessions per turn: between two
// steps whatever else waits runs, so a mass move's Locator Updates are not held up by a pass
// over 100,000 sessions (issue 28).

// sweepStepSize is how many sessions one step of the sweep handles: a few milliseconds of the
// loop.
const sweepStepSize = 2000

// sessionSweep is the loop's state of the walk (loop-owned).
type sessionSweep struct {
	sweep *sweep.Pass[datapath.Session]
	// since is lastTouch when the walk began (a session busy since then is touched), newest
	// the latest traffic time seen in it.
	since, newest uint64
	// reconcileLeft is how many sessions the walk may still adopt (reconcilePerPass), more
	// whether it passed some over for that bound.
	reconcileLeft int
	reconcileMore bool
}

// sweepReadyCh is always ready: sweepReady hands it out while a walk is under way.
var sweepReadyCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// sweepReady is ready while a walk has sessions left (nil, never ready, otherwise).
func (n *Node) sweepReady() <-chan struct{} {
	if n.sweep.Done() {
		return nil
	}
	return sweepReadyCh
}

// tableRead is the datapath's session table and its events_lost counter, read before it: an
// event lost after that read shows in the next one.
type tableRead struct {
	sessions []datapath.Session
	lost     uint64
	lostErr  error
}

// readSessions reads the datapath's session table and hands it to the loop (no sessions on an
// error: the next touch tries again).
func (n *Node) readSessions(ctx context.Context, out chan<- tableRead) {
	var r tableRead
	r.lost, r.lostErr = n.dp.EventsLost()
	var err error
	if r.sessions, err = n.dp.Sessions(); err != nil {
		n.log.Debug("session table", "err", err)
		r.sessions = nil
	}
	select {
	case out <- r:
	case <-ctx.Done():
	}
}

// startSweep begins a walk over the datapath's whole table.
func (n *Node) startSweep(r tableRead) {
	sessions := r.sessions
	n.countUnproven(sessions)
	if r.lostErr == nil {
		n.checkEventsLost(r.lost)
	}
	n.sessionSweep = sessionSweep{sweep: sweep.New(sessions), since: n.lastTouch, newest: n.lastTouch,
		reconcileLeft: reconcilePerPass}
	if n.sweep.Done() {
		n.endSweep()
	}
}

// sweepStep handles the walk's next sessions.
func (n *Node) sweepStep() {
	step := n.sweep.Step(sweepStepSize)
	now := time.Now()
	for _, s := range step {
		if last := max(s.LastTxNs, s.LastRxNs); last > n.since {
			n.cache.Touch(s.RemoteNID, now)
			n.newest = max(n.newest, last)
		}
	}
	if n.reconcilePending {
		adopted, more := n.reconcile(step, now, n.reconcileLeft)
		n.reconcileLeft -= adopted
		n.reconcileMore = n.reconcileMore || more
	}
	n.expireUnproven(step, now)
	n.lvProbe(step)
	if n.sweep.Done() {
		n.endSweep()
	}
}

// endSweep closes a walk: the traffic times seen count as read, and reconciliation goes on in
// the next walk only if this one stopped at its bound.
func (n *Node) endSweep() {
	n.lastTouch = n.newest
	if n.reconcilePending {
		n.reconcilePending = n.reconcileMore
	}
	n.sessionSweep = sessionSweep{}
}
