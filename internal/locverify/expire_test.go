package locverify

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// A mass move: 10,000 correspondents announce a new locator, 100 a millisecond over two
// challenge lifetimes. Challenges expire in the order they were sent, a late echo is refused,
// a live one is taken, and what the engine keeps is the last lifetime's challenges, not all.
func TestExpireInOrder(t *testing.T) {
	e, err := New(Config{Mode: Strict, ChallengeLifetime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(100, 0)
	const n = 10000
	tokens := make([]Token, n)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Microsecond) }
	for i := 0; i < n; i++ {
		p := wire.NID(0x0a00_0000_0000_0000 + uint64(i))
		acts, err := e.Announced(p, []wire.L64{0x2001_0db8_0062_0000}, 0x2001_0db8_0062_0000, 1000, true, at(i))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if a.Kind == SendChallenge {
				tokens[i] = a.Token
			}
		}
		if tokens[i] == (Token{}) {
			t.Fatalf("correspondent %d: no challenge in %+v", i, acts)
		}
	}
	end := at(n - 1)
	// Sent in the last 50 ms: 5,001 (i = 5000 ... 9999, end - at(i) <= 50 ms).
	if e.challengesOut() != 5001 || len(e.order) != 5001 {
		t.Fatalf("%d challenges kept (%d in order), want the last lifetime's 5001", e.challengesOut(), len(e.order))
	}
	if _, ok := e.Echoed(wire.NID(0x0a00_0000_0000_0000+10), tokens[10], end); ok {
		t.Fatal("an expired challenge's echo was taken")
	}
	p := wire.NID(0x0a00_0000_0000_0000 + 9000)
	if acts, ok := e.Echoed(p, tokens[9000], end); !ok || len(acts) != 1 || acts[0].Kind != MarkVerified {
		t.Fatalf("a live challenge's echo: %v %+v", ok, acts)
	}
	e.expire(end.Add(time.Second))
	// Nothing outstanding, nothing unverified: the peer's rare state is gone too.
	if st, _ := e.get(p); e.challengesOut() != 0 || len(e.order) != 0 || st.rare != nil {
		t.Fatalf("after every lifetime: %d tokens, %d in order, a peer's rare state %+v", e.challengesOut(), len(e.order), st.rare)
	}
}
