package node

import (
	"testing"

	"ilnp/internal/datapath"
	"ilnp/internal/wire"
)

// The sessions the ILCC lacks are recovered, embryos never, and at most limit a pass.
func TestSessionsToRecover(t *testing.T) {
	var sessions []datapath.Session
	for i := 0; i < 10; i++ {
		s := datapath.Session{LocalNID: 1, RemoteNID: wire.NID(100 + i)}
		if i == 3 {
			s.Flags |= datapath.SessionEmbryonic
		}
		sessions = append(sessions, s)
	}
	known := func(n wire.NID) bool { return n%2 == 0 } // 100, 102, ... are in the ILCC
	got := sessionsToRecover(sessions, known, 100)
	var nids []wire.NID
	for _, s := range got {
		nids = append(nids, s.RemoteNID)
	}
	want := []wire.NID{101, 105, 107, 109} // 103 is an embryo
	if len(nids) != len(want) {
		t.Fatalf("recovered %v, want %v", nids, want)
	}
	for i := range want {
		if nids[i] != want[i] {
			t.Fatalf("recovered %v, want %v", nids, want)
		}
	}
	if got := sessionsToRecover(sessions, known, 2); len(got) != 2 || got[0].RemoteNID != 101 || got[1].RemoteNID != 105 {
		t.Fatalf("limit 2: %+v", got)
	}
	if got := sessionsToRecover(sessions, func(wire.NID) bool { return true }, 100); len(got) != 0 {
		t.Fatalf("all known: %+v", got)
	}
}
