package linkemu

import (
	"math"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab/ping"
)

// wire builds a - w - b with the emulator in w, both directions shaped alike, and returns the
// two end namespaces once the path works.
func wire(t *testing.T, shape Shape) (a, b *nstest.NS) {
	t.Helper()
	nstest.RequireTool(t, "ethtool")
	a, w, b := nstest.New(t, "emu-a"), nstest.New(t, "emu-w"), nstest.New(t, "emu-b")
	nstest.Link(t, a, "a0", w, "wa")
	nstest.Link(t, b, "b0", w, "wb")
	for _, x := range []struct {
		ns  *nstest.NS
		ifs []string
	}{{a, []string{"a0"}}, {w, []string{"wa", "wb"}}, {b, []string{"b0"}}} {
		for _, ifname := range x.ifs {
			x.ns.Run("ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off", "tx", "off")
		}
	}
	a.Run("ip", "addr", "add", "2001:db8:ff::1/64", "dev", "a0", "nodad")
	b.Run("ip", "addr", "add", "2001:db8:ff::2/64", "dev", "b0", "nodad")
	// The emulator runs as its own process in the wire namespace, as in the lab: this test
	// binary re-executes itself with EnvVar set (see TestMain).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := &nstest.SyncBuffer{}, &nstest.SyncBuffer{}
	// Registered before Start so it runs after the emulator was stopped and printed counters.
	t.Cleanup(func() { t.Logf("emulator: %s", stderr) })
	w.Start(func(c *exec.Cmd) {
		c.Env = append(os.Environ(), EnvVar+"=1")
		c.Stdout, c.Stderr = stdout, stderr
		c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	}, exe, "wa,wb,"+shape.String())
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stdout.String(), ReadyLine); {
		if time.Now().After(deadline) {
			t.Fatalf("emulator not ready: %s %s", stdout, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := pingFrom(t, a, 5, time.Second); len(r.RTTs) == 0 {
		t.Fatal("no path through the emulator")
	}
	return a, b
}

func TestMain(m *testing.M) {
	RunIfRequested()
	os.Exit(m.Run())
}

func pingFrom(t *testing.T, a *nstest.NS, count int, timeout time.Duration) ping.Result {
	t.Helper()
	var c *ping.Conn
	if err := a.Do(func() (err error) { c, err = ping.Listen(); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Ping("2001:db8:ff::2", count, 50*time.Millisecond, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func meanSD(r ping.Result) (mean, sd float64) {
	for _, d := range r.RTTs {
		mean += float64(d) / 1e6
	}
	mean /= float64(len(r.RTTs))
	for _, d := range r.RTTs {
		sd += (float64(d)/1e6 - mean) * (float64(d)/1e6 - mean)
	}
	return mean, math.Sqrt(sd / float64(len(r.RTTs)))
}

// 100 ms one-way on a 30 Mbit/s link must show as a 200 ms RTT with < 1 ms error.
func TestDelay(t *testing.T) {
	a, _ := wire(t, Shape{Delay: 100 * time.Millisecond, RateBps: 30e6})
	r := pingFrom(t, a, 20, time.Second)
	if len(r.RTTs) != 20 {
		t.Fatalf("%d of 20 echoes answered", len(r.RTTs))
	}
	avg, mdev := meanSD(r)
	t.Logf("RTT through 2 x 100 ms at 30 Mbit/s: mean %.3f ms sd %.3f ms", avg, mdev)
	if math.Abs(avg-200) >= 1 {
		t.Errorf("RTT %.3f ms, want 200 +/- 1 ms", avg)
	}
}

// The delay holds while the link carries 30 Mbit/s: pings alongside a 30 Mbit/s UDP stream
// (1400-byte datagrams, about 2700 frames/s) still see 200 ms +/- 1 ms.
func TestDelayUnderLoad(t *testing.T) {
	a, b := wire(t, Shape{Delay: 100 * time.Millisecond})
	load := make(chan flowResult, 1)
	go func() { load <- udpFlow(t, a, b, 30e6, 1400, 5*time.Second) }()
	time.Sleep(1500 * time.Millisecond) // into the steady stream
	r := pingFrom(t, a, 40, time.Second)
	l := <-load
	if len(r.RTTs) < 38 {
		t.Fatalf("%d of 40 echoes answered under load", len(r.RTTs))
	}
	avg, sd := meanSD(r)
	t.Logf("RTT through 2 x 100 ms with %.1f Mbit/s of UDP alongside (%d of %d datagrams lost): mean %.3f ms sd %.3f ms",
		l.DeliveredBps()/1e6, l.Sent-l.Received, l.Sent, avg, sd)
	if l.DeliveredBps() < 25e6 {
		t.Errorf("load only %.1f Mbit/s, want 30", l.DeliveredBps()/1e6)
	}
	if math.Abs(avg-200) >= 1 {
		t.Errorf("RTT %.3f ms under load, want 200 +/- 1 ms", avg)
	}
}

// Jitter keeps the mean and spreads the samples; without Reorder the order holds.
func TestJitter(t *testing.T) {
	a, _ := wire(t, Shape{Delay: 40 * time.Millisecond, Jitter: 5 * time.Millisecond})
	r := pingFrom(t, a, 40, time.Second)
	avg, mdev := meanSD(r)
	t.Logf("RTT through 2 x (40 +/- 5) ms: mean %.3f ms sd %.3f ms", avg, mdev)
	if avg < 75 || avg > 90 {
		t.Errorf("RTT mean %.3f ms, want about 80-84 ms", avg)
	}
	if mdev < 2 {
		t.Errorf("RTT sd %.3f ms, want the jitter to show (> 2 ms)", mdev)
	}
}

// flowResult is what a paced UDP flow from a to b delivered: the receiver's own count, not a
// tool's report, so no start-up exchange of a traffic tool can be lost to the link under test.
type flowResult struct {
	Sent, Received      int
	ReceivedBytes       int64
	FirstRecv, LastRecv time.Time
	OfferedBps          float64
}

// DeliveredBps is the payload rate the receiver saw between its first and last datagram.
func (r flowResult) DeliveredBps() float64 {
	d := r.LastRecv.Sub(r.FirstRecv).Seconds()
	if r.Received < 2 || d <= 0 {
		return 0
	}
	return float64(r.ReceivedBytes-r.ReceivedBytes/int64(r.Received)) * 8 / d
}

// udpFlow sends datagrams of length bytes from a to b at rateBps for dur, paced against the
// clock (a late sender catches up in a burst, so the offered rate holds on a loaded machine),
// and counts what arrived until the link has been quiet for half a second.
func udpFlow(t *testing.T, a, b *nstest.NS, rateBps float64, length int, dur time.Duration) flowResult {
	t.Helper()
	rx := b.ListenPacket("udp6", "[2001:db8:ff::2]:0")
	defer rx.Close()
	tx := a.ListenPacket("udp6", "[2001:db8:ff::1]:0")
	defer tx.Close()
	dst := rx.LocalAddr()

	var r flowResult
	var sending atomic.Bool
	sending.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			_ = rx.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, _, err := rx.ReadFrom(buf)
			if err != nil {
				if !sending.Load() {
					return // quiet for half a second after the last datagram was sent
				}
				continue
			}
			now := time.Now()
			if r.Received == 0 {
				r.FirstRecv = now
			}
			r.LastRecv = now
			r.Received++
			r.ReceivedBytes += int64(n)
		}
	}()

	payload := make([]byte, length)
	interval := time.Duration(float64(time.Second) * float64(length*8) / rateBps)
	start := time.Now()
send:
	for time.Since(start) < dur {
		for due := int(time.Since(start) / interval); r.Sent <= due; r.Sent++ {
			if _, err := tx.WriteTo(payload, dst); err != nil {
				t.Errorf("send datagram %d: %v", r.Sent, err) // Errorf: udpFlow may run beside the test's goroutine
				break send
			}
		}
		time.Sleep(interval / 2)
	}
	r.OfferedBps = float64(r.Sent*length*8) / time.Since(start).Seconds()
	sending.Store(false)
	<-done
	return r
}

// 10 % random loss shows as 10 % of datagrams lost (binomial 4-sigma band).
func TestLoss(t *testing.T) {
	a, b := wire(t, Shape{Loss: 0.10})
	r := udpFlow(t, a, b, 2e6, 200, 3*time.Second)
	n := float64(r.Sent)
	lost := float64(r.Sent-r.Received) / n
	sigma := math.Sqrt(0.1 * 0.9 / n)
	t.Logf("loss: %d of %d datagrams (%.2f %%), want 10 +/- %.2f %%", r.Sent-r.Received, r.Sent, 100*lost, 400*sigma)
	if n < 1000 || math.Abs(lost-0.10) > 4*sigma {
		t.Errorf("lost fraction %.4f of %v datagrams, want 0.10 +/- %.4f", lost, n, 4*sigma)
	}
}

// A 30 Mbit/s link offered 45 Mbit/s delivers 30 Mbit/s of frames: UDP payload rate
// 30 * 1400 / (1400+8+40+14) Mbit/s, within 5 %.
func TestRate(t *testing.T) {
	a, b := wire(t, Shape{RateBps: 30e6, QueueBytes: 64 * 1024})
	r := udpFlow(t, a, b, 45e6, 1400, 3*time.Second)
	want := 30e6 * 1400 / (1400 + 8 + 40 + 14)
	got := r.DeliveredBps()
	t.Logf("rate: offered %.2f Mbit/s, delivered %.2f Mbit/s of payload, want %.2f", r.OfferedBps/1e6, got/1e6, want/1e6)
	if r.OfferedBps < 1.2*30e6 {
		t.Fatalf("the sender offered only %.2f Mbit/s: the link was never full", r.OfferedBps/1e6)
	}
	if math.Abs(got-want)/want > 0.05 {
		t.Errorf("delivered %.2f Mbit/s, want %.2f +/- 5 %%", got/1e6, want/1e6)
	}
}

func TestParseShape(t *testing.T) {
	cases := []struct {
		in   string
		want Shape
		bad  bool
	}{
		{in: "lan", want: Shape{}},
		{in: "wan", want: Shape{Delay: 100 * time.Millisecond}},
		{in: "3g", want: Profiles["3g"]},
		{in: "wan+loss=1%", want: Shape{Delay: 100 * time.Millisecond, Loss: 0.01}},
		{in: "delay=5ms+jitter=1ms+rate=30M+queue=1000+reorder", want: Shape{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, RateBps: 30e6, QueueBytes: 1000, Reorder: true}},
		{in: "", bad: true},
		{in: "moon", bad: true},
		{in: "loss=2", bad: true},
		{in: "delay=-1s", bad: true},
		{in: "delay=1ms+wan", bad: true},
		{in: "queue=0", bad: true},
		{in: "rate=xM", bad: true},
	}
	for _, c := range cases {
		got, err := ParseShape(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("ParseShape(%q) = %+v, want error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseShape(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if back, err := ParseShape(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q via %q = %+v, %v", c.in, got.String(), back, err)
		}
	}
}

func FuzzParseShape(f *testing.F) {
	for _, s := range []string{"lan", "wan+loss=1%", "delay=5ms+jitter=1ms+rate=30M+queue=1000+reorder", "3g", "rate=1.5G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseShape(spec)
		if err != nil {
			return
		}
		if s.Loss < 0 || s.Loss > 1 || s.Delay < 0 || s.Jitter < 0 || s.RateBps < 0 || s.QueueBytes < 0 {
			t.Fatalf("ParseShape(%q) accepted out-of-range %+v", spec, s)
		}
		if back, err := ParseShape(s.String()); err != nil || back != s {
			t.Fatalf("round trip %q -> %q -> %+v, %v", spec, s.String(), back, err)
		}
	})
}

// The scheduler on its own: FIFO under jitter, queue bound, serialisation time.
func TestScheduler(t *testing.T) {
	t0 := time.Unix(0, 0)
	s := newScheduler(Shape{RateBps: 8e6, QueueBytes: 3000}, 1)
	d1, v1 := s.admit(t0, 1000) // 1 ms to serialise
	d2, v2 := s.admit(t0, 1000)
	_, v3 := s.admit(t0, 1500) // 1000 bytes waiting + 1500 > ... 2000 + 1500 > 3000
	if v1 != pass || v2 != pass || v3 != dropQueue {
		t.Fatalf("verdicts %v %v %v", v1, v2, v3)
	}
	if d1.Sub(t0) != time.Millisecond || d2.Sub(t0) != 2*time.Millisecond {
		t.Errorf("departures %v %v, want 1ms 2ms", d1.Sub(t0), d2.Sub(t0))
	}
	j := newScheduler(Shape{Delay: 10 * time.Millisecond, Jitter: 8 * time.Millisecond}, 2)
	last := t0
	for i := 0; i < 1000; i++ {
		d, _ := j.admit(t0.Add(time.Duration(i)*100*time.Microsecond), 100)
		if d.Before(last) {
			t.Fatalf("packet %d reordered", i)
		}
		last = d
	}
}

func TestParseLinkArg(t *testing.T) {
	l, err := ParseLinkArg("r1r2a,r1r2b,wan,lan")
	if err != nil || l.A != "r1r2a" || l.B != "r1r2b" || l.AtoB.Delay != 100*time.Millisecond || l.BtoA != (Shape{}) {
		t.Errorf("ParseLinkArg = %+v, %v", l, err)
	}
	for _, bad := range []string{"", "a,b", "a,a,lan", ",b,lan", "a,b,lan,lan,lan", "a,b,moon"} {
		if _, err := ParseLinkArg(bad); err == nil {
			t.Errorf("ParseLinkArg(%q) accepted", bad)
		}
	}
}

func FuzzParseLinkArg(f *testing.F) {
	for _, s := range []string{"r1r2a,r1r2b,wan", "a,b,delay=1ms+loss=1%,3g", "a,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, arg string) {
		l, err := ParseLinkArg(arg)
		if err != nil {
			return
		}
		if l.A == "" || l.B == "" || l.A == l.B {
			t.Fatalf("accepted %q as %+v", arg, l)
		}
	})
}
