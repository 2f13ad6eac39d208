package node

import (
	"testing"
	"time"
)

func TestPollLateness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type poll struct{ due, ran int } // ms; due < 0: not known
	for _, tc := range []struct {
		name  string
		polls []poll
		from  int
		want  time.Duration
	}{
		{"none", nil, 0, 0},
		{"on time", []poll{{0, 0}, {20, 20}, {40, 40}}, 0, 0},
		{"early is not late", []poll{{20, 5}}, 0, 0},
		{"last late", []poll{{0, 0}, {20, 20}, {40, 70}}, 0, 30 * time.Millisecond},
		{"last and the worst before", []poll{{0, 5}, {20, 32}, {40, 44}, {60, 61}}, 0, 13 * time.Millisecond},
		{"before the episode does not count", []poll{{0, 50}, {60, 60}, {80, 81}}, 55, time.Millisecond},
		{"unknown due", []poll{{-1, 30}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p pollLateness
			for _, pl := range tc.polls {
				if pl.due >= 0 {
					p.want(ms(pl.due))
				}
				p.ran(ms(pl.ran))
			}
			if got := p.since(ms(tc.from)); got != tc.want {
				t.Errorf("since(%d ms) = %v, want %v", tc.from, got, tc.want)
			}
		})
	}
	t.Run("ring wraps", func(t *testing.T) {
		var p pollLateness
		for i := range 100 {
			p.want(ms(20 * i))
			p.ran(ms(20*i + i%3))
		}
		if got := p.since(ms(0)); got != 2*time.Millisecond {
			t.Errorf("since = %v, want 2ms (last 0, the worst of the 15 before 2 ms)", got)
		}
	})
}
