package node

import (
	"testing"

	"ilnp/internal/datapath"
	"ilnp/internal/ilcc"
	"ilnp/internal/wire"
)

// The sessions the ILCC lacks are adopted, embryos never, at most limit a pass; a nonce the
// datapath learned and the ILCC did not is taught.
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
	adopt, nonces, more := toReconcile(sessions, binding, 100)
	if got := nids(adopt); len(got) != 4 || got[0] != 101 || got[1] != 105 || got[2] != 107 || got[3] != 109 || more {
		t.Fatalf("adopt %v (more %v), want [101 105 107 109] (103 is an embryo), no more", got, more)
	}
	if got := nids(nonces); len(got) != 1 || got[0] != 104 {
		t.Fatalf("nonces %v, want [104]", got)
	}
	if adopt, _, more := toReconcile(sessions, binding, 2); len(adopt) != 2 || adopt[1].RemoteNID != 105 || !more {
		t.Fatalf("limit 2: adopt %v, more %v: want [101 105] and more", nids(adopt), more)
	}
	if adopt, _, more := toReconcile(sessions, func(wire.NID) (ilcc.Binding, bool) { return ilcc.Binding{}, true }, 100); len(adopt) != 0 || more {
		t.Fatalf("all known: adopt %v, more %v", nids(adopt), more)
	}
}
