package lab

import (
	"testing"

	"ilnp/internal/timeline"
)

// The iperf3 server's receiving stream per interval; its sending stream (--bidir) and
// malformed entries are left out.
func TestParseIperfIntervals(t *testing.T) {
	doc := `{"intervals":[
	 {"streams":[{"socket":5,"start":0,"end":1.0001,"packets":226,"lost_packets":0,"sender":false},
	             {"socket":7,"start":0,"end":1.0001,"packets":226,"sender":true}]},
	 {"streams":[{"socket":5,"start":1.0001,"end":2.0002,"packets":100,"lost_packets":126,"sender":false}]},
	 {"streams":[{"socket":5,"start":2,"end":1,"packets":1,"lost_packets":1,"sender":false}]},
	 {"streams":[{"socket":5,"start":3,"end":4,"packets":1,"lost_packets":-5,"sender":false}]}]}`
	ivs := parseIperfIntervals([]byte(doc))
	if len(ivs) != 2 || ivs[0].Packets != 226 || ivs[0].Lost != 0 || ivs[1].Lost != 126 || ivs[1].Start != 1.0001 {
		t.Fatalf("intervals %+v", ivs)
	}
	if parseIperfIntervals([]byte("{")) != nil || parseIperfIntervals([]byte(`{"intervals":[]}`)) != nil {
		t.Error("nothing to read gave intervals")
	}
}

func FuzzParseIperfIntervals(f *testing.F) {
	f.Add([]byte(`{"intervals":[{"streams":[{"start":0,"end":1,"packets":3,"lost_packets":1,"sender":false}]}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, iv := range parseIperfIntervals(b) {
			if iv.Lost < 0 || iv.Packets < 0 || iv.End < iv.Start {
				t.Fatalf("interval %+v", iv)
			}
		}
	})
}

// Drop events of the CN's packets with kernel stamps become host drops; other peers', other
// kinds and rejected LUs (also bad_nonce) do not.
func TestHostDropsFrom(t *testing.T) {
	evs := []timeline.Event{
		{MonoNS: 5, Kind: timeline.BadNonce, Peer: CNNID, Detail: "bad-nonce from 2001:db8:1::5"},
		{MonoNS: 5, Kind: timeline.BadNonce, Peer: CNNID, Detail: "ilcc: Locator Update without the session's nonce"},
		{MonoNS: 6, Kind: timeline.DatapathDrop, Peer: CNNID},
		{MonoNS: 7, Kind: timeline.BadNonce, Peer: "0000:0000:0000:0009"},
		{MonoNS: 8, Kind: timeline.LUSent, Peer: CNNID},
		{Kind: timeline.BadNonce, Peer: CNNID},
	}
	d := hostDropsFrom(evs, CNNID)
	if len(d) != 2 || d[0].MonoNS != 5 || d[1].MonoNS != 6 {
		t.Fatalf("drops %+v", d)
	}
}
