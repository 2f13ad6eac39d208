package datapath

import "testing"

// TestSessionMapFlags: a session is flagged multipath / unverified exactly while it has an
// entry in that map (the egress and ingress read those maps only for flagged sessions), the
// flags survive PutSession, a session put after its multipath entry is flagged, and a datapath
// loaded over pinned maps that lack the flags sets them.
func TestSessionMapFlags(t *testing.T) {
	dir := mountBPFFS(t)
	d, err := Load(Options{PinDir: dir, KeepPinned: true})
	must(t, err)
	h := hostA(t, 4)
	h.setup(t, d, true)
	flags := func() SessionFlags {
		t.Helper()
		s, err := d.GetSession(nidA, nidB)
		must(t, err)
		return s.Flags & sessionMapFlags
	}
	want := func(what string, f SessionFlags) {
		t.Helper()
		if got := flags(); got != f {
			t.Fatalf("%s: flags %v, want %v", what, got, f)
		}
	}
	want("new session", 0)
	pairs := []MultipathPair{{Local: lA1, Remote: lB1, Weight: 1}, {Local: lA2, Remote: lB2, Weight: 1}}
	must(t, d.SetMultipath(nidA, nidB, pairs))
	want("multipath set", SessionMultipath)
	must(t, d.PutUnverified(nidA, nidB, lB2, 0, 0))
	must(t, d.PutUnverified(nidA, nidB, lB1, 0, 0))
	want("unverified", SessionMultipath|SessionUnverified)
	s, err := d.GetSession(nidA, nidB)
	must(t, err)
	s.Flags &^= sessionMapFlags
	must(t, d.PutSession(s))
	want("PutSession without the flags", SessionMultipath|SessionUnverified)
	must(t, d.DeleteUnverified(nidB, lB2))
	want("one of two unverified locators verified", SessionMultipath|SessionUnverified)
	must(t, d.DeleteUnverified(nidB, lB1))
	want("both verified", SessionMultipath)
	must(t, d.SetMultipath(nidA, nidB, nil))
	want("multipath off", 0)

	// Entries that outlived their session flag the session put again.
	must(t, d.SetMultipath(nidA, nidB, pairs))
	must(t, d.PutUnverified(nidA, nidB, lB2, 0, 0))
	must(t, d.DeleteSession(nidA, nidB))
	h.setup(t, d, true)
	want("session put again", SessionMultipath|SessionUnverified)

	// A daemon from before the flags left entries without them in the pinned maps.
	var v ilnpBPFIlnpSession
	k := sessionKey(nidA, nidB)
	must(t, d.objs.Sessions.Lookup(k, &v))
	v.Flags &^= uint32(sessionMapFlags)
	must(t, d.objs.Sessions.Put(k, &v))
	want("flags cleared behind the datapath's back", 0)
	must(t, d.Close())
	d, err = Load(Options{PinDir: dir})
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	want("loaded over the pinned maps", SessionMultipath|SessionUnverified)
	if got := (SessionMultipath | SessionUnverified).String(); got != "multipath,unverified" {
		t.Fatalf("flag names %q", got)
	}
}
