package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/lab/cwnd"
	"ilnp/lab/window"
)

// clampFlow runs the lab's TCP traffic (iperf3 -w 320K -C cubic) CN -> MN for secs and returns
// the sender's sock_diag samples and the receiver's per-second goodput (bit/s).
func clampFlow(t *testing.T, topo *Topology, name string, secs int) ([]cwnd.Sample, []float64) {
	t.Helper()
	ctx := context.Background()
	tr := Traffics["tcp"]
	dir := topo.Cfg.Dir
	srv, err := topo.Start(topo.MN, name+"-server", tr.ServerArgs(filepath.Join(dir, name+"-server.json"))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitListening(ctx, topo, 5201, 5*time.Second); err != nil {
		t.Fatalf("iperf3 server: %v: %s", err, srv.Log())
	}
	smp, err := cwnd.Start(ctx, topo.CN.Do, 5201, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := topo.Start(topo.CN, name+"-client", tr.ClientArgs(topo.MNInitialAddr, time.Duration(secs)*time.Second, filepath.Join(dir, name+"-client.json"))...)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := cl.Wait(time.Duration(secs+10) * time.Second); !done || err != nil {
		t.Fatalf("iperf3 client: done %v, %v: %s", done, err, cl.Log())
	}
	samples, _ := smp.Stop()
	srv.Stop(2 * time.Second)
	b, err := os.ReadFile(filepath.Join(dir, name+"-server.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Intervals []struct {
			Sum struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum"`
		} `json:"intervals"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var rates []float64
	for _, iv := range doc.Intervals {
		rates = append(rates, iv.Sum.BitsPerSecond)
	}
	return samples, rates
}

// The thesis's window over a 200-ms RTT: without the clamp the lab's `iperf3 -w 320K` keeps
// more than 320 KB in flight (the receiver advertises ~410 KB on this kernel); with it the
// sender's window stops at 320 KB / MSS segments, and the goodput at that window per RTT.
func TestWindowClampThesis(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd", "ethtool", "iperf3")
	ctx := context.Background()
	topo, err := Build(ctx, TopologyConfig{Scenario: Scenarios["wan-lan"], RAMin: 300 * time.Millisecond, RAMax: 600 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := topo.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	}()
	r, err := topo.Ping(topo.MN, topo.CNAddrText, 5, 50*time.Millisecond, time.Second)
	if err != nil || len(r.RTTs) == 0 {
		t.Fatalf("ping: %v", err)
	}
	rtt := r.MeanMS()

	// Control: iperf3's own buffer setting alone.
	free, _ := clampFlow(t, topo, "free", 6)
	wFree := WindowSamples(free)
	t.Logf("without the clamp: max cwnd %d, max in flight %d segments / %d bytes, receiver advertised up to %d bytes, MSS %d",
		wFree.MaxCwnd, wFree.MaxUnacked, wFree.MaxInFlightBytes, wFree.MaxSndWnd, wFree.MSS)
	if wFree.MSS == 0 || wFree.MaxInFlightBytes <= window.ThesisBytes {
		t.Fatalf("control flow kept at most %d bytes in flight (MSS %d): the test cannot tell a clamp from no clamp", wFree.MaxInFlightBytes, wFree.MSS)
	}

	if err := topo.ClampWindow(window.ThesisBytes); err != nil {
		t.Fatal(err)
	}
	held, rates := clampFlow(t, topo, "held", 6)
	w := topo.windowReport(held)
	segs := uint32(window.Segments(window.ThesisBytes, int(w.MSS)))
	t.Logf("with the clamp: %+v; clamp %d segments; goodput per second %v; RTT %.1f ms", w, segs, fmtRates(rates), rtt)
	if w.Counters.Clamped < 2 || w.Counters.Failed != 0 || w.Counters.LastSegs != uint64(segs) {
		t.Errorf("counters %+v: want the data connection clamped at both ends (>= 2, no failure) at %d segments", w.Counters, segs)
	}
	// What the thesis's window bounds is the data in flight, which may pass the cwnd by one
	// segment (a tail loss probe sends new data beyond it). The cwnd itself can be sampled
	// above the clamp before the clamp's first callback on a loaded machine (a CI run beside a
	// busy loop saw 567 with 229 in flight), so it is not asserted.
	if w.MaxUnacked > segs+1 || w.MaxInFlightBytes > uint64(segs+1)*uint64(w.MSS) || w.MaxUnacked+5 < segs {
		t.Errorf("max cwnd %d, in flight %d segments / %d bytes: want the flight to reach %d segments and stay within %d bytes",
			w.MaxCwnd, w.MaxUnacked, w.MaxInFlightBytes, segs, window.ThesisBytes)
	}
	// Once slow start is over (2 s at 200 ms) each second carries at most one window per RTT.
	ceiling := float64(window.ThesisBytes) * 8 / (rtt / 1e3)
	for i, v := range rates {
		if i >= 2 && v > 1.03*ceiling {
			t.Errorf("second %d: %.2f Mbit/s, above one 320-KB window per %.1f-ms RTT (%.2f Mbit/s)", i+1, v/1e6, rtt, ceiling/1e6)
		}
	}
}

func fmtRates(r []float64) string {
	s := ""
	for _, v := range r {
		s += fmt.Sprintf(" %.2f", v/1e6)
	}
	return s + " Mbit/s"
}
