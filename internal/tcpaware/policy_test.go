package tcpaware

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

func TestPolicy(t *testing.T) {
	a := netip.MustParseAddr("fd00:aa::1")
	type step struct {
		op     string // start, end, off, switch (the MN switching first), switched (the CN after the MN), answered (the MN's held switch's LU-ACK)
		rtt    time.Duration
		want   []Update
		wantOK bool
	}
	tests := []struct {
		name  string
		on    bool
		steps []step
	}{
		{"off does nothing", false, []step{
			{op: "start"}, {op: "end", rtt: 50 * time.Millisecond},
		}},
		{"MN: start caps, end restores, reverts, window from the LU RTT", true, []step{
			{op: "start", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, Moving: 1, RtoMaxMs: 1000, LossWindowMs: 5000}}}},
			{op: "start"}, // already moving: nothing new
			{op: "end", rtt: 200 * time.Millisecond, wantOK: true,
				want: []Update{{Peer: a, Entry: Peer{Epoch: 1, RtoMaxMs: 120000, LossWindowMs: 2000, RttUs: 200000}, Revert: true}}},
		}},
		{"CN: the move's end alone, no RTT", true, []step{
			{op: "end", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, RtoMaxMs: 120000, LossWindowMs: 2000}, Revert: true}}},
			{op: "start", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 2, Moving: 1, RtoMaxMs: 1000, LossWindowMs: 5000}}}},
		}},
		{"absurd RTT is bounded", true, []step{
			{op: "end", rtt: time.Hour, wantOK: true,
				want: []Update{{Peer: a, Entry: Peer{Epoch: 1, RtoMaxMs: 120000, LossWindowMs: 5000}, Revert: true}}},
		}},
		{"soft switch: a new drain number each time, wait until the correspondent's ACKs show the path", true, []step{
			{op: "switch", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Drain: 1, DrainWait: 1}}}},
			{op: "start", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, Moving: 1, RtoMaxMs: 1000, LossWindowMs: 5000}}}},
			{op: "switched", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, Drain: 2}}}},
		}},
		{"soft move: the move's start and the drain in one entry", true, []step{
			{op: "softstart", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, Moving: 1, RtoMaxMs: 1000, LossWindowMs: 5000, Drain: 1, DrainWait: 1}}}},
			{op: "start"}, // already moving
			{op: "softstart", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, Drain: 2, DrainWait: 1}}}},
		}},
		{"no drain while off", false, []step{{op: "switch"}, {op: "switched"}, {op: "softstart"}, {op: "answered", rtt: time.Millisecond}}},
		{"MN soft switch held until the LU-ACK: the drain comes with the move's end, decided by its RTT", true, []step{
			{op: "start", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, Moving: 1, RtoMaxMs: 1000, LossWindowMs: 5000}}}},
			{op: "answered", rtt: 200 * time.Millisecond, wantOK: true,
				want: []Update{{Peer: a, Entry: Peer{Epoch: 1, RtoMaxMs: 120000, LossWindowMs: 2000, RttUs: 200000, Drain: 1}, Revert: true}}},
			{op: "start", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 2, Moving: 1, RtoMaxMs: 1000, LossWindowMs: 5000}}}},
			// The LU was retransmitted: no RTT, the new path is not known faster, no drain.
			{op: "answered", wantOK: true,
				want: []Update{{Peer: a, Entry: Peer{Epoch: 2, RtoMaxMs: 120000, LossWindowMs: 2000}, Revert: true}}},
		}},
		{"switching off undoes a cap", true, []step{
			{op: "start", wantOK: true, want: []Update{{Peer: a, Entry: Peer{Epoch: 1, Moving: 1, RtoMaxMs: 1000, LossWindowMs: 5000}}}},
			{op: "off", want: []Update{{Peer: a, Entry: Peer{Epoch: 1, RtoMaxMs: 120000}}}},
			{op: "start"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPolicy(tt.on)
			for i, s := range tt.steps {
				var got []Update
				var ok bool
				switch s.op {
				case "start":
					var u Update
					u, ok = p.MoveStarted(a)
					if ok {
						got = []Update{u}
					}
				case "end":
					var u Update
					u, ok = p.MoveEnded(a, s.rtt)
					if ok {
						got = []Update{u}
					}
				case "softstart":
					var u Update
					u, ok = p.SoftMoveStarted(a)
					if ok {
						got = []Update{u}
					}
				case "answered":
					var u Update
					u, ok = p.SwitchAnswered(a, s.rtt)
					if ok {
						got = []Update{u}
					}
				case "switch", "switched":
					var u Update
					u, ok = p.Switching(a, s.op == "switched")
					if ok {
						got = []Update{u}
					}
				case "off":
					got = p.SetEnabled(false)
				}
				if s.op != "off" && ok != s.wantOK {
					t.Fatalf("step %d %s: ok %v, want %v", i, s.op, ok, s.wantOK)
				}
				if len(got) != len(s.want) {
					t.Fatalf("step %d %s: %+v, want %+v", i, s.op, got, s.want)
				}
				for j := range got {
					if got[j] != s.want[j] {
						t.Fatalf("step %d %s: %+v, want %+v", i, s.op, got[j], s.want[j])
					}
				}
			}
		})
	}
}

