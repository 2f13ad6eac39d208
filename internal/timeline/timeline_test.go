package timeline

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteRead(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	ch, stop := w.Subscribe(4)
	w.Emit(Event{Kind: LUSent, Peer: "cn", Attempt: 1})
	w.Emit(Event{Kind: LUAckReceived, Peer: "cn"})
	stop()
	events, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Kind != LUSent || events[1].Kind != LUAckReceived {
		t.Fatalf("events = %+v", events)
	}
	if events[0].MonoNS == 0 || events[1].MonoNS < events[0].MonoNS {
		t.Fatalf("timestamps not monotonic: %d then %d", events[0].MonoNS, events[1].MonoNS)
	}
	if got := len(ch); got != 2 {
		t.Fatalf("subscriber got %d events, want 2", got)
	}
}

func TestReadRejectsMalformedLine(t *testing.T) {
	_, err := Read(strings.NewReader("{\"t_ns\":1,\"type\":\"lu_sent\"}\n{oops\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}

// Held events reach the file only at Release, all of them; unheld ones at once.
func TestHoldRelease(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Emit(Event{MonoNS: 1, Kind: LUSent})
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("unheld: %d lines written", n)
	}
	w.Hold()
	w.Emit(Event{MonoNS: 2, Kind: LUReceived})
	w.Emit(Event{MonoNS: 3, Kind: LUAckSent})
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("held: %d lines written, want the 1 before Hold", n)
	}
	w.Release()
	evs, err := Read(strings.NewReader(buf.String()))
	if err != nil || len(evs) != 3 || evs[1].MonoNS != 2 || evs[2].MonoNS != 3 {
		t.Fatalf("after Release: %+v (%v)", evs, err)
	}
	w.Emit(Event{MonoNS: 4, Kind: LUSent})
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Fatalf("after Release an event is not written at once: %d lines", n)
	}
}
