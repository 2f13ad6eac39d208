package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"ilnp/internal/datapath"
	"ilnp/internal/ilcc"
	"ilnp/internal/wire"
)

func TestToReconcile(t *testing.T) {
	nonce, err := wire.NonceFromBytes([]byte{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	var sessions []datapath.Session
	for i := 0; i < 10; i++ {
		s := datapath.Session{LocalNID: 1, RemoteNID: wire.NID(100 + i)}
		if i == 3 {
			s.Flags |= datapath.SessionEmbryonic
		}
		if i == 4 {
			s.RemoteNonce = nonce
		}
		sessions = append(sessions, s)
	}
	// 100, 102, ... are in the ILCC; 104's nonce the ILCC has not learned.
	binding := func(n wire.NID) (ilcc.Binding, bool) { return ilcc.Binding{}, n%2 == 0 }
	nids := func(ss []datapath.Session) (out []wire.NID) {
		for _, s := range ss {
			out = append(out, s.RemoteNID)
		}
		return out
	}
	adopt, nonces := toReconcile(sessions, binding)
	if got := nids(adopt); len(got) != 4 || got[0] != 101 || got[1] != 105 || got[2] != 107 || got[3] != 109 {
		t.Fatalf("adopt %v, want [101 105 107 109] (103 is an embryo)", got)
	}
	if got := nids(nonces); len(got) != 1 || got[0] != 104 {
		t.Fatalf("nonces %v, want [104]", got)
	}
	if adopt, _ := toReconcile(sessions, func(wire.NID) (ilcc.Binding, bool) { return ilcc.Binding{}, true }); len(adopt) != 0 {
		t.Fatalf("all known: adopt %v", nids(adopt))
	}
	// Missing: 101, 105, 107, 109 (indexes 1, 5, 7, 9).
	for _, tc := range []struct{ limit, want int }{{1, 5}, {2, 7}, {3, 9}, {4, 10}, {100, 10}, {0, 1}} {
		if got := reconcileCut(sessions, binding, tc.limit); got != tc.want {
			t.Errorf("reconcileCut(limit %d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
	if got := reconcileCut(nil, binding, 5); got != 0 {
		t.Errorf("reconcileCut of nothing = %d", got)
	}
}

func TestReconcileNext(t *testing.T) {
	for _, tc := range []struct {
		reconciling bool
		adopted     int
		lost, want  bool
	}{
		{false, 0, false, false}, // a plain walk: the sweep's pace
		{false, 0, true, true},   // events lost during it: reconcile at once
		{false, 3, false, false}, // a plain walk adopts nothing (adopted is 0 there)
		{true, 5, false, true},   // it found sessions missing: more may be
		{true, 0, true, true},
		{true, 0, false, false}, // found none, lost none: caught up
	} {
		if got := reconcileNext(tc.reconciling, tc.adopted, tc.lost); got != tc.want {
			t.Errorf("reconcileNext(%v, %d, %v) = %v, want %v", tc.reconciling, tc.adopted, tc.lost, got, tc.want)
		}
	}
}

// fakeTable is a session table whose events were lost: the sessions it holds, its
// events_lost counter, and a hook that runs as a walk hands out each session (sessions
// opened meanwhile).
type fakeTable struct {
	mu       sync.Mutex // the walk runs beside the test's loop; during runs with it held
	sessions []datapath.Session
	lost     uint64
	during   func(i int)
	handed   atomic.Int64 // sessions handed to walks so far
	err      error
}

func (f *fakeTable) EventsLost() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost, nil
}

func (f *fakeTable) WalkSessions(fn func(datapath.Session) bool) error {
	for i := 0; ; i++ {
		f.mu.Lock()
		if i >= len(f.sessions) {
			err := f.err
			f.mu.Unlock()
			return err
		}
		if f.during != nil {
			f.during(i)
		}
		s := f.sessions[i]
		f.mu.Unlock()
		f.handed.Add(1)
		if !fn(s) {
			return nil
		}
	}
}

// TestStreamTable: a walk hands the table over in chunks of the step size, the counter read
// before and after it, and holds no more than two chunks ahead of its reader.
func TestStreamTable(t *testing.T) {
	tab := &fakeTable{lost: 7}
	for i := range 4500 {
		tab.sessions = append(tab.sessions, datapath.Session{RemoteNID: wire.NID(i + 1)})
	}
	const size = 1000
	out := make(chan walkChunk, 1)
	go streamTable(context.Background(), tab, size, out)
	first := <-out
	if !first.first || first.lost != 7 || len(first.sessions) != 0 {
		t.Fatalf("first chunk %+v: want the counter, no sessions", first)
	}
	consumed := 0
	var sizes []int
	for c := range out {
		if c.first {
			t.Fatal("a second first chunk")
		}
		// The chunk in hand, the one in the channel and the one being filled.
		if ahead := int(tab.handed.Load()) - consumed; ahead > 3*size {
			t.Fatalf("the walk read %d sessions ahead of the loop", ahead)
		}
		tab.mu.Lock()
		tab.lost = 9 // after the walk: the last chunk's counter
		tab.mu.Unlock()
		for i, s := range c.sessions {
			if want := wire.NID(consumed + i + 1); s.RemoteNID != want {
				t.Fatalf("session %d is %v, want %v", consumed+i, s.RemoteNID, want)
			}
		}
		consumed += len(c.sessions)
		sizes = append(sizes, len(c.sessions))
		if c.last && (c.lost != 9 || c.err != nil) {
			t.Fatalf("last chunk: lost %d, err %v", c.lost, c.err)
		}
		if c.last != (consumed == len(tab.sessions)) {
			t.Fatalf("chunk %d: last %v after %d of %d sessions", len(sizes), c.last, consumed, len(tab.sessions))
		}
	}
	if len(sizes) != 5 || sizes[0] != size || sizes[4] != 500 {
		t.Fatalf("chunk sizes %v, want four of %d and 500", sizes, size)
	}
	// A walk whose reader goes away stops reading the table.
	ctx, cancel := context.WithCancel(context.Background())
	tab.handed.Store(0)
	out = make(chan walkChunk, 1)
	done := make(chan struct{})
	go func() { streamTable(ctx, tab, size, out); close(done) }()
	<-out
	<-out
	cancel()
	<-done
	if h := tab.handed.Load(); h > 3*size+1 {
		t.Fatalf("an abandoned walk read %d sessions", h)
	}
	// A failing read ends the walk with its error.
	tab.err = errors.New("map gone")
	out = make(chan walkChunk, 1)
	go streamTable(context.Background(), tab, size, out)
	var last walkChunk
	for c := range out {
		last = c
	}
	if !last.last || !errors.Is(last.err, tab.err) {
		t.Fatalf("last chunk of a failed read: %+v", last)
	}
}

// TestReconcileCatchesUp: a table of 30,000 sessions of which the ILCC missed every third (the
// ring lost their events), and 6,000 more opened during the first walk, half of them behind
// its cursor, a quarter of them with their events lost too. The walks that the counter starts
// follow each other, each turn adopting at most reconcilePerTurn, until none is missing: every
// session is adopted within a few walks (the second finds those behind the first's cursor),
// and then no walk follows at once. Steps as sweep.go takes them.
func TestReconcileCatchesUp(t *testing.T) {
	tab := &fakeTable{}
	ilccHas := map[wire.NID]bool{}
	next := wire.NID(1)
	open := func(lostEvent bool, at int) {
		tab.sessions = slices.Insert(tab.sessions, at, datapath.Session{RemoteNID: next})
		if lostEvent {
			tab.lost++
		} else {
			ilccHas[next] = true
		}
		next++
	}
	for i := range 30000 {
		open(i%3 == 0, i)
	}
	// The sessions opened during the first walk land anywhere in a hash table: half in front
	// of the walk's cursor, half behind it (where only the next walk finds them).
	walks := 0
	tab.during = func(i int) {
		if walks == 1 && i%5 == 0 && i < 30000 {
			at := len(tab.sessions)
			if i%10 == 0 {
				at = i / 2
			}
			open(i%4 == 0, at)
		}
	}
	binding := func(n wire.NID) (ilcc.Binding, bool) {
		tab.mu.Lock()
		defer tab.mu.Unlock()
		return ilcc.Binding{}, ilccHas[n]
	}
	var seen uint64
	reconciling := false
	startWalk := true
	maxTurn, turns := 0, 0
	var perWalk []int
	for walks < 20 && startWalk {
		walks++
		out := make(chan walkChunk, 1)
		go streamTable(context.Background(), tab, sweepStepSize, out)
		adopted := 0
		var last walkChunk
		for c := range out {
			if c.first {
				if c.lost != seen {
					seen, reconciling = c.lost, true
				}
				continue
			}
			for rest := c.sessions; len(rest) > 0; {
				step := rest
				if reconciling {
					step = step[:reconcileCut(step, binding, reconcilePerTurn)]
				}
				rest = rest[len(step):]
				turns++
				if !reconciling {
					continue
				}
				adopt, _ := toReconcile(step, binding)
				tab.mu.Lock()
				for _, s := range adopt {
					ilccHas[s.RemoteNID] = true
				}
				tab.mu.Unlock()
				adopted += len(adopt)
				maxTurn = max(maxTurn, len(adopt))
			}
			last = c
		}
		tab.mu.Lock()
		n := len(tab.sessions)
		tab.mu.Unlock()
		moved := last.lost != seen
		seen = last.lost
		reconciling = reconcileNext(reconciling, adopted, moved)
		startWalk = reconciling
		perWalk = append(perWalk, adopted)
		t.Logf("walk %d: %d sessions, adopted %d, lost during it %v", walks, n, adopted, moved)
	}
	missed := 0
	for _, s := range tab.sessions {
		if !ilccHas[s.RemoteNID] {
			missed++
		}
	}
	if missed > 0 {
		t.Fatalf("%d of %d sessions never adopted after %d walks", missed, len(tab.sessions), walks)
	}
	if len(perWalk) < 2 || perWalk[1] == 0 {
		t.Fatalf("adopted per walk %v: the second walk should find the sessions behind the first's cursor", perWalk)
	}
	if walks > 4 || startWalk {
		t.Fatalf("%d walks (the last asking for another: %v): want the catching up over within 4", walks, startWalk)
	}
	if maxTurn > reconcilePerTurn || maxTurn == 0 {
		t.Fatalf("a turn adopted %d sessions, bound %d", maxTurn, reconcilePerTurn)
	}
	if min := (len(tab.sessions) / 3) / reconcilePerTurn; turns < min {
		t.Fatalf("%d turns for %d adoptions", turns, len(tab.sessions)/3)
	}
}