func TestLossWindowMs(t *testing.T) {
	for _, tt := range []struct {
		rtt  time.Duration
		want uint32
	}{{0, 2000}, {time.Millisecond, 1000}, {200 * time.Millisecond, 2000}, {450 * time.Millisecond, 4500}, {time.Second, 5000}} {
		if got := lossWindowMs(tt.rtt); got != tt.want {
			t.Errorf("lossWindowMs(%v) = %d, want %d", tt.rtt, got, tt.want)
		}
	}
}

func TestParseSockets(t *testing.T) {
	rec := make([]byte, sockRecordSize)
	rec[15], rec[31] = 1, 2
	binary.LittleEndian.PutUint16(rec[32:], 40000)
	binary.LittleEndian.PutUint16(rec[34:], 5201)
	binary.LittleEndian.PutUint32(rec[40:], 0xdeadbeef) // snd_una
	binary.LittleEndian.PutUint32(rec[56:], 10)         // cwnd
	rec[76], rec[77], rec[78] = 3, 1, AppliedRTOMax
	got, err := ParseSockets(append(rec, rec...))
	if err != nil || len(got) != 2 {
		t.Fatalf("ParseSockets = %v, %v", got, err)
	}
	s := got[0]
	if s.Local.String() != "[::1]:40000" || s.Remote.String() != "[::2]:5201" || s.SndUna != 0xdeadbeef ||
		s.Cwnd != 10 || s.Backoff != 3 || s.State != 1 || s.Applied != AppliedRTOMax {
		t.Fatalf("decoded %+v", s)
	}
	if _, err := ParseSockets(rec[:len(rec)-1]); err == nil {
		t.Fatal("a short record was accepted")
	}
}

func TestRevertMessage(t *testing.T) {
	s := Socket{Local: netip.MustParseAddrPort("[fd00::1]:40000"), Remote: netip.MustParseAddrPort("[fd00::2]:5201"),
		SndUna: 0x01020304, SndNxt: 0x01030000, Backoff: 3}
	m := RevertMessage(s)
	if len(m) != 68 || m[0] != 1 || m[1] != 0 || m[8]>>4 != 6 || m[14] != 6 ||
		netip.AddrFrom16([16]byte(m[16:32])) != s.Local.Addr() || netip.AddrFrom16([16]byte(m[32:48])) != s.Remote.Addr() ||
		binary.BigEndian.Uint16(m[48:]) != 40000 || binary.BigEndian.Uint16(m[50:]) != 5201 ||
		binary.BigEndian.Uint32(m[52:]) != 0x01020304 {
		t.Fatalf("message % x", m)
	}
	for _, tt := range []struct {
		state, backoff uint8
		una, nxt       uint32
		want           int
	}{{tcpEstablished, 0, 1, 2, 0}, {tcpEstablished, 3, 1, 2, 4}, {tcpEstablished, 3, 2, 2, 0},
		{tcpEstablished, 200, 1, 2, 16}, {tcpCloseWait, 1, 1, 2, 2}, {tcpFinWait1, 1, 1, 2, 2},
		{tcpLastAck, 1, 1, 2, 2}, {tcpClosing, 1, 1, 2, 2},
		// A connect whose SYN was retransmitted, or a passive open whose SYN-ACK was: the
		// message would abort it (tcp_v6_err), so none.
		{2 /* SYN_SENT */, 1, 1, 2, 0}, {3 /* SYN_RECV */, 1, 1, 2, 0}, {0, 3, 1, 2, 0}} {
		if got := Reverts(Socket{State: tt.state, Backoff: tt.backoff, SndUna: tt.una, SndNxt: tt.nxt}); got != tt.want {
			t.Errorf("Reverts(state %d, backoff %d, una %d, nxt %d) = %d, want %d", tt.state, tt.backoff, tt.una, tt.nxt, got, tt.want)
		}
	}
}

func TestRTTUs(t *testing.T) {
	for _, tt := range []struct {
		rtt  time.Duration
		want uint32
	}{{0, 0}, {-time.Millisecond, 0}, {time.Nanosecond, 1}, {200 * time.Millisecond, 200000}, {10 * time.Second, 10000000}, {11 * time.Second, 0}} {
		if got := rttUs(tt.rtt); got != tt.want {
			t.Errorf("rttUs(%v) = %d, want %d", tt.rtt, got, tt.want)
		}
	}
}
