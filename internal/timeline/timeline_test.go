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
