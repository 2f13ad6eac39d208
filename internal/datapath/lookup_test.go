package datapath

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
)

// TestLookupSessionOrEmbryo: a session promoted from the embryos while it is looked up is
// found, wherever the promotion falls between the reads (the datapath inserts into the session
// table, then deletes the embryo), and a session in neither table is not.
func TestLookupSessionOrEmbryo(t *testing.T) {
	errMap := errors.New("map read failed")
	for _, c := range []struct {
		name string
		// promoteAfter: the promotion happens after this many reads (-1: never, an embryo
		// throughout; -2: no such session at all).
		promoteAfter int
		sessionErr   error
		want         string
	}{
		{"in the session table", 0, nil, "session"},
		{"an embryo throughout", -1, nil, "embryo"},
		{"promoted between the two reads", 1, nil, "session"},
		{"promoted after the embryo was read", 2, nil, "embryo"},
		{"in neither table", -2, nil, "none"},
		{"session table unreadable", 0, errMap, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			reads := 0
			inSessions := func() bool { return c.promoteAfter >= 0 && reads >= c.promoteAfter }
			inEmbryos := func() bool { return c.promoteAfter == -1 || (c.promoteAfter > 0 && reads < c.promoteAfter) }
			found := "none"
			session := func() error {
				defer func() { reads++ }()
				if c.sessionErr != nil {
					return c.sessionErr
				}
				if inSessions() {
					found = "session"
					return nil
				}
				return ebpf.ErrKeyNotExist
			}
			embryo := func() error {
				defer func() { reads++ }()
				if inEmbryos() {
					found = "embryo"
					return nil
				}
				return ebpf.ErrKeyNotExist
			}
			err := lookupSessionOrEmbryo(session, embryo)
			switch {
			case c.want == "error":
				if !errors.Is(err, errMap) {
					t.Errorf("err %v, want %v", err, errMap)
				}
			case c.want == "none":
				if !errors.Is(err, ebpf.ErrKeyNotExist) {
					t.Errorf("err %v (found %s), want ErrKeyNotExist", err, found)
				}
			case err != nil || found != c.want:
				t.Errorf("found %q (err %v), want %q after %d reads", found, err, c.want, reads)
			}
		})
	}
}
