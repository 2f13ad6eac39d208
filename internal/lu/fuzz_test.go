package lu

import (
	"testing"
	"time"

	"ilnp/internal/wire"
)

// FuzzEngine drives the engine with an arbitrary sequence of Send, Ack, Tick, Redirect, Cancel
// and Forget calls (each input byte pair is one call) and checks it never panics, never
// exceeds MaxAttempts, never schedules outside the timeout bounds and never leaves a deadline
// in the past that Tick would not act on.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 1, 1, 2, 255})
	f.Add([]byte{0, 0, 0, 17, 2, 200, 2, 200, 2, 200, 1, 0})
	f.Add([]byte{0, 3, 0, 4, 1, 3, 1, 4, 1, 3, 2, 9})
	f.Add([]byte{0, 1, 4, 9, 3, 0, 5, 1, 0, 2, 5, 2, 1, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		e, err := New(Config{MaxAttempts: 3, InitialTimeout: 100 * time.Millisecond, MinTimeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		attempts := map[uint64]int{}
		for i := 0; i+1 < len(ops); i += 2 {
			arg := ops[i+1]
			peer := wire.NID(arg % 4)
			body := msgTo(peer, wire.L64(arg>>2%4+1))
			var acts []Action
			switch ops[i] % 6 {
			case 0:
				acts, err = e.Send(body, now)
				if err != nil {
					t.Fatal(err)
				}
			case 1:
				_, acts = e.Ack(peer, body.Update.Ack(), now)
			case 2:
				now = now.Add(time.Duration(arg) * 7 * time.Millisecond)
				acts = e.Tick(now)
			case 3:
				if d, ok := e.NextDeadline(); ok {
					now = d
				}
				acts = e.Tick(now)
			case 4:
				acts = e.Redirect(peer, wire.ILV{Locator: wire.L64(arg), NID: peer}, now)
			case 5:
				if arg&1 == 0 {
					e.Cancel(peer)
				} else {
					e.Forget(peer)
				}
			}
			for _, a := range acts {
				if a.Kind == Transmit {
					attempts[a.Exchange] = a.Attempt
					if a.Timeout < 10*time.Millisecond || a.Timeout > DefaultMaxTimeout {
						t.Fatalf("timeout %v out of bounds", a.Timeout)
					}
				}
				if a.Attempt > 3 {
					t.Fatalf("attempt %d > 3", a.Attempt)
				}
			}
			out := 0
			for _, p := range e.peers {
				if p.out != nil {
					out++
				}
			}
			if out != e.nOut {
				t.Fatalf("outstanding count %d, actual %d", e.nOut, out)
			}
			if d, ok := e.NextDeadline(); ok && d.Before(now) {
				if len(e.Tick(now)) == 0 {
					t.Fatal("overdue deadline but Tick did nothing")
				}
			}
		}
	})
}
