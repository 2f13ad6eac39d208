package lab

import (
	"encoding/json"
	"os"
	"strings"

	"ilnp/internal/timeline"
	"ilnp/lab/measure"
)

// The window-loss sources besides the MN's capture (lab/measure WindowLoss): iperf3's
// per-interval receiver counts and the datapath's drop events.

// DropKinds are the MN timeline's kinds for a CN -> MN packet the MN's datapath dropped after
// the capture point, with the datapath's kernel time stamp: bad_nonce (bad, missing or
// repeated nonce) and datapath_drop (a packet for a local locator that is no longer usable).
var DropKinds = map[timeline.Kind]bool{timeline.BadNonce: true, timeline.DatapathDrop: true}

// datapathDrop says whether a timeline event is a packet drop the datapath reported (ilnpd
// writes those bad_nonce events as "<event type> from <source>"; its other bad_nonce events
// are rejected Locator Updates, not dropped data).
func datapathDrop(e timeline.Event) bool {
	if e.Kind != timeline.BadNonce {
		return DropKinds[e.Kind]
	}
	for _, t := range []string{"bad-nonce from ", "missing-nonce from ", "multiple-nonces from "} {
		if strings.HasPrefix(e.Detail, t) {
			return true
		}
	}
	return false
}

// hostDropsFrom picks the drops of packets from peer (the CN's NID) out of the MN's timeline.
func hostDropsFrom(evs []timeline.Event, peer string) []measure.HostDrop {
	var out []measure.HostDrop
	for _, e := range evs {
		if datapathDrop(e) && e.MonoNS != 0 && (e.Peer == peer || e.Peer == "") {
			out = append(out, measure.HostDrop{MonoNS: e.MonoNS, Reason: string(e.Kind) + ": " + e.Detail})
		}
	}
	return out
}

// iperfReceiverIntervals reads the iperf3 server's -J intervals for its receiving UDP
// stream(s) (sender false); nil when there are none.
func iperfReceiverIntervals(path string) []measure.AppInterval {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return parseIperfIntervals(b)
}

func parseIperfIntervals(b []byte) []measure.AppInterval {
	var doc struct {
		Intervals []struct {
			Streams []struct {
				Start   float64 `json:"start"`
				End     float64 `json:"end"`
				Packets *int    `json:"packets"`
				Lost    *int    `json:"lost_packets"`
				Sender  bool    `json:"sender"`
			} `json:"streams"`
		} `json:"intervals"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return nil
	}
	var out []measure.AppInterval
	for _, iv := range doc.Intervals {
		var a measure.AppInterval
		found := false
		for _, s := range iv.Streams {
			if s.Sender || s.Packets == nil || s.Lost == nil || *s.Lost < 0 || *s.Packets < 0 || s.End < s.Start {
				continue
			}
			if !found {
				a.Start, a.End = s.Start, s.End
			}
			found = true
			a.Packets += *s.Packets
			a.Lost += *s.Lost
		}
		if found {
			out = append(out, a)
		}
	}
	return out
}
