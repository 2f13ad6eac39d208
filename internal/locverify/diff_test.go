package locverify

import (
	"encoding/binary"
	"reflect"
	"slices"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// counter16 numbers its tokens 1, 2, 3, ... in two bytes (no repeat within a fuzz input).
func counter16() func([]byte) error {
	n := uint16(0)
	return func(b []byte) error {
		n++
		clear(b)
		binary.BigEndian.PutUint16(b, n)
		return nil
	}
}

// FuzzEngineDifferential drives the engine and the one before challenges moved into their
// peers' state (v0engine_test.go) with the same calls, and wants the same actions, echo
// verdicts, errors and per-peer answers: the move changed where a challenge is kept, not
// what the engine decides. Time only goes forward, as the daemon's clock does.
func FuzzEngineDifferential(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 4, 0, 0, 0, 2, 0, 2, 10, 4, 0, 1, 0, 6, 0, 0, 200})
	f.Add([]byte{0, 1, 3, 0, 1, 1, 1, 0, 2, 1, 6, 1, 4, 1, 0, 0, 2, 1, 7, 40, 6, 0, 0, 255, 4, 1, 1, 0})
	f.Add([]byte{7, 2, 5, 0, 2, 2, 2, 1, 4, 2, 0, 0, 3, 2, 3, 9, 5, 2, 0, 0, 0, 2, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mode := range []Mode{Strict, Opportunistic} {
			diffRun(t, mode, data)
		}
	})
}

func diffRun(t *testing.T, mode Mode, data []byte) {
	cfg := Config{Mode: mode, ChallengeLifetime: 2 * time.Second}
	cfg.Random = counter16()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Random = counter16()
	o, err := v0New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	peers := [...]wire.NID{peerA, peerB, 0x0a00_0000_0000_0003}
	locs := [...]wire.L64{l1, l2, lV, 0x2001_0db8_0004_0000}
	set := func(bits byte) []wire.L64 {
		var out []wire.L64
		for i, l := range locs {
			if bits&(1<<i) != 0 {
				out = append(out, l)
			}
		}
		return out
	}
	var tokens []Token
	now := t0
	for i := 0; i+4 <= len(data) && i < 4*400; i += 4 {
		op, p, arg, adv := data[i]%8, peers[int(data[i+1])%len(peers)], data[i+2], data[i+3]
		now = now.Add(time.Duration(adv) * 50 * time.Millisecond)
		l := locs[int(arg>>4)%len(locs)]
		var got, want []Action
		var gotErr, wantErr error
		switch op {
		case 0:
			got, gotErr = e.Opened(p, set(arg), l, arg&0x40 != 0, now)
			want, wantErr = o.Opened(p, set(arg), l, arg&0x40 != 0, now)
		case 1:
			got, gotErr = e.Probe(p, l, now)
			want, wantErr = o.Probe(p, l, now)
		case 2:
			got, gotErr = e.Announced(p, set(arg), l, uint64(adv)*4, arg&0x40 != 0, now)
			want, wantErr = o.Announced(p, set(arg), l, uint64(adv)*4, arg&0x40 != 0, now)
		case 3:
			got, gotErr = e.Roamed(p, l, uint64(arg)*8, now)
			want, wantErr = o.Roamed(p, l, uint64(arg)*8, now)
		case 4:
			tk := Token{0xff, arg}
			if len(tokens) > 0 && arg&0x80 == 0 {
				tk = tokens[len(tokens)-1-int(arg)%len(tokens)]
			}
			var gotOK, wantOK bool
			got, gotOK = e.Echoed(p, tk, now)
			want, wantOK = o.Echoed(p, tk, now)
			if gotOK != wantOK {
				t.Fatalf("step %d: echo %x of %v taken %v, the reference %v", i/4, tk[:2], p, gotOK, wantOK)
			}
		case 5:
			e.Closed(p)
			o.Closed(p)
		case 6:
			got = e.Tick(now)
			want = o.Tick(now)
		case 7:
			cr := []Credit{{Locator: l, RxBytes: uint64(adv), TxBytes: uint64(arg)}}
			got, gotErr = e.Resumed(p, set(arg), locs[0], cr, now)
			want, wantErr = o.Resumed(p, set(arg), locs[0], cr, now)
		}
		if !reflect.DeepEqual(got, want) || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("step %d (op %d, %v): actions %+v %v, the reference %+v %v", i/4, op, p, got, gotErr, want, wantErr)
		}
		for _, a := range got {
			if a.Kind == SendChallenge {
				tokens = append(tokens, a.Token)
			}
		}
		for _, q := range peers {
			if e.Known(q) != o.Known(q) || e.Answered(q) != o.Answered(q) || !slices.Equal(e.Unverified(q), o.Unverified(q)) {
				t.Fatalf("step %d (op %d): %v known %v answered %v unverified %v, the reference %v %v %v", i/4, op, q,
					e.Known(q), e.Answered(q), e.Unverified(q), o.Known(q), o.Answered(q), o.Unverified(q))
			}
		}
	}
}
