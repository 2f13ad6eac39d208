package cc

import (
	"context"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
	"ilnp/internal/structops"
)

// A TCP flow between two namespaces, with every 100th packet to the receiver dropped so the
// loss path runs too, uses each program chosen per socket: ss shows the algorithm, the
// counters move, every traced step matches lab/cc/model, and after Close the kernel no longer
// lists it. The drop is counted, not random: veth hands over 64-KB GSO packets, so 24 MiB can
// be as few as 384 of them, and a random 1 % missed them all in about 2 % of runs (0.99^384).
func TestFlowUsesProgram(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "ss", "nft")
	for _, algo := range []string{Hybla, Veno} {
		t.Run(algo, func(t *testing.T) {
			l := load(t, algo)
			snd, rcv := nstest.New(t, "cc-snd"), nstest.New(t, "cc-rcv")
			nstest.Link(t, snd, "v0", rcv, "v1")
			snd.Run("ip", "addr", "add", "fd00:cc::1/64", "dev", "v0", "nodad")
			rcv.Run("ip", "addr", "add", "fd00:cc::2/64", "dev", "v1", "nodad")
			rcv.Run("nft", "add table inet cctest; add chain inet cctest in { type filter hook prerouting priority 0; }; "+
				"add rule inet cctest in tcp dport 5201 numgen inc mod 100 == 50 drop")

			ln := rcv.Listen("tcp6", "[fd00:cc::2]:5201")
			defer ln.Close()
			received := make(chan int64, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					received <- -1
					return
				}
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				received <- n
			}()

			var conn net.Conn
			err := snd.Do(func() (err error) {
				d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
					var serr error
					if err := rc.Control(func(fd uintptr) {
						serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, l.Name)
					}); err != nil {
						return err
					}
					return serr
				}}
				conn, err = d.DialContext(context.Background(), "tcp6", "[fd00:cc::2]:5201")
				return err
			})
			if err != nil {
				t.Fatalf("connect with TCP_CONGESTION %s: %v", l.Name, err)
			}
			const total = 24 << 20
			buf := make([]byte, 64<<10)
			_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
			for sent := 0; sent < total; sent += len(buf) {
				if _, err := conn.Write(buf); err != nil {
					conn.Close()
					t.Fatalf("write after %d bytes: %v", sent, err)
				}
			}
			ss := snd.Run("ss", "-tin", "dst", "[fd00:cc::2]")
			conn.Close()
			if !strings.Contains(ss, " "+l.Name+" ") {
				t.Errorf("ss -ti does not show %s:\n%s", l.Name, ss)
			}
			if n := <-received; n != total {
				t.Fatalf("receiver got %d bytes, want %d", n, total)
			}

			c, err := l.Counters()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s counters: %v", l.Name, c.Map())
			if c[CounterInit] < 1 || c[CounterAcks] == 0 || c[CounterLosses] == 0 || c[CounterMaxCwnd] < 10 {
				t.Errorf("counters did not move: %v", c.Map())
			}
			if algo == Veno && (c[CounterSamples] == 0 || c[CounterRandom]+c[CounterCongestive] != c[CounterLosses]) {
				t.Errorf("veno: samples %d, random %d + congestive %d != losses %d", c[CounterSamples],
					c[CounterRandom], c[CounterCongestive], c[CounterLosses])
			}
			if algo == Hybla && c[CounterLastRho] != 16 {
				t.Errorf("hybla: rho %d/16 on a sub-millisecond path, want 16 (rho = 1)", c[CounterLastRho])
			}
			steps, err := l.Trace()
			if err != nil {
				t.Fatal(err)
			}
			r, err := ReplayTrace(algo, steps)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("replay: %d steps (%d ACK, %d grew, %d samples, %d ssthresh)", r.Steps, r.Acks, r.Grew, r.Samples, r.Ssthresh)
			if !r.OK() {
				t.Errorf("BPF and model differ:\n%s", strings.Join(r.Mismatches, "\n"))
			}
			if r.Acks == 0 || r.Grew == 0 {
				t.Errorf("trace has %d ACK steps, %d with growth", r.Acks, r.Grew)
			}

			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if reg, err := structops.Registered(l.Name); err != nil || reg {
				t.Fatalf("%s still in %s after unloading (%v)", l.Name, structops.AvailablePath, err)
			}
		})
	}
}
