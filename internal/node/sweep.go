package node

import (
	"context"
	"time"

	"ilnp/internal/datapath"
)

// Every touchInterval the loop walks the datapath's session table: traffic times into the ILCC
// (busy sessions never idle out), sessions whose events the ring lost (reconcile.go), unproven
// sessions (unproven.go), locator verification's probes. The table is read off the loop and
// handed to it sweepStepSize sessions at a time (streamTable), and the loop handles one such
// step per turn: between two steps whatever else waits runs, so a mass move's Locator Updates
// are not held up by a pass over 100,000 sessions, and the walk holds a few steps in memory,
// not the table (a million sessions read whole took ~280 MB; issue 28).

// sweepStepSize is how many sessions one step of the sweep handles: a few milliseconds of the
// loop.
const sweepStepSize = 2000

// walkTable is what the sweep reads (the datapath; a fake one in tests).
type walkTable interface {
	// EventsLost is the datapath's events_lost counter.
	EventsLost() (uint64, error)
	// WalkSessions hands every session to fn until fn returns false.
	WalkSessions(fn func(datapath.Session) bool) error
}

// walkChunk is a step's worth of the table, read off the loop. A walk's first chunk carries
// the events_lost counter read before the walk (no sessions), its last one the counter read
// after it (and the read's error, if it failed).
type walkChunk struct {
	sessions    []datapath.Session
	first, last bool
	lost        uint64
	lostErr     error
	err         error
}

// streamTable reads t in chunks of size sessions onto out, then closes it; it stops early when
// ctx ends. It holds at most the chunk it fills and the one out holds: the loop's pace is the
// walk's.
func streamTable(ctx context.Context, t walkTable, size int, out chan<- walkChunk) {
	defer close(out)
	send := func(c walkChunk) bool {
		select {
		case out <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	lost, lostErr := t.EventsLost()
	if !send(walkChunk{first: true, lost: lost, lostErr: lostErr}) {
		return
	}
	size = max(size, 1)
	buf := make([]datapath.Session, 0, size)
	stopped := false
	err := t.WalkSessions(func(s datapath.Session) bool {
		buf = append(buf, s)
		if len(buf) < size {
			return true
		}
		if !send(walkChunk{sessions: buf}) {
			stopped = true
			return false
		}
		buf = make([]datapath.Session, 0, size)
		return true
	})
	if stopped {
		return
	}
	end := walkChunk{sessions: buf, last: true, err: err}
	end.lost, end.lostErr = t.EventsLost()
	send(end)
}

// sessionSweep is the loop's state of the walk (loop-owned).
type sessionSweep struct {
	// chunks is the walk under way (nil: none); cur the chunk the loop is handling, of which a
	// turn that adopted its share of lost sessions left the rest (reconcile.go).
	chunks <-chan walkChunk
	cur    walkChunk
	// since is lastTouch when the walk began (a session busy since then is touched), newest
	// the latest traffic time seen in it.
	since, newest uint64
	// unproven counts the sessions an Echo Reply promoted (countUnproven).
	unproven uint64
	// walkAdopted is how many sessions this walk adopted (reconcile.go).
	walkAdopted int
}

// sweepReadyCh is always ready: sweepReady hands it out while a chunk has sessions left.
var sweepReadyCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// sweepReady is ready while the chunk under way has sessions left (nil, never ready,
// otherwise).
func (n *Node) sweepReady() <-chan struct{} {
	if len(n.cur.sessions) == 0 {
		return nil
	}
	return sweepReadyCh
}

// sweepChunks is the walk's next chunk, once the loop is done with the last one (nil, never
// ready, otherwise and between walks).
func (n *Node) sweepChunks() <-chan walkChunk {
	if len(n.cur.sessions) > 0 {
		return nil
	}
	return n.chunks
}

// startSweep begins a walk over the datapath's table unless one is under way.
func (n *Node) startSweep(ctx context.Context) {
	if n.chunks != nil {
		return
	}
	ch := make(chan walkChunk, 1)
	n.sessionSweep = sessionSweep{chunks: ch, since: n.lastTouch, newest: n.lastTouch}
	go streamTable(ctx, n.dp, sweepStepSize, ch)
}

// takeChunk handles the walk's next chunk (ok false: the stream ended without its last chunk,
// as when the daemon ends).
func (n *Node) takeChunk(ctx context.Context, c walkChunk, ok bool) {
	if !ok {
		n.sessionSweep = sessionSweep{}
		return
	}
	if c.first {
		if c.lostErr == nil {
			n.checkEventsLost(c.lost)
		}
		return
	}
	n.cur = c
	n.sweepStep(ctx)
}

// sweepStep handles the next sessions of the chunk under way: all of them, or while the walk
// reconciles, up to the reconcilePerTurn-th the ILCC lacks (the rest wait for the next turn).
func (n *Node) sweepStep(ctx context.Context) {
	step := n.cur.sessions
	if n.reconcilePending {
		step = step[:reconcileCut(step, n.cache.Binding, reconcilePerTurn)]
	}
	n.cur.sessions = n.cur.sessions[len(step):]
	now := time.Now()
	for _, s := range step {
		if last := max(s.LastTxNs, s.LastRxNs); last > n.since {
			n.cache.Touch(s.RemoteNID, now)
			n.newest = max(n.newest, last)
		}
		if s.Flags&datapath.SessionUnproven != 0 {
			n.unproven++
		}
	}
	if n.reconcilePending {
		n.walkAdopted += n.reconcile(step, now)
	}
	n.expireUnproven(step, now)
	n.lvProbe(step)
	if len(n.cur.sessions) == 0 && n.cur.last {
		n.endSweep(ctx, n.cur)
	}
}

// endSweep closes a walk: the traffic times seen count as read, the unproven pool is what the
// walk counted, and a walk that reconciled is followed at once by another while sessions are
// still missing (reconcile.go).
func (n *Node) endSweep(ctx context.Context, last walkChunk) {
	if last.err != nil {
		n.log.Debug("session table", "err", last.err)
	} else {
		n.lastTouch = n.newest
		if err := n.dp.SetUnprovenCount(n.unproven); err != nil {
			n.log.Debug("unproven pool", "err", err)
		}
	}
	// A failed read leaves reconciling as it was, for the next touch: no walk after walk on a
	// table that cannot be read.
	again := last.err == nil && n.reconcileAgain(last.lost, last.lostErr == nil, n.walkAdopted)
	n.sessionSweep = sessionSweep{}
	if again {
		n.startSweep(ctx)
	}
}
