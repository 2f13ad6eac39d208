package cwnd

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"ilnp/internal/nstest"
)

func TestPick(t *testing.T) {
	info := func(cwnd uint32, acked uint64) *netlink.TCPInfo {
		return &netlink.TCPInfo{Snd_cwnd: cwnd, Bytes_acked: acked, Ca_state: 3, Lost: 7}
	}
	for _, tc := range []struct {
		name  string
		conns []Conn
		want  uint32 // cwnd of the pick; 0: none
	}{
		{"none", nil, 0},
		{"other port only", []Conn{{SrcPort: 40000, DstPort: 22, Info: info(10, 1e9)}}, 0},
		{"no info", []Conn{{SrcPort: 40000, DstPort: 5201}}, 0},
		{"client side: data beats control", []Conn{{SrcPort: 40001, DstPort: 5201, Info: info(4, 200)},
			{SrcPort: 40002, DstPort: 5201, Info: info(280, 9e6)}, {SrcPort: 40003, DstPort: 22, Info: info(99, 1e12)}}, 280},
		{"server side (iperf3 -R)", []Conn{{SrcPort: 5201, DstPort: 40002, Info: info(33, 5e6)},
			{SrcPort: 5201, DstPort: 40001, Info: info(10, 100)}}, 33},
	} {
		s, ok := Pick(tc.conns, 5201, 42)
		if ok != (tc.want != 0) || s.Cwnd != tc.want || (ok && (s.MonoNS != 42 || s.CaState != 3 || s.Lost != 7)) {
			t.Errorf("%s: %+v %v, want cwnd %d", tc.name, s, ok, tc.want)
		}
	}
}

// A bulk flow to port 5201 inside a namespace: the sampler, started from outside it, sees the
// sender's window, and Stop ends it.
func TestSamplerInNamespace(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, "cwnd")
	ns.Run("ip", "link", "set", "lo", "up")
	ln := ns.Listen("tcp6", "[::1]:5201")
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(io.Discard, c)
	}()
	c := ns.Dial("tcp6", "[::1]:5201").(*net.TCPConn)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		buf := make([]byte, 64<<10)
		for ctx.Err() == nil {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	s, err := Start(ctx, ns.Do, 5201, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	samples, err := s.Stop()
	if err != nil {
		t.Errorf("dumps failed: %v", err)
	}
	if again, _ := s.Stop(); len(again) != len(samples) {
		t.Errorf("second Stop: %d samples, first %d", len(again), len(samples))
	}
	if len(samples) < 5 {
		t.Fatalf("%d samples in 300 ms at 10 ms, want many", len(samples))
	}
	last := samples[len(samples)-1]
	if last.Cwnd < 10 || last.BytesAcked == 0 || last.MonoNS <= samples[0].MonoNS {
		t.Errorf("samples %+v ... %+v: want the bulk sender's growing window", samples[0], last)
	}
}
