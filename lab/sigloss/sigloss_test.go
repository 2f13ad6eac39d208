package sigloss

import (
	"strings"
	"testing"
)

func TestExpr(t *testing.T) {
	for _, c := range []struct {
		r    Rule
		want string
	}{
		{Rule{Msg: LU, Nth: 1}, "meta l4proto ipv6-icmp icmpv6 type 156 @th,40,8 1 numgen inc mod 16777216 == 0 counter drop comment \"drop-lu-1\""},
		{Rule{Msg: LUAck, Nth: 3}, "meta l4proto ipv6-icmp icmpv6 type 156 @th,40,8 2 numgen inc mod 16777216 == 2 counter drop comment \"drop-lu-ack-3\""},
		{Rule{Msg: BU, Nth: 1}, "meta l4proto 135 @th,16,8 5 numgen inc mod 16777216 == 0 counter drop comment \"drop-bu-1\""},
		{Rule{Msg: BAck, Nth: 2}, "meta l4proto 135 @th,16,8 6 numgen inc mod 16777216 == 1 counter drop comment \"drop-back-2\""},
		{Rule{Msg: HoTI, Nth: 1, Tunnelled: true}, "meta l4proto ipv6 @th,48,8 135 @th,336,8 1 numgen inc mod 16777216 == 0 counter drop comment \"drop-hoti-tunnelled-1\""},
		{Rule{Msg: CoT, Nth: 1}, "meta l4proto 135 @th,16,8 4 numgen inc mod 16777216 == 0 counter drop comment \"drop-cot-1\""},
	} {
		got, err := c.r.Expr()
		if err != nil || got != c.want {
			t.Errorf("%+v: got %q, %v; want %q", c.r, got, err, c.want)
		}
	}
	for _, bad := range []Rule{{Msg: LU, Nth: 0}, {Msg: LU, Nth: 1, Tunnelled: true}, {Msg: Message(99), Nth: 1}} {
		if _, err := bad.Expr(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}

func TestParseMessage(t *testing.T) {
	for m, n := range names {
		got, err := ParseMessage(strings.ToUpper(n))
		if err != nil || got != m {
			t.Errorf("%s: %v %v", n, got, err)
		}
	}
	if _, err := ParseMessage("bogus"); err == nil {
		t.Error("bogus accepted")
	}
}

const sample = `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "inet", "name": "ilab_sigloss", "handle": 1}},
{"rule": {"family": "inet", "table": "ilab_sigloss", "chain": "forward", "handle": 2, "comment": "drop-lu-1", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "icmpv6", "field": "type"}}, "right": 156}}, {"counter": {"packets": 1, "bytes": 96}}, {"drop": null}]}},
{"rule": {"family": "inet", "table": "ilab_sigloss", "chain": "forward", "handle": 3, "comment": "drop-bu-2", "expr": [{"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}}]}`

func TestParseCounters(t *testing.T) {
	got, err := ParseCounters([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got["drop-lu-1"] != 1 || got["drop-bu-2"] != 0 || len(got) != 2 {
		t.Errorf("got %v", got)
	}
	if _, err := ParseCounters([]byte("{")); err == nil {
		t.Error("truncated JSON accepted")
	}
}

func FuzzParseCounters(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(`{"nftables":[{"rule":null}]}`))
	f.Add([]byte(`{"nftables":[{"rule":{"comment":"x","expr":[1,"a",{"counter":null}]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseCounters(b)
	})
}
