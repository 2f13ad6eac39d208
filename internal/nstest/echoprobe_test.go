package nstest

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// TestEchoProbeCountsWhatDidNotComeBack: an echo server on loopback that drops every third
// datagram and echoes every fifth twice; the probe reports exactly the dropped ones missing,
// counts duplicates once and sees the gaps the drops leave.
func TestEchoProbeCountsWhatDidNotComeBack(t *testing.T) {
	srv, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 2000)
		for {
			n, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			seq := binary.BigEndian.Uint64(buf)
			if seq%3 == 0 {
				continue
			}
			_, _ = srv.WriteTo(buf[:n], from)
			if seq%5 == 0 {
				_, _ = srv.WriteTo(buf[:n], from)
			}
		}
	}()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := StartEchoProbe(conn, srv.LocalAddr(), 2*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for p.Got() < 30 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r := p.Stop(50 * time.Millisecond)
	if r.Got < 30 {
		t.Fatalf("got %d echoes in 5 s", r.Got)
	}
	if r.Sent-r.Got != int64(len(r.Missing)) {
		t.Errorf("sent %d, got %d, but %d missing", r.Sent, r.Got, len(r.Missing))
	}
	for _, seq := range r.Missing {
		if seq%3 != 0 {
			t.Errorf("echo %d reported missing; only multiples of 3 were dropped", seq)
		}
	}
	if len(r.Missing) < int(r.Sent)/3-1 {
		t.Errorf("%d missing of %d sent: want every third", len(r.Missing), r.Sent)
	}
	if r.MaxGap <= 0 || r.MaxGapEnd.IsZero() || r.LastRx.Before(r.MaxGapEnd) {
		t.Errorf("max gap %v ending %v, last echo %v", r.MaxGap, r.MaxGapEnd, r.LastRx)
	}
}
