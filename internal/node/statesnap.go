package node

import (
	"context"
	"net/netip"
	"runtime/trace"
	"time"

	"ilnp/internal/state"
	"ilnp/internal/wire"
)

// stateSnapshot is the state file being taken on the loop a share per turn (issue 28: the
// snapshot of 100,000 correspondents and their routes in one turn held the loop 78-176 ms).
// Its lists with an entry per session are walked (state.Walk) snapshotStep entries per step;
// the rest, a few entries, is taken when it begins. Each entry is as it was when the walk
// reached it; an event the loop serves during the walk (dirty) makes another snapshot follow,
// so the file catches up with what the walk had passed.
type stateSnapshot struct {
	st    state.File
	walks []*state.Walk
	dirty bool
	took  time.Duration // the loop's time in the snapshot's steps
	steps int           // steps taken, most entries one of them took (tests)
	most  int
	// The advertisement last converted and its conversion, which the next correspondents told
	// the same one share (the cache shares one slice between the peers told the same set).
	lastAdv  []wire.LocatorEntry
	lastConv []state.Advertised
}

// snapshotStep is how many entries a step of a snapshot takes: some 1 ms of the loop.
const snapshotStep = 2000

// beginSnapshot starts a snapshot of what the loop persists (unsorted: sortState puts it in
// order off the loop). It takes nothing of the walked lists before its first step.
func (n *Node) beginSnapshot() *stateSnapshot {
	s := &stateSnapshot{st: n.stateFileFixed()}
	s.st.PeerRoutes = make([]netip.Addr, 0, n.host.peerRoutes.len())
	s.st.Correspondents = make([]state.Correspondent, 0, n.cache.Len())
	s.walks = []*state.Walk{
		state.NewWalk(n.host.peerRoutes.all(), func(addr netip.Addr, _ *peerRoute) {
			s.st.PeerRoutes = append(s.st.PeerRoutes, addr)
		}),
		state.NewWalk(n.cache.AllAdvertised(), func(peer wire.NID, adv []wire.LocatorEntry) {
			c := state.Correspondent{NID: peer, Advertised: s.advertised(adv)}
			// A correspondent whose last LU was given up does not hold this set: the next
			// daemon must send it again (ilcc.Resync).
			c.Acked = !n.engine.Unanswered(peer) && len(c.Advertised) > 0
			s.st.Correspondents = append(s.st.Correspondents, c)
		}),
	}
	return s
}

// advertised is adv as the state file lists it, shared with the correspondent before when it
// was told the same slice (the file only reads it).
func (s *stateSnapshot) advertised(adv []wire.LocatorEntry) []state.Advertised {
	if len(adv) == 0 {
		return nil
	}
	if len(s.lastAdv) == len(adv) && &s.lastAdv[0] == &adv[0] {
		return s.lastConv
	}
	conv := make([]state.Advertised, len(adv))
	for i, e := range adv {
		conv[i] = state.Advertised{Locator: e.Locator, Preference: e.Preference}
	}
	s.lastAdv, s.lastConv = adv, conv
	return conv
}

// step takes up to max entries of the walked lists and reports how many it took and whether
// the snapshot is whole.
func (s *stateSnapshot) step(max int) (taken int, whole bool) {
	for _, w := range s.walks {
		if w.Done() {
			continue
		}
		if taken >= max {
			return taken, false
		}
		v, done := w.Step(max - taken)
		taken += v
		if !done {
			return taken, false
		}
	}
	return taken, true
}

// finish takes what is left of the snapshot at once (the loop has ended, or a test).
func (s *stateSnapshot) finish() state.File {
	for _, w := range s.walks {
		for !w.Done() {
			w.Step(1 << 20)
		}
	}
	return s.st
}

// stop ends the snapshot's walks unfinished.
func (s *stateSnapshot) stop() {
	for _, w := range s.walks {
		w.Stop()
	}
}

// persistReady is ready when the snapshot being taken is due its next step (nil, never ready,
// when none is being taken).
func (n *Node) persistReady() <-chan time.Time {
	c := &n.continuity
	if c.snap == nil {
		return nil
	}
	if c.stepTimer == nil {
		c.stepTimer = time.NewTimer(time.Until(c.nextStep))
		c.stepArmed = c.nextStep
	} else if !c.stepArmed.Equal(c.nextStep) {
		c.stepTimer.Reset(time.Until(c.nextStep)) // Go 1.23 timers: no stale tick after Reset
		c.stepArmed = c.nextStep
	}
	return c.stepTimer.C
}

// persistStep takes the next share of the snapshot being taken; the step that makes it whole
// hands it to a writer. After a step of d, the next waits d x persistShare, so that a
// snapshot takes at most a persistShare-th of the loop while events queue.
func (n *Node) persistStep() {
	defer trace.StartRegion(context.Background(), "state file step").End() // `ilnp-lab scale --profile`
	c := &n.continuity
	s := c.snap
	c.stepTurn = true
	if s == nil {
		return
	}
	start := time.Now()
	taken, whole := s.step(snapshotStep)
	d := time.Since(start)
	s.steps, s.most = s.steps+1, max(s.most, taken)
	s.took += d
	c.nextStep = start.Add(persistShare * d)
	if whole {
		n.snapshotTaken(s, start)
	}
}

// snapshotTaken hands the whole snapshot s to a writer off the loop and, when the loop served
// events during it, asks for another.
func (n *Node) snapshotTaken(s *stateSnapshot, now time.Time) {
	c := &n.continuity
	c.snap = nil
	c.stateSeq++
	seq := c.stateSeq
	c.nextCheck = now.Add(persistShare * s.took)
	c.pending = s.dirty // armTimer wakes the loop at nextCheck for the next one
	c.writing.Store(true)
	st := s.st
	go func() {
		defer c.writing.Store(false)
		began := time.Now()
		n.saveState(st, seq)
		c.writerAfter.Store(time.Now().Add(persistShare * time.Since(began)).UnixNano())
	}()
}

// dropSnapshot abandons the snapshot being taken (the loop ends; writeState takes its own).
func (n *Node) dropSnapshot() {
	c := &n.continuity
	if c.snap != nil {
		c.snap.stop()
		c.snap = nil
	}
	if c.stepTimer != nil {
		c.stepTimer.Stop()
	}
}
